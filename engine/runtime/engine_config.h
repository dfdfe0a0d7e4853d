// How the engine is built: which model, which backend, how much KV cache, what a step may hold.
// Plain data; the server fills it from configs/*.json, flags and LOOM_* variables.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "engine/backend/backend.h"
#include "engine/experts/expert_provider.h"
#include "engine/weights/file_mapping.h"
#include "kernels/common/dtype.h"

namespace loom {

struct EngineConfig {
  // A Hugging Face model folder (config.json, *.safetensors) or a GGUF file.
  std::string model_dir;
  BackendKind backend = BackendKind::kCpu;
  // CPU worker threads; 0 = one per available core. At most 1024.
  int num_threads = 0;
  // KV cache format: f32, bf16, f16, fp8-e4m3, or the low-bit int8, int4 and int2 (packed codes
  // with f16 scales/zeros, K grouped per channel over one block or per token, V per token, and a
  // bf16 residual tail per sequence; kernels/common/kv_format.h).
  DType kv_dtype = DType::kBF16;
  // kv_dtype is "auto": the model's float weight type (f16 for block-quantized weights).
  bool kv_dtype_auto = false;
  // Low-bit formats: group K per token instead of per channel.
  bool kv_k_per_token = false;
  // Low-bit formats: each sequence attends to at least its newest kv_residual_tokens tokens in
  // bf16 (KIVI's full-precision window; the tail then holds 1 + ceil(kv_residual_tokens /
  // block_size) blocks per sequence). 0 keeps only the partial last block in bf16.
  int32_t kv_residual_tokens = 0;
  // Low-bit formats: store K and V rotated by the Hadamard transform over head_dim (QuaRot), which
  // spreads K's outlier channels and cuts the quantization error of per-token groups and of
  // int2 several times. Needs head_dim to be a power of two; ignored (off) otherwise.
  bool kv_hadamard = true;
  // Tokens per KV block.
  int32_t block_size = 16;
  // KV cache size: num_kv_blocks when > 0, else kv_cache_bytes.
  int32_t num_kv_blocks = 0;
  int64_t kv_cache_bytes = int64_t{1} << 30;
  // Most tokens computed in one step (prefill chunks plus decodes) and most sequences in it.
  int32_t max_num_batched_tokens = 2048;
  int32_t max_num_seqs = 256;
  // Longest sequence; 0 = the model's max_position_embeddings (never more than that).
  int32_t max_context_len = 0;
  // Logit rows computed per LM-head call (a step with more rows uses several calls).
  int32_t max_logit_rows = 256;
  // CPU matmuls round activations to bf16 once instead of the f32-accurate default: prefill, and
  // on AVX512-BF16 CPUs one-sequence decode too (vdpbf16ps, kernels/cpu/matmul.h).
  bool fast_bf16_matmul = false;
  // CPU decode matmuls of block-quantized weights quantize the activations to int8 blocks and use
  // integer dot products (several times faster for 4- to 6-bit weights; ~0.5-0.8 % relative
  // error per output, see kernels/cpu/matmul.h) instead of keeping them f32.
  bool int8_activations = false;
  // Fault the weights into memory at load, so the first step is not slowed by page faults (with
  // an expert cache, every weight but the routed experts').
  bool populate_weights = true;
  // CPU backend without an expert cache: read the weights in place from the files' mappings, or
  // from a copy in anonymous memory, which the kernel backs with huge pages, made at load (faster
  // decode, one read of the files at load; engine/weights/file_mapping.h); kAuto copies each
  // file that is at most half of the memory available. Other backends copy the weights to the
  // device from the mappings.
  WeightMemory weight_memory = WeightMemory::kAuto;
  // Mixture-of-experts models: memory for the expert cache (RAM on the CPU backend, device memory
  // on CUDA). 0 keeps every expert resident (in the checkpoint's mapping, or on the device).
  // Above 0, routed experts live in a slower tier and this many bytes of slots hold the hot ones
  // (engine/experts/expert_store.h), loaded on demand or ahead of need from the plan's prefetch
  // hints. The slower tier is the checkpoint file on the CPU backend (the model's other weights
  // stay mapped) and a copy in host memory on CUDA (the other weights are on the device).
  int64_t expert_cache_bytes = 0;
  // With an expert cache on the CPU backend: keep the routed experts' slow tier in host memory
  // and load them with the backend's copy queue, as on CUDA, instead of reading the file. It is
  // what a device backend always does; on the CPU it exists so the tests run that path.
  bool expert_home_in_memory = false;
  // With an expert cache whose slow tier is host memory (CUDA, or the above): compute a missing
  // expert's tokens on the host CPU where it lives instead of loading it: when the cost model
  // measured at start says that is faster (kAuto), never, or always. Unless kNever, steps that
  // run their experts grouped (moe_grouped_experts) read a missing expert in place from host
  // memory instead, and load it after the step.
  ExpertHostCompute expert_host_compute = ExpertHostCompute::kAuto;
  // Mixture-of-experts models: run small steps' experts grouped from per-layer expert tables
  // (DecoderModel::grouped_expert_tokens), routing on the device, so CUDA decode steps of up to
  // 16 sequences are graphs: with every expert resident, or behind an expert cache in host
  // memory whose expert_host_compute is not kNever. Off, every step routes on the host and runs
  // its experts one by one; for comparisons.
  bool moe_grouped_experts = true;
  // Read experts with O_DIRECT where the file system allows it (else read, then drop the range
  // from the page cache).
  bool expert_direct_io = true;
  // CUDA: the device ordinal.
  int device = 0;
  // CUDA: the fraction of the device's memory loom may use in all (weights, activations,
  // workspace, KV cache); the KV cache gets what the rest leaves, unless num_kv_blocks is set.
  // kv_cache_bytes is the CPU backend's setting and does not apply.
  double gpu_memory_utilization = 0.9;
  // CUDA: replay decode steps (every sequence computing one token) as CUDA graphs, one per
  // padded batch size up to max_num_seqs.
  bool cuda_graphs = true;
  // For tests: the CPU backend pads decode steps as if it replayed graphs (BackendOptions::
  // pretend_graphs).
  bool cpu_pretend_graphs = false;
  // Fault the whole KV cache into memory at load (a server's steady resident size from the
  // start); off, pages are touched as blocks are first used.
  bool populate_kv_cache = false;
};

// The KV cache formats a flag or config file may name, besides "auto".
inline constexpr DType kKvCacheDTypes[] = {DType::kBF16,   DType::kF16,    DType::kF32,
                                           DType::kF8E4M3, DType::kKvInt8, DType::kKvInt4,
                                           DType::kKvInt2};

// The KV cache format a flag or config file names ("bf16", "fp8-e4m3", "int4", ...); nullopt
// otherwise ("auto" included: see EngineConfig::kv_dtype_auto).
inline std::optional<DType> KvCacheDTypeFromName(std::string_view name) {
  for (DType d : kKvCacheDTypes) {
    if (DTypeName(d) == name) return d;
  }
  return std::nullopt;
}

// The KV cache names every front end (loomd's configuration, loom generate, the benches) accepts,
// applied to `config`: `dtype` "auto" or a KvCacheDTypeFromName name; `k_granularity` "channel"
// or "token" (low-bit formats); `block_size` 0 picks 16 for the element formats and 32 for the
// low-bit ones (one K group per block: 32 tokens, as KIVI, measured more accurate than 64 for
// int4 at a few percent more bytes in scales).
inline absl::Status SetKvCacheFormat(std::string_view dtype, std::string_view k_granularity,
                                     int32_t block_size, EngineConfig& config) {
  config.kv_dtype_auto = dtype == "auto";
  if (!config.kv_dtype_auto) {
    std::optional<DType> d = KvCacheDTypeFromName(dtype);
    if (!d) {
      return absl::InvalidArgumentError(
          "KV cache dtype must be auto, bf16, f16, f32, fp8-e4m3, int8, int4 or int2, got '" +
          std::string(dtype) + "'");
    }
    config.kv_dtype = *d;
  }
  if (k_granularity != "channel" && k_granularity != "token") {
    return absl::InvalidArgumentError("K granularity must be channel or token, got '" +
                                      std::string(k_granularity) + "'");
  }
  config.kv_k_per_token = k_granularity == "token";
  if (block_size < 0) return absl::InvalidArgumentError("block size must be >= 0");
  const bool low_bit = !config.kv_dtype_auto && IsLowBitKvDType(config.kv_dtype);
  config.block_size = block_size > 0 ? block_size : low_bit ? 32 : 16;
  return absl::OkStatus();
}

}  // namespace loom
