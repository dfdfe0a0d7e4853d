#include "bench/experts/synthetic_traces.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace loom::bench {
namespace {

// SplitMix64: small, fast, and the same on every platform.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1).
  double Uniform() { return (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53; }
  // Uniform in [lo, hi].
  int32_t Between(int32_t lo, int32_t hi) {
    return lo + static_cast<int32_t>(Next() % static_cast<uint64_t>(hi - lo + 1));
  }
  double Gumbel() { return -std::log(-std::log(Uniform())); }
  template <typename T>
  void Shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[Next() % i]);
  }

 private:
  uint64_t state_;
};

// log weight of every expert of every layer for one topic: [num_layers, num_experts].
std::vector<std::vector<double>> TopicLogWeights(const MoeShape& shape, const TraceConfig& config,
                                                 const std::vector<std::vector<int32_t>>& rank,
                                                 Rng& rng) {
  std::vector<std::vector<double>> out(shape.num_layers);
  std::vector<int32_t> experts(shape.num_experts);
  for (int32_t l = 0; l < shape.num_layers; ++l) {
    out[l].resize(shape.num_experts);
    for (int32_t e = 0; e < shape.num_experts; ++e) {
      out[l][e] = -config.zipf_exponent * std::log(rank[l][e] + 1.0);
    }
    std::iota(experts.begin(), experts.end(), 0);
    rng.Shuffle(experts);
    const int32_t core = std::min(config.core_size, shape.num_experts);
    for (int32_t i = 0; i < core; ++i) out[l][experts[i]] += std::log(config.core_boost);
  }
  return out;
}

}  // namespace

std::vector<RequestTrace> MakeTraces(const MoeShape& shape, const TraceConfig& config) {
  Rng rng(config.seed);
  // Popularity rank of each expert in each layer.
  std::vector<std::vector<int32_t>> rank(shape.num_layers, std::vector<int32_t>(shape.num_experts));
  for (int32_t l = 0; l < shape.num_layers; ++l) {
    std::iota(rank[l].begin(), rank[l].end(), 0);
    rng.Shuffle(rank[l]);
  }
  std::vector<std::vector<std::vector<double>>> topics;
  for (int32_t t = 0; t < config.num_topics; ++t) {
    topics.push_back(TopicLogWeights(shape, config, rank, rng));
  }
  std::vector<RequestTrace> requests(config.num_requests);
  std::vector<std::pair<double, int32_t>> scored(shape.num_experts);
  for (RequestTrace& request : requests) {
    request.topic = static_cast<int32_t>(rng.Next() % config.num_topics);
    request.prompt_len = rng.Between(config.min_prompt_len, config.max_prompt_len);
    request.output_len = rng.Between(config.min_output_len, config.max_output_len);
    const int32_t num_tokens = request.prompt_len + request.output_len;
    request.experts.reserve(static_cast<size_t>(num_tokens) * shape.num_layers * shape.top_k);
    const std::vector<std::vector<double>>& weights = topics[request.topic];
    for (int32_t t = 0; t < num_tokens; ++t) {
      for (int32_t l = 0; l < shape.num_layers; ++l) {
        for (int32_t e = 0; e < shape.num_experts; ++e) {
          scored[e] = {weights[l][e] + config.gumbel_scale * rng.Gumbel(), e};
        }
        std::partial_sort(scored.begin(), scored.begin() + shape.top_k, scored.end(),
                          [](const auto& a, const auto& b) { return a.first > b.first; });
        for (int32_t k = 0; k < shape.top_k; ++k) {
          request.experts.push_back(static_cast<int16_t>(scored[k].second));
        }
      }
    }
  }
  return requests;
}

}  // namespace loom::bench
