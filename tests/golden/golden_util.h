// Shared by the golden tests (tests/golden, CPU backend) and the GPU model parity test
// (tests/gpu/model_parity_test.cc): the tiny random-weight checkpoints of
// tests/golden/models with transformers' logits and greedy tokens (made by
// tests/golden/make_golden.py), an executor on a chosen backend, a run of every prompt, and the
// comparison with the reference.
#pragma once

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/common/file.h"
#include "engine/common/json.h"
#include "engine/runtime/local_executor.h"
#include "engine/weights/checkpoint.h"
#include "scheduler/offline_batch.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::golden {

inline const std::string kModels = std::string(LOOM_SOURCE_DIR) + "/tests/golden/models";

struct GoldenPrompt {
  std::vector<TokenId> tokens;
  std::vector<TokenId> greedy;
  std::vector<float> margins;            // reference top-1 minus top-2 logit at each greedy step
  const float* logits = nullptr;         // [prompt_len, vocab]
  const float* greedy_logits = nullptr;  // [greedy_steps, vocab]
};

struct Golden {
  std::string dir;
  // What the engine loads: `dir` itself (a Hugging Face folder) or the GGUF file in it that
  // reference.json names as "model_file".
  std::string model_path;
  int32_t vocab = 0;
  float tolerance = 0;
  // A mixture-of-experts model (reference.json has model.moe).
  bool moe = false;
  std::unique_ptr<Checkpoint> tensors;  // reference.safetensors
  std::vector<GoldenPrompt> prompts;
};

inline std::vector<TokenId> Tokens(const Json& list) {
  std::vector<TokenId> out;
  for (size_t i = 0; i < list.size(); ++i) out.push_back(TokenId(static_cast<int32_t>(*list[i].AsInt())));
  return out;
}

inline std::unique_ptr<Golden> LoadGolden(const std::string& name) {
  auto g = std::make_unique<Golden>();
  g->dir = kModels + "/" + name;
  const auto text = ReadFile(g->dir + "/reference.json");
  EXPECT_TRUE(text.ok()) << text.status();
  const auto ref = Json::Parse(*text);
  EXPECT_TRUE(ref.ok()) << ref.status();
  g->model_path = g->dir;
  const auto model_file = ref->GetString("model_file", std::string());
  EXPECT_TRUE(model_file.ok()) << model_file.status();
  if (model_file.ok() && !model_file->empty()) g->model_path = g->dir + "/" + *model_file;
  g->vocab = static_cast<int32_t>(*ref->Get("model")->GetInt("vocab_size"));
  g->tolerance = static_cast<float>(*ref->Get("tolerance")->GetDouble("logits_abs"));
  g->moe = ref->Get("model")->Has("moe");
  auto tensors = Checkpoint::Open(g->dir + "/reference.safetensors");
  EXPECT_TRUE(tensors.ok()) << tensors.status();
  g->tensors = std::make_unique<Checkpoint>(std::move(*tensors));
  const Json prompts = *ref->Get("prompts");
  for (size_t i = 0; i < prompts.size(); ++i) {
    GoldenPrompt p;
    p.tokens = Tokens(*prompts[i].Get("token_ids"));
    p.greedy = Tokens(*prompts[i].Get("greedy"));
    const Json margins = *prompts[i].Get("greedy_margins");
    for (size_t j = 0; j < margins.size(); ++j) p.margins.push_back(float(*margins[j].AsDouble()));
    const TensorInfo* logits = g->tensors->Find(*prompts[i].GetString("logits_tensor"));
    const TensorInfo* greedy = g->tensors->Find(*prompts[i].GetString("greedy_logits_tensor"));
    EXPECT_TRUE(logits != nullptr && greedy != nullptr);
    EXPECT_EQ(logits->dtype, DType::kF32);
    p.logits = static_cast<const float*>(logits->data);
    p.greedy_logits = static_cast<const float*>(greedy->data);
    g->prompts.push_back(std::move(p));
  }
  return g;
}

inline std::vector<std::string> ModelNames() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(kModels)) {
    if (std::filesystem::exists(entry.path() / "reference.json")) {
      names.push_back(entry.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

struct EngineSetup {
  int32_t block_size = 16;
  DType kv_dtype = DType::kF32;
  int num_threads = 2;
  BackendKind backend = BackendKind::kCpu;
  bool cuda_graphs = true;
  bool cpu_pretend_graphs = false;
  bool fast_bf16_matmul = false;
  int64_t expert_cache_bytes = 0;
  ExpertHostCompute expert_host_compute = ExpertHostCompute::kAuto;
  bool moe_grouped_experts = true;
};

inline std::unique_ptr<LocalExecutor> MakeExecutor(const Golden& g, const EngineSetup& setup) {
  EngineConfig config;
  config.model_dir = g.model_path;
  config.block_size = setup.block_size;
  config.kv_dtype = setup.kv_dtype;
  config.num_threads = setup.num_threads;
  config.backend = setup.backend;
  config.cuda_graphs = setup.cuda_graphs;
  config.cpu_pretend_graphs = setup.cpu_pretend_graphs;
  config.fast_bf16_matmul = setup.fast_bf16_matmul;
  config.expert_cache_bytes = setup.expert_cache_bytes;
  config.expert_host_compute = setup.expert_host_compute;
  config.moe_grouped_experts = setup.moe_grouped_experts;
  config.num_kv_blocks = 512;
  config.max_num_batched_tokens = 256;
  config.max_num_seqs = 16;
  auto executor = LocalExecutor::Create(config);
  EXPECT_TRUE(executor.ok()) << executor.status();
  return executor.ok() ? std::move(*executor) : nullptr;
}

// Logits the engine computed, by (sequence, position).
using LogitsLog = std::map<std::pair<uint64_t, int32_t>, std::vector<float>>;

struct EngineRun {
  std::vector<OfflineResult> results;
  LogitsLog logits;
};

// Runs every prompt of `g` for its greedy length. `first_steps` staggers the starts.
inline EngineRun RunPrompts(LocalExecutor& executor, const Golden& g, const OfflineOptions& options,
               const std::vector<int32_t>& first_steps = {}) {
  EngineRun run;
  executor.SetLogitsObserver([&](SequenceId id, int32_t position, std::span<const float> row) {
    run.logits[{id.value(), position}] = std::vector<float>(row.begin(), row.end());
  });
  std::vector<OfflineRequest> requests;
  for (size_t i = 0; i < g.prompts.size(); ++i) {
    OfflineRequest r;
    r.prompt = g.prompts[i].tokens;
    r.sampling.temperature = 0.0f;
    r.sampling.prompt_logprobs = 0;
    r.max_new_tokens = static_cast<int32_t>(g.prompts[i].greedy.size());
    r.first_step = i < first_steps.size() ? first_steps[i] : 0;
    requests.push_back(std::move(r));
  }
  auto results = RunOffline(executor, requests, options);
  EXPECT_TRUE(results.ok()) << results.status();
  if (results.ok()) run.results = std::move(*results);
  executor.SetLogitsObserver(nullptr);
  return run;
}

// NaN-safe: a NaN logit is an infinite difference.
inline float MaxAbsDiff(const std::vector<float>& got, const float* want) {
  return test::MaxAbsDiff(got.data(), want, got.size());
}

// Checks the recorded logit rows and the greedy tokens of `run` against the reference. With
// `allow_near_ties`, a greedy token may differ where the reference's top-2 margin is within
// twice the tolerance (a tie at that precision); the comparison then ends at that step, since
// later reference logits belong to a different continuation.
inline void ExpectMatchesReference(const Golden& g, const EngineRun& run, float tolerance,
                            bool allow_near_ties = false) {
  ASSERT_EQ(run.results.size(), g.prompts.size());
  float worst = 0;
  for (size_t i = 0; i < g.prompts.size(); ++i) {
    const GoldenPrompt& p = g.prompts[i];
    const OfflineResult& r = run.results[i];
    ASSERT_EQ(r.output_tokens.size(), p.greedy.size()) << "prompt " << i;
    size_t steps = p.greedy.size();
    if (allow_near_ties) {
      for (size_t j = 0; j < p.greedy.size(); ++j) {
        if (r.output_tokens[j] == p.greedy[j]) continue;
        EXPECT_LE(p.margins[j], 2 * tolerance) << "prompt " << i << " diverged at step " << j
                                               << " where the reference margin is clear";
        steps = j + 1;
        break;
      }
    } else {
      EXPECT_EQ(r.output_tokens, p.greedy) << "prompt " << i;
    }
    const int32_t len = static_cast<int32_t>(p.tokens.size());
    for (int32_t pos = 0; pos < len + static_cast<int32_t>(steps) - 1; ++pos) {
      auto it = run.logits.find({r.seq_id.value(), pos});
      ASSERT_NE(it, run.logits.end()) << "prompt " << i << " position " << pos;
      const float* want = pos < len ? p.logits + int64_t{pos} * g.vocab
                                    : p.greedy_logits + int64_t{pos - len + 1} * g.vocab;
      const float diff = MaxAbsDiff(it->second, want);
      worst = std::max(worst, diff);
      EXPECT_LE(diff, tolerance) << "prompt " << i << " position " << pos;
    }
  }
  ::testing::Test::RecordProperty("max_abs_logit_diff", std::to_string(worst));
}

}  // namespace loom::golden
