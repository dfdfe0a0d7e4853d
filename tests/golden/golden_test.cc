// Golden tests: the CPU engine against Hugging Face transformers (float32 reference) on the tiny
// random-weight checkpoints made by tests/golden/make_golden.py.
//
// For every model folder in tests/golden/models and every prompt, the engine must reproduce
//   - the logits at every prompt position and at every greedy step, within the tolerance stated
//     in reference.json (tolerance.logits_abs);
//   - the 32 greedy tokens exactly;
// and its tokens must not depend on how the work is batched: alone or mixed with other
// sequences that prefill while it decodes, prompt in one step or in chunks, any block size.
// ctest runs this binary once per CPU instruction-set level (LOOM_CPU_ISA).
#include <gtest/gtest.h>

#include "tests/golden/golden_util.h"

namespace loom {
namespace {

using namespace golden;  // NOLINT: the helpers of this very test, moved to a header

class GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { golden_ = LoadGolden(GetParam()); }
  std::unique_ptr<Golden> golden_;
};

// Each prompt alone, prefilled in one step, f32 KV cache.
TEST_P(GoldenTest, AloneMatchesTransformers) {
  auto executor = MakeExecutor(*golden_, {});
  ASSERT_NE(executor, nullptr);
  for (size_t i = 0; i < golden_->prompts.size(); ++i) {
    Golden one;
    one.vocab = golden_->vocab;
    one.prompts = {golden_->prompts[i]};
    const EngineRun run = RunPrompts(*executor, one, {});
    ExpectMatchesReference(one, run, golden_->tolerance);
  }
  EXPECT_EQ(executor->num_sequences(), 0u);
}

// All prompts together, started on different steps so prefills mix with decodes, prompts in
// chunks of 3 tokens, blocks of 5 tokens.
TEST_P(GoldenTest, MixedBatchAndChunkedPrefillMatch) {
  auto executor = MakeExecutor(*golden_, {.block_size = 5});
  ASSERT_NE(executor, nullptr);
  std::vector<int32_t> first_steps;
  for (size_t i = 0; i < golden_->prompts.size(); ++i) first_steps.push_back(int32_t(i) * 3);
  const EngineRun run = RunPrompts(*executor, *golden_, {.prefill_chunk = 3}, first_steps);
  ExpectMatchesReference(*golden_, run, golden_->tolerance);
}

// Whole batch at once with a small token budget (chunks set by the budget) and block size 1.
TEST_P(GoldenTest, TightBudgetAndBlockSizeOneMatch) {
  auto executor = MakeExecutor(*golden_, {.block_size = 1, .num_threads = 3});
  ASSERT_NE(executor, nullptr);
  const EngineRun run = RunPrompts(*executor, *golden_, {.max_num_batched_tokens = 11});
  ExpectMatchesReference(*golden_, run, golden_->tolerance);
}

// Decode steps padded to graph batch sizes (what the CUDA backend replays as graphs): padded
// rows write no K/V, attend to one key of block 0 and are never sampled, so the results are
// those of the unpadded batch.
TEST_P(GoldenTest, PaddedDecodeBatchesMatch) {
  auto executor = MakeExecutor(*golden_, {.block_size = 5, .cpu_pretend_graphs = true});
  ASSERT_NE(executor, nullptr);
  std::vector<int32_t> first_steps;
  for (size_t i = 0; i < golden_->prompts.size(); ++i) first_steps.push_back(int32_t(i) * 2);
  const EngineRun run = RunPrompts(*executor, *golden_, {}, first_steps);
  ExpectMatchesReference(*golden_, run, golden_->tolerance);
}

// A bf16 KV cache rounds K and V to 8 significant bits: logits (std ~2, max ~10 here) move by
// up to ~0.2, so greedy choices may flip where the reference has a near tie (margins go down
// to 0.02), and only there.
TEST_P(GoldenTest, Bf16KvCacheStaysClose) {
  auto executor = MakeExecutor(*golden_, {.kv_dtype = DType::kBF16});
  ASSERT_NE(executor, nullptr);
  const EngineRun run = RunPrompts(*executor, *golden_, {.prefill_chunk = 7});
  ExpectMatchesReference(*golden_, run, 0.25f, /*allow_near_ties=*/true);
}

// The same with an f16 cache (11 significant bits): closer than bf16.
TEST_P(GoldenTest, F16KvCacheStaysClose) {
  auto executor = MakeExecutor(*golden_, {.kv_dtype = DType::kF16});
  ASSERT_NE(executor, nullptr);
  const EngineRun run = RunPrompts(*executor, *golden_, {});
  ExpectMatchesReference(*golden_, run, 0.03f, /*allow_near_ties=*/true);
}

INSTANTIATE_TEST_SUITE_P(Models, GoldenTest, ::testing::ValuesIn(ModelNames()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace loom
