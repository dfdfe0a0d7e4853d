// Both ends of a live migration at the scheduler level, over two fake executors whose outputs
// depend on the tokens really stored in the blocks: a request moved mid-decode or mid-prompt
// produces exactly the tokens it would have produced alone, and every abort path leaves one
// owner and no leaked block.
#include <limits>
#include <map>
#include <random>

#include "gtest/gtest.h"
#include "scheduler/scheduler.h"
#include "tests/scheduler/fake_executor.h"

namespace loom {
namespace {

using testing::ExpectedTokens;
using testing::FakeExecutor;

constexpr int32_t kVocab = 50;
constexpr int32_t kBlock = 4;

ModelInfo Model() {
  ModelInfo info;
  info.vocab_size = kVocab;
  info.max_context_len = 512;
  return info;
}

KvCapacity Capacity(int32_t num_blocks, int32_t budget = 64) {
  KvCapacity c;
  c.num_blocks = num_blocks;
  c.block_size = kBlock;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = 16;
  return c;
}

SchedRequest Request(uint64_t id, int32_t prompt_len, int32_t max_new, uint64_t seed = 7) {
  SchedRequest r;
  r.id = RequestId(id);
  std::mt19937 rng(static_cast<uint32_t>(id));
  for (int i = 0; i < prompt_len; ++i) r.prompt.push_back(TokenId(static_cast<int32_t>(rng() % kVocab)));
  r.max_new_tokens = max_new;
  r.sampling.seed = seed;
  return r;
}

// One instance: a scheduler over a fake executor, and what its requests produced.
struct Instance {
  explicit Instance(int32_t num_blocks, SchedulerConfig config = {})
      : executor(Model(), Capacity(num_blocks)), scheduler(config, Model(), executor.capacity()) {}

  void Step() {
    StepPlan plan = scheduler.Schedule(now_ms);
    absl::StatusOr<StepResult> result = executor.Execute(plan);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_TRUE(scheduler.Update(*result).ok());
    const absl::Status s = scheduler.CheckInvariants();
    ASSERT_TRUE(s.ok()) << s;
    for (ChoiceOutput& out : scheduler.TakeOutputs()) {
      auto& t = tokens[out.request_id.value()];
      t.insert(t.end(), out.new_tokens.begin(), out.new_tokens.end());
      if (out.finish != FinishReason::kNone) finish[out.request_id.value()] = out.finish;
    }
    now_ms += 10;
  }
  void RunToEnd() {
    for (int i = 0; i < 10000 && scheduler.HasWork(); ++i) {
      Step();
      if (::testing::Test::HasFatalFailure()) return;
    }
  }

  FakeExecutor executor;
  Scheduler scheduler;
  std::map<uint64_t, std::vector<TokenId>> tokens;
  std::map<uint64_t, FinishReason> finish;
  int64_t now_ms = 0;
};

// Moves request `id` from `src` to `dst` with `precopy` pre-copy stages, as the coordinator
// does: each stage exports at the source's next step, reserves and imports at the
// destination's; the last stage freezes, and the destination resumes under `new_id`. With
// `final_in_resume` the last stage's blocks go to the destination with the resume itself, as
// the migrator sends a small remainder.
void Migrate(Instance& src, Instance& dst, uint64_t id, uint64_t new_id, int precopy,
             int decode_steps_between = 2, bool final_in_resume = false) {
  ASSERT_TRUE(src.scheduler.BeginMigrateOut(RequestId(id)).ok());
  uint64_t reservation = 0;
  int32_t sent = 0;
  for (int stage = 0; stage <= precopy; ++stage) {
    const bool last = stage == precopy;
    absl::StatusOr<MigrationExport> ex =
        src.scheduler.ExportForMigration(RequestId(id), sent, /*freeze=*/last);
    ASSERT_TRUE(ex.ok()) << ex.status();
    src.Step();  // the export runs with this step (the request keeps decoding unless frozen)
    const int32_t want = ex->total_blocks - dst.scheduler.ReservedBlocks(reservation);
    absl::StatusOr<uint64_t> r = dst.scheduler.Reserve(reservation, std::max(0, want), dst.now_ms);
    ASSERT_TRUE(r.ok()) << r.status();
    reservation = *r;
    const int32_t first = sent;
    const bool in_resume = last && final_in_resume;
    if (ex->blob != nullptr && !in_resume) {
      ASSERT_EQ(ex->blob->num_blocks, ex->num_blocks);
      ASSERT_TRUE(
          dst.scheduler.ImportForMigration(reservation, sent, ex->blob, dst.now_ms).ok());
      dst.Step();
    }
    sent = ex->total_blocks;
    if (last) {
      ASSERT_TRUE(dst.scheduler
                      .ResumeMigrated(RequestId(new_id), reservation, ex->state, ex->blob,
                                      in_resume ? ex->blob : nullptr, first)
                      .ok());
      src.scheduler.CommitMigrateOut(RequestId(id));
    } else {
      for (int i = 0; i < decode_steps_between; ++i) src.Step();
    }
  }
}

TEST(SchedulerMigrationTest, DecodePhaseMoveGivesTheSameTokens) {
  for (int precopy : {0, 1, 3}) {
    Instance a(64), b(64);
    SchedRequest r = Request(1, 13, 40);
    const auto expected = ExpectedTokens(r.sampling.seed, r.prompt, 40, {}, kVocab);
    ASSERT_TRUE(a.scheduler.Add(r).ok());
    for (int i = 0; i < 6; ++i) a.Step();  // prompt + 5 tokens
    Migrate(a, b, 1, 101, precopy);
    a.RunToEnd();
    b.RunToEnd();
    std::vector<TokenId> all = a.tokens[1];
    all.insert(all.end(), b.tokens[101].begin(), b.tokens[101].end());
    EXPECT_EQ(all, expected) << "precopy " << precopy;
    EXPECT_FALSE(a.finish.contains(1)) << "the source reports no finish";
    EXPECT_EQ(b.finish[101], FinishReason::kLength);
    EXPECT_EQ(a.scheduler.block_pool().num_free(), 64);
    EXPECT_EQ(b.scheduler.block_pool().num_free(), 64);
    EXPECT_EQ(a.executor.num_sequences(), 0u);
    EXPECT_GT(a.executor.num_exports(), 0);
    EXPECT_GT(b.executor.num_imports(), 0);
  }
}

TEST(SchedulerMigrationTest, LastBlocksInTheResumeAreImportedBeforeTheFirstStep) {
  for (int precopy : {0, 1}) {
    Instance a(64), b(64);
    SchedRequest r = Request(1, 13, 40);
    const auto expected = ExpectedTokens(r.sampling.seed, r.prompt, 40, {}, kVocab);
    ASSERT_TRUE(a.scheduler.Add(r).ok());
    for (int i = 0; i < 6; ++i) a.Step();
    const int64_t imports_before = b.executor.num_imports();
    Migrate(a, b, 1, 101, precopy, 2, /*final_in_resume=*/true);
    a.RunToEnd();
    b.RunToEnd();
    std::vector<TokenId> all = a.tokens[1];
    all.insert(all.end(), b.tokens[101].begin(), b.tokens[101].end());
    // The fake executor's outputs depend on the tokens stored in the blocks: a missing or late
    // import of the last blocks changes them.
    EXPECT_EQ(all, expected) << "precopy " << precopy;
    EXPECT_GT(b.executor.num_imports(), imports_before) << "precopy " << precopy;
    EXPECT_EQ(a.scheduler.block_pool().num_free(), 64);
    EXPECT_EQ(b.scheduler.block_pool().num_free(), 64);
  }
}

TEST(SchedulerMigrationTest, LastBlocksOutsideTheRequestAreRefusedAndNothingIsImported) {
  Instance a(64), b(64);
  SchedRequest r = Request(1, 13, 40);
  ASSERT_TRUE(a.scheduler.Add(r).ok());
  for (int i = 0; i < 6; ++i) a.Step();
  ASSERT_TRUE(a.scheduler.BeginMigrateOut(RequestId(1)).ok());
  absl::StatusOr<MigrationExport> ex = a.scheduler.ExportForMigration(RequestId(1), 0, true);
  ASSERT_TRUE(ex.ok()) << ex.status();
  a.Step();
  ASSERT_NE(ex->blob, nullptr);
  absl::StatusOr<uint64_t> rid = b.scheduler.Reserve(0, ex->total_blocks, 0);
  ASSERT_TRUE(rid.ok()) << rid.status();
  // One block past what the request fills.
  const absl::Status s = b.scheduler.ResumeMigrated(RequestId(101), *rid, ex->state, ex->blob,
                                                    ex->blob, ex->total_blocks - ex->num_blocks + 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_FALSE(b.scheduler.HasWork()) << "no import may be queued for released blocks";
  EXPECT_EQ(b.scheduler.block_pool().num_free(), 64);
  a.scheduler.CancelMigrateOut(RequestId(1));
  a.RunToEnd();
  EXPECT_EQ(a.finish[1], FinishReason::kLength);
}

TEST(SchedulerMigrationTest, PromptPhaseMoveGivesTheSameTokens) {
  SchedulerConfig chunked;
  chunked.max_prefill_chunk = 8;
  Instance a(64, chunked), b(64, chunked);
  SchedRequest r = Request(2, 30, 10);
  const auto expected = ExpectedTokens(r.sampling.seed, r.prompt, 10, {}, kVocab);
  ASSERT_TRUE(a.scheduler.Add(r).ok());
  a.Step();  // 8 of 30 prompt tokens
  Migrate(a, b, 2, 202, /*precopy=*/1, /*decode_steps_between=*/1);
  a.RunToEnd();
  b.RunToEnd();
  EXPECT_TRUE(a.tokens[2].empty());
  EXPECT_EQ(b.tokens[202], expected);
}

TEST(SchedulerMigrationTest, WaitingRequestMovesWithoutKv) {
  SchedulerConfig one;
  one.max_num_seqs = 1;
  Instance a(64, one), b(64);
  SchedRequest first = Request(1, 6, 30), second = Request(2, 9, 12, 99);
  const auto expected = ExpectedTokens(99, second.prompt, 12, {}, kVocab);
  ASSERT_TRUE(a.scheduler.Add(first).ok());
  ASSERT_TRUE(a.scheduler.Add(second).ok());
  a.Step();  // request 2 waits behind the sequence cap
  ASSERT_TRUE(a.scheduler.BeginMigrateOut(RequestId(2)).ok());
  absl::StatusOr<MigrationExport> ex = a.scheduler.ExportForMigration(RequestId(2), 0, true);
  ASSERT_TRUE(ex.ok()) << ex.status();
  EXPECT_EQ(ex->total_blocks, 0);
  EXPECT_EQ(ex->blob, nullptr);
  EXPECT_EQ(ex->state.num_computed, 0);
  ASSERT_TRUE(b.scheduler.ResumeMigrated(RequestId(7), 0, ex->state, nullptr).ok());
  a.scheduler.CommitMigrateOut(RequestId(2));
  a.RunToEnd();
  b.RunToEnd();
  EXPECT_EQ(b.tokens[7], expected);
  EXPECT_FALSE(a.finish.contains(2));
  EXPECT_EQ(a.finish[1], FinishReason::kLength);
}

TEST(SchedulerMigrationTest, CancelPutsTheFrozenRequestBack) {
  Instance a(64);
  SchedRequest r = Request(3, 10, 20);
  const auto expected = ExpectedTokens(r.sampling.seed, r.prompt, 20, {}, kVocab);
  ASSERT_TRUE(a.scheduler.Add(r).ok());
  for (int i = 0; i < 4; ++i) a.Step();
  ASSERT_TRUE(a.scheduler.BeginMigrateOut(RequestId(3)).ok());
  ASSERT_TRUE(a.scheduler.ExportForMigration(RequestId(3), 0, true).ok());
  EXPECT_EQ(a.scheduler.Stats().num_migrating_out, 1);
  const size_t before = a.tokens[3].size();
  a.Step();  // frozen: the export runs, no token
  EXPECT_EQ(a.tokens[3].size(), before);
  a.scheduler.CancelMigrateOut(RequestId(3));
  a.RunToEnd();
  EXPECT_EQ(a.tokens[3], expected);
  // And it can migrate again later.
  EXPECT_EQ(a.scheduler.block_pool().num_free(), 64);
}

TEST(SchedulerMigrationTest, PreemptionDuringPrecopyAbortsTheMigration) {
  SchedulerConfig config;
  Instance a(6, config);  // 6 blocks of 4: room for one of the two
  SchedRequest low = Request(1, 8, 12);
  low.priority = 5;
  SchedRequest high = Request(2, 16, 4);
  ASSERT_TRUE(a.scheduler.Add(low).ok());
  for (int i = 0; i < 3; ++i) a.Step();
  ASSERT_TRUE(a.scheduler.BeginMigrateOut(RequestId(1)).ok());
  ASSERT_TRUE(a.scheduler.ExportForMigration(RequestId(1), 0, false).ok());
  a.Step();
  ASSERT_TRUE(a.scheduler.Add(high).ok());  // more important; preempts request 1
  a.Step();
  absl::StatusOr<MigrationExport> ex = a.scheduler.ExportForMigration(RequestId(1), 2, true);
  EXPECT_EQ(ex.status().code(), absl::StatusCode::kAborted) << ex.status();
  a.scheduler.CancelMigrateOut(RequestId(1));
  a.RunToEnd();
  EXPECT_EQ(a.tokens[1], ExpectedTokens(low.sampling.seed, low.prompt, 12, {}, kVocab));
  EXPECT_EQ(a.finish[2], FinishReason::kLength);
}

TEST(SchedulerMigrationTest, AbortWhileFrozenFinishesAndFreesEverything) {
  Instance a(32);
  ASSERT_TRUE(a.scheduler.Add(Request(4, 10, 20)).ok());
  for (int i = 0; i < 3; ++i) a.Step();
  ASSERT_TRUE(a.scheduler.BeginMigrateOut(RequestId(4)).ok());
  ASSERT_TRUE(a.scheduler.ExportForMigration(RequestId(4), 0, true).ok());
  a.Step();
  a.scheduler.Abort(RequestId(4));
  a.RunToEnd();
  EXPECT_EQ(a.finish[4], FinishReason::kAbort);
  a.scheduler.CommitMigrateOut(RequestId(4));  // too late: nothing to do
  a.scheduler.CancelMigrateOut(RequestId(4));
  EXPECT_EQ(a.scheduler.block_pool().num_free(), 32);
  EXPECT_EQ(a.executor.num_sequences(), 0u);
  EXPECT_TRUE(a.scheduler.CheckInvariants().ok());
}

TEST(SchedulerMigrationTest, RefusalsAndReservationLifetime) {
  Instance a(16), b(16);
  SchedRequest two = Request(5, 6, 5);
  two.n = 2;
  ASSERT_TRUE(a.scheduler.Add(two).ok());
  EXPECT_EQ(a.scheduler.BeginMigrateOut(RequestId(5)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(a.scheduler.BeginMigrateOut(RequestId(99)).code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(a.scheduler.Add(Request(6, 6, 5)).ok());
  ASSERT_TRUE(a.scheduler.BeginMigrateOut(RequestId(6)).ok());
  EXPECT_EQ(a.scheduler.BeginMigrateOut(RequestId(6)).code(),
            absl::StatusCode::kFailedPrecondition);

  // More blocks than are free.
  EXPECT_EQ(b.scheduler.Reserve(0, 17, 0).status().code(), absl::StatusCode::kResourceExhausted);
  absl::StatusOr<uint64_t> r = b.scheduler.Reserve(0, 5, /*now_ms=*/100);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(b.scheduler.block_pool().num_free(), 11);
  EXPECT_TRUE(b.scheduler.CheckInvariants().ok());
  EXPECT_EQ(b.scheduler.Stats().num_reserved_blocks, 5);
  ASSERT_TRUE(b.scheduler.Reserve(*r, 2, /*now_ms=*/200).ok());
  EXPECT_EQ(b.scheduler.ReservedBlocks(*r), 7);
  b.scheduler.ExpireReservations(/*older_than_ms=*/150);  // used at 200: kept
  EXPECT_EQ(b.scheduler.ReservedBlocks(*r), 7);
  b.scheduler.ExpireReservations(/*older_than_ms=*/250);
  EXPECT_EQ(b.scheduler.ReservedBlocks(*r), 0);
  EXPECT_EQ(b.scheduler.block_pool().num_free(), 16);
  EXPECT_EQ(b.scheduler.Reserve(*r, 1, 300).status().code(), absl::StatusCode::kNotFound);
  b.scheduler.ReleaseReservation(*r);  // idempotent

  // A resume whose blocks do not cover its computed tokens is refused and frees them.
  absl::StatusOr<uint64_t> small = b.scheduler.Reserve(0, 1, 0);
  ASSERT_TRUE(small.ok());
  MigrantState state;
  state.params = Request(8, 10, 5);
  state.tokens = state.params.prompt;
  state.num_computed = 9;  // needs 3 blocks
  EXPECT_EQ(b.scheduler.ResumeMigrated(RequestId(8), *small, state, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(b.scheduler.block_pool().num_free(), 16);
  state.num_computed = 10;  // everything computed: nothing left to sample from
  EXPECT_EQ(b.scheduler.ResumeMigrated(RequestId(8), 0, state, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
}

// Dispatch ranks instances by dispatch_freeness. A deep queue must not look less loaded than
// a short one because its deficit is shared by more requests.
TEST(SchedulerMigrationTest, DispatchFreenessDoesNotDiluteADeficit) {
  LoadInputs deep;
  deep.num_blocks = 34;
  deep.num_free_blocks = 2;
  deep.num_running = 16;
  deep.num_waiting = 10;
  deep.waiting_blocks = 42;  // 40 blocks short
  LoadInputs shallow = deep;
  shallow.num_running = 2;
  shallow.num_waiting = 1;
  shallow.waiting_blocks = 7;  // 5 blocks short
  EXPECT_DOUBLE_EQ(ComputeLoad(deep).dispatch_freeness, -40.0);
  EXPECT_DOUBLE_EQ(ComputeLoad(shallow).dispatch_freeness, -5.0);
  EXPECT_GT(ComputeLoad(shallow).dispatch_freeness, ComputeLoad(deep).dispatch_freeness);
  // A surplus is still shared: blocks per request, and continuous through 0.
  shallow.waiting_blocks = 0;
  EXPECT_DOUBLE_EQ(ComputeLoad(shallow).dispatch_freeness, 2.0 / 3);
  shallow.waiting_blocks = 2;
  EXPECT_DOUBLE_EQ(ComputeLoad(shallow).dispatch_freeness, 0.0);
  for (double blocks : {-7.0, -0.5, 0.0, 0.5, 12.0}) {
    EXPECT_DOUBLE_EQ(UnspreadBlocks(SpreadBlocks(blocks, 5), 5), blocks);
  }
}

TEST(SchedulerMigrationTest, FreenessSignConvention) {
  LoadInputs in;
  in.num_blocks = 100;
  in.num_free_blocks = 60;
  in.num_running = 4;
  LoadReport idle = ComputeLoad(in);
  EXPECT_DOUBLE_EQ(idle.freeness, 15.0);  // 60 free blocks over a batch of 4
  in.num_waiting = 1;
  in.head_of_line_blocks = 80;  // the next request cannot start: looks overloaded
  in.waiting_blocks = 80;
  LoadReport blocked = ComputeLoad(in);
  EXPECT_LT(blocked.freeness, 0.0);
  EXPECT_DOUBLE_EQ(blocked.freeness, -5.0);
  EXPECT_DOUBLE_EQ(blocked.dispatch_freeness, -20.0);  // a deficit counts in blocks
  in.num_waiting = 0;
  in.head_of_line_blocks = 0;
  in.waiting_blocks = 0;
  in.has_high_priority = true;
  in.priority_headroom_fraction = 0.5;
  EXPECT_DOUBLE_EQ(ComputeLoad(in).freeness, (60.0 - 50.0) / 4);
  in.draining = true;
  EXPECT_EQ(ComputeLoad(in).freeness, -std::numeric_limits<double>::infinity());
  // Less free memory means lower freeness.
  LoadInputs empty;
  empty.num_blocks = 100;
  empty.num_free_blocks = 100;
  LoadInputs fuller = empty;
  fuller.num_free_blocks = 10;
  fuller.num_running = 1;
  EXPECT_GT(ComputeLoad(empty).freeness, ComputeLoad(fuller).freeness);
}

TEST(SchedulerMigrationTest, LoadReportFromTheScheduler) {
  SchedulerConfig one;
  one.max_num_seqs = 1;
  Instance a(32, one);
  ASSERT_TRUE(a.scheduler.Add(Request(1, 8, 8)).ok());   // 4 blocks in all
  ASSERT_TRUE(a.scheduler.Add(Request(2, 20, 20)).ok());  // 10 blocks: head of line
  a.Step();
  const LoadReport load = a.scheduler.Load(false, 0, 0.5);
  EXPECT_EQ(load.inputs.num_running, 1);
  EXPECT_EQ(load.inputs.num_waiting, 1);
  EXPECT_EQ(load.inputs.head_of_line_blocks, 10);
  EXPECT_EQ(load.inputs.num_free_blocks, 30);  // 8 tokens computed: 2 blocks
  EXPECT_DOUBLE_EQ(load.freeness, 30.0 - 10.0);
  auto shortest = a.scheduler.ShortestMovableRequest();
  ASSERT_TRUE(shortest.has_value());
  EXPECT_EQ(shortest->first, RequestId(1));
  EXPECT_EQ(a.scheduler.MovableRequests().size(), 2u);
}

}  // namespace
}  // namespace loom
