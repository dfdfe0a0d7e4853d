// What every layer of a step reads besides its weights: the ragged batch's per-token and
// per-sequence metadata, already in the backend's memory. Built once per step by the model
// runner (engine/runtime/model_runner.h); the layout follows kernels/common/attention_args.h.
#pragma once

#include <cstdint>

namespace loom {

struct StepBatch {
  int32_t num_tokens = 0;
  const int32_t* token_ids = nullptr;     // [num_tokens]
  const int32_t* slot_mapping = nullptr;  // [num_tokens] cache slot of each token's K/V
  const float* rope_cos = nullptr;        // [num_tokens, head_dim / 2]
  const float* rope_sin = nullptr;        // [num_tokens, head_dim / 2]
  int32_t num_seqs = 0;
  const int32_t* query_start = nullptr;   // [num_seqs + 1]
  const int32_t* seq_lens = nullptr;      // [num_seqs]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;
  const int32_t* tail_slots = nullptr;    // [num_seqs] low-bit KV formats; -1 for padding
  const int32_t* tail_first_blocks = nullptr;  // [num_seqs] low-bit KV formats
  // Host-side bounds of the sequences' query lengths (kernels size grids and skip work by them).
  int32_t min_query_len = 0;
  int32_t max_query_len = 0;
};

}  // namespace loom
