// Engine benchmark: prefill and decode tokens/s of a checkpoint on the CPU or the CUDA backend,
// with the measured memory bandwidth as the decode roofline (CPU: the best multi-stream read
// bandwidth; CUDA: device-to-device copy bandwidth, bytes read plus written) and, for prefill,
// the matmul FLOP rate (2 x parameters outside the embedding x prompt tokens) against a stated
// peak. JSON output records the machine, the commit and every setting.
//
//   loom_engine_bench make-model --shape llama-1.1b --dtype bf16 --out DIR
//   loom_engine_bench run --model DIR [--backend cpu|cuda] [--threads 1,2] [--batch 1,8]
//                         [--prompt-len 128] [--gen-len 32] [--kv-cache-dtype bf16]
//                         [--max-batched-tokens 2048] [--expert-cache-percent 25]
//                         [--expert-host-compute auto|never|always]
//                         [--moe-grouped-experts=false] [--out FILE.json]
#include <chrono>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/common/memory_bandwidth.h"
#include "bench/engine/random_checkpoint.h"
#include "engine/common/file.h"
#include "engine/common/strings.h"
#include "engine/runtime/local_executor.h"
#include "kernels/cpu/cpu_features.h"
#include "scheduler/offline_batch.h"
#include "server/cli/flags.h"

#if LOOM_HAS_CUDA
#include "kernels/cuda/device.h"
#endif

namespace loom::bench {
namespace {

std::string CommandOutput(const std::string& command) {
  std::string out;
  if (std::FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[256];
    while (std::fgets(buffer, sizeof(buffer), pipe)) out += buffer;
    pclose(pipe);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

nlohmann::json MachineJson() {
  return {{"cpu", cpu::DescribeCpu()},
          {"available_cpus", cpu::NumAvailableCpus()},
          {"memory", CommandOutput("grep MemTotal /proc/meminfo")},
          {"kernel", CommandOutput("uname -r")}};
}

std::string UtcNow() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

int MakeModel(const std::vector<std::string>& args) {
  std::string shape = "llama-1.1b", dtype_name = "bf16", out;
  int64_t seed = 4321;
  cli::FlagSet flags("usage: loom_engine_bench make-model --shape NAME --out DIR");
  flags.String("shape", &shape, "one of: llama-134m, llama-1.1b, llama3-8b, mixtral-mini");
  flags.String("dtype", &dtype_name, "bf16, f16 or f32");
  flags.String("out", &out, "folder to write");
  flags.Int("seed", &seed, "weight seed");
  if (absl::Status s = flags.Parse(args); !s.ok() || out.empty() || flags.help_requested()) {
    std::cerr << (s.ok() ? "" : std::string(s.message()) + "\n") << flags.Help();
    return 2;
  }
  const DType dtype = dtype_name == "f32"   ? DType::kF32
                      : dtype_name == "f16" ? DType::kF16
                                            : DType::kBF16;
  const auto start = std::chrono::steady_clock::now();
  if (absl::Status s = WriteRandomCheckpoint(shape, dtype, seed, out); !s.ok()) {
    std::cerr << "make-model: " << s.message() << "\n";
    return 1;
  }
  std::cerr << "wrote " << out << " in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
            << " s\n";
  return 0;
}

struct RunSettings {
  std::string model, kv_dtype = "bf16", kv_k_granularity = "channel", out, threads = "2",
                     batches = "1", backend = "cpu";
  int64_t prompt_len = 128, gen_len = 32, block_size = 0, repeat = 2, max_batched_tokens = 2048;
  int64_t kv_residual_tokens = 0;
  bool kv_hadamard = true;
  bool fast_bf16 = false;
  std::string quant_activations = "f32";  // or "int8"
  std::string weight_memory = "auto";     // or "file", "anonymous" (EngineConfig::weight_memory)
  // MoE models: the expert cache's size as a share of the routed experts (0 = every expert
  // resident), and whether missing experts may be computed on the host (device backends).
  int64_t expert_cache_percent = 0;
  std::string expert_host_compute = "auto";
  // MoE, all resident: small steps' experts grouped (EngineConfig::moe_grouped_experts).
  bool moe_grouped_experts = true;
  // The prefill FLOP ceiling the fraction is taken of (TFLOP/s; 0 = not reported).
  double peak_tflops = 0;
};

// The decode roofline's bandwidth for the CUDA backend (GB/s), or 0 without a device.
double CudaCopyBandwidthGbps(nlohmann::json& report) {
#if LOOM_HAS_CUDA
  if (!cuda::CudaDeviceAvailable()) return 0;
  cuda::CudaDeviceInfo info;
  if (cuda::QueryCudaDevice(0, &info) == cudaSuccess) {
    report["device"] = {{"name", info.name},
                        {"compute_capability", StrCat(info.compute_major, ".", info.compute_minor)},
                        {"sm_count", info.sm_count},
                        {"memory_bytes", info.total_memory_bytes},
                        {"driver", CommandOutput("nvidia-smi --query-gpu=driver_version "
                                                 "--format=csv,noheader 2>/dev/null")}};
  }
  double bytes_per_second = 0;
  if (cuda::MeasureCopyBandwidth(size_t{2} << 30, 20, &bytes_per_second) != cudaSuccess) return 0;
  report["device_copy_gb_per_s"] = bytes_per_second / 1e9;
  return bytes_per_second / 1e9;
#else
  (void)report;
  return 0;
#endif
}

// Prefill `batch` prompts of prompt_len tokens, then decode gen_len tokens each (greedy,
// ignoring EOS). Best of `repeat` runs.
nlohmann::json RunOne(const RunSettings& s, int threads, int batch, double bandwidth) {
  EngineConfig config;
  config.model_dir = s.model;
  config.num_threads = threads;
  if (absl::Status kv = SetKvCacheFormat(s.kv_dtype, s.kv_k_granularity,
                                         static_cast<int32_t>(s.block_size), config);
      !kv.ok()) {
    return {{"error", std::string(kv.message())}};
  }
  config.max_num_seqs = std::max(batch, 1);
  config.kv_cache_bytes = int64_t{2} << 30;
  config.kv_residual_tokens = static_cast<int32_t>(s.kv_residual_tokens);
  config.kv_hadamard = s.kv_hadamard;
  config.fast_bf16_matmul = s.fast_bf16;
  config.int8_activations = s.quant_activations == "int8";
  // Checked in Run.
  config.weight_memory = WeightMemoryFromName(s.weight_memory).value_or(WeightMemory::kAuto);
  config.max_num_batched_tokens = static_cast<int32_t>(s.max_batched_tokens);
  config.max_context_len = static_cast<int32_t>(s.prompt_len + s.gen_len + config.block_size);
  if (s.backend == "cuda") config.backend = BackendKind::kCuda;
  config.expert_host_compute = s.expert_host_compute == "always" ? ExpertHostCompute::kAlways
                               : s.expert_host_compute == "never" ? ExpertHostCompute::kNever
                                                                  : ExpertHostCompute::kAuto;
  config.moe_grouped_experts = s.moe_grouped_experts;
  int32_t expert_slots = 0, routed_experts = 0;
  if (s.expert_cache_percent > 0) {
    // A one-slot engine says how large a slot is; the cache then holds the share asked for.
    config.expert_cache_bytes = 1;
    auto probe = LocalExecutor::Create(config);
    if (!probe.ok()) return {{"error", std::string(probe.status().message())}};
    for (bool sparse : (*probe)->model_info().sparse_layers) {
      routed_experts += sparse ? (*probe)->model_info().num_experts : 0;
    }
    expert_slots = std::max<int32_t>(
        1, static_cast<int32_t>(routed_experts * s.expert_cache_percent / 100));
    config.expert_cache_bytes = int64_t{expert_slots} * (*probe)->capacity().expert_slot_bytes;
  }
  auto executor = LocalExecutor::Create(config);
  if (!executor.ok()) return {{"error", std::string(executor.status().message())}};
  const ModelInfo& info = (*executor)->model_info();
  const KvCapacity& cap = (*executor)->capacity();
  std::vector<OfflineRequest> requests(batch);
  for (int b = 0; b < batch; ++b) {
    for (int64_t i = 0; i < s.prompt_len; ++i) {
      requests[b].prompt.push_back(
          TokenId(static_cast<int32_t>((i * 7919 + b * 104729) % info.vocab_size)));
    }
    requests[b].sampling.temperature = 0;
    requests[b].max_new_tokens = static_cast<int32_t>(s.gen_len);
  }
  // Warm-up: grows workspaces and touches the KV pages once.
  (void)RunOffline(**executor, std::span(requests).subspan(0, 1));
  OfflineStats best;
  for (int64_t r = 0; r < s.repeat; ++r) {
    OfflineStats stats;
    auto results = RunOffline(**executor, requests, {}, &stats);
    if (!results.ok()) return {{"error", std::string(results.status().message())}};
    if (r == 0 || stats.decode_ms < best.decode_ms) {
      const double best_prefill =
          r == 0 ? stats.prefill_ms : std::min(best.prefill_ms, stats.prefill_ms);
      best = stats;
      best.prefill_ms = best_prefill;
    } else {
      best.prefill_ms = std::min(best.prefill_ms, stats.prefill_ms);
    }
  }
  // A decode step reads every matrix once (the embedding table only when it is the tied LM head)
  // and the KV cache of every sequence: prompt_len + gen_len / 2 keys on average over the steps,
  // each at the format's bytes per token (a low-bit format's bf16 window counts as packed).
  const double kv_bytes_per_token = static_cast<double>(cap.bytes_per_block) / cap.block_size;
  const auto decode_kv_bytes = static_cast<int64_t>(
      batch * (static_cast<double>(s.prompt_len) + 0.5 * static_cast<double>(s.gen_len)) *
      kv_bytes_per_token);
  const int64_t decode_bytes = info.decode_weight_bytes + decode_kv_bytes;
  const double decode_steps = static_cast<double>(best.decode_tokens) / batch;
  const double step_ms = decode_steps > 0 ? best.decode_ms / decode_steps : 0;
  const double decode_tps = best.decode_ms > 0 ? best.decode_tokens * 1000.0 / best.decode_ms : 0;
  const double effective_gbps = step_ms > 0 ? decode_bytes / (step_ms * 1e6) : 0;
  const double roofline_tps = bandwidth * 1e9 / decode_bytes * batch;
  const double prefill_tps =
      best.prefill_ms > 0 ? best.prefill_tokens * 1000.0 / best.prefill_ms : 0;
  // Matmul FLOPs of a prompt token: 2 per weight outside the embedding table (attention's own
  // FLOPs, small at these prompt lengths, are not counted).
  const double prefill_tflops =
      2.0 * static_cast<double>(info.num_parameters - int64_t{info.vocab_size} * info.hidden_size) *
      prefill_tps / 1e12;
  return {{"backend", s.backend},
          {"threads", threads},
          {"batch", batch},
          {"prompt_len", s.prompt_len},
          {"gen_len", s.gen_len},
          {"prefill_tokens", best.prefill_tokens},
          {"prefill_ms", best.prefill_ms},
          {"prefill_tokens_per_s", prefill_tps},
          {"prefill_matmul_tflops", prefill_tflops},
          {"prefill_fraction_of_peak", s.peak_tflops > 0 ? prefill_tflops / s.peak_tflops : 0},
          {"decode_tokens", best.decode_tokens},
          {"decode_ms", best.decode_ms},
          {"decode_step_ms", step_ms},
          {"decode_tokens_per_s", decode_tps},
          {"decode_bytes_per_step", decode_bytes},
          {"decode_kv_bytes_per_step", decode_kv_bytes},
          {"decode_effective_gb_per_s", effective_gbps},
          {"decode_roofline_tokens_per_s", roofline_tps},
          {"decode_fraction_of_roofline", roofline_tps > 0 ? decode_tps / roofline_tps : 0},
          {"weights_in_anonymous_memory", info.weights_in_anonymous_memory},
          // The KV cache format: what one token takes, how many tokens a GiB holds, and the
          // bf16 residual tail each sequence holds besides (low-bit formats).
          {"kv_cache_dtype", std::string(DTypeName(cap.kv_dtype))},
          {"kv_block_size", cap.block_size},
          {"kv_bytes_per_token", kv_bytes_per_token},
          {"kv_tokens_per_gib",
           static_cast<double>(int64_t{1} << 30) * cap.block_size / cap.bytes_per_block},
          {"kv_tail_bytes_per_seq", cap.tail_bytes / std::max(cap.max_num_seqs, 1)},
          // The expert cache over the whole run (warm-up included): its size, and what the
          // steps found in it, loaded, or computed on the host.
          {"expert_cache",
           {{"slots", expert_slots},
            {"routed_experts", routed_experts},
            {"slot_bytes", cap.expert_slot_bytes},
            {"hits", best.expert_cache.hits},
            {"misses", best.expert_cache.misses},
            {"computed_on_host", best.expert_cache.computed_at_home},
            {"bytes_loaded", best.expert_cache.bytes_loaded},
            {"load_seconds", best.expert_cache.load_seconds},
            {"wait_seconds", best.expert_cache.wait_seconds}}}};
}

int Run(const std::vector<std::string>& args) {
  RunSettings s;
  cli::FlagSet flags("usage: loom_engine_bench run --model DIR [flags]");
  flags.String("model", &s.model, "Hugging Face model folder or GGUF file");
  flags.String("threads", &s.threads, "comma-separated thread counts");
  flags.String("batch", &s.batches, "comma-separated batch sizes (sequences)");
  flags.Int("prompt-len", &s.prompt_len, "prompt tokens per sequence");
  flags.Int("gen-len", &s.gen_len, "generated tokens per sequence");
  flags.String("kv-cache-dtype", &s.kv_dtype, "auto, bf16, f16, f32, fp8-e4m3, int8, int4 or int2");
  flags.String("kv-k-granularity", &s.kv_k_granularity, "low-bit KV: channel or token");
  flags.Int("kv-residual-tokens", &s.kv_residual_tokens, "low-bit KV: newest tokens kept in bf16");
  flags.Bool("kv-hadamard", &s.kv_hadamard, "low-bit KV: store K/V Hadamard-rotated");
  flags.Int("block-size", &s.block_size, "tokens per KV block (0 = 16, or 32 for low-bit KV)");
  flags.Int("repeat", &s.repeat, "runs per setting; the best is reported");
  flags.Bool("fast-bf16-matmul", &s.fast_bf16,
             "bf16-rounded matmul activations (prefill; one-sequence decode on AVX512-BF16)");
  flags.String("quant-activations", &s.quant_activations,
               "activations of quantized-weight decode matmuls: f32 or int8");
  flags.String("weight-memory", &s.weight_memory,
               "CPU: weights read from the file mapping (file), a copy in anonymous memory "
               "(anonymous) or auto");
  flags.String("backend", &s.backend, "cpu or cuda");
  flags.Int("max-batched-tokens", &s.max_batched_tokens, "step token budget (prefill chunk size)");
  flags.Double("peak-tflops", &s.peak_tflops, "prefill FLOP ceiling to report a fraction of");
  flags.Int("expert-cache-percent", &s.expert_cache_percent,
            "MoE: expert cache holding this share of the routed experts (0 = all resident)");
  flags.String("expert-host-compute", &s.expert_host_compute,
               "MoE with an expert cache on cuda: auto, never or always");
  flags.Bool("moe-grouped-experts", &s.moe_grouped_experts,
             "MoE, all resident: small steps' experts grouped, routed on the device (graphs)");
  flags.String("out", &s.out, "write the JSON here as well as to stdout");
  std::vector<int32_t> threads, batches;
  absl::Status status = flags.Parse(args);
  if (status.ok()) status = cli::ParseIntList(s.threads, &threads);
  if (status.ok()) status = cli::ParseIntList(s.batches, &batches);
  if (status.ok() && s.backend != "cpu" && s.backend != "cuda") {
    status = absl::InvalidArgumentError("--backend must be cpu or cuda");
  }
  if (status.ok() && s.quant_activations != "f32" && s.quant_activations != "int8") {
    status = absl::InvalidArgumentError("--quant-activations must be f32 or int8");
  }
  if (status.ok() && !WeightMemoryFromName(s.weight_memory).has_value()) {
    status = absl::InvalidArgumentError("--weight-memory must be auto, file or anonymous");
  }
  if (status.ok() && s.expert_host_compute != "auto" && s.expert_host_compute != "never" &&
      s.expert_host_compute != "always") {
    status = absl::InvalidArgumentError("--expert-host-compute must be auto, never or always");
  }
  if (status.ok() && (s.expert_cache_percent < 0 || s.expert_cache_percent > 100)) {
    status = absl::InvalidArgumentError("--expert-cache-percent must be in [0, 100]");
  }
  if (!status.ok() || s.model.empty() || flags.help_requested()) {
    std::cerr << (status.ok() ? "" : std::string(status.message()) + "\n") << flags.Help();
    return 2;
  }
  nlohmann::json report = {
      {"benchmark", "engine"},
      {"date", UtcNow()},
      {"commit", CommandOutput(std::string("git -C ") + LOOM_SOURCE_DIR +
                               " rev-parse --short HEAD 2>/dev/null")},
      {"machine", MachineJson()},
      // The folder's name only: results are committed and must not name a path of the machine.
      {"settings",
       {{"model", std::string(BaseName(s.model))},
        {"kv_dtype", s.kv_dtype},
        {"kv_k_granularity", s.kv_k_granularity},
        {"kv_residual_tokens", s.kv_residual_tokens},
        {"kv_hadamard", s.kv_hadamard},
        {"block_size", s.block_size},
        {"backend", s.backend},
        {"max_batched_tokens", s.max_batched_tokens},
        {"peak_tflops", s.peak_tflops},
        {"repeat", s.repeat},
        {"fast_bf16_matmul", s.fast_bf16},
        {"quant_activations", s.quant_activations},
        {"weight_memory", s.weight_memory},
        {"expert_cache_percent", s.expert_cache_percent},
        {"expert_host_compute", s.expert_host_compute},
        {"moe_grouped_experts", s.moe_grouped_experts}}}};
  nlohmann::json results = nlohmann::json::array();
  if (s.backend == "cuda") {
    const double bandwidth = CudaCopyBandwidthGbps(report);
    if (bandwidth <= 0) {
      std::cerr << "no CUDA device (or this build has no CUDA backend)\n";
      return 1;
    }
    for (int32_t b : batches) {
      nlohmann::json one = RunOne(s, 0, b, bandwidth);
      std::cerr << one.dump() << "\n";
      results.push_back(std::move(one));
    }
  }
  for (int32_t t : s.backend == "cpu" ? threads : std::vector<int32_t>{}) {
    cpu::ThreadPool pool(t);
    const BandwidthResult bw = MeasureReadBandwidth(pool, int64_t{1} << 30, 10);
    nlohmann::json by_streams;
    for (const auto& [streams, gbps] : bw.gb_per_s_by_streams) {
      by_streams[std::to_string(streams)] = gbps;
    }
    nlohmann::json by_placement;
    for (const auto& [placement, figures] : bw.gb_per_s_by_placement) {
      for (const auto& [streams, gbps] : figures) {
        by_placement[placement][std::to_string(streams)] = gbps;
      }
    }
    report["memory_bandwidth"][std::to_string(t) + "_threads"] = {
        {"best_gb_per_s", bw.best_gb_per_s},
        {"best_streams_per_thread", bw.best_streams_per_thread},
        {"best_placement", bw.best_placement},
        {"loads", bw.loads},
        {"gb_per_s_by_streams_per_thread", by_streams},
        {"gb_per_s_by_placement_and_streams", by_placement},
        {"buffer_bytes", bw.buffer_bytes}};
    for (int32_t b : batches) {
      nlohmann::json one = RunOne(s, t, b, bw.best_gb_per_s);
      std::cerr << one.dump() << "\n";
      results.push_back(std::move(one));
    }
  }
  report["results"] = results;
  const std::string text = report.dump(2);
  std::cout << text << "\n";
  if (!s.out.empty()) std::ofstream(s.out) << text << "\n";
  return 0;
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + std::min(argc, 2), argv + argc);
  const std::string command = argc >= 2 ? argv[1] : "";
  if (command == "make-model") return loom::bench::MakeModel(args);
  if (command == "run") return loom::bench::Run(args);
  std::cerr << "usage: loom_engine_bench make-model|run [flags] (--help for flags)\n";
  return 2;
}
