// Sampler cost per call (one sequence, one position) at vocabulary sizes of current models.
//
// Every iteration restores the logits from a pristine copy (Sample uses them as scratch) and
// draws with a new seed; BM_RestoreOnly measures that copy alone so it can be subtracted.
// Logit distributions:
//   peaked     N(0, 1.5^2) plus +8..14 on 20 random tokens: a confident LLM step, where top-p
//              0.9 keeps a handful of tokens;
//   spread     N(0, 3^2): an uncertain step, top-p 0.9 keeps ~4% of the vocabulary;
//   flat       N(0, 1): close to uniform, top-p 0.9 keeps most of the vocabulary (worst case).
#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "engine/api/sampling_params.h"
#include "engine/sampling/sampler.h"

namespace loom {
namespace {

enum Distribution : int64_t { kPeaked = 0, kSpread = 1, kFlat = 2 };

std::vector<float> MakeLogits(int32_t vocab_size, int64_t distribution) {
  std::mt19937 rng(1234);
  const float sigma = distribution == kPeaked ? 1.5f : distribution == kSpread ? 3.0f : 1.0f;
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> logits(vocab_size);
  for (float& x : logits) x = normal(rng);
  if (distribution == kPeaked) {
    std::uniform_int_distribution<int32_t> token(0, vocab_size - 1);
    std::uniform_real_distribution<float> boost(8.0f, 14.0f);
    for (int i = 0; i < 20; ++i) logits[token(rng)] += boost(rng);
  }
  return logits;
}

void RunSample(benchmark::State& state, SamplingParams params, int32_t num_prompt,
               int32_t num_output) {
  const int32_t vocab_size = static_cast<int32_t>(state.range(0));
  const std::vector<float> pristine = MakeLogits(vocab_size, state.range(1));
  std::vector<float> logits(pristine.size());
  std::mt19937 rng(99);
  std::uniform_int_distribution<int32_t> token(0, vocab_size - 1);
  std::vector<TokenId> prompt(num_prompt), output(num_output);
  for (TokenId& id : prompt) id = TokenId(token(rng));
  for (TokenId& id : output) id = TokenId(token(rng));
  SamplerScratch scratch;
  SamplerInput input{&params, prompt, output};
  uint64_t seed = 0;
  for (auto _ : state) {
    std::copy(pristine.begin(), pristine.end(), logits.begin());
    params.seed = seed++;
    benchmark::DoNotOptimize(Sample(logits, input, scratch));
  }
  state.SetItemsProcessed(state.iterations());
}

void BM_RestoreOnly(benchmark::State& state) {
  const std::vector<float> pristine = MakeLogits(static_cast<int32_t>(state.range(0)), 0);
  std::vector<float> logits(pristine.size());
  for (auto _ : state) {
    std::copy(pristine.begin(), pristine.end(), logits.begin());
    benchmark::DoNotOptimize(logits.data());
    benchmark::ClobberMemory();
  }
}

void BM_Greedy(benchmark::State& state) {
  SamplingParams params;
  params.temperature = 0.0f;
  RunSample(state, params, 0, 0);
}

void BM_TopP(benchmark::State& state) {
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_p = 0.9f;
  RunSample(state, params, 0, 0);
}

void BM_TopK50TopP(benchmark::State& state) {
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_k = 50;
  params.top_p = 0.95f;
  RunSample(state, params, 0, 0);
}

void BM_MinP(benchmark::State& state) {
  SamplingParams params;
  params.temperature = 1.0f;
  params.min_p = 0.05f;
  RunSample(state, params, 0, 0);
}

void BM_TemperatureOnly(benchmark::State& state) {
  SamplingParams params;
  params.temperature = 1.0f;
  RunSample(state, params, 0, 0);
}

// Penalties over a 2000-token prompt and 500 generated tokens, plus 5 top log-probabilities.
void BM_TopPPenaltiesLogprobs(benchmark::State& state) {
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_p = 0.9f;
  params.repetition_penalty = 1.1f;
  params.frequency_penalty = 0.3f;
  params.presence_penalty = 0.2f;
  params.logprobs = 5;
  RunSample(state, params, 2000, 500);
}

void VocabArgs(benchmark::internal::Benchmark* bench) {
  for (int64_t vocab : {32000, 128256}) bench->Args({vocab, kPeaked});
}
void VocabAndDistributionArgs(benchmark::internal::Benchmark* bench) {
  for (int64_t vocab : {32000, 128256}) {
    for (int64_t distribution : {kPeaked, kSpread, kFlat}) bench->Args({vocab, distribution});
  }
}

BENCHMARK(BM_RestoreOnly)->Arg(32000)->Arg(128256);
BENCHMARK(BM_Greedy)->Apply(VocabArgs);
BENCHMARK(BM_TopP)->Apply(VocabAndDistributionArgs);
BENCHMARK(BM_TopK50TopP)->Apply(VocabAndDistributionArgs);
BENCHMARK(BM_MinP)->Apply(VocabAndDistributionArgs);
BENCHMARK(BM_TemperatureOnly)->Apply(VocabAndDistributionArgs);
BENCHMARK(BM_TopPPenaltiesLogprobs)->Apply(VocabArgs);

}  // namespace
}  // namespace loom

BENCHMARK_MAIN();
