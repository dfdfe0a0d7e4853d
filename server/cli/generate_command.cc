// `loom generate`: load a model, run prompts to completion, print tokens and timings.
#include <cstdio>
#include <string>
#include <vector>

#include "engine/common/json_writer.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "engine/runtime/local_executor.h"
#include "kernels/cpu/cpu_features.h"
#include "scheduler/offline_batch.h"
#include "server/cli/commands.h"
#include "server/cli/flags.h"
#include "server/cli/text_prompts.h"

namespace loom::cli {
namespace {

// Most sequences one run makes (prompts times --batch): each request is held in memory up front.
constexpr int64_t kMaxSequences = int64_t{1} << 20;

struct GenerateFlags {
  std::string model;
  std::vector<std::string> prompt_ids;
  std::vector<std::string> prompts;
  std::vector<std::string> chats;
  std::string backend = "cpu";
  std::string kv_dtype = "bf16", kv_k_granularity = "channel";
  std::string quant_activations = "f32";
  int32_t max_tokens = 32, threads = 0, block_size = 0, kv_residual_tokens = 0;
  int32_t max_batch_tokens = 2048, prefill_chunk = 0, batch = 1, top_k = 0, logprobs = -1;
  int64_t kv_cache_mb = 1024, seed = 0;
  double temperature = 0, top_p = 1, min_p = 0, repetition_penalty = 1;
  double frequency_penalty = 0, presence_penalty = 0;
  bool ignore_eos = false, json = false, fast_bf16_matmul = false, kv_hadamard = true;
};

void Declare(FlagSet& f, GenerateFlags& g) {
  f.String("model", &g.model, "Hugging Face model folder (config.json, *.safetensors) or GGUF file");
  f.Strings("prompt-ids", &g.prompt_ids, "prompt as comma-separated token ids (repeatable)");
  f.Strings("prompt", &g.prompts, "prompt text, through the model's tokenizer (repeatable)");
  f.Strings("chat", &g.chats,
            "a conversation as a JSON array of {\"role\",\"content\"} messages, through the "
            "model's chat template (repeatable)");
  f.Int32("max-tokens", &g.max_tokens, "tokens to generate per prompt");
  f.Int32("batch", &g.batch, "run each prompt this many times, as separate sequences");
  f.Double("temperature", &g.temperature, "0 = greedy");
  f.Int32("top-k", &g.top_k, "keep the k most likely tokens (0 = off)");
  f.Double("top-p", &g.top_p, "nucleus sampling mass");
  f.Double("min-p", &g.min_p, "drop tokens below min-p times the top probability");
  f.Double("repetition-penalty", &g.repetition_penalty, "Hugging Face repetition penalty");
  f.Double("frequency-penalty", &g.frequency_penalty, "OpenAI frequency penalty");
  f.Double("presence-penalty", &g.presence_penalty, "OpenAI presence penalty");
  f.Int("seed", &g.seed, "random seed (sequence i uses seed + i)");
  f.Int32("logprobs", &g.logprobs, "report this many top log-probabilities per token (-1 = off)");
  f.Bool("ignore-eos", &g.ignore_eos, "do not stop at the model's end-of-sequence tokens");
  f.String("backend", &g.backend, "cpu or cuda");
  f.Int32("threads", &g.threads, "CPU threads (0 = all available cores)");
  f.String("kv-cache-dtype", &g.kv_dtype,
           "KV cache format: auto, bf16, f16, f32, fp8-e4m3, int8, int4 or int2");
  f.String("kv-k-granularity", &g.kv_k_granularity, "low-bit KV: K per channel or per token");
  f.Int32("kv-residual-tokens", &g.kv_residual_tokens,
          "low-bit KV: newest tokens each sequence keeps in bf16");
  f.Bool("kv-hadamard", &g.kv_hadamard, "low-bit KV: store K/V Hadamard-rotated");
  f.Int32("block-size", &g.block_size, "tokens per KV block (0 = 16, or 32 for low-bit KV)");
  f.Int("kv-cache-mb", &g.kv_cache_mb, "KV cache size in MiB");
  f.Int32("max-batch-tokens", &g.max_batch_tokens, "most tokens computed in one step");
  f.Int32("prefill-chunk", &g.prefill_chunk, "most prompt tokens per sequence and step (0 = budget)");
  f.Bool("fast-bf16-matmul", &g.fast_bf16_matmul,
         "round matmul activations to bf16 (prefill; one-sequence decode on AVX512-BF16 "
         "CPUs): faster, less exact");
  f.String("quant-activations", &g.quant_activations,
           "activations of quantized-weight decode matmuls: f32 or int8 (faster, less exact)");
  f.Bool("json", &g.json, "print one JSON object instead of text");
}

absl::StatusOr<EngineConfig> MakeEngineConfig(const GenerateFlags& g) {
  if (g.model.empty()) return absl::InvalidArgumentError("--model is required");
  EngineConfig config;
  config.model_dir = g.model;
  LOOM_ASSIGN_OR_RETURN(config.backend, ParseBackendKind(g.backend));
  if (absl::Status kv = SetKvCacheFormat(g.kv_dtype, g.kv_k_granularity, g.block_size, config);
      !kv.ok()) {
    return absl::InvalidArgumentError(StrCat("--kv-cache-dtype: ", kv.message()));
  }
  if (g.kv_cache_mb < 0 || g.kv_cache_mb > (INT64_MAX >> 20)) {
    return absl::InvalidArgumentError(StrCat("--kv-cache-mb: ", g.kv_cache_mb, " is out of range"));
  }
  config.num_threads = g.threads;
  config.kv_residual_tokens = g.kv_residual_tokens;
  config.kv_hadamard = g.kv_hadamard;
  config.kv_cache_bytes = g.kv_cache_mb << 20;
  config.max_num_batched_tokens = g.max_batch_tokens;
  config.fast_bf16_matmul = g.fast_bf16_matmul;
  if (g.quant_activations != "f32" && g.quant_activations != "int8") {
    return absl::InvalidArgumentError(
        StrCat("--quant-activations: '", g.quant_activations, "' (f32 or int8)"));
  }
  config.int8_activations = g.quant_activations == "int8";
  return config;
}

// Every prompt as token ids: --prompt-ids as given, --prompt and --chat through the text layer.
absl::StatusOr<std::vector<std::vector<int32_t>>> PromptIds(const GenerateFlags& g,
                                                            const TextSupport& text) {
  std::vector<std::vector<int32_t>> prompts;
  for (const std::string& list : g.prompt_ids) {
    std::vector<int32_t> ids;
    absl::Status status = ParseIntList(list, &ids);
    if (!status.ok()) return absl::InvalidArgumentError(StrCat("--prompt-ids: ", status.message()));
    prompts.push_back(std::move(ids));
  }
  for (const std::string& prompt : g.prompts) {
    LOOM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, EncodePrompt(text, prompt));
    prompts.push_back(std::move(ids));
  }
  for (const std::string& chat : g.chats) {
    LOOM_ASSIGN_OR_RETURN(std::vector<int32_t> ids, EncodeChat(text, chat));
    prompts.push_back(std::move(ids));
  }
  if (prompts.empty()) {
    return absl::InvalidArgumentError("give at least one --prompt, --chat or --prompt-ids");
  }
  return prompts;
}

absl::StatusOr<std::vector<OfflineRequest>> MakeRequests(const GenerateFlags& g,
                                                         const ModelInfo& info,
                                                         const TextSupport& text) {
  LOOM_ASSIGN_OR_RETURN(std::vector<std::vector<int32_t>> prompts, PromptIds(g, text));
  if (g.max_tokens < 1 || g.batch < 1) {
    return absl::InvalidArgumentError("--max-tokens and --batch must be positive");
  }
  if (static_cast<int64_t>(g.batch) * static_cast<int64_t>(prompts.size()) > kMaxSequences) {
    return absl::InvalidArgumentError(
        StrCat("--batch: at most ", kMaxSequences, " sequences in all"));
  }
  std::vector<OfflineRequest> requests;
  for (const std::vector<int32_t>& ids : prompts) {
    OfflineRequest r;
    for (int32_t id : ids) {
      if (id < 0 || id >= info.vocab_size) {
        return absl::InvalidArgumentError(
            StrCat("prompt token ", id, " is outside the vocabulary [0, ", info.vocab_size, ")"));
      }
      r.prompt.push_back(TokenId(id));
    }
    if (static_cast<int64_t>(r.prompt.size()) + g.max_tokens > info.max_context_len) {
      return absl::InvalidArgumentError(StrCat("prompt of ", r.prompt.size(), " tokens plus ",
                                               g.max_tokens, " new tokens exceeds the context of ",
                                               info.max_context_len));
    }
    r.max_new_tokens = g.max_tokens;
    SamplingParams& s = r.sampling;
    s.temperature = static_cast<float>(g.temperature);
    s.top_k = g.top_k;
    s.top_p = static_cast<float>(g.top_p);
    s.min_p = static_cast<float>(g.min_p);
    s.repetition_penalty = static_cast<float>(g.repetition_penalty);
    s.frequency_penalty = static_cast<float>(g.frequency_penalty);
    s.presence_penalty = static_cast<float>(g.presence_penalty);
    s.logprobs = g.logprobs;
    LOOM_RETURN_IF_ERROR(ValidateSamplingParams(s, info.vocab_size));
    if (!g.ignore_eos) r.stop_token_ids = info.eos_token_ids;
    for (int32_t b = 0; b < g.batch; ++b) {
      r.sampling.seed = static_cast<uint64_t>(g.seed) + requests.size();
      requests.push_back(r);
    }
  }
  return requests;
}

double PerSecond(int64_t count, double ms) { return ms > 0 ? count * 1000.0 / ms : 0.0; }

// The generated text of a result, special tokens skipped ("" without a tokenizer).
std::string OutputText(const TextSupport& text, const OfflineResult& result) {
  if (text.tokenizer == nullptr) return "";
  std::vector<int32_t> ids;
  for (TokenId t : result.output_tokens) ids.push_back(t.value());
  return text.tokenizer->Decode(ids, /*skip_special_tokens=*/true);
}

void Print(const GenerateFlags& g, const std::vector<OfflineRequest>& requests,
           const std::vector<OfflineResult>& results, const OfflineStats& stats,
           const LocalExecutor& executor, const TextSupport& text) {
  const double prefill_tps = PerSecond(stats.prefill_tokens, stats.prefill_ms);
  const double decode_tps = PerSecond(stats.decode_tokens, stats.decode_ms);
  if (g.json) {
    std::string out = "{\"results\":[";
    for (size_t i = 0; i < results.size(); ++i) {
      out += StrCat(i ? "," : "", "{\"prompt_tokens\":", requests[i].prompt.size(),
                    ",\"finish_reason\":\"",
                    results[i].finish == OfflineFinish::kStopToken ? "stop" : "length",
                    "\",\"tokens\":[");
      for (size_t t = 0; t < results[i].output_tokens.size(); ++t) {
        out += StrCat(t ? "," : "", results[i].output_tokens[t].value());
      }
      out += "]";
      if (text.tokenizer != nullptr) out += StrCat(",\"text\":", JsonQuote(OutputText(text, results[i])));
      out += "}";
    }
    out += StrCat("],\"timing\":{\"prefill_tokens\":", stats.prefill_tokens, ",\"prefill_ms\":",
                  stats.prefill_ms, ",\"prefill_tokens_per_s\":", prefill_tps,
                  ",\"decode_tokens\":", stats.decode_tokens, ",\"decode_ms\":", stats.decode_ms,
                  ",\"decode_tokens_per_s\":", decode_tps, ",\"steps\":", stats.num_steps,
                  ",\"threads\":", executor.num_threads(), "}}\n");
    std::fputs(out.c_str(), stdout);
    return;
  }
  for (size_t i = 0; i < results.size(); ++i) {
    std::string line = StrCat("[", i, "] ", requests[i].prompt.size(), " prompt tokens -> ",
                              results[i].output_tokens.size(), " tokens (",
                              results[i].finish == OfflineFinish::kStopToken ? "stop" : "length",
                              "):");
    for (TokenId t : results[i].output_tokens) line += StrCat(" ", t.value());
    std::printf("%s\n", line.c_str());
    if (text.tokenizer != nullptr) {
      std::printf("    text: %s\n", JsonQuote(OutputText(text, results[i])).c_str());
    }
  }
  std::printf("prefill: %lld tokens in %.1f ms = %.1f tokens/s\n",
              static_cast<long long>(stats.prefill_tokens), stats.prefill_ms, prefill_tps);
  std::printf("decode:  %lld tokens in %.1f ms = %.1f tokens/s (%lld steps in all, %d threads)\n",
              static_cast<long long>(stats.decode_tokens), stats.decode_ms, decode_tps,
              static_cast<long long>(stats.num_steps), executor.num_threads());
}

}  // namespace

int GenerateCommand(const std::vector<std::string>& args) {
  GenerateFlags g;
  FlagSet flags(
      "usage: loom generate --model DIR (--prompt TEXT | --chat JSON | --prompt-ids 1,2,3) [flags]");
  Declare(flags, g);
  absl::Status status = flags.Parse(args);
  if (flags.help_requested()) {
    std::printf("%s", flags.Help().c_str());
    return 0;
  }
  auto fail = [](const absl::Status& s) {
    std::fprintf(stderr, "loom generate: %s\n", std::string(s.message()).c_str());
    return 2;
  };
  if (!status.ok()) return fail(status);
  absl::StatusOr<EngineConfig> config = MakeEngineConfig(g);
  if (!config.ok()) return fail(config.status());
  absl::StatusOr<std::unique_ptr<LocalExecutor>> executor = LocalExecutor::Create(*config);
  if (!executor.ok()) return fail(executor.status());
  const TextSupport text = text::LoadModelText((*config).model_dir);
  absl::StatusOr<std::vector<OfflineRequest>> requests =
      MakeRequests(g, (*executor)->model_info(), text);
  if (!requests.ok()) return fail(requests.status());
  OfflineStats stats;
  OfflineOptions options;
  options.prefill_chunk = g.prefill_chunk;
  absl::StatusOr<std::vector<OfflineResult>> results =
      RunOffline(**executor, *requests, options, &stats);
  if (!results.ok()) return fail(results.status());
  Print(g, *requests, *results, stats, **executor, text);
  return 0;
}

}  // namespace loom::cli
