#include "kernels/ref/ops_ref.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/ref/kv_quant_ref.h"
#include "kernels/ref/quant_ref.h"

namespace loom::ref {

void Embedding(const int32_t* token_ids, int32_t num_tokens, const void* table, DType table_dtype,
               int32_t dim, float* out) {
  if (IsQuantizedDType(table_dtype)) {
    const int64_t row_bytes = DTypeRowBytes(table_dtype, dim);
    for (int32_t t = 0; t < num_tokens; ++t) {
      DequantizeRow(table_dtype, static_cast<const uint8_t*>(table) + token_ids[t] * row_bytes, dim,
                    out + int64_t{t} * dim);
    }
    return;
  }
  for (int32_t t = 0; t < num_tokens; ++t) {
    const size_t row = static_cast<size_t>(token_ids[t]) * dim;
    for (int32_t i = 0; i < dim; ++i) out[int64_t{t} * dim + i] = LoadAsF32(table, table_dtype, row + i);
  }
}

void RmsNorm(const float* x, int64_t x_stride, int32_t num_rows, int32_t dim, const void* weight,
             DType weight_dtype, float eps, float* out, int64_t out_stride) {
  for (int32_t r = 0; r < num_rows; ++r) {
    const float* xr = x + r * x_stride;
    float sum_sq = 0.0f;
    for (int32_t i = 0; i < dim; ++i) sum_sq += xr[i] * xr[i];
    const float inv_rms = 1.0f / std::sqrt(sum_sq / static_cast<float>(dim) + eps);
    float* outr = out + r * out_stride;
    for (int32_t i = 0; i < dim; ++i) {
      outr[i] = xr[i] * inv_rms * LoadAsF32(weight, weight_dtype, i);
    }
  }
}

void AddRmsNorm(float* residual, const float* delta, int32_t num_rows, int32_t dim,
                const void* weight, DType weight_dtype, float eps, float* out) {
  for (int64_t i = 0; i < int64_t{num_rows} * dim; ++i) residual[i] += delta[i];
  RmsNorm(residual, dim, num_rows, dim, weight, weight_dtype, eps, out, dim);
}

void Rope(float* x, int64_t x_stride, int32_t num_tokens, int32_t num_heads, int32_t head_dim,
          int32_t rotary_dim, const float* cos, const float* sin) {
  const int32_t half = rotary_dim / 2;
  for (int32_t t = 0; t < num_tokens; ++t) {
    const float* c = cos + int64_t{t} * half;
    const float* s = sin + int64_t{t} * half;
    for (int32_t h = 0; h < num_heads; ++h) {
      float* xh = x + t * x_stride + int64_t{h} * head_dim;
      for (int32_t i = 0; i < half; ++i) {
        const float a = xh[i];
        const float b = xh[i + half];
        xh[i] = a * c[i] - b * s[i];
        xh[i + half] = b * c[i] + a * s[i];
      }
    }
  }
}

void SiluMul(const float* gate, int64_t gate_stride, const float* up, int64_t up_stride,
             int32_t num_rows, int32_t dim, float* out, int64_t out_stride) {
  for (int32_t r = 0; r < num_rows; ++r) {
    for (int32_t i = 0; i < dim; ++i) {
      const float g = gate[r * gate_stride + i];
      out[r * out_stride + i] = g / (1.0f + std::exp(-g)) * up[r * up_stride + i];
    }
  }
}

void WriteKv(const KvWriteArgs& args) {
  if (args.cache.low_bit()) return WriteKvLowBit(args);
  const PagedKvView& cache = args.cache;
  const int32_t row_len = cache.num_kv_heads * cache.head_dim;
  for (int32_t t = 0; t < args.num_tokens; ++t) {
    const int32_t slot = args.slot_mapping[t];
    if (slot < 0) continue;
    const int32_t block = slot / cache.block_size;
    const int32_t offset = slot % cache.block_size;
    for (int32_t i = 0; i < row_len; ++i) {
      const int32_t head = i / cache.head_dim;
      const int32_t d = i % cache.head_dim;
      const size_t index = static_cast<size_t>(block) * cache.block_stride() +
                           static_cast<size_t>(head) * cache.head_stride() +
                           static_cast<size_t>(offset) * cache.head_dim + d;
      StoreFromF32(cache.k, cache.dtype, index, args.k[t * args.k_stride + i]);
      StoreFromF32(cache.v, cache.dtype, index, args.v[t * args.v_stride + i]);
    }
  }
}

void HadamardRotate(float* x, int64_t num_rows, int32_t dim) {
  const float norm = 1.0f / std::sqrt(static_cast<float>(dim));
  std::vector<float> out(dim);
  for (int64_t r = 0; r < num_rows; ++r) {
    float* row = x + r * dim;
    // The definition, one output at a time (O(dim^2)): the fast kernels use the butterfly form.
    for (int32_t i = 0; i < dim; ++i) {
      double sum = 0;
      for (int32_t j = 0; j < dim; ++j) sum += (__builtin_popcount(i & j) & 1) ? -row[j] : row[j];
      out[i] = static_cast<float>(sum) * norm;
    }
    std::copy(out.begin(), out.end(), row);
  }
}

void PagedAttention(const PagedAttentionArgs& args) {
  const PagedKvView& cache = args.cache;
  const int32_t head_dim = cache.head_dim;
  const int32_t group = args.num_heads / cache.num_kv_heads;
  std::vector<float> scores;
  for (int32_t s = 0; s < args.num_seqs; ++s) {
    const int32_t q_begin = args.query_start[s];
    const int32_t q_end = args.query_start[s + 1];
    const int32_t seq_len = args.seq_lens[s];
    const int32_t* blocks = args.block_tables + int64_t{s} * args.max_blocks_per_seq;
    const int32_t tail = args.tail_slots != nullptr ? args.tail_slots[s] : -1;
    const int32_t tail_first = args.tail_first_blocks != nullptr ? args.tail_first_blocks[s] : 0;
    // A prefill chunk reads its own positions from the step's rows (attention_args.h).
    const int32_t fresh_first = args.FreshFirst(s);
    auto load = [&](bool is_v, int32_t pos, int32_t kv_head, int32_t d) {
      if (pos >= fresh_first) {
        const float* rows = is_v ? args.fresh_v : args.fresh_k;
        const int64_t stride = is_v ? args.fresh_v_stride : args.fresh_k_stride;
        return Bf16ToF32(F32ToBf16(
            rows[int64_t{q_begin + pos - fresh_first} * stride + int64_t{kv_head} * head_dim + d]));
      }
      return LoadKvElement(cache, blocks, seq_len, tail, tail_first, is_v, pos, kv_head, d);
    };
    for (int32_t t = q_begin; t < q_end; ++t) {
      const int32_t pos = seq_len - (q_end - t);
      const int32_t first = args.sliding_window > 0 ? std::max(0, pos - args.sliding_window + 1) : 0;
      for (int32_t h = 0; h < args.num_heads; ++h) {
        const int32_t kv_head = h / group;
        const float* q = args.q + t * args.q_stride + int64_t{h} * head_dim;
        scores.assign(pos + 1 - first, 0.0f);
        float max_score = -std::numeric_limits<float>::infinity();
        for (int32_t j = first; j <= pos; ++j) {
          float dot = 0.0f;
          for (int32_t d = 0; d < head_dim; ++d) {
            dot += q[d] * load(false, j, kv_head, d);
          }
          scores[j - first] = dot * args.scale;
          max_score = std::max(max_score, scores[j - first]);
        }
        float denom = 0.0f;
        for (float& score : scores) {
          score = std::exp(score - max_score);
          denom += score;
        }
        float* out = args.out + t * args.out_stride + int64_t{h} * head_dim;
        for (int32_t d = 0; d < head_dim; ++d) {
          float acc = 0.0f;
          for (int32_t j = first; j <= pos; ++j) {
            acc += scores[j - first] * load(true, j, kv_head, d);
          }
          out[d] = acc / denom;
        }
      }
    }
  }
}

}  // namespace loom::ref
