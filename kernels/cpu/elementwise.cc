#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_features.h"
#include "kernels/ref/ops_ref.h"
#include "kernels/ref/quant_ref.h"

namespace loom::cpu {
namespace {

bool UseAvx2() { return SelectedIsa() >= Isa::kAvx2; }

// Rows go to threads only when there is enough work per row set to amortise a parallel region
// (a few microseconds); small decode batches run on the calling thread.
constexpr int64_t kMinElementsPerThread = 16 * 1024;

template <typename RowFn>
void ForEachRow(ThreadPool& pool, int32_t num_rows, int64_t elements_per_row, RowFn fn) {
  if (num_rows == 0) return;
  if (num_rows < 2 || int64_t{num_rows} * elements_per_row < 2 * kMinElementsPerThread) {
    for (int32_t r = 0; r < num_rows; ++r) fn(r);
    return;
  }
  pool.ParallelFor(num_rows, [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) fn(static_cast<int32_t>(r));
  });
}

}  // namespace

void Embedding(ThreadPool& pool, const int32_t* token_ids, int32_t num_tokens, const void* table,
               DType table_dtype, int32_t dim, float* out) {
  const size_t row_bytes = static_cast<size_t>(DTypeRowBytes(table_dtype, dim));
  if (IsQuantizedDType(table_dtype)) {
    // One row per token, decoded by the reference: a few thousand elements per token, far from
    // the cost of the matmuls that follow.
    ForEachRow(pool, num_tokens, dim, [&](int32_t t) {
      const char* row =
          static_cast<const char*>(table) + static_cast<size_t>(token_ids[t]) * row_bytes;
      ref::DequantizeRow(table_dtype, row, dim, out + int64_t{t} * dim);
    });
    return;
  }
  if (!UseAvx2()) return ref::Embedding(token_ids, num_tokens, table, table_dtype, dim, out);
  ForEachRow(pool, num_tokens, dim, [&](int32_t t) {
    const char* row = static_cast<const char*>(table) + static_cast<size_t>(token_ids[t]) * row_bytes;
    avx2::LoadRow(row, table_dtype, dim, out + int64_t{t} * dim);
  });
}

void RmsNorm(ThreadPool& pool, const float* x, int64_t x_stride, int32_t num_rows, int32_t dim,
             const void* weight, DType weight_dtype, float eps, float* out, int64_t out_stride) {
  if (!UseAvx2()) {
    return ref::RmsNorm(x, x_stride, num_rows, dim, weight, weight_dtype, eps, out, out_stride);
  }
  ForEachRow(pool, num_rows, dim, [&](int32_t r) {
    avx2::RmsNormRow(x + r * x_stride, dim, weight, weight_dtype, eps, out + r * out_stride);
  });
}

void AddRmsNorm(ThreadPool& pool, float* residual, const float* delta, int32_t num_rows,
                int32_t dim, const void* weight, DType weight_dtype, float eps, float* out) {
  if (!UseAvx2()) {
    return ref::AddRmsNorm(residual, delta, num_rows, dim, weight, weight_dtype, eps, out);
  }
  ForEachRow(pool, num_rows, dim, [&](int32_t r) {
    float* row = residual + int64_t{r} * dim;
    avx2::AddRow(row, delta + int64_t{r} * dim, dim);
    avx2::RmsNormRow(row, dim, weight, weight_dtype, eps, out + int64_t{r} * dim);
  });
}

void Add(ThreadPool& pool, float* residual, const float* delta, int64_t num_elements) {
  if (!UseAvx2()) {
    for (int64_t i = 0; i < num_elements; ++i) residual[i] += delta[i];
    return;
  }
  if (num_elements < 2 * kMinElementsPerThread) return avx2::AddRow(residual, delta, num_elements);
  pool.ParallelFor(num_elements, [&](int64_t begin, int64_t end, int) {
    avx2::AddRow(residual + begin, delta + begin, end - begin);
  });
}

void Rope(ThreadPool& pool, float* x, int64_t x_stride, int32_t num_tokens, int32_t num_heads,
          int32_t head_dim, int32_t rotary_dim, const float* cos, const float* sin) {
  if (!UseAvx2()) {
    return ref::Rope(x, x_stride, num_tokens, num_heads, head_dim, rotary_dim, cos, sin);
  }
  const int32_t half = rotary_dim / 2;
  ForEachRow(pool, num_tokens, int64_t{num_heads} * head_dim, [&](int32_t t) {
    avx2::RopeRow(x + t * x_stride, num_heads, head_dim, rotary_dim, cos + int64_t{t} * half,
                  sin + int64_t{t} * half);
  });
}

void SiluMul(ThreadPool& pool, const float* gate, int64_t gate_stride, const float* up,
             int64_t up_stride, int32_t num_rows, int32_t dim, float* out, int64_t out_stride) {
  if (!UseAvx2()) {
    return ref::SiluMul(gate, gate_stride, up, up_stride, num_rows, dim, out, out_stride);
  }
  // Decode rows are long (the intermediate size): split them by columns too.
  if (num_rows < pool.num_threads() && int64_t{num_rows} * dim >= 2 * kMinElementsPerThread) {
    pool.ParallelFor(dim, [&](int64_t begin, int64_t end, int) {
      for (int32_t r = 0; r < num_rows; ++r) {
        avx2::SiluMulRow(gate + r * gate_stride + begin, up + r * up_stride + begin,
                         static_cast<int32_t>(end - begin), out + r * out_stride + begin);
      }
    });
    return;
  }
  ForEachRow(pool, num_rows, dim, [&](int32_t r) {
    avx2::SiluMulRow(gate + r * gate_stride, up + r * up_stride, dim, out + r * out_stride);
  });
}

namespace {

// One row: pairs (j, j + h) become (a + b, a - b) for h = 1, 2, 4, ...; the compiler vectorises
// the inner loop once h reaches the vector width.
void HadamardRow(float* v, int32_t n, float norm) {
  for (int32_t h = 1; h < n; h *= 2) {
    for (int32_t i = 0; i < n; i += 2 * h) {
      for (int32_t j = i; j < i + h; ++j) {
        const float a = v[j], b = v[j + h];
        v[j] = a + b;
        v[j + h] = a - b;
      }
    }
  }
  for (int32_t i = 0; i < n; ++i) v[i] *= norm;
}

}  // namespace

void HadamardRotate(ThreadPool& pool, float* x, int64_t num_rows, int32_t dim) {
  const float norm = 1.0f / std::sqrt(static_cast<float>(dim));
  // Rows in groups, so each task is a few thousand operations at least.
  const int64_t per_task = std::max<int64_t>(1, 4096 / dim);
  const int64_t num_tasks = (num_rows + per_task - 1) / per_task;
  auto run = [&](int64_t task) {
    const int64_t end = std::min(num_rows, (task + 1) * per_task);
    for (int64_t r = task * per_task; r < end; ++r) HadamardRow(x + r * dim, dim, norm);
  };
  if (num_tasks <= 1 || pool.num_threads() == 1) {
    for (int64_t t = 0; t < num_tasks; ++t) run(t);
    return;
  }
  pool.ParallelFor(num_tasks, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) run(t);
  });
}

void WriteKv(ThreadPool& pool, const KvWriteArgs& args) {
  const PagedKvView& cache = args.cache;
  // Low-bit packing and fp8 rounding run the reference (a step writes few rows next to what its
  // matmuls read).
  if (!UseAvx2() || cache.low_bit() || cache.dtype == DType::kF8E4M3) return ref::WriteKv(args);
  const size_t elem = DTypeSize(cache.dtype);
  ForEachRow(pool, args.num_tokens, 2 * int64_t{cache.num_kv_heads} * cache.head_dim, [&](int32_t t) {
    const int32_t slot = args.slot_mapping[t];
    if (slot < 0) return;
    const int64_t block = slot / cache.block_size;
    const int64_t offset = slot % cache.block_size;
    for (int32_t h = 0; h < cache.num_kv_heads; ++h) {
      const int64_t index = block * cache.block_stride() + h * cache.head_stride() +
                            offset * cache.head_dim;
      avx2::ConvertRow(args.k + t * args.k_stride + int64_t{h} * cache.head_dim, cache.head_dim,
                       cache.dtype, static_cast<char*>(cache.k) + index * elem);
      avx2::ConvertRow(args.v + t * args.v_stride + int64_t{h} * cache.head_dim, cache.head_dim,
                       cache.dtype, static_cast<char*>(cache.v) + index * elem);
    }
  });
}

}  // namespace loom::cpu
