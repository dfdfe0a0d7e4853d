// loomd's configuration: one typed struct, read from (lowest to highest precedence) its
// defaults, a JSON file (`--config configs/NAME.json`), `LOOM_<KEY>` environment variables, and
// `--<key>` command-line flags (dashes or underscores).
//
// Every key is declared once, in server_config.cc's table, with its unit, default and validation
// rule; the same table parses JSON, environment and flags and writes configs/README.md's
// reference (a test keeps that file in step). Unknown keys in a file and unknown flags are
// errors that name them; a bad value names the key, the source and the rule.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace loom {

struct ServerConfig {
  // Model.
  std::string model;               // Hugging Face folder; empty = a tiny random-weight test model
  std::string served_model_name;   // the API's model id; empty = the folder's name
  // HTTP.
  std::string host = "0.0.0.0";
  int64_t port = 8000;
  int64_t http_threads = 2;
  int64_t max_body_bytes = int64_t{32} << 20;
  int64_t max_header_bytes = int64_t{64} << 10;
  int64_t max_requests_per_connection = 10000;
  int64_t idle_timeout_s = 60;
  std::vector<std::string> api_keys;  // empty = no authentication
  bool strict_api = false;
  std::string metrics_compat;  // "" or "vllm"
  bool metrics_require_api_key = true;  // /metrics needs a key when api_keys is set
  bool allow_request_chat_template = false;
  // gRPC.
  int64_t grpc_port = -1;  // -1 = off, 0 = any free port
  std::string grpc_tls_cert_file;  // PEM; with the key, gRPC uses TLS
  std::string grpc_tls_key_file;
  // Engine.
  std::string backend = "cpu";
  int64_t threads = 0;  // 0 = all available cores
  int64_t device = 0;   // CUDA device ordinal
  double gpu_memory_utilization = 0.9;
  bool cuda_graphs = true;
  std::string kv_cache_dtype = "bf16";
  std::string kv_k_granularity = "channel";
  int64_t kv_residual_tokens = 0;
  bool kv_hadamard = true;
  std::string quantized_activations = "f32";  // "int8": int8 activations for quantized weights
  bool fast_bf16_matmul = false;  // CPU matmuls round activations to bf16 (EngineConfig)
  std::string weight_memory = "auto";  // CPU: "file", "anonymous" or "auto" (EngineConfig)
  int64_t block_size = 0;  // 0: 16, or 32 for the low-bit KV formats
  int64_t kv_cache_mb = 1024;
  // Mixture-of-experts models: RAM for the expert cache (0 = every expert resident), the policy
  // that steers it, and whether experts are read around the page cache (O_DIRECT).
  int64_t expert_cache_mb = 0;
  std::string expert_cache_policy = "activation";
  bool expert_direct_io = true;
  std::string expert_host_compute = "auto";
  // Scheduler.
  int64_t max_num_batched_tokens = 2048;
  int64_t max_num_seqs = 64;
  int64_t max_prefill_chunk = 0;
  bool enable_prefix_caching = true;
  int64_t max_waiting_requests = 1024;
  int64_t max_waiting_prompt_tokens = 0;
  int64_t retry_after_s = 1;
  // Lifecycle.
  int64_t drain_timeout_s = 30;
  int64_t livez_step_timeout_s = 60;
  int64_t livez_max_failed_steps = 5;
  // Cluster (shared/ARCHITECTURE.md §6; proto/loom/v1/cluster.proto).
  std::string role = "instance";  // "instance" serves; "manager" runs the control plane
  std::string instance_id;        // unique in the cluster; empty = host:port
  std::string cluster_manager;    // the manager's gRPC host:port; empty = standalone
  std::string advertise_host;     // how other instances reach this one; empty = host
  std::string cluster_tls_ca_file;  // PEM roots of the cluster's certificates; empty = plaintext
  int64_t cluster_report_interval_ms = 100;
  bool cluster_dispatch = true;  // ask the manager where each new request should run
  double priority_headroom_fraction = 0.5;  // of the blocks, while high-priority requests run
  int64_t high_priority_below = 0;          // priority values below this are high priority
  int64_t migration_max_stages = 3;
  int64_t migration_last_stage_blocks = 4;
  int64_t migration_timeout_ms = 5000;
  int64_t migration_max_in_flight = 1;  // per instance, in and out together
  int64_t reservation_timeout_ms = 10000;
  int64_t migration_stage_pause_ms = 0;  // between stages and before the commit
  int64_t max_relays = 512;  // relay threads of moved or forwarded requests; 0 = unbounded
  // Manager.
  int64_t manager_instance_timeout_ms = 3000;
  int64_t manager_dispatch_top_k = 2;
  int64_t manager_pair_interval_ms = 500;
  double manager_migrate_out_below = 3.0;  // freeness (free blocks per running request)
  double manager_migrate_in_above = 10.0;
  double manager_scale_out_below = 5.0;     // average freeness
  double manager_scale_in_above = 60.0;
  bool manager_migration = true;
};

// Where values come from besides the flags (tests inject a fake environment).
using EnvLookup = std::function<const char*(const char* name)>;

// Applies, in order: `--config FILE` (if among args), the environment, the flags. `args` are the
// command line without the program name. --help sets *help_requested and returns OK.
absl::Status LoadServerConfig(const std::vector<std::string>& args, const EnvLookup& env,
                              ServerConfig* config, bool* help_requested);

// Command-line help: every flag with its unit, default and rule.
std::string ServerConfigHelp();
// The markdown reference of every key (configs/README.md's table).
std::string ServerConfigReference();

}  // namespace loom
