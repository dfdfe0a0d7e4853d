// What the KV-cache engine tests share: a LocalExecutor on the qwen3_qknorm golden checkpoint
// (head_dim 32, 4 query heads over 2 KV heads, vocabulary 512) with a small pool in a chosen KV
// format, and helpers for the token and block lists of hand-made plans.
#pragma once

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "engine/runtime/local_executor.h"
#include "gtest/gtest.h"

namespace loom::testing {

inline const std::string kModelDir =
    std::string(LOOM_SOURCE_DIR) + "/tests/golden/models/qwen3_qknorm";
inline constexpr int32_t kVocab = 512;
inline constexpr int32_t kBlockSize = 16;

// 32 blocks of 16 tokens, 4 sequences, 128 tokens a step, 2 threads.
inline EngineConfig Config(DType dtype, bool k_per_token = false, int32_t residual = 0,
                           bool hadamard = true) {
  EngineConfig config;
  config.model_dir = kModelDir;
  config.num_threads = 2;
  config.kv_dtype = dtype;
  config.kv_k_per_token = k_per_token;
  config.kv_residual_tokens = residual;
  config.kv_hadamard = hadamard;
  config.block_size = kBlockSize;
  config.num_kv_blocks = 32;
  config.max_num_batched_tokens = 128;
  config.max_num_seqs = 4;
  config.populate_weights = false;
  return config;
}

inline std::unique_ptr<LocalExecutor> MakeExecutor(const EngineConfig& config) {
  absl::StatusOr<std::unique_ptr<LocalExecutor>> executor = LocalExecutor::Create(config);
  EXPECT_TRUE(executor.ok()) << executor.status();
  return executor.ok() ? std::move(*executor) : nullptr;
}

// `count` token ids spread over the vocabulary, starting at `first`.
inline std::vector<TokenId> Prompt(int32_t count, int32_t first = 3) {
  std::vector<TokenId> out;
  for (int32_t i = 0; i < count; ++i) out.push_back(TokenId((first + 37 * i) % kVocab));
  return out;
}

inline std::vector<BlockId> Blocks(std::initializer_list<int32_t> ids) {
  std::vector<BlockId> out;
  for (int32_t id : ids) out.push_back(BlockId(id));
  return out;
}

}  // namespace loom::testing
