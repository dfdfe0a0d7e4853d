// KV transfers through LocalExecutor (engine/api/step.h KvImport, KvExport, imported tails) on a
// golden checkpoint (qwen3_qknorm: 2 layers, 2 KV heads, head_dim 32): a sequence exported from
// one executor and imported into another at other block ids resumes there exactly (tokens and
// logits) for every KV format, after a prefill in one step or in chunks, ending mid-block or on a
// block edge, greedy or seeded; the layout string names the format; transfers run in their
// documented order and alone; a failed step fills no export; every malformed transfer is
// refused, named, and changes nothing.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/local_executor.h"
#include "gtest/gtest.h"
#include "tests/engine/kv_test_model.h"

namespace loom {
namespace {

using testing::Blocks;
using testing::Config;
using testing::kBlockSize;
using testing::kModelDir;
using testing::kVocab;
using testing::MakeExecutor;
using testing::Prompt;

std::vector<BlockId> Prefix(const std::vector<BlockId>& blocks, int32_t count) {
  return std::vector<BlockId>(blocks.begin(), blocks.begin() + count);
}

NewSequencePlan NewSeq(uint64_t id, std::vector<TokenId> tokens, std::vector<BlockId> blocks,
                       int32_t scheduled = -1) {
  NewSequencePlan plan;
  plan.seq_id = SequenceId(id);
  plan.num_prompt_tokens = static_cast<int32_t>(tokens.size());
  plan.num_scheduled_tokens = scheduled < 0 ? static_cast<int32_t>(tokens.size()) : scheduled;
  plan.token_ids = std::move(tokens);
  plan.block_table = std::move(blocks);
  plan.sampling.temperature = 0.0f;
  return plan;
}

// A plan that starts `sequences` and does nothing else.
StepPlan Admit(std::vector<NewSequencePlan> sequences) {
  StepPlan plan;
  plan.new_sequences = std::move(sequences);
  return plan;
}

StepPlan Decode(uint64_t id) {
  StepPlan plan;
  plan.continuing.push_back({SequenceId(id), {}, 1});
  return plan;
}

StepResult MustExecute(LocalExecutor& executor, const StepPlan& plan) {
  absl::StatusOr<StepResult> result = executor.Execute(plan);
  EXPECT_TRUE(result.ok()) << result.status();
  return result.ok() ? std::move(*result) : StepResult{};
}

using LogitMap = std::map<int32_t, std::vector<float>>;  // by position

// Records the logits of sequence 1.
void Observe(LocalExecutor& executor, LogitMap& logits) {
  executor.SetLogitsObserver([&logits](SequenceId id, int32_t position,
                                       std::span<const float> row) {
    if (id == SequenceId(1)) logits[position].assign(row.begin(), row.end());
  });
}

// Exports `blocks` (and the tail of `tail_of`, 0 for none) in a plan of its own.
std::shared_ptr<KvBlob> Export(LocalExecutor& executor, std::vector<BlockId> blocks,
                               uint64_t tail_of = 0) {
  auto blob = std::make_shared<KvBlob>();
  StepPlan plan;
  plan.kv_exports.push_back({std::move(blocks), SequenceId(tail_of), blob});
  MustExecute(executor, plan);
  return blob;
}

struct Format {
  std::string name;
  EngineConfig config;
};

std::vector<Format> EveryFormat() {
  return {
      {"bf16", Config(DType::kBF16)},
      {"f32", Config(DType::kF32)},
      {"fp8-e4m3", Config(DType::kF8E4M3)},
      {"int8", Config(DType::kKvInt8)},
      {"int4 K per channel", Config(DType::kKvInt4)},
      {"int4 K per token", Config(DType::kKvInt4, /*k_per_token=*/true)},
      // tail ring of 2 blocks: the newest full block is read from the tail, older ones packed
      {"int2 residual 16", Config(DType::kKvInt2, false, /*residual=*/16)},
  };
}

struct Scenario {
  int32_t prompt_len;
  int32_t num_decodes;  // before the export; the sequence then holds prompt + decodes computed
  int32_t chunk;        // prefill chunk; 0: the whole prompt in one step
  bool seeded;          // temperature 1 with a seed; greedy otherwise
};

// Runs `scenario` on A, exports the sequence in the plan of A's next decode, imports it into B
// at other block ids (over another sequence's stale K/V and tail), resumes it there, and checks
// that B continues exactly as A does.
void CheckResumeMatches(const Format& format, const Scenario& scenario) {
  const int32_t num_computed = scenario.prompt_len + scenario.num_decodes;
  SCOPED_TRACE(format.name + ": prompt " + std::to_string(scenario.prompt_len) + " + " +
               std::to_string(scenario.num_decodes) + " decodes, chunk " +
               std::to_string(scenario.chunk) + (scenario.seeded ? ", seeded" : ", greedy"));
  auto a = MakeExecutor(format.config);
  auto b = MakeExecutor(format.config);
  ASSERT_TRUE(a != nullptr && b != nullptr);
  ASSERT_EQ(a->capacity().kv_layout, b->capacity().kv_layout);
  LogitMap logits_a, logits_b;
  Observe(*a, logits_a);
  Observe(*b, logits_b);
  const std::vector<BlockId> table_a = Blocks({3, 7, 1, 12, 5, 20});
  const std::vector<BlockId> table_b = Blocks({9, 2, 14, 0, 25, 6});
  constexpr int32_t kMoreDecodes = 6;

  // A: the prompt, in one step or in chunks, then decodes.
  const std::vector<TokenId> prompt = Prompt(scenario.prompt_len);
  NewSequencePlan first = NewSeq(1, prompt, table_a);
  if (scenario.seeded) {
    first.sampling.temperature = 1.0f;
    first.sampling.seed = 1234;
  }
  const SamplingParams sampling = first.sampling;
  std::vector<TokenId> tokens = prompt;
  if (scenario.chunk == 0) {
    tokens.push_back(MustExecute(*a, Admit({first})).outputs.at(0).token_id);
  } else {
    first.num_scheduled_tokens = std::min(scenario.chunk, scenario.prompt_len);
    StepResult result = MustExecute(*a, Admit({first}));
    for (int32_t done = first.num_scheduled_tokens; done < scenario.prompt_len;) {
      const int32_t n = std::min(scenario.chunk, scenario.prompt_len - done);
      StepPlan chunk;
      chunk.continuing.push_back({SequenceId(1), {}, n});
      result = MustExecute(*a, chunk);
      done += n;
    }
    tokens.push_back(result.outputs.at(0).token_id);
  }
  for (int32_t i = 0; i < scenario.num_decodes; ++i) {
    tokens.push_back(MustExecute(*a, Decode(1)).outputs.at(0).token_id);
  }
  ASSERT_EQ(static_cast<int32_t>(tokens.size()), num_computed + 1);

  // A exports every block holding a computed position, and the tail, in the plan of its next
  // decode: the export sees the K/V from before that step's forward pass.
  const int32_t num_exported = (num_computed + kBlockSize - 1) / kBlockSize;
  auto blob = std::make_shared<KvBlob>();
  StepPlan export_plan = Decode(1);
  export_plan.kv_exports.push_back({Prefix(table_a, num_exported), SequenceId(1), blob});
  std::vector<TokenId> want = {MustExecute(*a, export_plan).outputs.at(0).token_id};
  for (int32_t i = 1; i < kMoreDecodes; ++i) {
    want.push_back(MustExecute(*a, Decode(1)).outputs.at(0).token_id);
  }
  EXPECT_EQ(blob->layout, a->capacity().kv_layout);
  EXPECT_EQ(blob->num_blocks, num_exported);
  EXPECT_EQ(static_cast<int64_t>(blob->blocks.size()),
            num_exported * a->capacity().bytes_per_block);
  const bool low_bit = IsLowBitKvDType(format.config.kv_dtype);
  EXPECT_EQ(static_cast<int64_t>(blob->tail.size()),
            low_bit ? a->capacity().tail_bytes / format.config.max_num_seqs : 0);
  EXPECT_EQ(blob->tail_first_block, 0);

  // B: another sequence leaves its K/V in the destination blocks and its tail in slot 0, which
  // the resumed sequence is then given; it is released by the importing plan.
  MustExecute(*b, Admit({NewSeq(5, Prompt(70, 300), table_b)}));
  StepPlan import_plan;
  import_plan.finished = {SequenceId(5)};
  import_plan.kv_imports.push_back({Prefix(table_b, num_exported), blob});
  EXPECT_TRUE(MustExecute(*b, import_plan).outputs.empty());

  NewSequencePlan resumed = NewSeq(1, tokens, table_b, 1);
  resumed.num_prompt_tokens = scenario.prompt_len;
  resumed.num_computed_tokens = num_computed;
  resumed.sampling = sampling;
  resumed.imported_tail = blob;
  std::vector<TokenId> got = {MustExecute(*b, Admit({resumed})).outputs.at(0).token_id};
  for (int32_t i = 1; i < kMoreDecodes; ++i) {
    got.push_back(MustExecute(*b, Decode(1)).outputs.at(0).token_id);
  }
  EXPECT_EQ(got, want);
  for (int32_t p = num_computed; p < num_computed + kMoreDecodes; ++p) {
    ASSERT_TRUE(logits_a.contains(p) && logits_b.contains(p)) << p;
    EXPECT_EQ(logits_a[p], logits_b[p]) << "position " << p;
  }
}

TEST(KvTransferTest, AnImportedSequenceContinuesExactlyAsOnItsSource) {
  const Scenario scenarios[] = {
      {60, 9, 0, false},   // 69 computed: ends mid-block
      {60, 9, 13, true},   // the same, prefilled in chunks, sampled
      {57, 7, 0, true},    // 64 computed: ends on a block edge
      {57, 7, 13, false},  // the same, prefilled in chunks, greedy
  };
  for (const Format& format : EveryFormat()) {
    for (const Scenario& scenario : scenarios) CheckResumeMatches(format, scenario);
  }
}

TEST(KvTransferTest, ResumingWithoutTheTailLosesTheWindow) {
  // The tail carries what packed blocks cannot: int2 with a 48-token window attends its whole
  // context in bf16. Resumed on a block edge with the imported blocks only (allowed: the
  // newest full blocks are then read packed, like a prefix hit), the next logits change; with
  // the tail they do not. This is what the imported tail is for.
  const EngineConfig config = Config(DType::kKvInt2, false, 48);
  std::vector<float> want, with_tail, without_tail;
  std::vector<TokenId> tokens = Prompt(48);
  {
    auto a = MakeExecutor(config);
    LogitMap logits;
    Observe(*a, logits);
    const StepResult first = MustExecute(*a, Admit({NewSeq(1, tokens, Blocks({0, 1, 2, 3}))}));
    tokens.push_back(first.outputs.at(0).token_id);
    auto blob = std::make_shared<KvBlob>();
    StepPlan export_plan = Decode(1);
    export_plan.kv_exports.push_back({Blocks({0, 1, 2}), SequenceId(1), blob});
    MustExecute(*a, export_plan);
    want = logits[48];
    for (const bool tail : {true, false}) {
      auto b = MakeExecutor(config);
      LogitMap got;
      Observe(*b, got);
      StepPlan import_plan;
      import_plan.kv_imports.push_back({Blocks({4, 5, 6}), blob});
      MustExecute(*b, import_plan);
      NewSequencePlan resumed = NewSeq(1, tokens, Blocks({4, 5, 6, 7}), 1);
      resumed.num_prompt_tokens = 48;
      resumed.num_computed_tokens = 48;
      if (tail) resumed.imported_tail = blob;
      MustExecute(*b, Admit({resumed}));
      (tail ? with_tail : without_tail) = got[48];
    }
  }
  EXPECT_EQ(with_tail, want);
  ASSERT_EQ(without_tail.size(), want.size());
  EXPECT_NE(without_tail, want);
}

TEST(KvTransferTest, TheLayoutNamesEverythingBothEndsMustShare) {
  struct Case {
    EngineConfig config;
    std::string layout;
  };
  EngineConfig big_blocks = Config(DType::kBF16);
  big_blocks.block_size = 32;
  const Case cases[] = {
      {Config(DType::kBF16), "bf16/bs16/L2/kvh2/d32"},
      {big_blocks, "bf16/bs32/L2/kvh2/d32"},
      {Config(DType::kF8E4M3), "fp8-e4m3/bs16/L2/kvh2/d32"},
      {Config(DType::kKvInt4), "int4/bs16/L2/kvh2/d32/k:channel/tail:1/hadamard/codes:lanes"},
      {Config(DType::kKvInt4, true, 0, false),
       "int4/bs16/L2/kvh2/d32/k:token/tail:1/plain/codes:lanes"},
      {Config(DType::kKvInt2, false, 17),
       "int2/bs16/L2/kvh2/d32/k:channel/tail:3/hadamard/codes:lanes"},
  };
  for (const Case& c : cases) {
    auto executor = MakeExecutor(c.config);
    ASSERT_NE(executor, nullptr);
    EXPECT_EQ(executor->capacity().kv_layout, c.layout);
  }
  // The size of the pool and the number of tail slots are each engine's own.
  EngineConfig other = Config(DType::kKvInt4);
  other.num_kv_blocks = 20;
  other.max_num_seqs = 3;
  auto executor = MakeExecutor(other);
  ASSERT_NE(executor, nullptr);
  EXPECT_EQ(executor->capacity().kv_layout,
            "int4/bs16/L2/kvh2/d32/k:channel/tail:1/hadamard/codes:lanes");
}

TEST(KvTransferTest, ATransfersOnlyPlanRunsCopiesThenImportsThenExports) {
  for (DType dtype : {DType::kBF16, DType::kKvInt4}) {
    SCOPED_TRACE(DTypeName(dtype));
    auto executor = MakeExecutor(Config(dtype));
    ASSERT_NE(executor, nullptr);
    MustExecute(*executor, Admit({NewSeq(1, Prompt(40), Blocks({0, 1, 2}))}));
    const std::shared_ptr<KvBlob> original = Export(*executor, Blocks({0, 1}));
    ASSERT_EQ(original->num_blocks, 2);
    // Different data to import: block 1's bytes, then block 0's.
    auto swapped = std::make_shared<KvBlob>(*original);
    const size_t half = swapped->blocks.size() / 2;
    std::rotate(swapped->blocks.begin(), swapped->blocks.begin() + half, swapped->blocks.end());

    auto copied = std::make_shared<KvBlob>();
    auto imported = std::make_shared<KvBlob>();
    StepPlan plan;
    plan.step_id = 77;
    plan.block_copies = {{BlockId(0), BlockId(5)}};
    plan.kv_imports.push_back({Blocks({6, 7}), swapped});
    plan.kv_exports.push_back({Blocks({5}), SequenceId(0), copied});
    plan.kv_exports.push_back({Blocks({7, 6}), SequenceId(0), imported});
    const StepResult result = MustExecute(*executor, plan);
    EXPECT_EQ(result.step_id, 77u);
    EXPECT_TRUE(result.outputs.empty());
    EXPECT_EQ(result.num_tokens_computed, 0);
    EXPECT_EQ(executor->num_sequences(), 1u);
    // The export saw the copy and the import of the same plan.
    EXPECT_EQ(copied->blocks,
              std::vector<uint8_t>(original->blocks.begin(), original->blocks.begin() + half));
    EXPECT_EQ(imported->blocks, original->blocks);  // blocks 7, 6 = original blocks 0, 1
    EXPECT_TRUE(copied->tail.empty());
    // The sequence is untouched and continues.
    MustExecute(*executor, Decode(1));
  }
}

TEST(KvTransferTest, AFailedStepFillsNoExportAndMayBeSentAgain) {
  auto executor = MakeExecutor(Config(DType::kKvInt8));
  ASSERT_NE(executor, nullptr);
  MustExecute(*executor, Admit({NewSeq(1, Prompt(20), Blocks({0, 1}))}));
  auto blob = std::make_shared<KvBlob>();
  StepPlan plan = Decode(1);
  plan.step_id = 9;
  plan.kv_exports.push_back({Blocks({0, 1}), SequenceId(1), blob});
  executor->SetFaultInjectorForTesting([](uint64_t step_id) {
    return step_id == 9 ? absl::InternalError("injected") : absl::OkStatus();
  });
  EXPECT_EQ(executor->Execute(plan).status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(blob->layout.empty() && blob->blocks.empty() && blob->tail.empty());
  executor->SetFaultInjectorForTesting(nullptr);
  MustExecute(*executor, plan);
  EXPECT_EQ(blob->layout, executor->capacity().kv_layout);
  EXPECT_EQ(blob->num_blocks, 2);
  EXPECT_EQ(static_cast<int64_t>(blob->blocks.size()), 2 * executor->capacity().bytes_per_block);
  EXPECT_FALSE(blob->tail.empty());
}

// The refusals: each plan is refused with InvalidArgument naming the problem, and leaves the
// engine as it was: its sequences, the bytes of every block the plan names, its export blobs.
class KvTransferRefusalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    executor_ = MakeExecutor(Config(DType::kKvInt4));
    ASSERT_NE(executor_, nullptr);
    // Sequence 1 holds blocks 0-2 (40 tokens); its blocks 0-1 exported as a valid blob.
    MustExecute(*executor_,
                Admit({NewSeq(1, Prompt(40), Blocks({0, 1, 2, 3}))}));
    blob_ = Export(*executor_, Blocks({0, 1}), 1);
    ASSERT_EQ(blob_->num_blocks, 2);
    ASSERT_FALSE(blob_->tail.empty());
    before_ = Export(*executor_, Blocks({0, 1, 2, 3, 8, 9, 10}))->blocks;
  }

  void ExpectRefused(const StepPlan& plan, const std::string& message) {
    const size_t num_sequences = executor_->num_sequences();
    absl::StatusOr<StepResult> refused = executor_->Execute(plan);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
    EXPECT_NE(refused.status().message().find(message), std::string::npos) << refused.status();
    EXPECT_EQ(executor_->num_sequences(), num_sequences);
    EXPECT_EQ(Export(*executor_, Blocks({0, 1, 2, 3, 8, 9, 10}))->blocks, before_)
        << "a refused plan wrote KV data";
    for (const KvExport& e : plan.kv_exports) {
      if (e.out != nullptr) {
        EXPECT_TRUE(e.out->layout.empty() && e.out->blocks.empty()) << "a refused plan exported";
      }
    }
  }

  std::unique_ptr<LocalExecutor> executor_;
  std::shared_ptr<KvBlob> blob_;
  std::vector<uint8_t> before_;
};

TEST_F(KvTransferRefusalTest, AnotherLayout) {
  auto int8 = MakeExecutor(Config(DType::kKvInt8));
  ASSERT_NE(int8, nullptr);
  MustExecute(*int8, Admit({NewSeq(1, Prompt(20), Blocks({0, 1}))}));
  StepPlan plan;
  plan.kv_imports.push_back({Blocks({8}), Export(*int8, Blocks({0}))});
  ExpectRefused(plan, "has KV layout \"int8/bs16");
  // The same bytes under a mislabelled layout are refused too.
  auto relabelled = std::make_shared<KvBlob>(*blob_);
  relabelled->layout = "int4/bs16/L2/kvh2/d32/k:channel/tail:1/plain/codes:lanes";
  plan.kv_imports = {{Blocks({8, 9}), relabelled}};
  ExpectRefused(plan,
                "this engine's is \"int4/bs16/L2/kvh2/d32/k:channel/tail:1/hadamard/codes:lanes\"");
  // So are codes in another backend's order (a CUDA instance's rows).
  relabelled->layout = "int4/bs16/L2/kvh2/d32/k:channel/tail:1/hadamard/codes:rows";
  ExpectRefused(plan, "has KV layout \"int4/bs16/L2/kvh2/d32/k:channel/tail:1/hadamard/codes:rows");
}

TEST_F(KvTransferRefusalTest, WrongBlockCountOrBytes) {
  StepPlan plan;
  plan.kv_imports.push_back({Blocks({8, 9, 10}), blob_});
  ExpectRefused(plan, "carries 2 blocks for 3 block ids");
  auto short_blob = std::make_shared<KvBlob>(*blob_);
  short_blob->blocks.pop_back();
  plan.kv_imports = {{Blocks({8, 9}), short_blob}};
  ExpectRefused(plan, "bytes, not the");
  plan.kv_imports = {{Blocks({8, 99}), blob_}};
  ExpectRefused(plan, "names block 99 outside [0, 32)");
  plan.kv_imports = {{Blocks({8, 9}), nullptr}};
  ExpectRefused(plan, "has no data");
  plan.kv_imports = {{Blocks({8, 9}), blob_}, {Blocks({10, 9}), blob_}};
  ExpectRefused(plan, "block 9 is imported twice");
}

TEST_F(KvTransferRefusalTest, ImportingIntoABlockInUse) {
  StepPlan held;  // block 2 is sequence 1's partial block
  held.kv_imports.push_back({Blocks({8, 2}), blob_});
  ExpectRefused(held, "writes block 2, which a sequence holds");
  StepPlan appended = Decode(1);  // a block the plan appends to a continuing sequence
  appended.continuing[0].new_block_ids = Blocks({9});
  appended.kv_imports.push_back({Blocks({8, 9}), blob_});
  ExpectRefused(appended, "writes block 9, which a sequence holds");
  StepPlan staged;  // a block of a new sequence of the same plan
  staged.new_sequences.push_back(NewSeq(2, Prompt(5), Blocks({10})));
  staged.kv_imports.push_back({Blocks({8, 10}), blob_});
  ExpectRefused(staged, "writes block 10, which a sequence holds");
  StepPlan copied;
  copied.block_copies = {{BlockId(0), BlockId(9)}};
  copied.kv_imports.push_back({Blocks({8, 9}), blob_});
  ExpectRefused(copied, "writes block 9, the destination of a block copy");
  // A sequence the plan finishes gives its blocks back: importing into them is fine.
  StepPlan released;
  released.finished = {SequenceId(1)};
  released.kv_imports.push_back({Blocks({1, 0}), blob_});
  MustExecute(*executor_, released);
}

TEST_F(KvTransferRefusalTest, BadExports) {
  StepPlan plan;
  plan.kv_exports.push_back({Blocks({0}), SequenceId(0), nullptr});
  ExpectRefused(plan, "KV export 0 has no output blob");
  plan.kv_exports = {{Blocks({0, 32}), SequenceId(0), std::make_shared<KvBlob>()}};
  ExpectRefused(plan, "names block 32 outside [0, 32)");
  plan.kv_exports = {{Blocks({0}), SequenceId(42), std::make_shared<KvBlob>()}};
  ExpectRefused(plan, "the tail of sequence 42, which the engine does not hold");
  StepPlan finishing;  // a sequence the plan releases has no tail left to export
  finishing.finished = {SequenceId(1)};
  finishing.kv_exports = {{Blocks({0}), SequenceId(1), std::make_shared<KvBlob>()}};
  ExpectRefused(finishing, "the tail of sequence 1, which the engine does not hold");
  auto shared = std::make_shared<KvBlob>();
  plan.kv_exports = {{Blocks({0}), SequenceId(0), shared}, {Blocks({1}), SequenceId(0), shared}};
  ExpectRefused(plan, "shares its output blob");
}

TEST_F(KvTransferRefusalTest, MissingOrBadImportedTail) {
  std::vector<TokenId> tokens = Prompt(41);
  NewSequencePlan resumed = NewSeq(2, tokens, Blocks({8, 9, 10}), 1);
  resumed.num_prompt_tokens = 40;
  resumed.num_computed_tokens = 40;  // inside block 10: the low-bit format needs its tail
  StepPlan plan = Admit({resumed});
  ExpectRefused(plan, "inside a block, with no tail to copy it from");
  auto wrong_size = std::make_shared<KvBlob>(*blob_);
  wrong_size->tail.resize(wrong_size->tail.size() / 2);
  plan.new_sequences[0].imported_tail = wrong_size;
  ExpectRefused(plan, "imported tail of " + std::to_string(wrong_size->tail.size()) + " bytes");
  auto relabelled = std::make_shared<KvBlob>(*blob_);
  relabelled->layout = "bf16/bs16/L2/kvh2/d32";
  plan.new_sequences[0].imported_tail = relabelled;
  ExpectRefused(plan, "imported tail of KV layout \"bf16/bs16/L2/kvh2/d32\"");
  auto late_first_block = std::make_shared<KvBlob>(*blob_);
  late_first_block->tail_first_block = 3;
  plan.new_sequences[0].imported_tail = late_first_block;
  ExpectRefused(plan, "first block 3 is not in [0, 2]");
  NewSequencePlan from_scratch = NewSeq(3, Prompt(5), Blocks({8}));
  from_scratch.imported_tail = blob_;
  ExpectRefused(Admit({from_scratch}), "has no computed tokens");
  // With its tail the same sequence is accepted.
  plan.new_sequences[0].imported_tail = blob_;
  MustExecute(*executor_, plan);
  EXPECT_EQ(executor_->num_sequences(), 2u);
}

}  // namespace
}  // namespace loom
