// How the engine is built: which model, which backend, how much KV cache, what a step may hold.
// Plain data; the server fills it from configs/*.json, flags and LOOM_* variables.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "engine/backend/backend.h"
#include "kernels/common/dtype.h"

namespace loom {

struct EngineConfig {
  // A Hugging Face model folder (config.json, *.safetensors) or a GGUF file.
  std::string model_dir;
  BackendKind backend = BackendKind::kCpu;
  // CPU worker threads; 0 = one per available core. At most 1024.
  int num_threads = 0;
  // KV cache element type: f32, bf16 or f16.
  DType kv_dtype = DType::kBF16;
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
  // CPU prefill matmuls round activations to bf16 once instead of the f32-accurate default.
  bool fast_bf16_matmul = false;
  // CPU decode matmuls of block-quantized weights quantize the activations to int8 blocks and use
  // integer dot products (several times faster for 4- to 6-bit weights; ~0.5-0.8 % relative
  // error per output, see kernels/cpu/matmul.h) instead of keeping them f32.
  bool int8_activations = false;
  // Fault the weights into memory at load, so the first step is not slowed by page faults.
  bool populate_weights = true;
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

// The KV cache type a flag or config file names: "bf16", "f16" or "f32"; nullopt otherwise.
inline std::optional<DType> KvCacheDTypeFromName(std::string_view name) {
  for (DType d : {DType::kBF16, DType::kF16, DType::kF32}) {
    if (DTypeName(d) == name) return d;
  }
  return std::nullopt;
}

}  // namespace loom
