// The block-to-group mapping of the grouped GEMV launches (cuda::DenseGemvGrouped,
// cuda::QuantGemvGrouped): a grid of feature blocks x groups x row chunks, whose block (x, g, c)
// serves up to kRows rows of group g, from row group_offsets[g] + c * kRows, through the weights
// group_weights[g]. Both read from device memory, so the launch does not depend on them.
#pragma once

#include <cstdint>

namespace loom::cuda::internal {

// Points the GEMV parameters p (a kernel's own copy) at the block's group and rows; false when the
// block has no rows (the same for every thread of the block, so it may return before a barrier).
// A launch that is not grouped (null group_offsets) keeps p as it is.
template <int kRows, typename Params>
__device__ __forceinline__ bool SelectGroup(Params& p) {
  if (p.group_offsets == nullptr) return true;
  const int32_t first = p.group_offsets[blockIdx.y] + static_cast<int32_t>(blockIdx.z) * kRows;
  const int32_t rows = min(p.group_offsets[blockIdx.y + 1] - first, kRows);
  if (rows <= 0) return false;
  p.num_rows = rows;
  p.weight = static_cast<decltype(p.weight)>(p.group_weights[blockIdx.y]);
  p.x += int64_t{first} * p.x_stride;
  p.y += int64_t{first} * p.y_stride;
  return true;
}

}  // namespace loom::cuda::internal
