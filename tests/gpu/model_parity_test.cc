// The whole model on the CUDA backend: against Hugging Face transformers' logits (the golden
// fixtures of tests/golden) and against the CPU backend, with and without CUDA graphs, in mixed
// and chunked batches. Skipped without a device.
//
// Tolerances. Checkpoints stored in f32 multiply in f32 (cuBLAS without TF32, or the GEMV
// kernel), so they meet the fixtures' own tolerance (1e-3) up to a small factor for summation
// order. bf16/f16 and block-quantized checkpoints multiply on the tensor cores after rounding each
// matmul's input rows to bf16/f16 (engine/backend/cuda/cuda_ops.h; single rows of bf16/f16
// weights and decode batches of quantized ones go to GEMV kernels that keep them f32): ~3
// significant digits on every layer's inputs, the same perturbation as a bf16 KV cache, which
// the CPU golden tests hold to 0.25 of a logit (std ~2, max ~10 on these models). On an H100 the
// largest differences measured were 0.10-0.15 against transformers and against the CPU backend,
// so the rounded tolerance is that 0.25. Block-quantized checkpoints on that path also round the
// dequantized weights to bf16 (a second rounding per matmul; q5_k measured 0.27), so theirs is
// 0.4. A wrong kernel moves logits by whole units. Greedy tokens may flip only where the
// reference's top-2 margin is that small.
//
// Mixture-of-experts checkpoints run every case too. Steps of up to 16 tokens route on the device
// and run the experts grouped (CudaOps::MoeGroupedExperts), so their decode steps are graphs;
// larger steps route on the host with the CPU's code (engine/backend/cuda/cuda_ops.h). Either
// way a token picks the same experts unless the router's logits sit within the rounding of a
// tie. CudaMoeTest checks the grouped path against the host-routed one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "kernels/cuda/device.h"
#include "tests/golden/golden_util.h"

namespace loom {
namespace {

using namespace golden;  // NOLINT: the golden tests' helpers

constexpr float kF32Tolerance = 3e-3f;
constexpr float kRoundedTolerance = 0.25f;
constexpr float kQuantizedTolerance = 0.4f;

class CudaModelTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cuda::CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
    golden_ = LoadGolden(GetParam());
  }
  // The tolerance for this checkpoint's weight dtype on the CUDA backend.
  float Tolerance(const LocalExecutor& executor) const {
    const DType dtype = executor.model_info().weight_dtype;
    if (dtype == DType::kF32) return kF32Tolerance;
    return IsQuantizedDType(dtype) ? kQuantizedTolerance : kRoundedTolerance;
  }
  bool Rounded(const LocalExecutor& executor) const {
    return executor.model_info().weight_dtype != DType::kF32;
  }
  std::unique_ptr<Golden> golden_;
};

// Two runs of the same prompts: the same tokens per prompt, and the same logit rows; returns the
// largest difference between two rows.
float CompareRuns(const EngineRun& a, const EngineRun& b, const std::string& what) {
  EXPECT_EQ(a.results.size(), b.results.size()) << what;
  for (size_t i = 0; i < std::min(a.results.size(), b.results.size()); ++i) {
    EXPECT_EQ(a.results[i].output_tokens, b.results[i].output_tokens)
        << what << ", prompt " << i;
  }
  EXPECT_EQ(a.logits.size(), b.logits.size()) << what;
  float worst = 0;
  for (const auto& [key, row] : a.logits) {
    auto it = b.logits.find(key);
    if (it == b.logits.end()) {
      ADD_FAILURE() << what << ": a logit row of one run is missing from the other";
      continue;
    }
    worst = std::max(worst, MaxAbsDiff(row, it->second.data()));
  }
  return worst;
}

EngineSetup Cuda(EngineSetup setup = {}) {
  setup.backend = BackendKind::kCuda;
  return setup;
}

TEST_P(CudaModelTest, AloneMatchesTransformers) {
  auto executor = MakeExecutor(*golden_, Cuda());
  ASSERT_NE(executor, nullptr);
  for (size_t i = 0; i < golden_->prompts.size(); ++i) {
    Golden one;
    one.vocab = golden_->vocab;
    one.prompts = {golden_->prompts[i]};
    const EngineRun run = RunPrompts(*executor, one, {});
    ExpectMatchesReference(one, run, Tolerance(*executor), Rounded(*executor));
  }
  EXPECT_EQ(executor->num_sequences(), 0u);
}

// Prefills mixed with decodes, 3-token chunks attending to cached blocks of 5.
TEST_P(CudaModelTest, MixedBatchAndChunkedPrefillMatch) {
  auto executor = MakeExecutor(*golden_, Cuda({.block_size = 5}));
  ASSERT_NE(executor, nullptr);
  std::vector<int32_t> first_steps;
  for (size_t i = 0; i < golden_->prompts.size(); ++i) first_steps.push_back(int32_t(i) * 3);
  const EngineRun run = RunPrompts(*executor, *golden_, {.prefill_chunk = 3}, first_steps);
  ExpectMatchesReference(*golden_, run, Tolerance(*executor), Rounded(*executor));
}

// A bf16 cache on the device: the CPU backend's own tolerance for it.
TEST_P(CudaModelTest, Bf16KvCacheStaysClose) {
  auto executor = MakeExecutor(*golden_, Cuda({.kv_dtype = DType::kBF16}));
  ASSERT_NE(executor, nullptr);
  const EngineRun run = RunPrompts(*executor, *golden_, {.prefill_chunk = 7});
  ExpectMatchesReference(*golden_, run, 0.25f + Tolerance(*executor), /*allow_near_ties=*/true);
}

// Decode steps replayed from CUDA graphs give what direct launches give: the same tokens, and
// logits equal up to the summation order of a different split-KV partition (the graph pads the
// batch and sizes splits for the longest context).
TEST_P(CudaModelTest, GraphsMatchDirectLaunches) {
  auto direct = MakeExecutor(*golden_, Cuda({.kv_dtype = DType::kBF16, .cuda_graphs = false}));
  auto graphed = MakeExecutor(*golden_, Cuda({.kv_dtype = DType::kBF16}));
  ASSERT_NE(direct, nullptr);
  ASSERT_NE(graphed, nullptr);
  std::vector<int32_t> first_steps;
  for (size_t i = 0; i < golden_->prompts.size(); ++i) first_steps.push_back(int32_t(i) * 2);
  const EngineRun a = RunPrompts(*direct, *golden_, {}, first_steps);
  const EngineRun b = RunPrompts(*graphed, *golden_, {}, first_steps);
  const float worst = CompareRuns(a, b, "graphs");
  EXPECT_LE(worst, 1e-3f);
  RecordProperty("max_abs_logit_diff", std::to_string(worst));
}

// The CUDA backend against the CPU backend on the same engine settings: every logit row of the
// run within the rounding tolerance, the greedy tokens equal except after a near tie.
TEST_P(CudaModelTest, MatchesTheCpuBackend) {
  auto cpu = MakeExecutor(*golden_, {.kv_dtype = DType::kF32});
  auto gpu = MakeExecutor(*golden_, Cuda({.kv_dtype = DType::kF32}));
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(gpu, nullptr);
  const EngineRun a = RunPrompts(*cpu, *golden_, {.prefill_chunk = 5});
  const EngineRun b = RunPrompts(*gpu, *golden_, {.prefill_chunk = 5});
  ASSERT_EQ(a.results.size(), b.results.size());
  const float tolerance = Tolerance(*gpu);
  for (size_t i = 0; i < a.results.size(); ++i) {
    const auto& ta = a.results[i].output_tokens;
    const auto& tb = b.results[i].output_tokens;
    const int32_t len = static_cast<int32_t>(golden_->prompts[i].tokens.size());
    // Compare logits up to the first differing token (later rows follow other continuations).
    size_t same = 0;
    while (same < ta.size() && same < tb.size() && ta[same] == tb[same]) ++same;
    if (!Rounded(*gpu)) {
      EXPECT_EQ(same, ta.size()) << "prompt " << i;
    }
    for (int32_t pos = 0; pos < len + static_cast<int32_t>(same); ++pos) {
      auto ia = a.logits.find({a.results[i].seq_id.value(), pos});
      auto ib = b.logits.find({b.results[i].seq_id.value(), pos});
      if (ia == a.logits.end() || ib == b.logits.end()) continue;
      EXPECT_LE(MaxAbsDiff(ia->second, ib->second.data()), tolerance)
          << "prompt " << i << " position " << pos;
    }
  }
}

class CudaMoeTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (!cuda::CudaDeviceAvailable()) GTEST_SKIP() << "no CUDA device";
    golden_ = LoadGolden(GetParam());
    if (!golden_->moe) GTEST_SKIP() << "not a mixture-of-experts model";
  }
  std::unique_ptr<Golden> golden_;
};

// The expert cache on the device (slots in device memory, experts copied from page-locked host
// memory on a stream of their own, engine/experts/device_tiers.h; every expert computed on the
// device) is lossless: with one slot, half the experts and all of them, the tokens and logits
// are the all-resident run's. The same bytes reach the same kernels, so the logits should agree
// to the bit; the bound leaves room only for a cuBLAS algorithm chosen differently for another
// pointer alignment.
TEST_P(CudaMoeTest, ExpertCacheIsLossless) {
  // The cache always routes on the host: compare it with the resident model doing the same.
  auto resident = MakeExecutor(*golden_, Cuda({.moe_grouped_experts = false}));
  constexpr ExpertHostCompute kNever = ExpertHostCompute::kNever;
  auto probe =
      MakeExecutor(*golden_, Cuda({.expert_cache_bytes = 1, .expert_host_compute = kNever}));
  ASSERT_NE(resident, nullptr);
  ASSERT_NE(probe, nullptr);
  const int64_t slot = probe->capacity().expert_slot_bytes;
  ASSERT_GT(slot, 0);
  EXPECT_EQ(probe->capacity().expert_cache_slots, 1);
  const ModelInfo& info = resident->model_info();
  int32_t sparse = 0;
  for (bool s : info.sparse_layers) sparse += s;
  const int32_t all = sparse * info.num_experts;
  const EngineRun want = RunPrompts(*resident, *golden_, {.prefill_chunk = 5});
  for (const int32_t slots : {1, all / 2, all}) {
    auto cached = MakeExecutor(
        *golden_, Cuda({.expert_cache_bytes = slots * slot, .expert_host_compute = kNever}));
    ASSERT_NE(cached, nullptr) << slots << " slots";
    EXPECT_EQ(cached->capacity().expert_cache_slots, slots);
    const EngineRun got = RunPrompts(*cached, *golden_, {.prefill_chunk = 5});
    const std::string what = std::to_string(slots) + " slots";
    EXPECT_LE(CompareRuns(want, got, what), 1e-4f) << what;
  }
}

// The grouped experts (routing on the device, every expert's projection in one launch through the
// layer's expert table, decode steps replayed as graphs) and the host-routed path of the same
// resident model each match transformers within the device's tolerance. They are not compared
// token for token: the grouped GEMVs keep every input row in f32 where cuBLAS multiplies
// bf16-rounded rows, so a greedy token may flip where the reference's top-2 margin is that small
// (ExpectMatchesReference allows exactly that).
TEST_P(CudaMoeTest, GroupedExpertsMatchTheHostRoutedPath) {
  auto grouped = MakeExecutor(*golden_, Cuda());
  auto host = MakeExecutor(*golden_, Cuda({.cuda_graphs = false, .moe_grouped_experts = false}));
  ASSERT_NE(grouped, nullptr);
  ASSERT_NE(host, nullptr);
  const DType dtype = grouped->model_info().weight_dtype;
  const float tolerance = dtype == DType::kF32 ? kF32Tolerance
                          : IsQuantizedDType(dtype) ? kQuantizedTolerance
                                                    : kRoundedTolerance;
  ExpectMatchesReference(*golden_, RunPrompts(*grouped, *golden_, {}), tolerance,
                         dtype != DType::kF32);
  ExpectMatchesReference(*golden_, RunPrompts(*host, *golden_, {}), tolerance,
                         dtype != DType::kF32);
}

// Experts computed where they live (ExpertHostCompute::kAlways with one slot) still match
// transformers within the device's tolerance (the counters are checked on the CPU,
// tests/engine/expert_cache_test.cc). Steps of up to 16 tokens run grouped from the cache's
// tables, so the kernels read nearly every expert in place from the page-locked host copy, and
// decode steps are graphs; larger steps send the missing experts' rows to the host CPU, f32,
// and back.
TEST_P(CudaMoeTest, ExpertsComputedOnTheHostMatchTransformers) {
  auto executor = MakeExecutor(*golden_, Cuda({.expert_cache_bytes = 1,
                                               .expert_host_compute = ExpertHostCompute::kAlways}));
  ASSERT_NE(executor, nullptr);
  const DType dtype = executor->model_info().weight_dtype;
  const float tolerance = dtype == DType::kF32 ? kF32Tolerance
                          : IsQuantizedDType(dtype) ? kQuantizedTolerance
                                                    : kRoundedTolerance;
  const EngineRun run = RunPrompts(*executor, *golden_, {.prefill_chunk = 5});
  ExpectMatchesReference(*golden_, run, tolerance, dtype != DType::kF32);
}

// The routing counts a step reports (StepPlan::report_expert_routing), read back from the
// device, against the CPU backend's for one prefill of every prompt: per sequence and layer the
// same total (top_k per token of a sparse layer) and at most two tokens' choices that differ
// (a near tie of router logits that the device's rounding flips moves one count from an expert
// to another). A wrong grouping or copy moves most of them.
TEST_P(CudaMoeTest, RoutingCountsMatchTheCpuBackend) {
  auto cpu = MakeExecutor(*golden_, {.kv_dtype = DType::kF32});
  auto gpu = MakeExecutor(*golden_, Cuda({.kv_dtype = DType::kF32}));
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(gpu, nullptr);
  StepPlan plan;
  plan.step_id = 1;
  plan.report_expert_routing = true;
  int32_t next_block = 0;
  for (size_t i = 0; i < golden_->prompts.size(); ++i) {
    NewSequencePlan seq;
    seq.seq_id = SequenceId(i + 1);
    seq.token_ids = golden_->prompts[i].tokens;
    seq.num_prompt_tokens = static_cast<int32_t>(seq.token_ids.size());
    seq.num_scheduled_tokens = seq.num_prompt_tokens;
    const int32_t blocks = (seq.num_prompt_tokens + 15) / 16 + 1;
    for (int32_t b = 0; b < blocks; ++b) seq.block_table.push_back(BlockId(next_block++));
    seq.sampling.temperature = 0.0f;
    plan.new_sequences.push_back(std::move(seq));
  }
  absl::StatusOr<StepResult> a = cpu->Execute(plan);
  absl::StatusOr<StepResult> b = gpu->Execute(plan);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  ASSERT_EQ(a->outputs.size(), b->outputs.size());
  const int32_t experts = gpu->model_info().num_experts;
  ASSERT_GT(experts, 0);
  for (size_t i = 0; i < a->outputs.size(); ++i) {
    const std::vector<int32_t>& ca = a->outputs[i].expert_counts;
    const std::vector<int32_t>& cb = b->outputs[i].expert_counts;
    ASSERT_EQ(ca.size(), cb.size()) << "prompt " << i;
    ASSERT_FALSE(ca.empty()) << "prompt " << i;
    int32_t moved = 0;
    for (size_t l = 0; l < ca.size() / experts; ++l) {
      int32_t sum_a = 0, sum_b = 0;
      for (int32_t e = 0; e < experts; ++e) {
        const size_t at = l * experts + e;
        sum_a += ca[at];
        sum_b += cb[at];
        moved += std::abs(ca[at] - cb[at]);
      }
      EXPECT_EQ(sum_a, sum_b) << "prompt " << i << " layer " << l;
    }
    EXPECT_LE(moved, 4) << "prompt " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Models, CudaMoeTest, ::testing::ValuesIn(ModelNames()),
                         [](const auto& info) { return info.param; });

INSTANTIATE_TEST_SUITE_P(Models, CudaModelTest, ::testing::ValuesIn(ModelNames()),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace loom
