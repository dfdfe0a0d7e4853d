// engine/models: each architecture's config.json parsing on hand-written configs (defaults,
// both transformers layouts, eos merging, every refusal with its message), and the RoPE inverse
// frequencies of engine/layers/rope_table.h against the ones transformers computed for the
// golden checkpoints.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/common/file.h"
#include "engine/common/json.h"
#include "engine/common/status.h"
#include "engine/layers/rope_table.h"
#include "engine/models/architecture.h"
#include "engine/models/model_config.h"
#include "engine/weights/gguf.h"
#include "engine/weights/gguf_model.h"
#include "gtest/gtest.h"
#include "tests/engine/weights_test_util.h"

namespace loom {
namespace {

using nlohmann::json;

std::string Message(const absl::Status& status) { return std::string(status.message()); }

// The smallest config each architecture accepts: only the keys without a default.
json Minimal(std::string_view architecture) {
  return json{
      {"architectures", {architecture}}, {"vocab_size", 1000},     {"hidden_size", 256},
      {"intermediate_size", 512},        {"num_hidden_layers", 3}, {"num_attention_heads", 8}};
}

absl::StatusOr<ModelConfig> Parse(const json& config) {
  absl::StatusOr<Json> parsed = Json::Parse(config.dump(), "config.json");
  if (!parsed.ok()) return parsed.status();
  return ParseModelConfig(*parsed);
}

ModelConfig MustParse(const json& config) {
  absl::StatusOr<ModelConfig> model = Parse(config);
  EXPECT_TRUE(model.ok()) << model.status() << "\n" << config.dump(1);
  return model.ok() ? *model : ModelConfig();
}

// Expects `config` refused with `code` and a message starting "config.json: " and containing
// `part`.
void ExpectRefused(const json& config, absl::StatusCode code, std::string_view part) {
  absl::StatusOr<ModelConfig> model = Parse(config);
  ASSERT_FALSE(model.ok()) << config.dump(1);
  EXPECT_EQ(model.status().code(), code) << model.status();
  const std::string message = Message(model.status());
  EXPECT_EQ(message.rfind("config.json: ", 0), 0u) << message;
  LOOM_EXPECT_CONTAINS(message, std::string(part));
}

std::vector<int32_t> Windows(int32_t num_layers, int32_t window) {
  return std::vector<int32_t>(num_layers, window);
}

// ---------------------------------------------------------------------------------------------
// Defaults.

TEST(ModelConfigTest, LlamaDefaults) {
  const ModelConfig m = MustParse(Minimal("LlamaForCausalLM"));
  EXPECT_EQ(m.architecture, "LlamaForCausalLM");
  EXPECT_EQ(m.vocab_size, 1000);
  EXPECT_EQ(m.hidden_size, 256);
  EXPECT_EQ(m.intermediate_size, 512);
  EXPECT_EQ(m.num_layers, 3);
  EXPECT_EQ(m.num_heads, 8);
  EXPECT_EQ(m.num_kv_heads, 8);  // defaults to the query heads
  EXPECT_EQ(m.head_dim, 32);     // hidden_size / num_attention_heads
  EXPECT_EQ(m.max_position_embeddings, 2048);
  EXPECT_FLOAT_EQ(m.rms_norm_eps, 1e-6f);
  EXPECT_EQ(m.rope.theta, 10000.0);
  EXPECT_EQ(m.rope.scaling, RopeConfig::Scaling::kNone);
  EXPECT_FALSE(m.tie_word_embeddings);
  EXPECT_FALSE(m.qkv_bias);
  EXPECT_FALSE(m.o_proj_bias);
  EXPECT_FALSE(m.mlp_bias);
  EXPECT_FALSE(m.qk_norm);
  EXPECT_EQ(m.layer_sliding_window, Windows(3, 0));
  EXPECT_EQ(m.dtype, DType::kBF16);
  EXPECT_EQ(m.bos_token_id, TokenId(-1));
  EXPECT_TRUE(m.eos_token_ids.empty());
  EXPECT_EQ(m.q_dim(), 256);
  EXPECT_EQ(m.kv_dim(), 256);
}

TEST(ModelConfigTest, LlamaAttentionBiasCoversOProjAndMlpBiasIsSeparate) {
  json c = Minimal("LlamaForCausalLM");
  c["attention_bias"] = true;
  ModelConfig m = MustParse(c);
  EXPECT_TRUE(m.qkv_bias);
  EXPECT_TRUE(m.o_proj_bias);
  EXPECT_FALSE(m.mlp_bias);
  c["attention_bias"] = false;
  c["mlp_bias"] = true;
  m = MustParse(c);
  EXPECT_FALSE(m.qkv_bias);
  EXPECT_FALSE(m.o_proj_bias);
  EXPECT_TRUE(m.mlp_bias);
}

TEST(ModelConfigTest, LlamaExplicitValues) {
  json c = Minimal("LlamaForCausalLM");
  c["num_key_value_heads"] = 2;
  c["head_dim"] = 64;  // need not be hidden_size / heads
  c["max_position_embeddings"] = 8192;
  c["rms_norm_eps"] = 1e-5;
  c["tie_word_embeddings"] = true;
  c["torch_dtype"] = "float16";
  c["bos_token_id"] = 1;
  c["eos_token_id"] = 2;
  const ModelConfig m = MustParse(c);
  EXPECT_EQ(m.num_kv_heads, 2);
  EXPECT_EQ(m.head_dim, 64);
  EXPECT_EQ(m.q_dim(), 512);
  EXPECT_EQ(m.kv_dim(), 128);
  EXPECT_EQ(m.max_position_embeddings, 8192);
  EXPECT_FLOAT_EQ(m.rms_norm_eps, 1e-5f);
  EXPECT_TRUE(m.tie_word_embeddings);
  EXPECT_EQ(m.dtype, DType::kF16);
  EXPECT_EQ(m.bos_token_id, TokenId(1));
  EXPECT_EQ(m.eos_token_ids, std::vector<TokenId>{TokenId(2)});
}

TEST(ModelConfigTest, DtypeKeysAndNulls) {
  json c = Minimal("LlamaForCausalLM");
  c["dtype"] = "float32";  // transformers 5 name
  EXPECT_EQ(MustParse(c).dtype, DType::kF32);
  c["torch_dtype"] = nullptr;
  EXPECT_EQ(MustParse(c).dtype, DType::kF32);
  c["torch_dtype"] = "bfloat16";  // transformers 4 name wins when both are present
  EXPECT_EQ(MustParse(c).dtype, DType::kBF16);
  c["torch_dtype"] = "int8";
  ExpectRefused(c, absl::StatusCode::kUnimplemented, "dtype 'int8'");
}

TEST(ModelConfigTest, NullKeysTakeTheirDefaults) {
  json c = Minimal("LlamaForCausalLM");
  c["num_key_value_heads"] = nullptr;
  c["head_dim"] = nullptr;
  c["max_position_embeddings"] = nullptr;
  c["rope_scaling"] = nullptr;
  c["bos_token_id"] = nullptr;
  c["eos_token_id"] = nullptr;
  const ModelConfig m = MustParse(c);
  EXPECT_EQ(m.num_kv_heads, 8);
  EXPECT_EQ(m.head_dim, 32);
  EXPECT_EQ(m.max_position_embeddings, 2048);
  EXPECT_EQ(m.bos_token_id, TokenId(-1));
  EXPECT_TRUE(m.eos_token_ids.empty());
}

TEST(ModelConfigTest, MistralSlidingWindow) {
  json c = Minimal("MistralForCausalLM");
  ModelConfig m = MustParse(c);
  EXPECT_EQ(m.max_position_embeddings, 4096 * 32);
  EXPECT_EQ(m.layer_sliding_window, Windows(3, 4096));  // the class default when absent
  c["sliding_window"] = nullptr;
  EXPECT_EQ(MustParse(c).layer_sliding_window, Windows(3, 0));  // null: full attention
  c["sliding_window"] = 16;
  EXPECT_EQ(MustParse(c).layer_sliding_window, Windows(3, 16));
  c["max_position_embeddings"] = 16;  // a window as long as the context cuts nothing off
  EXPECT_EQ(MustParse(c).layer_sliding_window, Windows(3, 0));
  c["max_position_embeddings"] = 17;
  EXPECT_EQ(MustParse(c).layer_sliding_window, Windows(3, 16));
  c["sliding_window"] = 0;
  ExpectRefused(c, absl::StatusCode::kInvalidArgument, "sliding_window must be positive or null");
  c["sliding_window"] = -5;
  ExpectRefused(c, absl::StatusCode::kInvalidArgument, "got -5");
  c["sliding_window"] = "16";
  ExpectRefused(c, absl::StatusCode::kInvalidArgument, "sliding_window is a string");
}

TEST(ModelConfigTest, Qwen2HasQkvBiasAlwaysAndNoWindowByDefault) {
  json c = Minimal("Qwen2ForCausalLM");
  c["attention_bias"] = false;  // not a Qwen2 key: ignored
  c["sliding_window"] = 8;      // ignored while use_sliding_window is false
  const ModelConfig m = MustParse(c);
  EXPECT_TRUE(m.qkv_bias);
  EXPECT_FALSE(m.o_proj_bias);
  EXPECT_FALSE(m.mlp_bias);
  EXPECT_FALSE(m.qk_norm);
  EXPECT_EQ(m.max_position_embeddings, 32768);
  EXPECT_EQ(m.layer_sliding_window, Windows(3, 0));
}

TEST(ModelConfigTest, Qwen3Defaults) {
  json c = Minimal("Qwen3ForCausalLM");
  ModelConfig m = MustParse(c);
  EXPECT_EQ(m.head_dim, 128);  // not hidden_size / heads (32)
  EXPECT_EQ(m.q_dim(), 8 * 128);
  EXPECT_TRUE(m.qk_norm);
  EXPECT_FALSE(m.qkv_bias);
  EXPECT_FALSE(m.o_proj_bias);
  EXPECT_EQ(m.max_position_embeddings, 32768);
  c["attention_bias"] = true;
  m = MustParse(c);
  EXPECT_TRUE(m.qkv_bias);
  EXPECT_TRUE(m.o_proj_bias);
  EXPECT_FALSE(m.mlp_bias);
  // With the default head_dim, hidden_size need not be a multiple of the heads.
  c["hidden_size"] = 100;
  EXPECT_EQ(MustParse(c).head_dim, 128);
}

TEST(ModelConfigTest, QwenSlidingWindowByMaxWindowLayers) {
  for (const char* arch : {"Qwen2ForCausalLM", "Qwen3ForCausalLM"}) {
    SCOPED_TRACE(arch);
    json c = Minimal(arch);
    c["use_sliding_window"] = true;
    c["sliding_window"] = 64;
    c["max_window_layers"] = 1;
    EXPECT_EQ(MustParse(c).layer_sliding_window, (std::vector<int32_t>{0, 64, 64}));
    c["max_window_layers"] = 0;
    EXPECT_EQ(MustParse(c).layer_sliding_window, Windows(3, 64));
    c.erase("max_window_layers");  // default 28: no sliding layer among 3
    EXPECT_EQ(MustParse(c).layer_sliding_window, Windows(3, 0));
    c["max_window_layers"] = 1;
    c.erase("sliding_window");  // the class default, 4096
    EXPECT_EQ(MustParse(c).layer_sliding_window, (std::vector<int32_t>{0, 4096, 4096}));
    c["sliding_window"] = nullptr;  // transformers: no window on any layer
    EXPECT_EQ(MustParse(c).layer_sliding_window, Windows(3, 0));
    c["sliding_window"] = 40000;  // longer than the context: nothing cut off
    EXPECT_EQ(MustParse(c).layer_sliding_window, Windows(3, 0));
    c["sliding_window"] = 0;
    ExpectRefused(c, absl::StatusCode::kInvalidArgument, "sliding_window must be positive");
    c["sliding_window"] = 64;
    c["use_sliding_window"] = "yes";
    ExpectRefused(c, absl::StatusCode::kInvalidArgument,
                  "use_sliding_window is a string, expected a boolean");
  }
}

TEST(ModelConfigTest, QwenSlidingWindowByLayerTypes) {
  for (const char* arch : {"Qwen2ForCausalLM", "Qwen3ForCausalLM"}) {
    SCOPED_TRACE(arch);
    json c = Minimal(arch);
    c["use_sliding_window"] = true;
    c["sliding_window"] = 32;
    c["max_window_layers"] = 0;  // layer_types takes precedence
    c["layer_types"] = {"sliding_attention", "full_attention", "sliding_attention"};
    EXPECT_EQ(MustParse(c).layer_sliding_window, (std::vector<int32_t>{32, 0, 32}));
    c["use_sliding_window"] = false;  // then the types do not matter
    EXPECT_EQ(MustParse(c).layer_sliding_window, Windows(3, 0));
    c["use_sliding_window"] = true;
    c["layer_types"] = {"sliding_attention", "full_attention"};
    ExpectRefused(c, absl::StatusCode::kInvalidArgument, "layer_types must be a list with one");
    c["layer_types"] = "sliding_attention";
    ExpectRefused(c, absl::StatusCode::kInvalidArgument, "layer_types must be a list");
    c["layer_types"] = {"sliding_attention", "chunked_attention", "full_attention"};
    ExpectRefused(c, absl::StatusCode::kUnimplemented, "layer type 'chunked_attention'");
    c["layer_types"] = {"sliding_attention", 3, "full_attention"};
    ExpectRefused(c, absl::StatusCode::kInvalidArgument, "layer_types[1] is a number");
  }
}

// ---------------------------------------------------------------------------------------------
// RoPE layouts.

TEST(ModelConfigTest, RopeTransformers4Layout) {
  json c = Minimal("LlamaForCausalLM");
  c["rope_theta"] = 500000.0;
  c["rope_scaling"] = {{"type", "linear"}, {"factor", 4.0}};
  ModelConfig m = MustParse(c);
  EXPECT_EQ(m.rope.theta, 500000.0);
  EXPECT_EQ(m.rope.scaling, RopeConfig::Scaling::kLinear);
  EXPECT_EQ(m.rope.factor, 4.0);
  c["rope_scaling"] = {{"rope_type", "llama3"},
                       {"factor", 8.0},
                       {"low_freq_factor", 1.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  m = MustParse(c);
  EXPECT_EQ(m.rope.theta, 500000.0);
  EXPECT_EQ(m.rope.scaling, RopeConfig::Scaling::kLlama3);
  EXPECT_EQ(m.rope.factor, 8.0);
  EXPECT_EQ(m.rope.low_freq_factor, 1.0);
  EXPECT_EQ(m.rope.high_freq_factor, 4.0);
  EXPECT_EQ(m.rope.original_max_position_embeddings, 8192);
  // "rope_type" wins over the older "type".
  c["rope_scaling"] = {{"rope_type", "default"}, {"type", "yarn"}};
  EXPECT_EQ(MustParse(c).rope.scaling, RopeConfig::Scaling::kNone);
}

TEST(ModelConfigTest, RopeTransformers5Layout) {
  json c = Minimal("LlamaForCausalLM");
  c["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  ModelConfig m = MustParse(c);
  EXPECT_EQ(m.rope.theta, 1000000.0);
  EXPECT_EQ(m.rope.scaling, RopeConfig::Scaling::kNone);
  c["rope_parameters"] = {{"rope_type", "linear"}, {"rope_theta", 10000.0}, {"factor", 2.0}};
  m = MustParse(c);
  EXPECT_EQ(m.rope.scaling, RopeConfig::Scaling::kLinear);
  EXPECT_EQ(m.rope.factor, 2.0);
  // rope_parameters is the newer key: it wins over a stale rope_scaling and rope_theta.
  c["rope_theta"] = 5.0;
  c["rope_scaling"] = {{"type", "yarn"}, {"factor", 2.0}};
  m = MustParse(c);
  EXPECT_EQ(m.rope.theta, 10000.0);
  EXPECT_EQ(m.rope.scaling, RopeConfig::Scaling::kLinear);
  // Without rope_theta inside, the top-level (or default) theta stands.
  c = Minimal("MistralForCausalLM");
  c["rope_parameters"] = {{"rope_type", "default"}};
  EXPECT_EQ(MustParse(c).rope.theta, 10000.0);
}

TEST(ModelConfigTest, RopeRefusals) {
  for (const char* type : {"yarn", "dynamic", "longrope", "su", "made_up"}) {
    json c = Minimal("LlamaForCausalLM");
    c["rope_scaling"] = {{"rope_type", type}, {"factor", 2.0}};
    ExpectRefused(c, absl::StatusCode::kUnimplemented,
                  std::string("rope scaling type '") + type + "' is not supported");
    c.erase("rope_scaling");
    c["rope_parameters"] = {{"type", type}, {"factor", 2.0}, {"rope_theta", 10000.0}};
    ExpectRefused(c, absl::StatusCode::kUnimplemented, "(supported: default, linear, llama3)");
  }
  json c = Minimal("LlamaForCausalLM");
  c["rope_parameters"] = {{"rope_type", "default"}, {"partial_rotary_factor", 0.5}};
  ExpectRefused(c, absl::StatusCode::kUnimplemented, "partial_rotary_factor");
  c = Minimal("LlamaForCausalLM");
  c["partial_rotary_factor"] = 0.5;  // transformers 4 puts it at the top level
  ExpectRefused(c, absl::StatusCode::kUnimplemented, "partial_rotary_factor");
  c["partial_rotary_factor"] = 1.0;
  MustParse(c);
  c = Minimal("Qwen3ForCausalLM");
  c["rope_parameters"] = {
      {"full_attention", {{"rope_type", "default"}, {"rope_theta", 1000000.0}}},
      {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  ExpectRefused(c, absl::StatusCode::kUnimplemented, "per-layer-type rope parameters");
  c = Minimal("LlamaForCausalLM");
  c["rope_scaling"] = "linear";
  ExpectRefused(c, absl::StatusCode::kInvalidArgument, "rope_scaling must be an object");
  c["rope_scaling"] = {{"type", "linear"}};
  ExpectRefused(c, absl::StatusCode::kNotFound, "missing key 'rope_scaling.factor'");
  c["rope_scaling"] = {{"type", "linear"}, {"factor", 0.5}};
  ExpectRefused(c, absl::StatusCode::kInvalidArgument, "factor must be >= 1, got 0.5");
  c["rope_scaling"] = {{"type", "linear"}, {"factor", "2"}};
  ExpectRefused(c, absl::StatusCode::kInvalidArgument,
                "rope_scaling.factor is a string, expected a number");
  c["rope_scaling"] = {{"type", "llama3"},
                       {"factor", 8.0},
                       {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 8192}};
  ExpectRefused(c, absl::StatusCode::kNotFound, "rope_scaling.low_freq_factor");
  c["rope_scaling"]["low_freq_factor"] = 4.0;  // not below high_freq_factor
  ExpectRefused(c, absl::StatusCode::kInvalidArgument, "low_freq_factor < high_freq_factor");
  c["rope_scaling"]["low_freq_factor"] = 1.0;
  c["rope_scaling"]["original_max_position_embeddings"] = 0;
  ExpectRefused(c, absl::StatusCode::kInvalidArgument, "original_max_position_embeddings");
  for (const double theta : {0.0, -10000.0}) {
    c = Minimal("LlamaForCausalLM");
    c["rope_theta"] = theta;
    ExpectRefused(c, absl::StatusCode::kInvalidArgument, "rope_theta must be positive");
  }
}

// ---------------------------------------------------------------------------------------------
// Token ids.

TEST(ModelConfigTest, EosAsIntOrListMergedWithGenerationConfig) {
  json c = Minimal("LlamaForCausalLM");
  c["eos_token_id"] = {2, 3, 2};
  c["bos_token_id"] = {5, 6};  // a list: the first one
  ModelConfig m = MustParse(c);
  EXPECT_EQ(m.eos_token_ids, (std::vector<TokenId>{TokenId(2), TokenId(3)}));
  EXPECT_EQ(m.bos_token_id, TokenId(5));

  absl::Status merged = MergeGenerationConfig(*Json::Parse(R"({"eos_token_id": [3, 7, 8]})"), m);
  ASSERT_TRUE(merged.ok()) << merged;
  EXPECT_EQ(m.eos_token_ids,
            (std::vector<TokenId>{TokenId(2), TokenId(3), TokenId(7), TokenId(8)}));
  merged = MergeGenerationConfig(*Json::Parse(R"({"eos_token_id": 9})"), m);
  ASSERT_TRUE(merged.ok()) << merged;
  EXPECT_EQ(m.eos_token_ids.back(), TokenId(9));
  const size_t before = m.eos_token_ids.size();
  ASSERT_TRUE(MergeGenerationConfig(*Json::Parse(R"({"eos_token_id": null})"), m).ok());
  ASSERT_TRUE(MergeGenerationConfig(*Json::Parse(R"({"do_sample": true})"), m).ok());
  EXPECT_EQ(m.eos_token_ids.size(), before);

  for (const char* bad :
       {R"({"eos_token_id": "2"})", R"({"eos_token_id": [2, -1]})", R"({"eos_token_id": [2, 3.5]})",
        "[2]", R"({"eos_token_id": 4294967296})"}) {
    ModelConfig copy = m;
    absl::Status status = MergeGenerationConfig(*Json::Parse(bad), copy);
    ASSERT_FALSE(status.ok()) << bad;
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_EQ(Message(status).rfind("generation_config.json: ", 0), 0u) << Message(status);
  }
}

TEST(ModelConfigTest, BadTokenIdsInConfig) {
  json c = Minimal("LlamaForCausalLM");
  c["eos_token_id"] = -1;
  ExpectRefused(c, absl::StatusCode::kInvalidArgument, "eos_token_id has an invalid token id -1");
  c["eos_token_id"] = {1, "2"};
  ExpectRefused(c, absl::StatusCode::kInvalidArgument, "eos_token_id[1] is a string");
  c["eos_token_id"] = 2;
  c["bos_token_id"] = true;
  ExpectRefused(c, absl::StatusCode::kInvalidArgument, "bos_token_id is a boolean");
}

// ---------------------------------------------------------------------------------------------
// Architectures.

TEST(ModelConfigTest, UnknownArchitectureListsTheSupportedOnes) {
  ExpectRefused(Minimal("GPT2LMHeadModel"), absl::StatusCode::kUnimplemented,
                "architecture 'GPT2LMHeadModel' is not supported (supported: LlamaForCausalLM, "
                "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, MixtralForCausalLM, "
                "Qwen2MoeForCausalLM, Qwen3MoeForCausalLM)");
  EXPECT_EQ(Architectures().size(), 7u);
}

TEST(ModelConfigTest, MissingOrMalformedArchitectures) {
  json c = Minimal("LlamaForCausalLM");
  c.erase("architectures");
  ExpectRefused(c, absl::StatusCode::kInvalidArgument, "'architectures' must be a non-empty list");
  c["architectures"] = json::array();
  ExpectRefused(c, absl::StatusCode::kInvalidArgument, "'architectures' must be a non-empty list");
  c["architectures"] = "LlamaForCausalLM";
  ExpectRefused(c, absl::StatusCode::kInvalidArgument, "'architectures' must be a non-empty list");
  c["architectures"] = {7};
  ExpectRefused(c, absl::StatusCode::kInvalidArgument, "architectures[0] is a number");
  ExpectRefused(json::array(), absl::StatusCode::kInvalidArgument, "'architectures'");
  ExpectRefused(json("text"), absl::StatusCode::kInvalidArgument, "'architectures'");
}

TEST(ModelConfigTest, ArchitectureFunctionRefusesANonObject) {
  absl::StatusOr<ModelConfig> m = ParseLlamaConfig(*Json::Parse("[1, 2]"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(Message(m.status()), "the top level must be an object");
}

// ---------------------------------------------------------------------------------------------
// Refused sizes and options.

TEST(ModelConfigTest, HiddenActMustBeSilu) {
  json c = Minimal("LlamaForCausalLM");
  c["hidden_act"] = "gelu";
  ExpectRefused(c, absl::StatusCode::kUnimplemented, "hidden_act 'gelu' (supported: silu)");
  c["hidden_act"] = 1;
  ExpectRefused(c, absl::StatusCode::kInvalidArgument, "hidden_act is a number");
}

TEST(ModelConfigTest, HeadArithmetic) {
  json c = Minimal("LlamaForCausalLM");
  c["num_key_value_heads"] = 3;
  ExpectRefused(c, absl::StatusCode::kInvalidArgument,
                "num_attention_heads (8) must be a multiple of num_key_value_heads (3)");
  c = Minimal("LlamaForCausalLM");
  c["hidden_size"] = 100;
  ExpectRefused(c, absl::StatusCode::kInvalidArgument,
                "hidden_size (100) is not a multiple of num_attention_heads and head_dim is not "
                "given");
  c["head_dim"] = 16;  // then it is fine
  EXPECT_EQ(MustParse(c).head_dim, 16);
  c["head_dim"] = 15;
  ExpectRefused(c, absl::StatusCode::kUnimplemented, "head_dim 15 (must be even");
  c["head_dim"] = 1024;
  ExpectRefused(c, absl::StatusCode::kUnimplemented, "head_dim 1024");
  c = Minimal("LlamaForCausalLM");
  c["hidden_size"] = 8 * 33;  // derived head_dim 33: odd
  ExpectRefused(c, absl::StatusCode::kUnimplemented, "head_dim 33");
}

TEST(ModelConfigTest, SizesMustBePositiveAndBounded) {
  for (const char* key :
       {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings"}) {
    SCOPED_TRACE(key);
    for (const int64_t value : {int64_t{0}, int64_t{-1}, int64_t{1} << 31, INT64_MAX}) {
      json c = Minimal("LlamaForCausalLM");
      c[key] = value;
      ExpectRefused(c, absl::StatusCode::kInvalidArgument,
                    std::string(key) + " must be a positive integer, got " + std::to_string(value));
    }
    json c = Minimal("LlamaForCausalLM");
    c[key] = 18446744073709551615u;
    ExpectRefused(c, absl::StatusCode::kOutOfRange, std::string(key) + " is too large");
    c[key] = 1e300;
    ExpectRefused(c, absl::StatusCode::kInvalidArgument, std::string(key) + " is a number");
    c[key] = 2.5;
    ExpectRefused(c, absl::StatusCode::kInvalidArgument,
                  std::string(key) + " is a number, expected an integer");
  }
  json c = Minimal("LlamaForCausalLM");
  c["vocab_size"] = 32000.0;  // an integral float is an integer
  EXPECT_EQ(MustParse(c).vocab_size, 32000);
  c.erase("vocab_size");
  ExpectRefused(c, absl::StatusCode::kNotFound, "missing key 'vocab_size'");
}

// The layer count sizes per-layer vectors right away: a huge one is refused, not allocated.
TEST(ModelConfigTest, LayerCountIsBounded) {
  json c = Minimal("LlamaForCausalLM");
  c["num_hidden_layers"] = 1 << 30;
  ExpectRefused(c, absl::StatusCode::kInvalidArgument,
                "num_hidden_layers must be at most 65536, got 1073741824");
  c["num_hidden_layers"] = 65537;
  ExpectRefused(c, absl::StatusCode::kInvalidArgument, "num_hidden_layers must be at most 65536");
  c["num_hidden_layers"] = 65536;
  EXPECT_EQ(MustParse(c).layer_sliding_window.size(), 65536u);
}

// Sizes each within bounds whose products are not: refused before anything computes q_dim.
TEST(ModelConfigTest, HugeProductsAreRefused) {
  json c = Minimal("LlamaForCausalLM");
  c["num_attention_heads"] = 1 << 22;
  c["num_key_value_heads"] = 1;
  c["head_dim"] = 512;
  ExpectRefused(c, absl::StatusCode::kInvalidArgument, "times head_dim (512) is too large");
  c["num_attention_heads"] = 1 << 30;
  c["head_dim"] = 2;
  ExpectRefused(c, absl::StatusCode::kInvalidArgument, "is too large");
  c["num_attention_heads"] = 1 << 21;  // exactly 2^30: still representable
  c["head_dim"] = 512;
  EXPECT_EQ(MustParse(c).q_dim(), 1 << 30);
}

TEST(ModelConfigTest, WrongJsonTypesNameTheKey) {
  struct Case {
    const char* key;
    json value;
    const char* message;
  };
  const Case cases[] = {
      {"vocab_size", "32000", "config.json: vocab_size is a string, expected an integer"},
      {"hidden_size", true, "config.json: hidden_size is a boolean, expected an integer"},
      {"num_hidden_layers", json::array({2}), "config.json: num_hidden_layers is an array"},
      {"rms_norm_eps", "1e-6", "config.json: rms_norm_eps is a string, expected a number"},
      {"rope_theta", json::object(), "config.json: rope_theta is an object, expected a number"},
      {"tie_word_embeddings", 1,
       "config.json: tie_word_embeddings is a number, expected a boolean"},
      {"attention_bias", "false", "config.json: attention_bias is a string, expected a boolean"},
      {"torch_dtype", 16, "config.json: torch_dtype is a number, expected a string"},
  };
  for (const Case& k : cases) {
    json c = Minimal("LlamaForCausalLM");
    c[k.key] = k.value;
    absl::StatusOr<ModelConfig> m = Parse(c);
    ASSERT_FALSE(m.ok()) << k.key;
    EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument) << k.key;
    LOOM_EXPECT_CONTAINS(Message(m.status()), k.message);
  }
}

TEST(ModelConfigTest, RmsNormEpsRange) {
  for (const double eps : {0.0, -1e-6, 1.0, 5.0}) {
    json c = Minimal("LlamaForCausalLM");
    c["rms_norm_eps"] = eps;
    ExpectRefused(c, absl::StatusCode::kInvalidArgument, "rms_norm_eps must be in (0, 1)");
  }
}

// ---------------------------------------------------------------------------------------------
// The golden checkpoints' configs, and RoPE inverse frequencies against transformers.

const std::string kGoldenModels = std::string(LOOM_SOURCE_DIR) + "/tests/golden/models";

std::vector<std::string> GoldenModels() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(kGoldenModels)) {
    if (std::filesystem::exists(entry.path() / "reference.json")) {
      names.push_back(entry.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

Json ReadJson(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFile(path);
  EXPECT_TRUE(text.ok()) << text.status();
  absl::StatusOr<Json> parsed = Json::Parse(text.ok() ? *text : "null", path);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  return parsed.ok() ? *parsed : *Json::Parse("null");
}

// The config of a golden model: its config.json, or for a GGUF variant (reference.json names a
// "model_file") the config.json loom derives from the file's metadata, checked against the same
// transformers reference.
absl::StatusOr<ModelConfig> GoldenModelConfig(const std::string& dir) {
  const Json reference = ReadJson(dir + "/reference.json");
  const absl::StatusOr<std::string> model_file = reference.GetString("model_file", std::string());
  if (!model_file.ok() || model_file->empty()) {
    return ParseModelConfig(ReadJson(dir + "/config.json"));
  }
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(dir + "/" + *model_file));
  LOOM_ASSIGN_OR_RETURN(const std::string text, GgufConfigJson(*file));
  LOOM_ASSIGN_OR_RETURN(const Json json, Json::Parse(text, *model_file));
  LOOM_ASSIGN_OR_RETURN(ModelConfig config, ParseModelConfig(json));
  LOOM_ASSIGN_OR_RETURN(config.rope.freq_factors, GgufRopeFactors(*file, config.head_dim));
  return config;
}

// Distance in units in the last place between two finite floats of the same sign.
int64_t UlpDistance(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::abs(int64_t{ia} - int64_t{ib});
}

class GoldenConfigTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenConfigTest, ConfigMatchesTheReference) {
  const std::string dir = kGoldenModels + "/" + GetParam();
  const Json reference = ReadJson(dir + "/reference.json");
  const Json want = *reference.Get("model");
  absl::StatusOr<ModelConfig> model = GoldenModelConfig(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->architecture, *reference.GetString("architecture"));
  EXPECT_EQ(model->vocab_size, *want.GetInt("vocab_size"));
  EXPECT_EQ(model->hidden_size, *want.GetInt("hidden_size"));
  EXPECT_EQ(model->num_layers, *want.GetInt("num_hidden_layers"));
  EXPECT_EQ(model->num_heads, *want.GetInt("num_attention_heads"));
  EXPECT_EQ(model->num_kv_heads, *want.GetInt("num_key_value_heads"));
  EXPECT_EQ(model->head_dim, *want.GetInt("head_dim"));
  EXPECT_FLOAT_EQ(model->rms_norm_eps, static_cast<float>(*want.GetDouble("rms_norm_eps")));
  EXPECT_EQ(model->tie_word_embeddings, *want.GetBool("tie_word_embeddings"));
  EXPECT_EQ(model->qk_norm, *want.GetBool("qk_norm"));
  const int64_t window = *want.GetInt("sliding_window", 0);
  for (int32_t w : model->layer_sliding_window) EXPECT_EQ(w, window);
  EXPECT_EQ(model->rope.theta, *want.Get("rope")->GetDouble("rope_theta"));
  // Every bias transformers' module has, loom expects (names like "layers.0.self_attn.q_proj").
  const Json biases = *want.Get("biases");
  for (size_t i = 0; i < biases.size(); ++i) {
    const std::string name = *biases[i].AsString();
    if (name.find("q_proj") != std::string::npos || name.find("k_proj") != std::string::npos ||
        name.find("v_proj") != std::string::npos) {
      EXPECT_TRUE(model->qkv_bias) << name;
    } else if (name.find("o_proj") != std::string::npos) {
      EXPECT_TRUE(model->o_proj_bias) << name;
    } else {
      EXPECT_TRUE(model->mlp_bias) << name;
    }
  }
  if (biases.size() == 0) {
    EXPECT_FALSE(model->qkv_bias || model->o_proj_bias || model->mlp_bias);
  }
}

TEST_P(GoldenConfigTest, RopeInvFreqMatchesTransformers) {
  const std::string dir = kGoldenModels + "/" + GetParam();
  const Json want = *ReadJson(dir + "/reference.json").Get("model");
  absl::StatusOr<ModelConfig> model = GoldenModelConfig(dir);
  ASSERT_TRUE(model.ok()) << model.status();
  const RopeTable table(model->rope, model->head_dim);
  if (!want.Get("rope_inv_freq").ok()) {
    // The GGUF variants record no frequencies: their RoPE settings are the safetensors variants'
    // (checked here), and their logits are checked against transformers by the golden test.
    GTEST_SKIP() << GetParam() << ": reference.json records no rope_inv_freq";
  }
  const Json inv_freq = *want.Get("rope_inv_freq");
  ASSERT_EQ(table.inv_freq().size(), inv_freq.size());
  int64_t worst = 0;
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const float reference = static_cast<float>(*inv_freq[i].AsDouble());  // an f32 printed exactly
    const int64_t ulps = UlpDistance(table.inv_freq()[i], reference);
    worst = std::max(worst, ulps);
    EXPECT_LE(ulps, 1) << "inv_freq[" << i << "]: " << table.inv_freq()[i] << " vs " << reference;
  }
  ::testing::Test::RecordProperty("max_inv_freq_ulps", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenConfigTest, ::testing::ValuesIn(GoldenModels()),
                         [](const auto& info) { return info.param; });

// The scaled layouts are among the golden models, so the test above covers them.
TEST(GoldenConfigCoverageTest, LinearAndLlama3ScalingAreCovered) {
  bool linear = false, llama3 = false;
  for (const std::string& name : GoldenModels()) {
    absl::StatusOr<ModelConfig> model = GoldenModelConfig(kGoldenModels + "/" + name);
    ASSERT_TRUE(model.ok()) << model.status();
    linear |= model->rope.scaling == RopeConfig::Scaling::kLinear;
    llama3 |= model->rope.scaling == RopeConfig::Scaling::kLlama3;
  }
  EXPECT_TRUE(linear);
  EXPECT_TRUE(llama3);
}

TEST(RopeTableTest, FillGivesCosSinOfPositionTimesInvFreq) {
  RopeConfig rope;
  rope.theta = 10000.0;
  const RopeTable table(rope, 8);
  ASSERT_EQ(table.rotary_dim(), 8);
  ASSERT_EQ(table.inv_freq().size(), 4u);
  EXPECT_EQ(table.inv_freq()[0], 1.0f);
  const int32_t positions[3] = {0, 1, 1000};
  float cos[12], sin[12];
  table.Fill(positions, 3, cos, sin);
  for (int t = 0; t < 3; ++t) {
    for (int i = 0; i < 4; ++i) {
      const float angle = static_cast<float>(positions[t]) * table.inv_freq()[i];
      EXPECT_FLOAT_EQ(cos[t * 4 + i], std::cos(angle));
      EXPECT_FLOAT_EQ(sin[t * 4 + i], std::sin(angle));
    }
  }
  EXPECT_EQ(cos[0], 1.0f);
  EXPECT_EQ(sin[0], 0.0f);
}

TEST(RopeTableTest, LinearScalingDividesEveryFrequency) {
  RopeConfig plain;
  RopeConfig linear;
  linear.scaling = RopeConfig::Scaling::kLinear;
  linear.factor = 4.0;
  const RopeTable a(plain, 64), b(linear, 64);
  for (size_t i = 0; i < a.inv_freq().size(); ++i) {
    EXPECT_EQ(b.inv_freq()[i], a.inv_freq()[i] / 4.0f);
  }
}

// ---------------------------------------------------------------------------------------------
// Mixture-of-experts architectures.

json Mixtral() {
  json c = Minimal("MixtralForCausalLM");
  c["num_local_experts"] = 8;
  c["num_experts_per_tok"] = 2;
  return c;
}

json QwenMoe(std::string_view architecture) {
  json c = Minimal(architecture);
  c["num_experts"] = 6;
  c["num_experts_per_tok"] = 2;
  c["moe_intermediate_size"] = 64;
  if (architecture == "Qwen2MoeForCausalLM") c["shared_expert_intermediate_size"] = 96;
  return c;
}

TEST(ModelConfigTest, DenseModelsHaveNoExperts) {
  const ModelConfig m = MustParse(Minimal("LlamaForCausalLM"));
  EXPECT_FALSE(m.is_moe());
  EXPECT_TRUE(m.layer_sparse.empty());
  EXPECT_FALSE(m.IsSparseLayer(0));
}

TEST(ModelConfigTest, MixtralEveryLayerSparseAlwaysRenormalized) {
  json c = Mixtral();
  c["router_jitter_noise"] = 0.1;  // training only
  const ModelConfig m = MustParse(c);
  ASSERT_TRUE(m.is_moe());
  EXPECT_EQ(m.moe.num_experts, 8);
  EXPECT_EQ(m.moe.num_experts_per_tok, 2);
  EXPECT_EQ(m.moe.expert_intermediate_size, 512);  // intermediate_size is each expert's
  EXPECT_TRUE(m.moe.norm_topk_prob);
  EXPECT_EQ(m.moe.shared_expert_intermediate_size, 0);
  EXPECT_EQ(m.moe.naming, ExpertNaming::kMixtral);
  EXPECT_EQ(m.layer_sparse, std::vector<bool>(3, true));
  // Mixtral's configuration class has no window by default (Mistral's has 4096).
  EXPECT_EQ(m.layer_sliding_window, Windows(3, 0));
  EXPECT_EQ(m.max_position_embeddings, 4096 * 32);
  c["sliding_window"] = 4096;
  EXPECT_EQ(MustParse(c).layer_sliding_window, Windows(3, 4096));
  // transformers maps num_experts to num_local_experts.
  c.erase("num_local_experts");
  c["num_experts"] = 4;
  EXPECT_EQ(MustParse(c).moe.num_experts, 4);
}

TEST(ModelConfigTest, Qwen2MoeSparseLayersAndSharedExpert) {
  json c = QwenMoe("Qwen2MoeForCausalLM");
  ModelConfig m = MustParse(c);
  EXPECT_TRUE(m.qkv_bias);
  EXPECT_FALSE(m.o_proj_bias);
  EXPECT_EQ(m.moe.num_experts, 6);
  EXPECT_EQ(m.moe.expert_intermediate_size, 64);
  EXPECT_EQ(m.intermediate_size, 512);  // the dense layers'
  EXPECT_FALSE(m.moe.norm_topk_prob);
  EXPECT_EQ(m.moe.shared_expert_intermediate_size, 96);
  EXPECT_EQ(m.moe.naming, ExpertNaming::kQwen);
  EXPECT_EQ(m.layer_sparse, std::vector<bool>(3, true));

  c["num_hidden_layers"] = 6;
  c["decoder_sparse_step"] = 2;  // layers 1, 3, 5
  c["mlp_only_layers"] = {3};
  c["norm_topk_prob"] = true;
  c["qkv_bias"] = false;
  m = MustParse(c);
  EXPECT_EQ(m.layer_sparse, (std::vector<bool>{false, true, false, false, false, true}));
  EXPECT_TRUE(m.moe.norm_topk_prob);
  EXPECT_FALSE(m.qkv_bias);

  // No experts at all: a dense model.
  c["num_experts"] = 0;
  EXPECT_FALSE(MustParse(c).is_moe());
}

TEST(ModelConfigTest, Qwen3MoeHeadDimDefaultsToHiddenOverHeads) {
  json c = QwenMoe("Qwen3MoeForCausalLM");
  ModelConfig m = MustParse(c);
  EXPECT_EQ(m.head_dim, 32);  // 256 / 8, not Qwen3's 128
  EXPECT_TRUE(m.qk_norm);
  EXPECT_FALSE(m.qkv_bias);
  EXPECT_EQ(m.moe.shared_expert_intermediate_size, 0);
  // transformers 5 writes the count as num_local_experts.
  c.erase("num_experts");
  c["num_local_experts"] = 8;
  c["norm_topk_prob"] = true;
  c["attention_bias"] = true;
  m = MustParse(c);
  EXPECT_EQ(m.moe.num_experts, 8);
  EXPECT_TRUE(m.moe.norm_topk_prob);
  EXPECT_TRUE(m.qkv_bias && m.o_proj_bias);
}

TEST(ModelConfigTest, MoeRefusals) {
  json c = Mixtral();
  c.erase("num_experts_per_tok");
  ExpectRefused(c, absl::StatusCode::kNotFound, "num_experts_per_tok");
  c = Mixtral();
  c["num_experts_per_tok"] = 9;
  ExpectRefused(c, absl::StatusCode::kInvalidArgument,
                "num_experts_per_tok (9) must be at most num_local_experts (8)");
  c = Mixtral();
  c["num_local_experts"] = 5000;
  ExpectRefused(c, absl::StatusCode::kUnimplemented, "num_local_experts 5000");
  c = Mixtral();
  c["num_experts"] = 4;
  ExpectRefused(c, absl::StatusCode::kInvalidArgument,
                "num_local_experts (8) and num_experts (4) disagree");

  c = QwenMoe("Qwen2MoeForCausalLM");
  c.erase("shared_expert_intermediate_size");
  ExpectRefused(c, absl::StatusCode::kNotFound, "shared_expert_intermediate_size");
  c = QwenMoe("Qwen2MoeForCausalLM");
  c["decoder_sparse_step"] = 0;
  ExpectRefused(c, absl::StatusCode::kInvalidArgument, "decoder_sparse_step");
  c = QwenMoe("Qwen3MoeForCausalLM");
  c["mlp_only_layers"] = {0, 3};
  ExpectRefused(c, absl::StatusCode::kInvalidArgument, "mlp_only_layers has layer 3");
  c = QwenMoe("Qwen3MoeForCausalLM");
  c["use_sliding_window"] = true;
  ExpectRefused(c, absl::StatusCode::kUnimplemented, "use_sliding_window");
  c = QwenMoe("Qwen3MoeForCausalLM");
  c.erase("moe_intermediate_size");
  ExpectRefused(c, absl::StatusCode::kNotFound, "moe_intermediate_size");
  c = QwenMoe("Qwen2MoeForCausalLM");
  c["num_experts"] = -1;
  ExpectRefused(c, absl::StatusCode::kInvalidArgument, "num_experts must be >= 0");
}

}  // namespace
}  // namespace loom
