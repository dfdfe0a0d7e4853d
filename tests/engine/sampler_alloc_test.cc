// Sample does not allocate once its scratch has grown to the vocabulary (log-probabilities,
// whose result owns a vector, and the rare all -inf fallback aside). This binary replaces the
// global operator new to count allocations.
#include <atomic>
#include <cstdlib>
#include <new>
#include <random>
#include <vector>

#include "engine/sampling/sampler.h"
#include "gtest/gtest.h"

namespace {
std::atomic<int64_t> g_num_allocations{0};
}  // namespace

void* operator new(size_t size) {
  ++g_num_allocations;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace loom {
namespace {

TEST(SamplerAllocTest, WarmSampleDoesNotAllocate) {
  constexpr int32_t kVocab = 50000;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> pristine(kVocab);
  for (float& x : pristine) x = normal(rng);
  std::vector<TokenId> prompt, output;
  for (int i = 0; i < 300; ++i) prompt.push_back(TokenId(static_cast<int32_t>(rng() % kVocab)));
  for (int i = 0; i < 50; ++i) output.push_back(TokenId(static_cast<int32_t>(rng() % kVocab)));

  std::vector<SamplingParams> all_params(5);
  all_params[0].temperature = 0;
  all_params[1].top_p = 0.9f;
  all_params[2].top_k = 40;
  all_params[2].top_p = 0.95f;
  all_params[3].min_p = 0.05f;
  all_params[3].repetition_penalty = 1.1f;
  all_params[3].frequency_penalty = 0.5f;
  all_params[4].temperature = 1.3f;  // untruncated
  all_params[4].min_tokens = 100;
  all_params[4].min_tokens_banned_ids = {TokenId(2), TokenId(7)};
  all_params[4].logit_bias = {{TokenId(5), 3.0f}};

  SamplerScratch scratch;
  std::vector<float> logits(kVocab);
  int64_t allocations_when_cold = 0;
  int64_t allocations_when_warm = 0;
  for (int round = 0; round < 2; ++round) {
    const int64_t before = g_num_allocations.load();
    for (uint64_t seed = 0; seed < 20; ++seed) {
      for (SamplingParams& params : all_params) {
        params.seed = seed;
        logits = pristine;  // same size: no allocation
        Sample(logits, SamplerInput{&params, prompt, output}, scratch);
      }
    }
    (round == 0 ? allocations_when_cold : allocations_when_warm) = g_num_allocations - before;
  }
  EXPECT_GT(allocations_when_cold, 0);  // the counter works: the first round grows the scratch
  EXPECT_EQ(allocations_when_warm, 0);
}

}  // namespace
}  // namespace loom
