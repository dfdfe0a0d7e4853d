// Truncation (top-k, top-p, min-p) and the draw, sorting only what they need.
//
// Every filter keeps a prefix of the tokens sorted by (weight descending, id ascending), and the
// draw walks that same order, so all that is ever needed is the sorted order's first positions.
// SortedPrefix produces them lazily, band by band. A band is every token whose weight lies in
// [lo, previous lo): the first band starts at a threshold chosen below, each later one is 256
// times lower (but not below a floor), and a last one takes everything left. Since a band is
// cut on the weight itself, bands are exactly consecutive stretches of the full order, ties
// included. A band is gathered in one vectorised pass (scans.cc) only when the walk has used
// up the ones before; a small band is then sorted in chunks of growing size (nth_element +
// sort), a large one (>= 2048 tokens) radix-sorted at once. A threshold that proves too high
// costs one more pass, never correctness.
//
// The thresholds come from bounds on the mass that can hide below them. With vocabulary n and
// total weight Z, the tokens with weight < t hold less than n * t, so
//   top-p alone    t = (1 - top_p) Z / 2n leaves candidates holding more than top_p Z;
//   plain draw     t = (1 - u) Z / 2n leaves candidates holding more than the draw's target u Z;
//   min-p          t = min_p * w_max is exact;
// and these are the floors; the first band starts at max(floor, 1/256). For top-k the first
// (and floor) threshold is estimated from a strided sample of the weights, aiming at about
// 1.25 k + 16 strides of candidates. A peaked LLM distribution needs one band of a few dozen
// tokens; a flat one (high temperature) needs much of the vocabulary and approaches a full
// radix sort.
//
// Arithmetic, shared with the full-sort reference in the tests: cumulative mass is a double sum
// along the sorted order; top-p keeps the shortest prefix with cumulative >= top_p * M, where M
// is the cumulative of the first top_k tokens, or the total Z when top-k keeps everything;
// min-p keeps tokens with w >= min_p * w_max (f32); the kept mass is the cumulative of the kept
// prefix, or Z when nothing was cut; the draw picks the first kept position whose cumulative
// exceeds u times the kept mass, and the last kept token of positive weight if rounding leaves
// none.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "engine/common/logging.h"
#include "engine/sampling/sampler_internal.h"

namespace loom::sampling_internal {
namespace {

// Sorts WeightKeys in id order by weight descending, keeping id order among equal weights: a
// stable LSD radix sort on the 30 bits of the key that vary for weights in [0, 1] (bits 30
// and 31 of a weight <= 1 are 0, so bits 62-63 of its key are always 1). Four passes of 8 bits
// (256 buckets keep the scatter within L1); a pass whose digit is the same for every key is
// skipped.
void RadixSortKeysInIdOrder(uint64_t* keys, int32_t count, std::vector<uint64_t>& buffer) {
  constexpr int kDigitBits = 8;
  constexpr int kNumDigits = 4;
  constexpr uint32_t kRadix = 1u << kDigitBits;
  int32_t histogram[kNumDigits][kRadix] = {};
  for (int32_t i = 0; i < count; ++i) {
    for (int d = 0; d < kNumDigits; ++d) {
      ++histogram[d][(keys[i] >> (32 + kDigitBits * d)) & (kRadix - 1)];
    }
  }
  if (buffer.size() < static_cast<size_t>(count)) buffer.resize(count);
  uint64_t* from = keys;
  uint64_t* to = buffer.data();
  for (int d = 0; d < kNumDigits; ++d) {
    const int shift = 32 + kDigitBits * d;
    if (histogram[d][(from[0] >> shift) & (kRadix - 1)] == count) continue;  // one digit value
    int32_t offset = 0;
    for (uint32_t digit = 0; digit < kRadix; ++digit) {
      const int32_t size = histogram[d][digit];
      histogram[d][digit] = offset;
      offset += size;
    }
    int32_t* offsets = histogram[d];
    for (int32_t i = 0; i < count; ++i) to[offsets[(from[i] >> shift) & (kRadix - 1)]++] = from[i];
    std::swap(from, to);
  }
  if (from != keys) std::copy(from, from + count, keys);
}

// The first positions of the order (weight descending, id ascending), sorted on demand.
class SortedPrefix {
 public:
  // Gathers the tokens with weight >= start at once; when positions past them are needed,
  // lower bands follow, each kBandRatio times lower than the last but not below `floor`, and
  // below the floor a last band with everything left.
  SortedPrefix(std::span<const float> weights, float start, float floor, SamplerScratch& scratch)
      : weights_(weights),
        keys_(scratch.keys),
        buffer_(scratch.radix_buffer),
        cumulative_(scratch.cumulative),
        floor_(floor) {
    if (keys_.size() < weights.size()) keys_.resize(weights.size());
    if (cumulative_.size() < weights.size()) cumulative_.resize(weights.size());
    GatherDownTo(std::max(start, floor));
  }

  // The token at sorted position `pos` (0 <= pos < vocab).
  int32_t Token(int32_t pos) {
    if (pos >= num_sorted_) SortThrough(pos + 1);
    return KeyToken(keys_[pos]);
  }
  float Weight(int32_t pos) { return weights_[Token(pos)]; }

  // Mass of the first `len` positions (1 <= len <= vocab), summed in order in double.
  double Cumulative(int32_t len) {
    for (; num_cumulative_ < len; ++num_cumulative_) {
      const double previous = num_cumulative_ == 0 ? 0.0 : cumulative_[num_cumulative_ - 1];
      cumulative_[num_cumulative_] = previous + Weight(num_cumulative_);
    }
    return cumulative_[len - 1];
  }

 private:
  static constexpr int32_t kMinChunk = 32;
  static constexpr int32_t kRadixSortMin = 2048;
  static constexpr float kBandRatio = 1.0f / 256;

  // Gathers the tokens with lo <= weight < (the previous band's lo). Called only when every
  // token gathered before is sorted; a large band is then radix-sorted whole at once (cheaper
  // than sorting it in chunks as soon as more than a few chunks are needed).
  void GatherDownTo(float lo) {
    const int32_t band_begin = num_gathered_;
    num_gathered_ += GatherKeys(weights_, lo, gathered_down_to_, keys_.data() + band_begin);
    gathered_down_to_ = lo;
    if (num_gathered_ - band_begin >= kRadixSortMin) {
      RadixSortKeysInIdOrder(keys_.data() + band_begin, num_gathered_ - band_begin, buffer_);
      num_sorted_ = num_gathered_;
    }
  }

  void GatherNextBand() {
    LOOM_CHECK(gathered_down_to_ > 0.0f, "every token is already gathered");
    float lo = 0.0f;
    if (gathered_down_to_ > floor_) lo = std::max(floor_, gathered_down_to_ * kBandRatio);
    GatherDownTo(lo);
  }

  void SortThrough(int32_t len) {
    LOOM_CHECK(len <= static_cast<int32_t>(weights_.size()), "sorted position ", len - 1,
               " outside a vocabulary of ", weights_.size());
    while (num_sorted_ < len) {
      if (num_sorted_ == num_gathered_) {
        GatherNextBand();  // may sort the whole band
        continue;
      }
      const int32_t chunk = std::max(kMinChunk, 3 * num_sorted_);
      const int32_t end = std::min(num_gathered_, std::max(len, num_sorted_ + chunk));
      uint64_t* first = keys_.data() + num_sorted_;
      uint64_t* gathered_end = keys_.data() + num_gathered_;
      if (end < num_gathered_) std::nth_element(first, keys_.data() + end, gathered_end);
      std::sort(first, keys_.data() + end);
      num_sorted_ = end;
    }
  }

  std::span<const float> weights_;
  std::vector<uint64_t>& keys_;
  std::vector<uint64_t>& buffer_;
  std::vector<double>& cumulative_;
  const float floor_;
  float gathered_down_to_ = std::numeric_limits<float>::infinity();
  int32_t num_gathered_ = 0;
  int32_t num_sorted_ = 0;
  int32_t num_cumulative_ = 0;
};

// A weight that roughly the k largest weights reach, estimated from a strided sample; 0 (take
// everything) when k is a large part of the vocabulary.
float TopKThreshold(std::span<const float> weights, int32_t k, std::vector<float>& sample) {
  constexpr int32_t kSampleSize = 4096;
  const int32_t n = static_cast<int32_t>(weights.size());
  if (static_cast<int64_t>(k) * 4 >= n) return 0.0f;
  const int32_t stride = std::max(1, n / kSampleSize);
  sample.clear();
  for (int32_t i = 0; i < n; i += stride) sample.push_back(weights[i]);
  const int64_t rank = static_cast<int64_t>(k) / stride * 5 / 4 + 16;
  if (rank >= static_cast<int64_t>(sample.size())) return 0.0f;
  std::nth_element(sample.begin(), sample.begin() + rank, sample.end(), std::greater<float>());
  return sample[rank];
}

// The first gather threshold and the floor of the later ones (see SortedPrefix).
struct GatherPlan {
  float start;
  float floor;
};

GatherPlan PlanGathers(std::span<const float> weights, double total, const SamplingParams& params,
                       double u, int32_t k, float min_p_cut, std::vector<float>& sample) {
  constexpr float kFirstBand = 1.0f / 256;  // tokens within ~5.5 nats (scaled) of the best
  const int32_t n = static_cast<int32_t>(weights.size());
  const bool top_p = params.top_p < 1.0f;
  if (k < n) {
    float cut = TopKThreshold(weights, k, sample);
    // With top-p the whole top-k mass is needed, whatever min-p keeps.
    if (!top_p) cut = std::max(cut, min_p_cut);
    return {cut, cut};
  }
  if (!top_p && params.min_p > 0.0f) return {min_p_cut, min_p_cut};
  // Tokens below `bound` hold less than n * bound = (1 - top_p) Z / 2 (top-p), or
  // (1 - u) Z / 2 (the draw): candidates above it always suffice.
  const double tail = top_p ? 1.0 - params.top_p : 1.0 - u;
  const float bound = std::max(static_cast<float>(tail * total / (2.0 * n)), min_p_cut);
  return {std::max(kFirstBand, bound), bound};
}

// The position the draw lands on: the first of the `kept` whose cumulative exceeds target.
int32_t Invert(SortedPrefix& prefix, double target, int32_t kept) {
  int32_t last_positive = 0;
  for (int32_t pos = 0; pos < kept; ++pos) {
    if (prefix.Cumulative(pos + 1) > target) return prefix.Token(pos);
    if (prefix.Weight(pos) > 0.0f) last_positive = pos;
  }
  return prefix.Token(last_positive);
}

}  // namespace

int32_t DrawFromWeights(std::span<const float> weights, double total, const SamplingParams& params,
                        double u, SamplerScratch& scratch) {
  const int32_t n = static_cast<int32_t>(weights.size());
  const int32_t k = params.top_k > 0 && params.top_k < n ? params.top_k : n;
  // ComputeWeights gives the most likely token weight exactly 1.
  const float min_p_cut = params.min_p > 0.0f ? params.min_p * 1.0f : 0.0f;
  int32_t kept = k;
  if (params.min_p > 0.0f) kept = std::min(kept, std::max(1, CountAtLeast(weights, min_p_cut)));

  const GatherPlan plan = PlanGathers(weights, total, params, u, k, min_p_cut, scratch.sample);
  SortedPrefix prefix(weights, plan.start, plan.floor, scratch);
  if (params.top_p < 1.0f) {
    const double target =
        static_cast<double>(params.top_p) * (k < n ? prefix.Cumulative(k) : total);
    int32_t len = 1;
    while (len < kept && prefix.Cumulative(len) < target) ++len;
    kept = len;
  }
  const double kept_mass = kept < n ? prefix.Cumulative(kept) : total;
  return Invert(prefix, u * kept_mass, kept);
}

}  // namespace loom::sampling_internal
