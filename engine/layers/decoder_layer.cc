#include "engine/layers/decoder_layer.h"

#include <cmath>

namespace loom {

void AttentionBlock(Ops& ops, const ModelConfig& c, const DecoderLayerWeights& w, int32_t layer,
                    const StepBatch& batch, const PagedKvView& cache, const float* normed,
                    const LayerScratch& s, float* delta) {
  const int32_t tokens = batch.num_tokens;
  const LinearOutput qkv[] = {
      {&w.q_proj, s.q, c.q_dim()}, {&w.k_proj, s.k, c.kv_dim()}, {&w.v_proj, s.v, c.kv_dim()}};
  ops.Linear(normed, c.hidden_size, tokens, qkv);
  if (c.qk_norm) {
    ops.RmsNorm(s.q, c.head_dim, tokens * c.num_heads, c.head_dim, w.q_norm, c.rms_norm_eps, s.q,
                c.head_dim);
    ops.RmsNorm(s.k, c.head_dim, tokens * c.num_kv_heads, c.head_dim, w.k_norm, c.rms_norm_eps,
                s.k, c.head_dim);
  }
  ops.Rope(s.q, c.q_dim(), tokens, c.num_heads, c.head_dim, batch.rope_cos, batch.rope_sin);
  ops.Rope(s.k, c.kv_dim(), tokens, c.num_kv_heads, c.head_dim, batch.rope_cos, batch.rope_sin);
  if (cache.hadamard) {
    // The cache holds K and V in the rotated basis: q . k is unchanged, and the output is
    // rotated back below.
    ops.HadamardRotate(s.q, int64_t{tokens} * c.num_heads, c.head_dim);
    ops.HadamardRotate(s.k, int64_t{tokens} * c.num_kv_heads, c.head_dim);
    ops.HadamardRotate(s.v, int64_t{tokens} * c.num_kv_heads, c.head_dim);
  }

  KvWriteArgs write;
  write.k = s.k;
  write.v = s.v;
  write.k_stride = c.kv_dim();
  write.v_stride = c.kv_dim();
  write.num_tokens = tokens;
  write.slot_mapping = batch.slot_mapping;
  write.cache = cache;
  write.batch = {batch.num_seqs, batch.query_start, batch.seq_lens, batch.tail_slots,
                 batch.tail_first_blocks};
  ops.WriteKv(write);

  PagedAttentionArgs attn;
  attn.q = s.q;
  attn.q_stride = c.q_dim();
  attn.out = s.attn;
  attn.out_stride = c.q_dim();
  attn.num_heads = c.num_heads;
  attn.cache = cache;
  attn.num_seqs = batch.num_seqs;
  attn.query_start = batch.query_start;
  attn.seq_lens = batch.seq_lens;
  attn.block_tables = batch.block_tables;
  attn.max_blocks_per_seq = batch.max_blocks_per_seq;
  attn.tail_slots = batch.tail_slots;
  attn.tail_first_blocks = batch.tail_first_blocks;
  if (cache.low_bit()) {
    // A prefill chunk attends to its own keys at the tail's precision, not packed.
    attn.fresh_k = s.k;
    attn.fresh_v = s.v;
    attn.fresh_k_stride = c.kv_dim();
    attn.fresh_v_stride = c.kv_dim();
  }
  // head_dim ** -0.5 as the reference computes it (in double, then used as an f32 scalar).
  attn.scale = static_cast<float>(std::pow(static_cast<double>(c.head_dim), -0.5));
  attn.sliding_window = c.layer_sliding_window[layer];
  attn.num_tokens = tokens;
  attn.min_query_len = batch.min_query_len;
  attn.max_query_len = batch.max_query_len;
  ops.PagedAttention(attn);
  if (cache.hadamard) ops.HadamardRotate(s.attn, int64_t{tokens} * c.num_heads, c.head_dim);

  const LinearOutput o[] = {{&w.o_proj, delta, c.hidden_size}};
  ops.Linear(s.attn, c.q_dim(), tokens, o);
}

void MlpBlock(Ops& ops, const ModelConfig& c, const DecoderLayerWeights& w, int32_t num_tokens,
              const float* normed, const LayerScratch& s, float* delta) {
  const LinearOutput gate_up[] = {{&w.gate_proj, s.gate, c.intermediate_size},
                                  {&w.up_proj, s.up, c.intermediate_size}};
  ops.Linear(normed, c.hidden_size, num_tokens, gate_up);
  ops.SiluMul(s.gate, s.up, num_tokens, c.intermediate_size, s.gate);
  const LinearOutput down[] = {{&w.down_proj, delta, c.hidden_size}};
  ops.Linear(s.gate, c.intermediate_size, num_tokens, down);
}

}  // namespace loom
