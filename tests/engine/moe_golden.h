// Shared setup of the engine tests that run the mixture-of-experts golden checkpoints
// (tests/golden/models/{mixtral,qwen2_moe,qwen3_moe} and their GGUF relatives gguf_*): where
// they are, their recorded prompts, and a small engine configuration that holds them.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/common/file.h"
#include "engine/common/json.h"
#include "engine/runtime/engine_config.h"

namespace loom::testing {

inline const std::string kGoldenModels = std::string(LOOM_SOURCE_DIR) + "/tests/golden/models/";

// The "prompts" array of a golden model's reference.json (an empty array, with a test failure,
// when it cannot be read).
inline Json GoldenPrompts(const std::string& model) {
  absl::StatusOr<std::string> text = ReadFile(kGoldenModels + model + "/reference.json");
  EXPECT_TRUE(text.ok()) << text.status();
  absl::StatusOr<Json> ref = Json::Parse(text.ok() ? *text : R"({"prompts": []})");
  EXPECT_TRUE(ref.ok()) << ref.status();
  if (!ref.ok()) ref = Json::Parse(R"({"prompts": []})");
  absl::StatusOr<Json> prompts = ref->Get("prompts");
  EXPECT_TRUE(prompts.ok()) << prompts.status();
  return prompts.ok() ? *prompts : *Json::Parse("[]");
}

// A prompt's token ids.
inline std::vector<TokenId> PromptTokens(const Json& prompt) {
  std::vector<TokenId> tokens;
  const Json ids = *prompt.Get("token_ids");
  for (size_t j = 0; j < ids.size(); ++j) tokens.push_back(TokenId(int32_t(*ids[j].AsInt())));
  return tokens;
}

// f32 KV, blocks of 8, room for several short sequences. A GGUF variant (models/gguf_*) loads
// from its model.gguf.
inline EngineConfig GoldenMoeConfig(const std::string& model) {
  EngineConfig config;
  config.model_dir = kGoldenModels + model;
  if (std::filesystem::exists(config.model_dir + "/model.gguf")) config.model_dir += "/model.gguf";
  config.num_threads = 2;
  config.kv_dtype = DType::kF32;
  config.block_size = 8;
  config.num_kv_blocks = 128;
  config.max_num_batched_tokens = 256;
  config.max_num_seqs = 8;
  return config;
}

}  // namespace loom::testing
