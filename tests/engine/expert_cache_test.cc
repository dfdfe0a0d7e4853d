// The expert cache is lossless: on the mixture-of-experts golden checkpoints, a LocalExecutor whose
// routed experts live in a slower tier behind an ExpertStore (EngineConfig::expert_cache_bytes)
// produces exactly the tokens and log-probabilities of the all-resident one, whatever the cache
// size (one slot, a few, all), whatever prefetch hints and scores the plans carry (none, random,
// the experts the step will need) and wherever the experts live (the file, read directly or
// through the page cache; a copy in host memory loaded through the backend's copy queue, the
// device path, EngineConfig::expert_home_in_memory); its counters add up. The device path's
// provider keeps an expert pinned after Done until the ops that read it have finished.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "engine/backend/cpu_backend.h"
#include "engine/experts/stored_experts.h"
#include "engine/runtime/local_executor.h"
#include "tests/engine/moe_golden.h"

namespace loom {
namespace {

constexpr int32_t kDecodeSteps = 12;

std::vector<std::vector<TokenId>> LoadPrompts(const std::string& model) {
  std::vector<std::vector<TokenId>> out;
  const Json prompts = testing::GoldenPrompts(model);
  for (size_t i = 0; i < prompts.size(); ++i) out.push_back(testing::PromptTokens(prompts[i]));
  return out;
}

// Where the routed experts live outside the cache.
enum class Home { kFileDirect, kFileBuffered, kHostMemory };

absl::StatusOr<std::unique_ptr<LocalExecutor>> MakeExecutor(
    const std::string& model, int64_t expert_cache_bytes, Home home = Home::kFileDirect,
    ExpertHostCompute host_compute = ExpertHostCompute::kNever) {
  EngineConfig config = testing::GoldenMoeConfig(model);
  config.expert_cache_bytes = expert_cache_bytes;
  config.expert_direct_io = home == Home::kFileDirect;
  config.expert_home_in_memory = home == Home::kHostMemory;
  config.expert_host_compute = host_compute;
  return LocalExecutor::Create(config);
}

enum class Hints { kNone, kRandom, kAll };

// What a run produced: per step and sequence, the token and its top log-probabilities.
struct Trace {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  ExpertCacheCounters counters;
};

Trace RunSteps(LocalExecutor& executor, const std::vector<std::vector<TokenId>>& prompts, Hints hints,
          uint32_t seed) {
  Trace trace;
  const ModelInfo& info = executor.model_info();
  std::mt19937 rng(seed);
  auto add_hints = [&](StepPlan& plan) {
    if (hints == Hints::kNone) return;
    // Plans name sparse layers by their position among the sparse layers.
    int32_t sparse = 0;
    for (bool s : info.sparse_layers) sparse += s;
    for (int32_t l = 0; l < sparse; ++l) {
      for (int32_t e = 0; e < info.num_experts; ++e) {
        if (hints == Hints::kRandom && rng() % 3 != 0) continue;
        const double urgency = static_cast<double>(rng() % 1000) / 100.0;
        plan.expert_prefetch.push_back({{l, e}, urgency});
        plan.expert_scores.push_back({{l, e}, urgency});
      }
    }
  };
  StepPlan plan;
  plan.step_id = 1;
  for (size_t i = 0; i < prompts.size(); ++i) {
    NewSequencePlan s;
    s.seq_id = SequenceId(i + 1);
    s.token_ids = prompts[i];
    s.num_prompt_tokens = static_cast<int32_t>(prompts[i].size());
    s.num_scheduled_tokens = s.num_prompt_tokens;
    for (int32_t b = 0; b < 12; ++b) s.block_table.push_back(BlockId(int32_t(i) * 12 + b));
    s.sampling.temperature = 0.0f;
    s.sampling.logprobs = 3;
    plan.new_sequences.push_back(std::move(s));
  }
  add_hints(plan);
  for (int32_t step = 0; step <= kDecodeSteps; ++step) {
    absl::StatusOr<StepResult> result = executor.Execute(plan);
    EXPECT_TRUE(result.ok()) << result.status();
    if (!result.ok()) return trace;
    for (const SequenceOutput& out : result->outputs) {
      trace.tokens.push_back(out.token_id.value());
      for (const PositionLogprobs& p : out.logprobs) {
        trace.logprobs.push_back(p.token.logprob);
        for (const TokenLogprob& t : p.top) trace.logprobs.push_back(t.logprob);
      }
    }
    trace.counters = result->expert_cache;
    plan = StepPlan();
    plan.step_id = static_cast<uint64_t>(step) + 2;
    for (size_t i = 0; i < prompts.size(); ++i) plan.continuing.push_back({SequenceId(i + 1), {}, 1});
    add_hints(plan);
  }
  return trace;
}

class ExpertCacheTest : public ::testing::TestWithParam<std::string> {};

TEST_P(ExpertCacheTest, OutputsAreIdenticalWhateverTheCacheSizeAndHints) {
  const std::vector<std::vector<TokenId>> prompts = LoadPrompts(GetParam());
  ASSERT_FALSE(prompts.empty());
  absl::StatusOr<std::unique_ptr<LocalExecutor>> resident = MakeExecutor(GetParam(), 0);
  ASSERT_TRUE(resident.ok()) << resident.status();
  EXPECT_EQ((*resident)->capacity().expert_cache_slots, 0);
  // All resident, the experts of steps up to this many tokens run grouped from the expert tables
  // (Ops::MoeGroupedExperts); the cached runs below route on the host, expert by expert, except
  // those with a home in memory that may compute there, whose small steps run grouped from the
  // cache's tables (slots and homes). So the comparisons also check that the paths of the sparse
  // block make the same floats.
  EXPECT_EQ((*resident)->grouped_expert_tokens(), CpuOps::kMaxGroupedExpertTokens);
  const Trace want = RunSteps(**resident, prompts, Hints::kNone, 1);
  ASSERT_FALSE(want.tokens.empty());
  EXPECT_EQ(want.counters.slots, 0) << "no cache, no counters";

  // The slot size of each home (its parts' alignment differs), from a one-slot store.
  auto slot_bytes = [&](Home home) -> int64_t {
    absl::StatusOr<std::unique_ptr<LocalExecutor>> probe = MakeExecutor(GetParam(), 1, home);
    EXPECT_TRUE(probe.ok()) << probe.status();
    return probe.ok() ? (*probe)->capacity().expert_slot_bytes : 0;
  };
  const int64_t file_slot = slot_bytes(Home::kFileDirect);
  const int64_t memory_slot = slot_bytes(Home::kHostMemory);
  ASSERT_GT(file_slot, 0);
  ASSERT_GT(memory_slot, 0);
  const ModelInfo& info = (*resident)->model_info();
  int32_t sparse = 0;
  for (bool s : info.sparse_layers) sparse += s;
  const int32_t all = sparse * info.num_experts;

  constexpr ExpertHostCompute kNever = ExpertHostCompute::kNever;
  constexpr ExpertHostCompute kAlways = ExpertHostCompute::kAlways;
  struct Case {
    int32_t slots;
    Hints hints;
    Home home;
    ExpertHostCompute host_compute = ExpertHostCompute::kNever;
  };
  const Case cases[] = {{1, Hints::kNone, Home::kFileDirect},
                        {1, Hints::kRandom, Home::kFileDirect},
                        {2, Hints::kAll, Home::kFileDirect},
                        {3, Hints::kRandom, Home::kFileBuffered},
                        {all / 2, Hints::kRandom, Home::kFileDirect},
                        {all, Hints::kAll, Home::kFileDirect},
                        {1, Hints::kNone, Home::kHostMemory, kNever},
                        {2, Hints::kRandom, Home::kHostMemory, kNever},
                        {all / 2, Hints::kRandom, Home::kHostMemory, kNever},
                        {all, Hints::kAll, Home::kHostMemory, kNever},
                        // Missing experts computed where they live, on the host CPU.
                        {1, Hints::kNone, Home::kHostMemory, kAlways},
                        {2, Hints::kRandom, Home::kHostMemory, kAlways},
                        {all / 2, Hints::kAll, Home::kHostMemory, ExpertHostCompute::kAuto}};
  for (const Case& c : cases) {
    const std::string what = "slots " + std::to_string(c.slots) + " hints " +
                             std::to_string(static_cast<int>(c.hints)) + " home " +
                             std::to_string(static_cast<int>(c.home)) + " host compute " +
                             std::to_string(static_cast<int>(c.host_compute));
    const int64_t slot = c.home == Home::kHostMemory ? memory_slot : file_slot;
    absl::StatusOr<std::unique_ptr<LocalExecutor>> cached =
        MakeExecutor(GetParam(), c.slots * slot, c.home, c.host_compute);
    ASSERT_TRUE(cached.ok()) << cached.status() << " " << what;
    EXPECT_EQ((*cached)->capacity().expert_cache_slots, c.slots) << what;
    // A cache in host memory that may compute experts where they live keeps grouped tables:
    // its small steps read resident experts from their slots and the others in place at home.
    const bool grouped = c.home == Home::kHostMemory && c.host_compute != kNever;
    EXPECT_EQ((*cached)->grouped_expert_tokens(),
              grouped ? CpuOps::kMaxGroupedExpertTokens : 0)
        << what;
    const Trace got = RunSteps(**cached, prompts, c.hints, 7 + static_cast<uint32_t>(c.slots));
    EXPECT_EQ(got.tokens, want.tokens) << what;
    EXPECT_EQ(got.logprobs, want.logprobs) << what << ": the bytes are the same, so the floats are";
    const ExpertCacheCounters& n = got.counters;
    EXPECT_EQ(n.slots, c.slots) << what;
    EXPECT_LE(n.resident, c.slots) << what;
    EXPECT_GT(n.hits + n.misses + n.computed_at_home, 0) << what;
    if (c.host_compute == kNever) {
      EXPECT_EQ(n.computed_at_home, 0) << what;
      EXPECT_GT(n.bytes_loaded, 0) << what;
    }
    if (c.host_compute == kAlways) {
      EXPECT_GT(n.computed_at_home, 0) << what;
    }
    EXPECT_LE(n.prefetches_used + n.prefetches_wasted, n.prefetches_issued) << what;
    if (c.hints == Hints::kNone) {
      EXPECT_EQ(n.prefetches_issued, 0) << what;
    }
    if (c.slots == all && c.hints == Hints::kAll) {
      EXPECT_GT(n.prefetches_used, 0) << what << ": hinting everything must pay off somewhere";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Models, ExpertCacheTest,
                         ::testing::Values("mixtral", "qwen2_moe", "qwen3_moe",
                                           // GGUF: experts are rows of the stacked tensors.
                                           "gguf_mixtral_f16", "gguf_qwen2_moe_f16",
                                           "gguf_qwen3_moe_q8_0"));

// Three experts of one layer with distinct bytes, in host buffers (the checkpoint's views).
struct HostExperts {
  std::vector<std::vector<uint16_t>> buffers;
  std::vector<ExpertWeights> weights;
};

HostExperts MakeHostExperts(int32_t num_experts) {
  HostExperts out;
  constexpr int64_t kInter = 24, kHidden = 40;
  out.buffers.reserve(static_cast<size_t>(num_experts) * 3);
  for (int32_t e = 0; e < num_experts; ++e) {
    ExpertWeights w;
    for (LinearWeight* m : {&w.gate, &w.up, &w.down}) {
      const bool down = m == &w.down;
      std::vector<uint16_t> data(static_cast<size_t>(kInter * kHidden));
      for (size_t i = 0; i < data.size(); ++i) {
        // Finite bf16 values of both signs, different per expert and matrix: 0x3c00..0x3cff
        // (about 0.0078 to 0.031) with the sign bit set on every third.
        const uint32_t mixed = static_cast<uint32_t>(e * 7919 + out.buffers.size() * 131 + i);
        data[i] = static_cast<uint16_t>(0x3c00 | (mixed & 0xff) | (mixed % 3 == 0 ? 0x8000 : 0));
      }
      out.buffers.push_back(std::move(data));
      m->weight = {out.buffers.back().data(), DType::kBF16, down ? kHidden : kInter,
                   down ? kInter : kHidden};
    }
    out.weights.push_back(w);
  }
  return out;
}

bool SameBytes(const LinearWeight& got, const LinearWeight& want) {
  const size_t bytes = static_cast<size_t>(want.weight.rows * want.weight.cols) * 2;
  return got.weight.rows == want.weight.rows && got.weight.cols == want.weight.cols &&
         got.weight.dtype == want.weight.dtype &&
         std::memcmp(got.weight.data, want.weight.data, bytes) == 0;
}

TEST(DeviceExpertProviderTest, DoneExpertsStayPinnedUntilTheOpsAreKnownToHaveFinished) {
  const HostExperts host = MakeHostExperts(3);
  CpuBackend backend(BackendOptions{});
  ExpertStoreOptions options;
  options.budget_bytes = 1;  // one slot
  absl::StatusOr<std::unique_ptr<StoredExpertProvider>> provider =
      StoredExpertProvider::CreateInHostMemory(host.weights, 3, backend, options);
  ASSERT_TRUE(provider.ok()) << provider.status();
  StoredExpertProvider& p = **provider;
  ASSERT_EQ(p.store().Stats().num_slots, 1);

  const int32_t used[] = {0, 1};
  p.WillUse(0, used);
  absl::StatusOr<const ExpertWeights*> first = p.Get(0, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_TRUE(SameBytes((*first)->gate, host.weights[0].gate));
  EXPECT_TRUE(SameBytes((*first)->down, host.weights[0].down));
  p.Done(0, 0);
  // Its ops may still run: the one slot stays taken.
  EXPECT_TRUE(absl::IsResourceExhausted(p.store().Acquire({0, 2}).status()));
  // Get waits for the backend, unpins and loads the next expert into the slot.
  absl::StatusOr<const ExpertWeights*> second = p.Get(0, 1);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_TRUE(SameBytes((*second)->up, host.weights[1].up));
  p.Done(0, 1);
  EXPECT_TRUE(absl::IsResourceExhausted(p.store().Acquire({0, 2}).status()));
  // The next sparse layer's WillUse comes after Ops::MoeRoute waited for everything before it.
  p.WillUse(1, {});
  absl::StatusOr<ExpertBytes> direct = p.store().Acquire({0, 2});
  ASSERT_TRUE(direct.ok()) << direct.status();
  p.store().Release({0, 2});
  p.EndStep();

  // EndStep unpins what a failed step left pinned.
  ASSERT_TRUE(p.Get(0, 0).ok());
  p.EndStep();
  EXPECT_TRUE(p.store().Acquire({0, 2}).ok());
  p.store().Release({0, 2});
  const ExpertStoreStats stats = p.store().Stats();
  EXPECT_FALSE(stats.direct_io);
  EXPECT_GT(stats.bytes_loaded, 0);
}

TEST(DeviceExpertProviderTest, ExpertsWithBiasesAreRefused) {
  HostExperts host = MakeHostExperts(2);
  const std::vector<float> bias(24, 0.5f);
  host.weights[1].up.bias = bias.data();
  CpuBackend backend(BackendOptions{});
  ExpertStoreOptions options;
  options.budget_bytes = 1 << 20;
  absl::StatusOr<std::unique_ptr<StoredExpertProvider>> provider =
      StoredExpertProvider::CreateInHostMemory(host.weights, 2, backend, options);
  EXPECT_TRUE(absl::IsUnimplemented(provider.status())) << provider.status();
}

// The cost model's decision: the host wins for few rows of a large expert, loses as rows grow,
// and never without a measured load rate.
TEST(HostComputeCostTest, FewRowsOfALargeExpertGoToTheHost) {
  HostComputeCost cost;
  cost.load_bytes_per_second = 20e9;  // 1 ms per 20 MB
  cost.host_seconds_base = 0.2e-3;
  cost.host_seconds_per_row = 0.1e-3;
  const int64_t expert = 20'000'000, row = 16'384;
  EXPECT_TRUE(cost.HostIsFaster(1, expert, row));
  EXPECT_TRUE(cost.HostIsFaster(7, expert, row));
  EXPECT_FALSE(cost.HostIsFaster(8, expert, row)) << "0.2 + 0.8 ms is not below 1 ms";
  EXPECT_FALSE(cost.HostIsFaster(64, expert, row));
  EXPECT_FALSE(cost.HostIsFaster(1, 2'000'000, row)) << "a small expert loads faster";
  EXPECT_FALSE(cost.HostIsFaster(0, expert, row));
  // The rows' activations travel both ways: with huge rows the host loses.
  EXPECT_FALSE(cost.HostIsFaster(1, expert, 10'000'000));
  HostComputeCost unmeasured;
  EXPECT_FALSE(unmeasured.HostIsFaster(1, expert, row));
}

TEST(DeviceExpertProviderTest, RunsMissingExpertsOnTheHostWhenAsked) {
  const HostExperts host = MakeHostExperts(3);
  CpuBackend backend(BackendOptions{});
  ExpertStoreOptions options;
  options.budget_bytes = 1;
  HostComputeOptions compute;
  compute.mode = ExpertHostCompute::kAlways;
  compute.ops = &backend.ops();
  compute.max_rows = 8;
  compute.max_expert_rows = 4;
  absl::StatusOr<std::unique_ptr<StoredExpertProvider>> provider =
      StoredExpertProvider::CreateInHostMemory(host.weights, 3, backend, options, compute);
  ASSERT_TRUE(provider.ok()) << provider.status();
  StoredExpertProvider& p = **provider;
  EXPECT_TRUE(p.PrefersHost(0, 1, 3));
  // A resident expert is used where it is.
  const int32_t used[] = {2};
  p.WillUse(0, used);
  ASSERT_TRUE(p.Get(0, 2).ok());
  EXPECT_FALSE(p.PrefersHost(0, 2, 3));
  p.Done(0, 2);
  p.EndStep();
  // RunOnHost computes down(silu(gate x) * up x) from the host copy into host_rows().out.
  const ExpertProvider::HostRows rows = p.host_rows();
  ASSERT_NE(rows.x, nullptr);
  ASSERT_NE(rows.out, nullptr);
  // Rows 2..4 of the host buffers.
  for (int i = 0; i < 3 * 40; ++i) rows.x[80 + i] = 0.01f * static_cast<float>(i % 17) - 0.05f;
  ASSERT_TRUE(p.RunOnHost(0, 1, 2, 3).ok());
  std::vector<float> want(3 * 40), gate(3 * 24), up(3 * 24);
  const ExpertWeights& w = host.weights[1];
  const LinearOutput gate_up[] = {{&w.gate, gate.data(), 24}, {&w.up, up.data(), 24}};
  backend.ops().Linear(rows.x + 80, 40, 3, gate_up);
  backend.ops().SiluMul(gate.data(), up.data(), 3, 24, gate.data());
  const LinearOutput down[] = {{&w.down, want.data(), 40}};
  backend.ops().Linear(gate.data(), 24, 3, down);
  EXPECT_EQ(std::vector<float>(rows.out + 80, rows.out + 80 + 3 * 40), want);
  float largest = 0;
  for (float v : want) largest = std::max(largest, std::abs(v));
  EXPECT_GT(largest, 0.0f) << "the check must not compare zeros";
  EXPECT_EQ(p.store().Stats().computed_at_home, 1);
  EXPECT_FALSE(p.RunOnHost(0, 1, 0, 5).ok()) << "more rows of one expert than the host holds";
  EXPECT_FALSE(p.RunOnHost(0, 1, 6, 3).ok()) << "rows past the host buffers";
}

// The cache's grouped tables: a step reads resident experts from their slots (pinned until
// EndStep) and the others at home; the ones read at home are counted and loaded after the step,
// so the next step finds them in their slot.
TEST(DeviceExpertProviderTest, GroupedStepsReadMissingExpertsAtHomeAndLoadThemAfter) {
  const HostExperts host = MakeHostExperts(3);
  CpuBackend backend(BackendOptions{});
  ExpertStoreOptions options;
  options.budget_bytes = 1;  // one slot
  HostComputeOptions compute;
  compute.mode = ExpertHostCompute::kAlways;
  absl::StatusOr<std::unique_ptr<StoredExpertProvider>> provider =
      StoredExpertProvider::CreateInHostMemory(host.weights, 3, backend, options, compute);
  ASSERT_TRUE(provider.ok()) << provider.status();
  StoredExpertProvider& p = **provider;
  ASSERT_NE(p.GroupedTable(0), nullptr);
  EXPECT_EQ(p.GroupedTable(1), nullptr) << "one layer";

  // Nothing resident: every expert is read at home; the routed ones are counted and loaded.
  ASSERT_TRUE(p.BeginGroupedStep().ok());
  const int32_t routed[] = {1, 1, 2};  // [tokens, top_k]: expert 1 twice, counted once
  p.GroupedRouting(0, routed);
  p.EndStep();
  ExpertStoreStats stats = p.store().Stats();
  EXPECT_EQ(stats.computed_at_home, 2);
  EXPECT_EQ(stats.hits + stats.misses, 0);
  // One slot: one of the two loads stays. Wait for the loader.
  for (int i = 0; i < 1000 && p.store().Stats().resident == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_EQ(p.store().Stats().resident, 1);
  const int32_t in_slot = p.store().IsResident({0, 1}) ? 1 : 2;

  // The next step pins the resident one for the step (its slot cannot be taken), and counts a
  // hit for it; the other is read at home again.
  ASSERT_TRUE(p.BeginGroupedStep().ok());
  EXPECT_TRUE(absl::IsResourceExhausted(p.store().Acquire({0, 0}).status()));
  const int32_t both[] = {1, 2};
  p.GroupedRouting(0, both);
  p.EndStep();
  stats = p.store().Stats();
  EXPECT_EQ(stats.hits, 1) << "expert " << in_slot;
  EXPECT_EQ(stats.computed_at_home, 3);
  EXPECT_EQ(stats.misses, 1) << "only the probing Acquire of expert 0";
  ASSERT_TRUE(p.store().Acquire({0, 0}).ok()) << "EndStep unpinned the slot";
  p.store().Release({0, 0});
}

TEST(DeviceExpertProviderTest, NoGroupedTablesWhenExpertsMustBeLoaded) {
  const HostExperts host = MakeHostExperts(2);
  CpuBackend backend(BackendOptions{});
  ExpertStoreOptions options;
  options.budget_bytes = 1 << 20;
  absl::StatusOr<std::unique_ptr<StoredExpertProvider>> provider =
      StoredExpertProvider::CreateInHostMemory(host.weights, 2, backend, options);
  ASSERT_TRUE(provider.ok()) << provider.status();
  EXPECT_EQ((*provider)->GroupedTable(0), nullptr) << "host compute kNever: always load";
  EXPECT_FALSE((*provider)->BeginGroupedStep().ok());
}

TEST(ExpertCacheConfigTest, DenseModelsIgnoreTheBudget) {
  absl::StatusOr<std::unique_ptr<LocalExecutor>> dense = MakeExecutor("llama2_mha", 1 << 20);
  ASSERT_TRUE(dense.ok()) << dense.status();
  EXPECT_EQ((*dense)->capacity().expert_cache_slots, 0);
}

}  // namespace
}  // namespace loom
