// Synthetic MoE routing traces for the expert-cache simulator (expert_cache_sim.cc).
//
// What they model: expert popularity skewed per layer, and request-level locality.
//   - Popularity: in every layer the experts, in a random order, have Zipf weights
//     pop(l, rank r) = 1 / (r + 1)^zipf_exponent.
//   - Topics: `num_topics` latent topics; topic t prefers a "core" of `core_size` random experts
//     in every layer, each weighted `core_boost` times its popularity. A request belongs to one
//     topic (uniformly drawn), so the experts it uses in one layer say which topic it is and
//     hence which experts it will use in every other layer: correlation across layers.
//   - Routing: each token, in each layer, goes to the top_k experts of
//     log(weight(l, e)) + gumbel_scale * Gumbel noise (a top-k sample without replacement from
//     the weights when gumbel_scale is 1).
// Deterministic: a private SplitMix64 generator, no std:: distributions (their results differ
// between standard libraries), so every machine gets the same traces for the same seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom::bench {

struct MoeShape {
  std::string name;
  int32_t num_layers = 0;
  int32_t num_experts = 0;
  int32_t top_k = 0;
};

struct TraceConfig {
  int32_t num_requests = 256;
  int32_t num_topics = 8;
  double zipf_exponent = 1.0;
  int32_t core_size = 3;
  double core_boost = 20.0;
  double gumbel_scale = 1.0;
  // Prompt and output lengths, uniform in [min, max].
  int32_t min_prompt_len = 16;
  int32_t max_prompt_len = 64;
  int32_t min_output_len = 32;
  int32_t max_output_len = 128;
  uint64_t seed = 1;
};

// One request's routing: `experts` holds, for every token (prompt first, then output), for
// every layer, its top_k experts: [num_tokens, num_layers, top_k].
struct RequestTrace {
  int32_t topic = 0;
  int32_t prompt_len = 0;
  int32_t output_len = 0;
  std::vector<int16_t> experts;
};

// The requests of one workload, in arrival order.
std::vector<RequestTrace> MakeTraces(const MoeShape& shape, const TraceConfig& config);

}  // namespace loom::bench
