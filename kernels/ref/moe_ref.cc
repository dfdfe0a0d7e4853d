#include "kernels/ref/moe_ref.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace loom::ref {
namespace {

using Candidate = std::pair<float, int32_t>;  // (probability, expert)

// torch's order for topk(largest=True): NaN first, then larger values.
bool Before(const Candidate& a, const Candidate& b) {
  return (std::isnan(a.first) && !std::isnan(b.first)) || a.first > b.first;
}

}  // namespace

void MoeRouteToken(const float* logits, int32_t num_experts, int32_t top_k, bool renormalize,
                   int32_t* expert_ids, float* expert_weights) {
  Candidate candidates[kMaxMoeExperts];
  float max_logit = logits[0];
  for (int32_t e = 1; e < num_experts; ++e) max_logit = std::max(max_logit, logits[e]);
  float sum = 0.0f;
  for (int32_t e = 0; e < num_experts; ++e) {
    const float p = std::exp(logits[e] - max_logit);
    candidates[e] = {p, e};
    sum += p;
  }
  const float inv_sum = 1.0f / sum;
  for (int32_t e = 0; e < num_experts; ++e) candidates[e].first *= inv_sum;

  Candidate* begin = candidates;
  Candidate* end = candidates + num_experts;
  if (int64_t{top_k} * 64 <= num_experts) {
    std::partial_sort(begin, begin + top_k, end, Before);
  } else {
    std::nth_element(begin, begin + top_k - 1, end, Before);
    std::sort(begin, begin + top_k - 1, Before);
  }
  float total = 0.0f;
  for (int32_t k = 0; k < top_k; ++k) total += candidates[k].first;
  for (int32_t k = 0; k < top_k; ++k) {
    expert_ids[k] = candidates[k].second;
    expert_weights[k] = renormalize ? candidates[k].first / total : candidates[k].first;
  }
}

void MoeGroup(const MoeRouteArgs& a) {
  const int64_t num_pairs = int64_t{a.num_tokens} * a.top_k;
  std::fill(a.expert_offsets, a.expert_offsets + a.num_experts + 1, 0);
  for (int64_t i = 0; i < num_pairs; ++i) ++a.expert_offsets[a.expert_ids[i] + 1];
  for (int32_t e = 0; e < a.num_experts; ++e) a.expert_offsets[e + 1] += a.expert_offsets[e];
  // expert_offsets[e] serves as expert e's write cursor, then is shifted back.
  for (int64_t i = 0; i < num_pairs; ++i) {
    const int32_t row = a.expert_offsets[a.expert_ids[i]]++;
    a.grouped_tokens[row] = static_cast<int32_t>(i / a.top_k);
    a.grouped_weights[row] = a.expert_weights[i];
    if (a.token_rows != nullptr) a.token_rows[i] = row;
  }
  for (int32_t e = a.num_experts; e > 0; --e) a.expert_offsets[e] = a.expert_offsets[e - 1];
  a.expert_offsets[0] = 0;
}

void MoeRoute(const MoeRouteArgs& a) {
  for (int32_t t = 0; t < a.num_tokens; ++t) {
    MoeRouteToken(a.logits + t * a.logits_stride, a.num_experts, a.top_k, a.renormalize,
                  a.expert_ids + int64_t{t} * a.top_k, a.expert_weights + int64_t{t} * a.top_k);
  }
  MoeGroup(a);
}

void GatherRows(const float* x, int64_t x_stride, const int32_t* rows, int32_t num_rows,
                int32_t dim, float* out) {
  for (int32_t r = 0; r < num_rows; ++r) {
    std::copy(x + rows[r] * x_stride, x + rows[r] * x_stride + dim, out + int64_t{r} * dim);
  }
}

void MoeInitOutput(const float* shared, const float* gate_logits, int32_t num_tokens, int32_t dim,
                   float* out) {
  for (int32_t t = 0; t < num_tokens; ++t) {
    float* row = out + int64_t{t} * dim;
    if (shared == nullptr) {
      std::fill(row, row + dim, 0.0f);
      continue;
    }
    const float gate = 1.0f / (1.0f + std::exp(-gate_logits[t]));
    const float* in = shared + int64_t{t} * dim;
    for (int32_t i = 0; i < dim; ++i) row[i] = gate * in[i];
  }
}

void MoeScatterAdd(const float* rows, int32_t num_rows, int32_t dim, const int32_t* tokens,
                   const float* weights, float* out) {
  for (int32_t r = 0; r < num_rows; ++r) {
    float* dst = out + int64_t{tokens[r]} * dim;
    const float* src = rows + int64_t{r} * dim;
    for (int32_t i = 0; i < dim; ++i) dst[i] += weights[r] * src[i];
  }
}

void SortedTokenRows(const int32_t* token_rows, int32_t top_k, int32_t* sorted) {
  std::copy(token_rows, token_rows + top_k, sorted);
  std::sort(sorted, sorted + top_k);
}

void MoeCombine(const float* rows, int32_t num_tokens, int32_t top_k, int32_t dim,
                const int32_t* token_rows, const float* weights, float* out) {
  int32_t sorted[kMaxMoeExperts];
  for (int32_t t = 0; t < num_tokens; ++t) {
    SortedTokenRows(token_rows + int64_t{t} * top_k, top_k, sorted);
    for (int32_t k = 0; k < top_k; ++k) MoeScatterAdd(rows + int64_t{sorted[k]} * dim, 1, dim,
                                                      &t, weights + sorted[k], out);
  }
}

}  // namespace loom::ref
