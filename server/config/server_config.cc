#include "server/config/server_config.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string_view>
#include <variant>

#include "engine/common/file.h"
#include "engine/common/json.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"

namespace loom {
namespace {

struct IntRule {
  int64_t min;
  int64_t max;
};
// Real-valued keys: min < value <= max.
struct RealRule {
  double min;
  double max;
};
using Choices = std::vector<std::string>;  // empty = any string

// One configuration key: where it lives in ServerConfig and what it accepts.
struct Key {
  std::string_view name;  // JSON key; flag --name (or with dashes); env LOOM_NAME
  std::string_view unit;  // "" for none
  std::string_view help;
  std::variant<int64_t ServerConfig::*, bool ServerConfig::*, std::string ServerConfig::*,
               std::vector<std::string> ServerConfig::*, double ServerConfig::*>
      field;
  IntRule ints{0, 0};
  Choices choices{};
  RealRule reals{0, 0};
};

constexpr int64_t kMax = INT64_C(1) << 40;

const std::vector<Key>& Keys() {
  using C = ServerConfig;
  static const auto* keys = new std::vector<Key>{
      {"model", "path",
       "Hugging Face model folder or GGUF file; empty serves a tiny random-weight test model "
       "(deploy/quickstart.sh passes the default chat model, SmolLM2-135M-Instruct)",
       &C::model},
      {"served_model_name", "", "model id clients use; empty = the folder's name", &C::served_model_name},
      {"host", "", "address to listen on", &C::host},
      {"port", "", "HTTP port (0 = any free port)", &C::port, {0, 65535}},
      {"http_threads", "threads", "HTTP I/O threads", &C::http_threads, {1, 256}},
      {"max_body_bytes", "bytes", "largest request body (413 beyond)", &C::max_body_bytes, {1024, kMax}},
      {"max_header_bytes", "bytes", "largest request header block (431 beyond)", &C::max_header_bytes, {1024, 1 << 24}},
      {"max_requests_per_connection", "requests", "keep-alive requests before the server closes",
       &C::max_requests_per_connection, {1, kMax}},
      {"idle_timeout_s", "s", "idle keep-alive connections are closed after this", &C::idle_timeout_s, {1, 86400}},
      {"api_keys", "", "accepted Bearer keys, comma-separated in env/flags; empty = no auth", &C::api_keys},
      {"strict_api", "", "refuse unknown request fields with 400", &C::strict_api},
      {"metrics_compat", "", "also expose metrics under another server's names", &C::metrics_compat,
       {}, {"", "vllm"}},
      {"metrics_require_api_key", "",
       "with api_keys set, /metrics needs a key too (false: open, as vLLM's is)",
       &C::metrics_require_api_key},
      {"allow_request_chat_template", "", "let requests carry their own chat template",
       &C::allow_request_chat_template},
      {"grpc_port", "", "gRPC port (-1 = off, 0 = any free port)", &C::grpc_port, {-1, 65535}},
      {"grpc_tls_cert_file", "path", "PEM certificate for gRPC TLS (with the key)", &C::grpc_tls_cert_file},
      {"grpc_tls_key_file", "path", "PEM private key for gRPC TLS", &C::grpc_tls_key_file},
      {"backend", "", "compute backend", &C::backend, {}, {"cpu", "cuda"}},
      {"threads", "threads", "CPU threads (0 = all available cores)", &C::threads, {0, 4096}},
      {"device", "", "CUDA device ordinal", &C::device, {0, 1023}},
      {"gpu_memory_utilization", "fraction",
       "CUDA: share of the GPU's memory loom may use; the KV cache gets what weights and "
       "activations leave (kv_cache_mb is the CPU's setting)",
       &C::gpu_memory_utilization, {}, {}, {0.0, 1.0}},
      {"cuda_graphs", "", "CUDA: replay decode steps as CUDA graphs", &C::cuda_graphs},
      {"kv_cache_dtype", "",
       "KV cache format: auto (the model's), element types, or low-bit codes with a bf16 "
       "residual tail",
       &C::kv_cache_dtype, {}, {"auto", "bf16", "f16", "f32", "fp8-e4m3", "int8", "int4", "int2"}},
      {"kv_k_granularity", "", "low-bit KV: K quantized per channel (over a block) or per token",
       &C::kv_k_granularity, {}, {"channel", "token"}},
      {"kv_hadamard", "",
       "low-bit KV: store K/V rotated by the Hadamard transform (spreads outlier channels; "
       "head_dim a power of two)",
       &C::kv_hadamard},
      {"kv_residual_tokens", "tokens",
       "low-bit KV: each sequence attends to at least its newest this many tokens in bf16",
       &C::kv_residual_tokens, {0, 65536}},
      {"quantized_activations", "",
       "CPU decode with GGUF-quantized weights: activations as f32 (exact) or int8 (faster, "
       "~0.5-0.8 % relative error)",
       &C::quantized_activations, {}, {"f32", "int8"}},
      {"fast_bf16_matmul", "",
       "CPU: matmuls round activations to bf16 once instead of the f32-accurate default "
       "(~2^-9 relative error per product): on AVX512-BF16 / AMX CPUs prefill runs about twice "
       "as fast (GGUF-quantized weights rounded to bf16 too), and so does one-sequence decode "
       "of bf16 weights",
       &C::fast_bf16_matmul},
      {"weight_memory", "",
       "CPU: read weights in place from the file mapping, or from a copy in anonymous memory "
       "made at load (huge pages: faster decode; a resident copy per process); auto copies a "
       "file of at most half the available memory",
       &C::weight_memory, {}, {"auto", "file", "anonymous"}},
      {"block_size", "tokens", "tokens per KV block (0 = 16, or 32 for low-bit KV)",
       &C::block_size, {0, 1024}},
      {"kv_cache_mb", "MiB", "KV cache size", &C::kv_cache_mb, {1, kMax}},
      {"expert_cache_mb", "MiB",
       "MoE models: memory for the expert cache (RAM on cpu, GPU memory on cuda); routed experts "
       "stay in the checkpoint file (cpu) or in host memory (cuda) and the hot ones are loaded "
       "into it (0 = every expert resident; beside kv_cache_mb, not out of it)",
       &C::expert_cache_mb, {0, kMax}},
      {"expert_cache_policy", "",
       "MoE models with an expert cache: what to keep and prefetch (activation: predicted from "
       "past requests' expert traces; lru, lfu: baselines that never prefetch)",
       &C::expert_cache_policy, {}, {"activation", "lru", "lfu"}},
      {"expert_direct_io", "",
       "MoE models with an expert cache: read experts with O_DIRECT (else read, then drop them "
       "from the page cache), so the cache is the memory experts take",
       &C::expert_direct_io},
      {"expert_host_compute", "",
       "MoE models with an expert cache on cuda: compute a missing expert's tokens where it "
       "lives instead of loading it first: steps of up to 16 tokens read it in place from host "
       "memory (and are graphs), larger ones compute it on the host CPU (auto: when the costs "
       "measured at start say it is faster); never: always load",
       &C::expert_host_compute, {}, {"auto", "never", "always"}},
      {"max_num_batched_tokens", "tokens", "most tokens computed in one step", &C::max_num_batched_tokens,
       {1, 1 << 24}},
      {"max_num_seqs", "sequences", "most sequences in one step", &C::max_num_seqs, {1, 1 << 20}},
      {"max_prefill_chunk", "tokens", "most prompt tokens per sequence and step (0 = the budget)",
       &C::max_prefill_chunk, {0, 1 << 24}},
      {"enable_prefix_caching", "", "reuse K/V of shared prompt prefixes", &C::enable_prefix_caching},
      {"max_waiting_requests", "requests", "queued requests before 503 (0 = unbounded)",
       &C::max_waiting_requests, {0, kMax}},
      {"max_waiting_prompt_tokens", "tokens", "queued prompt tokens before 503 (0 = unbounded)",
       &C::max_waiting_prompt_tokens, {0, kMax}},
      {"retry_after_s", "s", "Retry-After sent with 503", &C::retry_after_s, {0, 3600}},
      {"drain_timeout_s", "s", "on SIGTERM, how long in-flight requests may take to finish",
       &C::drain_timeout_s, {0, 86400}},
      {"livez_step_timeout_s", "s",
       "/livez fails when the engine has work but no step returned for this long",
       &C::livez_step_timeout_s, {1, 86400}},
      {"livez_max_failed_steps", "steps", "/livez fails after this many failed engine steps in a row",
       &C::livez_max_failed_steps, {1, 1000000}},
      {"role", "", "instance: serve requests; manager: the cluster's control plane",
       &C::role, {}, {"instance", "manager"}},
      {"instance_id", "", "this instance's name in the cluster (empty = advertised host:port)",
       &C::instance_id},
      {"cluster_manager", "host:port", "the manager's gRPC address; empty = standalone",
       &C::cluster_manager},
      {"advertise_host", "", "host other instances use to reach this one (empty = host)",
       &C::advertise_host},
      {"cluster_tls_ca_file", "path",
       "PEM roots that sign the cluster's gRPC certificates; set, the calls between instances "
       "and the manager (reports, dispatch, migration) use TLS; empty = plaintext",
       &C::cluster_tls_ca_file},
      {"cluster_report_interval_ms", "ms", "how often an instance reports its load to the manager",
       &C::cluster_report_interval_ms, {10, 60000}},
      {"cluster_dispatch", "",
       "with a manager: ask it where each new request should run (false: run here; requests "
       "still migrate)",
       &C::cluster_dispatch},
      {"priority_headroom_fraction", "fraction",
       "freeness: blocks held back while high-priority requests run, as a share of the cache",
       &C::priority_headroom_fraction, {}, {}, {0.0, 1.0}},
      {"high_priority_below", "", "requests with a priority value below this are high priority",
       &C::high_priority_below, {-kMax, kMax}},
      {"migration_max_stages", "stages", "pre-copy stages before a migration gives up",
       &C::migration_max_stages, {1, 100}},
      {"migration_last_stage_blocks", "blocks",
       "freeze and finish a migration once this few blocks are left to copy",
       &C::migration_last_stage_blocks, {1, 1 << 20}},
      {"migration_timeout_ms", "ms", "bound on each migration call to the destination",
       &C::migration_timeout_ms, {10, 600000}},
      {"migration_max_in_flight", "migrations", "migrations per instance at once, in and out",
       &C::migration_max_in_flight, {1, 64}},
      {"migration_stage_pause_ms", "ms",
       "pause after each migration stage, the last included (spreads copy traffic; the fault "
       "tests use it to stop a process mid-migration); 0 = none",
       &C::migration_stage_pause_ms, {0, 600000}},
      {"max_relays", "relays",
       "requests moved or forwarded from here whose outputs are relayed back (a thread each); at "
       "the limit new ones run here instead (0 = unbounded)",
       &C::max_relays, {0, 1 << 20}},
      {"reservation_timeout_ms", "ms",
       "blocks reserved for an incoming migration are freed after this long without a call",
       &C::reservation_timeout_ms, {100, 3600000}},
      {"manager_instance_timeout_ms", "ms", "manager: drop an instance silent for this long",
       &C::manager_instance_timeout_ms, {10, 3600000}},
      {"manager_dispatch_top_k", "instances",
       "manager: dispatch picks at random among this many least loaded", &C::manager_dispatch_top_k,
       {1, 1024}},
      {"manager_pair_interval_ms", "ms", "manager: how often it pairs instances for migration",
       &C::manager_pair_interval_ms, {10, 3600000}},
      {"manager_migrate_out_below", "blocks", "manager: instances with freeness below migrate out",
       &C::manager_migrate_out_below, {}, {}, {-1e18, 1e18}},
      {"manager_migrate_in_above", "blocks", "manager: instances with freeness above take migrations",
       &C::manager_migrate_in_above, {}, {}, {-1e18, 1e18}},
      {"manager_migration", "",
       "manager: order load-balancing migrations (false: dispatch only; drains still migrate)",
       &C::manager_migration},
      {"manager_scale_out_below", "blocks",
       "manager: signal scale-out while the average freeness is below", &C::manager_scale_out_below,
       {}, {}, {-1e18, 1e18}},
      {"manager_scale_in_above", "blocks",
       "manager: signal scale-in while the average freeness (one instance fewer) is above",
       &C::manager_scale_in_above, {}, {}, {-1e18, 1e18}},
  };
  return *keys;
}

std::string Normalize(std::string_view flag) {
  std::string s(flag);
  std::replace(s.begin(), s.end(), '-', '_');
  return s;
}

const Key* FindKey(std::string_view name) {
  const std::string n = Normalize(name);
  for (const Key& k : Keys()) {
    if (k.name == n) return &k;
  }
  return nullptr;
}

std::vector<std::string> SplitList(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string_view::npos) end = text.size();
    std::string item(text.substr(start, end - start));
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (!item.empty()) out.push_back(item);
    start = end + 1;
  }
  return out;
}

absl::Status Bad(const Key& k, std::string_view source, std::string_view why) {
  return absl::InvalidArgumentError(StrCat(source, ": ", k.name, " ", why));
}

// Sets key `k` from text (environment variables and flags).
absl::Status SetFromText(const Key& k, std::string_view text, std::string_view source,
                         ServerConfig* c) {
  if (auto* r = std::get_if<double ServerConfig::*>(&k.field)) {
    char* end = nullptr;
    const std::string s(text);
    const double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0') {
      return Bad(k, source, StrCat("must be a number, got '", text, "'"));
    }
    if (!(v > k.reals.min && v <= k.reals.max)) {
      return Bad(k, source,
                 StrCat("must be in (", k.reals.min, ", ", k.reals.max, "], got ", text));
    }
    c->*(*r) = v;
  } else if (auto* f = std::get_if<int64_t ServerConfig::*>(&k.field)) {
    char* end = nullptr;
    const std::string s(text);
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0') return Bad(k, source, StrCat("must be an integer, got '", text, "'"));
    if (v < k.ints.min || v > k.ints.max) {
      return Bad(k, source, StrCat("must be in [", k.ints.min, ", ", k.ints.max, "], got ", v));
    }
    c->*(*f) = v;
  } else if (auto* b = std::get_if<bool ServerConfig::*>(&k.field)) {
    if (text == "1" || text == "true") {
      c->*(*b) = true;
    } else if (text == "0" || text == "false") {
      c->*(*b) = false;
    } else {
      return Bad(k, source, StrCat("must be true or false, got '", text, "'"));
    }
  } else if (auto* s = std::get_if<std::string ServerConfig::*>(&k.field)) {
    if (!k.choices.empty() &&
        std::find(k.choices.begin(), k.choices.end(), text) == k.choices.end()) {
      return Bad(k, source, StrCat("'", text, "' is not one of the allowed values"));
    }
    c->*(*s) = std::string(text);
  } else {
    c->*std::get<std::vector<std::string> ServerConfig::*>(k.field) = SplitList(text);
  }
  return absl::OkStatus();
}

absl::Status SetFromJson(const Key& k, const Json& v, std::string_view source, ServerConfig* c) {
  if (std::holds_alternative<double ServerConfig::*>(k.field)) {
    if (!v.IsNumber()) return Bad(k, source, "must be a number");
    return SetFromText(k, StrCat(*v.AsDouble()), source, c);
  }
  if (std::holds_alternative<int64_t ServerConfig::*>(k.field)) {
    if (!v.IsInteger()) return Bad(k, source, "must be an integer");
    absl::StatusOr<int64_t> i = v.AsInt();
    if (!i.ok()) return Bad(k, source, "is out of range");
    return SetFromText(k, std::to_string(*i), source, c);
  }
  if (std::holds_alternative<bool ServerConfig::*>(k.field)) {
    if (!v.IsBool()) return Bad(k, source, "must be true or false");
    return SetFromText(k, *v.AsBool() ? "true" : "false", source, c);
  }
  if (std::holds_alternative<std::string ServerConfig::*>(k.field)) {
    if (!v.IsString()) return Bad(k, source, "must be a string");
    return SetFromText(k, *v.AsString(), source, c);
  }
  if (!v.IsArray()) return Bad(k, source, "must be an array of strings");
  std::vector<std::string> items;
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].IsString()) return Bad(k, source, "must be an array of strings");
    items.push_back(*v[i].AsString());
  }
  c->*std::get<std::vector<std::string> ServerConfig::*>(k.field) = std::move(items);
  return absl::OkStatus();
}

absl::Status ApplyFile(const std::string& path, ServerConfig* c) {
  LOOM_ASSIGN_OR_RETURN(std::string text, ReadFile(path, int64_t{1} << 20));
  LOOM_ASSIGN_OR_RETURN(Json doc, Json::Parse(text, path));
  if (!doc.IsObject()) return absl::InvalidArgumentError(StrCat(path, ": must hold a JSON object"));
  for (const auto& [name, value] : doc.Items()) {
    const Key* k = FindKey(name);
    if (k == nullptr || k->name != name) {
      return absl::InvalidArgumentError(StrCat(path, ": unknown key '", name, "'"));
    }
    LOOM_RETURN_IF_ERROR(SetFromJson(*k, value, path, c));
  }
  return absl::OkStatus();
}

std::string EnvName(std::string_view name) {
  std::string env = "LOOM_";
  for (char ch : name) env.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(ch))));
  return env;
}

std::string DefaultText(const Key& k) {
  const ServerConfig d;
  if (auto* f = std::get_if<int64_t ServerConfig::*>(&k.field)) return std::to_string(d.*(*f));
  if (auto* r = std::get_if<double ServerConfig::*>(&k.field)) return StrCat(d.*(*r));
  if (auto* b = std::get_if<bool ServerConfig::*>(&k.field)) return d.*(*b) ? "true" : "false";
  if (auto* s = std::get_if<std::string ServerConfig::*>(&k.field)) {
    return d.*(*s) == "" ? "\"\"" : d.*(*s);
  }
  return "[]";
}

std::string RuleText(const Key& k) {
  if (std::holds_alternative<double ServerConfig::*>(k.field)) {
    return StrCat("number in (", k.reals.min, ", ", k.reals.max, "]");
  }
  if (std::holds_alternative<int64_t ServerConfig::*>(k.field)) {
    return StrCat("integer in [", k.ints.min, ", ", k.ints.max, "]");
  }
  if (std::holds_alternative<bool ServerConfig::*>(k.field)) return "true / false";
  if (!k.choices.empty()) {
    std::string out = "one of";
    for (const std::string& c : k.choices) out += StrCat(" ", c.empty() ? "\"\"" : c);
    return out;
  }
  if (std::holds_alternative<std::string ServerConfig::*>(k.field)) return "string";
  return "list of strings";
}

}  // namespace

absl::Status LoadServerConfig(const std::vector<std::string>& args, const EnvLookup& env,
                              ServerConfig* config, bool* help_requested) {
  *help_requested = false;
  // Split the flags first, so --config applies before the environment and the other flags.
  std::vector<std::pair<const Key*, std::string>> flags;
  std::string config_file;
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view arg = args[i];
    if (arg == "--help" || arg == "-h") {
      *help_requested = true;
      return absl::OkStatus();
    }
    if (arg.substr(0, 2) != "--") return absl::InvalidArgumentError(StrCat("unexpected argument '", arg, "'"));
    arg.remove_prefix(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = arg.find('='); eq != std::string_view::npos) {
      value = std::string(arg.substr(eq + 1));
      arg = arg.substr(0, eq);
      has_value = true;
    }
    const Key* k = arg == "config" ? nullptr : FindKey(arg);
    if (arg != "config" && k == nullptr) return absl::InvalidArgumentError(StrCat("unknown flag --", arg));
    const bool is_bool = k != nullptr && std::holds_alternative<bool ServerConfig::*>(k->field);
    if (!has_value && is_bool) {
      value = "true";
    } else if (!has_value) {
      if (i + 1 >= args.size()) return absl::InvalidArgumentError(StrCat("--", arg, " needs a value"));
      value = args[++i];
    }
    if (k == nullptr) {
      config_file = value;
    } else {
      flags.emplace_back(k, value);
    }
  }
  if (!config_file.empty()) LOOM_RETURN_IF_ERROR(ApplyFile(config_file, config));
  for (const Key& k : Keys()) {
    const std::string name = EnvName(k.name);
    if (const char* v = env(name.c_str()); v != nullptr) {
      LOOM_RETURN_IF_ERROR(SetFromText(k, v, name, config));
    }
  }
  for (const auto& [k, value] : flags) {
    LOOM_RETURN_IF_ERROR(SetFromText(*k, value, StrCat("--", k->name), config));
  }
  return absl::OkStatus();
}

std::string ServerConfigHelp() {
  std::string out =
      "usage: loomd [--config FILE] [--KEY VALUE ...]\n"
      "Every key may also come from the file or from LOOM_<KEY>; flags win, then the\n"
      "environment, then the file.\n\n";
  for (const Key& k : Keys()) {
    out += StrCat("  --", k.name, k.unit.empty() ? "" : StrCat(" (", k.unit, ")"), "\n      ",
                  k.help, "; ", RuleText(k), "; default ", DefaultText(k), "\n");
  }
  return out;
}

std::string ServerConfigReference() {
  std::string out =
      "| key | environment | unit | default | rule | meaning |\n|---|---|---|---|---|---|\n";
  for (const Key& k : Keys()) {
    out += StrCat("| `", k.name, "` | `", EnvName(k.name), "` | ", k.unit.empty() ? "—" : k.unit,
                  " | `", DefaultText(k), "` | ", RuleText(k), " | ", k.help, " |\n");
  }
  return out;
}

}  // namespace loom
