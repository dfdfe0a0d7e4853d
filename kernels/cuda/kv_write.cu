// K/V store into the paged cache; the contract (math, work split, bytes moved) is in kv_write.h.
#include "kernels/cuda/kv_write.h"

#include <climits>
#include <type_traits>

#include "kernels/cuda/kv_format_inl.cuh"
#include "kernels/cuda/vector_inl.cuh"

namespace loom::cuda {
namespace {

using internal::KvGeometry;
using internal::LoadF32;
using internal::StoreF32;

constexpr int kMaxThreads = 256;
constexpr int kMaxVec = 8;
constexpr int kPackThreads = 256;
constexpr int kPackWarps = kPackThreads / 32;
constexpr int kMaxPackParams = 256;  // max(head_dim, block_size) of a supported low-bit cache
constexpr int kMaxPackY = 16;

// The fp8 cache's element type in the element kernel (one byte, converted by F32ToFp8Device).
struct Fp8Tag {};

// n f32 -> n fp8 bytes, one store of n bytes (dst aligned to n).
template <int N>
__device__ __forceinline__ void StoreFp8(uint8_t* dst, const float (&in)[N]) {
  uint8_t b[N];
#pragma unroll
  for (int i = 0; i < N; ++i) b[i] = internal::F32ToFp8Device(in[i]);
  if constexpr (N == 8) {
    uint2 w;
    w.x = b[0] | (b[1] << 8) | (b[2] << 16) | (uint32_t{b[3]} << 24);
    w.y = b[4] | (b[5] << 8) | (b[6] << 16) | (uint32_t{b[7]} << 24);
    *reinterpret_cast<uint2*>(dst) = w;
  } else if constexpr (N == 4) {
    *reinterpret_cast<uint32_t*>(dst) = b[0] | (b[1] << 8) | (b[2] << 16) | (uint32_t{b[3]} << 24);
  } else if constexpr (N == 2) {
    *reinterpret_cast<uint16_t*>(dst) = static_cast<uint16_t>(b[0] | (b[1] << 8));
  } else {
    dst[0] = b[0];
  }
}

template <typename C, int kVec>
__global__ void WriteKvKernel(KvWriteArgs a) {
  using Stored = std::conditional_t<std::is_same_v<C, Fp8Tag>, uint8_t, C>;
  const PagedKvView& cache = a.cache;
  const int32_t vecs_per_head = cache.head_dim / kVec;
  const int32_t items = cache.num_kv_heads * vecs_per_head;
  const int64_t num_slots = int64_t{cache.num_blocks} * cache.block_size;
  // PagedKvView's stride helpers are host functions; the same products here.
  const int64_t head_stride = int64_t{cache.block_size} * cache.head_dim;
  const int64_t block_stride = cache.num_kv_heads * head_stride;
  Stored* k_cache = static_cast<Stored*>(cache.k);
  Stored* v_cache = static_cast<Stored*>(cache.v);
  for (int64_t t = blockIdx.x; t < a.num_tokens; t += gridDim.x) {
    const int32_t slot = a.slot_mapping[t];
    if (slot < 0 || slot >= num_slots) continue;  // uniform across the block
    const int64_t slot_base = int64_t{slot / cache.block_size} * block_stride +
                              int64_t{slot % cache.block_size} * cache.head_dim;
    for (int32_t j = threadIdx.x; j < items; j += blockDim.x) {
      const int32_t head = j / vecs_per_head;
      const int32_t d = (j - head * vecs_per_head) * kVec;
      const int64_t src = int64_t{head} * cache.head_dim + d;
      const int64_t dst = slot_base + int64_t{head} * head_stride + d;
      float k[kVec], v[kVec];
      LoadF32(a.k + t * a.k_stride + src, k);
      LoadF32(a.v + t * a.v_stride + src, v);
      if constexpr (std::is_same_v<C, Fp8Tag>) {
        StoreFp8(k_cache + dst, k);
        StoreFp8(v_cache + dst, v);
      } else {
        StoreF32(k_cache + dst, k);
        StoreF32(v_cache + dst, v);
      }
    }
  }
}

cudaError_t LaunchElementWrite(const KvWriteArgs& args, cudaStream_t stream) {
  const PagedKvView& cache = args.cache;
  auto launch = [&](auto tag, size_t elem_bytes) {
    using C = typename decltype(tag)::type;
    const int vec = internal::PickVecWidth(
        kMaxVec, {cache.head_dim, args.k_stride, args.v_stride},
        {{args.k, sizeof(float)}, {args.v, sizeof(float)}, {cache.k, elem_bytes},
         {cache.v, elem_bytes}});
    return internal::DispatchVecWidth<kMaxVec>(vec, [&](auto vec_tag) {
      constexpr int kVec = decltype(vec_tag)::value;
      const int64_t items = int64_t{cache.num_kv_heads} * (cache.head_dim / kVec);
      const int threads = internal::ThreadsForItems(items, kMaxThreads);
      WriteKvKernel<C, kVec><<<internal::GridForRows(args.num_tokens), threads, 0, stream>>>(args);
      return cudaGetLastError();
    });
  };
  if (cache.dtype == DType::kF8E4M3) return launch(internal::TypeTag<Fp8Tag>{}, 1);
  return internal::DispatchFloatType(cache.dtype, [&](auto tag) {
    return launch(tag, sizeof(typename decltype(tag)::type));
  });
}

// ---- low-bit formats ----

// The smallest value of a group and the first index holding it (std::min's choice between +0 and
// -0, which decides the sign of a zero parameter), over the warp.
__device__ __forceinline__ float WarpFirstMin(float lo, int lo_index) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, lo, offset);
    const int other_index = __shfl_xor_sync(0xffffffffu, lo_index, offset);
    if (other < lo || (other == lo && other_index < lo_index)) {
      lo = other;
      lo_index = other_index;
    }
  }
  return lo;
}

__device__ __forceinline__ float WarpMax(float x) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, offset));
  }
  return x;
}

// Packs one head block from the bf16 rows in shared memory (see kv_write.h).
template <int kBits>
__device__ void PackHeadBlock(const uint16_t* rows, const KvGeometry& g, bool per_token,
                              uint8_t* dst, float* param_zero, float* param_inv) {
  constexpr int kMaxCode = (1 << kBits) - 1;
  const int bs = g.block_size, hd = g.head_dim;
  const int num_params = per_token ? bs : hd;
  const int group_len = per_token ? hd : bs;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint16_t* scales = reinterpret_cast<uint16_t*>(dst + int64_t{bs} * g.row_bytes);
  for (int group = warp; group < num_params; group += kPackWarps) {
    float lo = INFINITY, hi = -INFINITY;
    int lo_index = INT_MAX;
    for (int i = lane; i < group_len; i += 32) {
      const int at = per_token ? group * hd + i : i * hd + group;
      const float v = internal::Bf16BitsToF32(rows[at]);
      if (v < lo) {
        lo = v;
        lo_index = i;
      }
      hi = fmaxf(hi, v);
    }
    lo = WarpFirstMin(lo, lo_index);
    hi = WarpMax(hi);
    if (lane == 0) {
      const KvGroupParams params = internal::KvChooseParamsDevice(lo, hi, kMaxCode);
      scales[group] = params.scale;
      scales[num_params + group] = params.zero;
      const internal::KvQuantParams q = internal::KvQuantParamsOf(params);
      param_zero[group] = q.zero;
      param_inv[group] = q.inv;
    }
  }
  __syncthreads();
  // Each thread builds whole bytes: the elements a byte holds follow the chunk-of-32 packing.
  const int total = bs * g.row_bytes;
  for (int idx = threadIdx.x; idx < total; idx += kPackThreads) {
    const int r = idx / g.row_bytes;
    const int byte = idx - r * g.row_bytes;
    constexpr int kPerByte = 8 / kBits;
    constexpr int kChunkBytes = kKvPackChunk * kBits / 8;
    const int chunk = byte / kChunkBytes, j = byte % kChunkBytes;
    uint32_t out = 0;
#pragma unroll
    for (int k = 0; k < kPerByte; ++k) {
      // int8: element j; int4: j and j + 16; int2: j, j + 8, j + 16, j + 24.
      const int e = chunk * kKvPackChunk + j + k * (kKvPackChunk / kPerByte);
      const int group = per_token ? r : e;
      const float x = internal::Bf16BitsToF32(rows[r * hd + e]);
      const int32_t code = internal::KvQuantizeDevice(
          x, internal::KvQuantParams{param_zero[group], param_inv[group]}, kMaxCode);
      out |= static_cast<uint32_t>(code) << (k * kBits);
    }
    dst[idx] = static_cast<uint8_t>(out);
  }
}

template <int kBits>
__global__ void __launch_bounds__(kPackThreads) WriteKvLowBitKernel(const KvWriteArgs a,
                                                                    const KvGeometry g) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ float param_zero[kMaxPackParams];
  __shared__ float param_inv[kMaxPackParams];
  uint16_t* rows = reinterpret_cast<uint16_t*>(smem);  // [block_size][head_dim] bf16 bits
  const PagedKvView& cache = a.cache;
  const int is_v = blockIdx.x % 2;
  const int h = (blockIdx.x / 2) % g.num_kv_heads;
  const int s = blockIdx.x / 2 / g.num_kv_heads;
  const int tail = a.batch.tail_slots[s];
  if (tail < 0) return;  // a padding sequence
  const int bs = g.block_size, hd = g.head_dim;
  const int row_begin = a.batch.query_start[s];
  const int seq_len = a.batch.seq_lens[s];
  const int first = seq_len - (a.batch.query_start[s + 1] - row_begin);
  if (first >= seq_len || first < 0) return;  // no new row (or a malformed batch)
  const float* input = is_v ? a.v : a.k;
  const int64_t stride = is_v ? a.v_stride : a.k_stride;
  const int64_t head_offset = int64_t{h} * hd;
  // This (tail slot, head)'s ring of tail_blocks blocks; position pos is ring row
  // (pos / bs % ring) * bs + pos % bs (kernels/common/kv_format.h).
  const int ring = g.tail_blocks;
  const int tail_first =
      a.batch.tail_first_blocks != nullptr ? a.batch.tail_first_blocks[s] : 0;
  uint16_t* tail_rows = static_cast<uint16_t*>(is_v ? cache.tail_v : cache.tail_k) +
                        int64_t{tail} * g.tail_slot_stride + int64_t{h} * g.tail_head_stride;
  const bool per_token = is_v || g.k_per_token;
  const int64_t head_bytes = is_v ? g.v_head_bytes : g.k_head_bytes;
  uint8_t* region = static_cast<uint8_t*>(is_v ? cache.v : cache.k);
  const int full_end = seq_len / bs;  // blocks below it are full after this step

  for (int b = first / bs + static_cast<int>(blockIdx.y); b < full_end; b += gridDim.y) {
    const int start = b * bs;
    const int32_t slot = a.slot_mapping[row_begin + (start + bs - 1 - first)];
    if (slot < 0 || slot / bs >= cache.num_blocks) continue;  // uniform across the CTA
    __syncthreads();  // the previous block's readers of `rows` and the parameters are done
    for (int i = threadIdx.x; i < bs * hd; i += kPackThreads) {
      const int r = i / hd, d = i - r * hd;
      const int pos = start + r;
      rows[i] = pos < first
                    ? tail_rows[(int64_t{b % ring} * bs + r) * hd + d]
                    : internal::Bits16<__nv_bfloat16>(
                          input[int64_t{row_begin + pos - first} * stride + head_offset + d]);
    }
    __syncthreads();
    uint8_t* dst = region + (int64_t{slot / bs} * g.num_kv_heads + h) * head_bytes;
    PackHeadBlock<kBits>(rows, g, per_token, dst, param_zero, param_inv);
  }

  // The new rows of the blocks read from the tail from now on (KvBlockInTail at the new
  // length), after the step's first block (packed above by this same CTA) has read the tail rows
  // these may replace.
  if (blockIdx.y != 0) return;
  __syncthreads();
  const int window_start = max(tail_first, full_end - (ring - 1)) * bs;
  const int from = max(first, window_start);
  for (int i = threadIdx.x; i < (seq_len - from) * hd; i += kPackThreads) {
    const int r = i / hd, d = i - r * hd;
    const int pos = from + r;
    tail_rows[(int64_t{pos / bs % ring} * bs + pos % bs) * hd + d] =
        internal::Bits16<__nv_bfloat16>(
            input[int64_t{row_begin + pos - first} * stride + head_offset + d]);
  }
}

cudaError_t LaunchLowBitWrite(const KvWriteArgs& args, cudaStream_t stream) {
  const PagedKvView& cache = args.cache;
  if (!WriteKvLowBitSupports(cache) || args.batch.num_seqs < 0) return cudaErrorInvalidValue;
  if (args.batch.num_seqs == 0) return cudaSuccess;
  if (cache.tail_k == nullptr || cache.tail_v == nullptr || args.batch.query_start == nullptr ||
      args.batch.seq_lens == nullptr || args.batch.tail_slots == nullptr) {
    return cudaErrorInvalidValue;
  }
  const int64_t x = int64_t{args.batch.num_seqs} * cache.num_kv_heads * 2;
  if (x > 0x7fffffff) return cudaErrorInvalidValue;
  // Blocks a sequence completes: about its rows / block_size; a y per block of an average
  // sequence's share, at most kMaxPackY (CTAs loop past that).
  const int64_t rows_per_seq = (int64_t{args.num_tokens} + args.batch.num_seqs - 1) /
                               args.batch.num_seqs;
  const int y = static_cast<int>(
      std::clamp<int64_t>((rows_per_seq + cache.block_size - 1) / cache.block_size + 1, 1,
                          kMaxPackY));
  const int smem_bytes = cache.block_size * cache.head_dim * 2;
  const KvGeometry g = internal::KvGeometryOf(cache);
  auto launch = [&](auto kernel) {
    cudaError_t error =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem_bytes);
    if (error != cudaSuccess) return error;
    kernel<<<dim3(static_cast<unsigned>(x), static_cast<unsigned>(y)), kPackThreads, smem_bytes,
             stream>>>(args, g);
    return cudaGetLastError();
  };
  switch (g.bits) {
    case 8: return launch(WriteKvLowBitKernel<8>);
    case 4: return launch(WriteKvLowBitKernel<4>);
    default: return launch(WriteKvLowBitKernel<2>);
  }
}

}  // namespace

bool WriteKvLowBitSupports(const PagedKvView& cache) {
  const int32_t bs = cache.block_size, hd = cache.head_dim;
  return IsLowBitKvDType(cache.dtype) && hd >= kKvPackChunk && hd <= kMaxPackParams &&
         hd % kKvPackChunk == 0 && (bs == 16 || bs == 32 || bs == 64 || bs == 128) &&
         cache.num_kv_heads >= 1 && cache.code_order == KvCodeOrder::kRows;
}

cudaError_t WriteKv(const KvWriteArgs& args, cudaStream_t stream) {
  const PagedKvView& cache = args.cache;
  if (args.num_tokens < 0 || cache.num_blocks < 0 || cache.num_kv_heads < 0 ||
      cache.block_size < 1 || cache.head_dim < 0 || !IsKvCacheDType(cache.dtype)) {
    return cudaErrorInvalidValue;
  }
  if (args.num_tokens == 0 || cache.num_kv_heads == 0 || cache.head_dim == 0) return cudaSuccess;
  if (cache.low_bit()) return LaunchLowBitWrite(args, stream);
  return LaunchElementWrite(args, stream);
}

}  // namespace loom::cuda
