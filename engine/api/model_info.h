// What the scheduler and server may know about the loaded model and the engine's capacity.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/api/ids.h"
#include "kernels/common/dtype.h"

namespace loom {

struct ModelInfo {
  // `architectures[0]` of config.json, e.g. "LlamaForCausalLM".
  std::string architecture;
  // The model folder's name, used as the model id when no other is configured.
  std::string name;
  int32_t vocab_size = 0;
  // Longest sequence (prompt + output) the model supports: max_position_embeddings.
  int32_t max_context_len = 0;
  int32_t num_layers = 0;
  int32_t hidden_size = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  // Mixture-of-experts models: experts per sparse layer and experts each token uses (0 for
  // dense models), and which layers are sparse (num_layers entries; empty for dense models).
  int32_t num_experts = 0;
  int32_t num_experts_per_tok = 0;
  std::vector<bool> sparse_layers;
  // From config.json / generation_config.json; empty when unknown.
  std::vector<TokenId> eos_token_ids;
  TokenId bos_token_id{-1};
  // Storage type of the checkpoint's weights (the most common one) and their total size.
  DType weight_dtype = DType::kBF16;
  int64_t num_parameters = 0;
  int64_t weight_bytes = 0;
  // Weight bytes one decode step reads: every matrix once, the embedding table only when it is
  // also the (tied) LM head (otherwise one row of it, not counted).
  int64_t decode_weight_bytes = 0;
  // CPU backend: the weights are read from a copy in anonymous memory made at load, not in place
  // from the files' mappings (EngineConfig::weight_memory).
  bool weights_in_anonymous_memory = false;
};

// The physical KV pool as the scheduler sees it: `num_blocks` blocks of `block_size` tokens.
struct KvCapacity {
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  DType kv_dtype = DType::kBF16;
  // Bytes of one block across all layers (K and V; low-bit formats: codes, scales and zeros).
  int64_t bytes_per_block = 0;
  // Bytes of the residual tails beside the blocks (low-bit formats; 0 otherwise).
  int64_t tail_bytes = 0;
  // Bytes of one sequence's residual tail (KvBlob::tail; 0 for element formats).
  int64_t tail_slot_bytes = 0;
  // Everything two engines must share for KV blocks to move between them (KvBlob::layout): the
  // format, block size, layers, KV heads, head_dim, K granularity, tail ring, rotation.
  std::string kv_layout;
  // Most tokens one step may compute, and most sequences one step may hold.
  int32_t max_num_batched_tokens = 0;
  int32_t max_num_seqs = 0;
  // Mixture-of-experts models: experts the fast tier holds at once when experts live behind an
  // expert cache (EngineConfig::expert_cache_bytes), and the bytes of one; 0 when every expert
  // stays resident (or the model is dense).
  int32_t expert_cache_slots = 0;
  int64_t expert_slot_bytes = 0;
};

}  // namespace loom
