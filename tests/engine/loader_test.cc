// LocalExecutor::Create on broken model folders: a golden checkpoint copied to a temporary folder
// and damaged in one way per test (missing files, bad JSON, unsupported options, wrong or missing
// tensors, truncated or lying safetensors files, a corrupt index), and on bad EngineConfig
// values. Each must give a Status whose message names the file (and the tensor where one is at
// fault), never a crash.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/runtime/local_executor.h"
#include "engine/weights/safetensors.h"
#include "engine/weights/safetensors_writer.h"
#include "gtest/gtest.h"
#include "tests/engine/weights_test_util.h"

namespace loom {
namespace {

namespace fs = std::filesystem;
using testing_util::ReadBytes;
using testing_util::TempFolder;
using testing_util::WriteBytes;

const std::string kGolden = std::string(LOOM_SOURCE_DIR) + "/tests/golden/models/";

std::string Message(const absl::Status& status) { return std::string(status.message()); }

// A copy of golden model `name` in a fresh temporary folder.
class ModelCopy {
 public:
  explicit ModelCopy(const std::string& name = "llama2_mha") {
    for (const auto& entry : fs::directory_iterator(kGolden + name)) {
      const std::string file = entry.path().filename().string();
      if (file.rfind("reference", 0) == 0) continue;  // test data, not the model
      fs::copy_file(entry.path(), folder_.File(file));
    }
  }
  const std::string& dir() const { return folder_.path(); }
  std::string File(std::string_view name) const { return folder_.File(name); }

  nlohmann::json ReadJson(std::string_view name) const {
    return nlohmann::json::parse(ReadBytes(File(name)));
  }
  void WriteJson(std::string_view name, const nlohmann::json& value) const {
    WriteBytes(File(name), value.dump(2));
  }

 private:
  TempFolder folder_;
};

EngineConfig Config(const std::string& dir) {
  EngineConfig config;
  config.model_dir = dir;
  config.num_threads = 1;
  config.num_kv_blocks = 16;
  config.populate_weights = false;
  return config;
}

// Creates an executor for `config`, expecting failure with `code`; returns the message.
std::string ExpectCreateFails(const EngineConfig& config, absl::StatusCode code) {
  absl::StatusOr<std::unique_ptr<LocalExecutor>> executor = LocalExecutor::Create(config);
  EXPECT_FALSE(executor.ok());
  if (executor.ok()) return "";
  EXPECT_EQ(executor.status().code(), code) << executor.status();
  return Message(executor.status());
}

// The tensors of `path`, for rewriting; `keep` must outlive the returned list.
std::vector<TensorToWrite> TensorsOf(const SafetensorsFile& file) {
  std::vector<TensorToWrite> tensors;
  for (const TensorInfo& t : file.tensors()) {
    tensors.push_back({.name = t.name, .dtype = t.dtype, .shape = t.shape, .data = t.data});
  }
  return tensors;
}

TEST(LoaderTest, TheUndamagedCopyLoads) {
  ModelCopy model;
  absl::StatusOr<std::unique_ptr<LocalExecutor>> executor =
      LocalExecutor::Create(Config(model.dir()));
  ASSERT_TRUE(executor.ok()) << executor.status();
  EXPECT_EQ((*executor)->model_info().vocab_size, 512);
  EXPECT_EQ((*executor)->model_info().name, fs::path(model.dir()).filename().string());
  EXPECT_EQ((*executor)->capacity().num_blocks, 16);
}

TEST(LoaderTest, MissingFolder) {
  TempFolder folder;
  const std::string dir = folder.File("no_such_model");
  const std::string message = ExpectCreateFails(Config(dir), absl::StatusCode::kNotFound);
  LOOM_EXPECT_CONTAINS(message, dir);
}

TEST(LoaderTest, MissingConfigJson) {
  ModelCopy model;
  fs::remove(model.File("config.json"));
  const std::string message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kNotFound);
  LOOM_EXPECT_CONTAINS(message, model.File("config.json"));
}

TEST(LoaderTest, ConfigJsonIsAFolder) {
  ModelCopy model;
  fs::remove(model.File("config.json"));
  fs::create_directory(model.File("config.json"));
  const std::string message =
      ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(message, model.File("config.json") + ": not a regular file");
}

TEST(LoaderTest, ConfigJsonIsNotJson) {
  ModelCopy model;
  WriteBytes(model.File("config.json"), "{\"architectures\": [\"LlamaForCausalLM\"],\n oops}");
  const std::string message =
      ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, model.File("config.json") + ": invalid JSON at byte offset 41");
}

TEST(LoaderTest, ConfigJsonIsEmpty) {
  ModelCopy model;
  WriteBytes(model.File("config.json"), "");
  const std::string message =
      ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, model.File("config.json") + ": invalid JSON at byte offset 0");
}

TEST(LoaderTest, UnsupportedArchitecture) {
  ModelCopy model;
  nlohmann::json config = model.ReadJson("config.json");
  config["architectures"] = {"FalconForCausalLM"};
  model.WriteJson("config.json", config);
  const std::string message =
      ExpectCreateFails(Config(model.dir()), absl::StatusCode::kUnimplemented);
  LOOM_EXPECT_CONTAINS(message, "config.json: architecture 'FalconForCausalLM' is not supported");
  LOOM_EXPECT_CONTAINS(message, "LlamaForCausalLM");
}

TEST(LoaderTest, ConfigWithAWrongType) {
  ModelCopy model;
  nlohmann::json config = model.ReadJson("config.json");
  config["vocab_size"] = "512";
  model.WriteJson("config.json", config);
  const std::string message =
      ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(message, "config.json: vocab_size is a string, expected an integer");
}

TEST(LoaderTest, BrokenGenerationConfig) {
  ModelCopy model;
  WriteBytes(model.File("generation_config.json"), "{\"eos_token_id\": [2,");
  std::string message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, model.File("generation_config.json") + ": invalid JSON");
  WriteBytes(model.File("generation_config.json"), "{\"eos_token_id\": \"2\"}");
  message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(message, "generation_config.json: eos_token_id is a string, expected an integer");
  // Without one, the config's eos ids stand.
  fs::remove(model.File("generation_config.json"));
  absl::StatusOr<std::unique_ptr<LocalExecutor>> executor =
      LocalExecutor::Create(Config(model.dir()));
  ASSERT_TRUE(executor.ok()) << executor.status();
  EXPECT_EQ((*executor)->model_info().eos_token_ids, std::vector<TokenId>{TokenId(2)});
}

// The config says one size, the checkpoint has another.
TEST(LoaderTest, ConfigDisagreesWithTheCheckpoint) {
  ModelCopy model;
  nlohmann::json config = model.ReadJson("config.json");
  config["intermediate_size"] = 161;
  model.WriteJson("config.json", config);
  const std::string message =
      ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, model.File("model.safetensors") +
                                    ": tensor 'model.layers.0.mlp.down_proj.weight': expected "
                                    "shape [64, 161], found [64, 160]");
}

TEST(LoaderTest, TensorWithTheWrongShape) {
  ModelCopy model;
  {
    auto original = SafetensorsFile::Open(kGolden + "llama2_mha/model.safetensors");
    ASSERT_TRUE(original.ok()) << original.status();
    std::vector<TensorToWrite> tensors = TensorsOf(**original);
    for (TensorToWrite& t : tensors) {
      if (t.name == "model.layers.1.self_attn.k_proj.weight") t.shape = {32, 128};  // same bytes
    }
    ASSERT_TRUE(WriteSafetensors(model.File("model.safetensors"), tensors).ok());
  }
  const std::string message =
      ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, model.File("model.safetensors") +
                                    ": tensor 'model.layers.1.self_attn.k_proj.weight': expected "
                                    "shape [64, 64], found [32, 128]");
}

TEST(LoaderTest, TensorWithAnIntegerDtype) {
  ModelCopy model;
  {
    auto original = SafetensorsFile::Open(kGolden + "llama2_mha/model.safetensors");
    ASSERT_TRUE(original.ok()) << original.status();
    std::vector<TensorToWrite> tensors = TensorsOf(**original);
    for (TensorToWrite& t : tensors) {
      if (t.name == "model.norm.weight") t.dtype = DType::kI16;  // same size as bf16
    }
    ASSERT_TRUE(WriteSafetensors(model.File("model.safetensors"), tensors).ok());
  }
  const std::string message =
      ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, "tensor 'model.norm.weight': dtype I16, expected F32, F16 or BF16");
}

TEST(LoaderTest, MissingTensor) {
  ModelCopy model;
  {
    auto original = SafetensorsFile::Open(kGolden + "llama2_mha/model.safetensors");
    ASSERT_TRUE(original.ok()) << original.status();
    std::vector<TensorToWrite> tensors;
    for (const TensorToWrite& t : TensorsOf(**original)) {
      if (t.name != "model.layers.1.mlp.up_proj.weight") tensors.push_back(t);
    }
    ASSERT_TRUE(WriteSafetensors(model.File("model.safetensors"), tensors).ok());
  }
  const std::string message =
      ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, model.dir());
  LOOM_EXPECT_CONTAINS(message, "missing tensor 'model.layers.1.mlp.up_proj.weight'");
}

TEST(LoaderTest, NoCheckpointAtAll) {
  ModelCopy model;
  fs::remove(model.File("model.safetensors"));
  const std::string message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kNotFound);
  LOOM_EXPECT_CONTAINS(message, model.dir() + ": no model.safetensors.index.json");
}

TEST(LoaderTest, TruncatedSafetensors) {
  ModelCopy model;
  const std::string path = model.File("model.safetensors");
  const std::string bytes = ReadBytes(path);
  for (const size_t keep : {bytes.size() - 100, size_t{5000}, size_t{20}, size_t{3}}) {
    SCOPED_TRACE(keep);
    WriteBytes(path, bytes.substr(0, keep));
    const std::string message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kDataLoss);
    LOOM_EXPECT_CONTAINS(message, path + ": ");
    LOOM_EXPECT_CONTAINS(message, "truncated");
  }
  // Cut inside the data: the message names the tensor that runs past the end.
  WriteBytes(path, bytes.substr(0, bytes.size() - 100));
  const std::string message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kDataLoss);
  LOOM_EXPECT_CONTAINS(message, ": tensor '");
}

// Rewrites the header of `path` through `edit`, keeping the data section as it is.
void EditHeader(const std::string& path, const std::function<void(nlohmann::json&)>& edit) {
  const std::string bytes = ReadBytes(path);
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(bytes[i]);
  nlohmann::json header = nlohmann::json::parse(bytes.substr(8, length));
  edit(header);
  WriteBytes(path, testing_util::RawSafetensors(header.dump(), bytes.substr(8 + length)));
}

TEST(LoaderTest, HeaderLiesAboutOffsets) {
  ModelCopy model;
  const std::string path = model.File("model.safetensors");
  const std::string original = ReadBytes(path);
  const std::string name = "model.layers.0.self_attn.q_proj.weight";

  // Shifted by two bytes: a hole before it, an overlap after it.
  EditHeader(path, [&](nlohmann::json& h) {
    h[name]["data_offsets"][0] = h[name]["data_offsets"][0].get<int64_t>() + 2;
    h[name]["data_offsets"][1] = h[name]["data_offsets"][1].get<int64_t>() + 2;
  });
  std::string message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, path + ": tensor '" + name + "': data_offsets");
  LOOM_EXPECT_CONTAINS(message, "leave a hole");

  // Two tensors on the same bytes.
  WriteBytes(path, original);
  EditHeader(path, [&](nlohmann::json& h) {
    h[name]["data_offsets"] = h["model.layers.0.self_attn.k_proj.weight"]["data_offsets"];
  });
  message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, path + ": tensor '");
  LOOM_EXPECT_CONTAINS(message, "overlap tensor '");

  // Past the end of the file.
  WriteBytes(path, original);
  EditHeader(path, [&](nlohmann::json& h) {
    h[name]["data_offsets"] = {int64_t{1} << 40, (int64_t{1} << 40) + 8192};
  });
  message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kDataLoss);
  LOOM_EXPECT_CONTAINS(message, path + ": tensor '" + name + "': data_offsets");

  // Offsets that do not match the shape.
  WriteBytes(path, original);
  EditHeader(path, [&](nlohmann::json& h) {
    h[name]["data_offsets"][1] = h[name]["data_offsets"][1].get<int64_t>() - 2;
  });
  message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, path + ": tensor '" + name + "': shape [64, 64] of BF16 needs");

  // Negative, reversed and non-integer offsets.
  for (const nlohmann::json& offsets :
       {nlohmann::json{-2, 8190}, nlohmann::json{8192, 0}, nlohmann::json{0.5, 8192},
        nlohmann::json{0}, nlohmann::json("0,8192")}) {
    WriteBytes(path, original);
    EditHeader(path, [&](nlohmann::json& h) { h[name]["data_offsets"] = offsets; });
    message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
    LOOM_EXPECT_CONTAINS(message, path + ": tensor '" + name + "': ");
  }

  // A header length that points into the data.
  WriteBytes(path, original);
  std::string bytes = original;
  bytes[0] = static_cast<char>(bytes[0] + 16);
  WriteBytes(path, bytes);
  message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, path + ": ");
}

// A hostile header nested a million levels deep: refused by the JSON reader, not a stack
// overflow while formatting the message about the bad shape.
TEST(LoaderTest, DeeplyNestedHeader) {
  ModelCopy model;
  const std::string path = model.File("model.safetensors");
  const int depth = 1'000'000;
  const std::string header = "{\"t\": {\"dtype\": \"F32\", \"shape\": [" + std::string(depth, '[') +
                             std::string(depth, ']') + "], \"data_offsets\": [0, 4]}}";
  WriteBytes(path, testing_util::RawSafetensors(header, std::string(4, '\0')));
  const std::string message =
      ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, path + ": ");
  LOOM_EXPECT_CONTAINS(message, "nested deeper than");
}

TEST(LoaderTest, NotASafetensorsFile) {
  ModelCopy model;
  const std::string path = model.File("model.safetensors");
  WriteBytes(path, std::string(4096, 'x'));
  std::string message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, path + ": header length");
  WriteBytes(path, testing_util::RawSafetensors("[1, 2, 3]", ""));
  message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(message, path + ": header is not a JSON object of tensors");
  WriteBytes(path, testing_util::RawSafetensors("{\"a\": ", "data"));
  message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, path + ": header: invalid JSON at byte offset");
}

// ---------------------------------------------------------------------------------------------
// Sharded checkpoints (mistral_window has three shards and an index).

TEST(LoaderTest, ShardedCopyLoads) {
  ModelCopy model("mistral_window");
  absl::StatusOr<std::unique_ptr<LocalExecutor>> executor =
      LocalExecutor::Create(Config(model.dir()));
  ASSERT_TRUE(executor.ok()) << executor.status();
}

TEST(LoaderTest, CorruptIndex) {
  ModelCopy model("mistral_window");
  const std::string index = model.File("model.safetensors.index.json");
  const std::string original = ReadBytes(index);

  WriteBytes(index, original.substr(0, original.size() / 2));
  std::string message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, index + ": index: invalid JSON at byte offset");

  WriteBytes(index, "{\"metadata\": {}}");
  message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(message, index + ": no \"weight_map\" object");

  nlohmann::json json = nlohmann::json::parse(original);
  json["weight_map"]["model.norm.weight"] = "model-00009-of-00003.safetensors";
  WriteBytes(index, json.dump());
  message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kNotFound);
  LOOM_EXPECT_CONTAINS(message,
                       index + ": shard " + model.File("model-00009-of-00003.safetensors"));
  LOOM_EXPECT_CONTAINS(message, "model.norm.weight");

  json = nlohmann::json::parse(original);
  json["weight_map"]["model.norm.weight"] = "../llama2_mha/model.safetensors";
  WriteBytes(index, json.dump());
  message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, "tensor 'model.norm.weight': shard name");

  json = nlohmann::json::parse(original);
  json["weight_map"]["model.norm.weight"] = 3;
  WriteBytes(index, json.dump());
  message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, index + ": tensor 'model.norm.weight': shard is 3");

  // The index sends a tensor to a shard that does not hold it.
  json = nlohmann::json::parse(original);
  std::string other_shard;
  for (const auto& [name, shard] : json["weight_map"].items()) {
    if (shard != json["weight_map"]["model.norm.weight"]) other_shard = shard;
  }
  json["weight_map"]["model.norm.weight"] = other_shard;
  WriteBytes(index, json.dump());
  message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, "tensor 'model.norm.weight' is mapped to shard");

  // A tensor left out of the index is missing, even though a shard holds it.
  json = nlohmann::json::parse(original);
  json["weight_map"].erase("model.norm.weight");
  WriteBytes(index, json.dump());
  message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, "missing tensor 'model.norm.weight'");
}

TEST(LoaderTest, MissingShard) {
  ModelCopy model("mistral_window");
  fs::remove(model.File("model-00002-of-00003.safetensors"));
  const std::string message = ExpectCreateFails(Config(model.dir()), absl::StatusCode::kNotFound);
  LOOM_EXPECT_CONTAINS(message, model.File("model-00002-of-00003.safetensors"));
  LOOM_EXPECT_CONTAINS(message, "does not exist");
}

// ---------------------------------------------------------------------------------------------
// EngineConfig values.

TEST(LoaderTest, BadEngineConfig) {
  ModelCopy model;
  struct Case {
    const char* name;
    std::function<void(EngineConfig&)> edit;
    absl::StatusCode code;
    const char* message;
  };
  const Case cases[] = {
      {"block_size 0", [](EngineConfig& c) { c.block_size = 0; },
       absl::StatusCode::kInvalidArgument, "block_size must be in [1, 1024], got 0"},
      {"block_size negative", [](EngineConfig& c) { c.block_size = -16; },
       absl::StatusCode::kInvalidArgument, "block_size must be in [1, 1024], got -16"},
      {"block_size huge", [](EngineConfig& c) { c.block_size = 4096; },
       absl::StatusCode::kInvalidArgument, "block_size must be in [1, 1024], got 4096"},
      {"kv dtype", [](EngineConfig& c) { c.kv_dtype = DType::kI8; },
       absl::StatusCode::kInvalidArgument, "kv cache dtype must be auto, f32, bf16, f16, fp8-e4m3, int8, int4 or int2"},
      {"cache too small",
       [](EngineConfig& c) {
         c.num_kv_blocks = 0;
         c.kv_cache_bytes = 100;
       },
       absl::StatusCode::kInvalidArgument, "KV cache of 100 bytes holds no block of"},
      {"cache empty",
       [](EngineConfig& c) {
         c.num_kv_blocks = 0;
         c.kv_cache_bytes = 0;
       },
       absl::StatusCode::kInvalidArgument, "KV cache of 0 bytes holds no block"},
      {"negative threads", [](EngineConfig& c) { c.num_threads = -1; },
       absl::StatusCode::kInvalidArgument, "threads must be >= 0"},
      {"absurd threads", [](EngineConfig& c) { c.num_threads = 1'000'000; },
       absl::StatusCode::kInvalidArgument, "num_threads must be at most"},
      {"negative blocks", [](EngineConfig& c) { c.num_kv_blocks = -5; },
       absl::StatusCode::kInvalidArgument, "KV cache size"},
      {"negative bytes",
       [](EngineConfig& c) {
         c.num_kv_blocks = 0;
         c.kv_cache_bytes = -1;
       },
       absl::StatusCode::kInvalidArgument, "KV cache size"},
      {"negative context", [](EngineConfig& c) { c.max_context_len = -1; },
       absl::StatusCode::kInvalidArgument, "context length"},
      {"zero budget", [](EngineConfig& c) { c.max_num_batched_tokens = 0; },
       absl::StatusCode::kInvalidArgument, "max_num_batched_tokens"},
      {"zero sequences", [](EngineConfig& c) { c.max_num_seqs = 0; },
       absl::StatusCode::kInvalidArgument, "max_num_seqs"},
      {"zero logit rows", [](EngineConfig& c) { c.max_logit_rows = -3; },
       absl::StatusCode::kInvalidArgument, "max_logit_rows"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    EngineConfig config = Config(model.dir());
    k.edit(config);
    LOOM_EXPECT_CONTAINS(ExpectCreateFails(config, k.code), k.message);
  }
}

// kv_cache_bytes and max_num_seqs so large that the block count does not fit an int32: it is
// capped, never wrapped to a negative or small count.
TEST(LoaderTest, HugeCacheBlockCountIsCapped) {
  ModelCopy model;
  EngineConfig config = Config(model.dir());
  config.num_kv_blocks = 0;
  config.kv_cache_bytes = INT64_MAX;
  config.block_size = 1;
  config.max_num_seqs = INT32_MAX;
  absl::StatusOr<std::unique_ptr<LocalExecutor>> executor = LocalExecutor::Create(config);
  RecordProperty("created", executor.ok() ? "yes" : "no");
  if (executor.ok()) {
    EXPECT_EQ((*executor)->capacity().num_blocks, INT32_MAX);
  } else {
    EXPECT_EQ(executor.status().code(), absl::StatusCode::kResourceExhausted) << executor.status();
    LOOM_EXPECT_CONTAINS(Message(executor.status()), "2147483647 blocks");
  }
}

TEST(LoaderTest, ContextLimitedByTheModel) {
  ModelCopy model;
  EngineConfig config = Config(model.dir());
  config.max_context_len = 100000;
  absl::StatusOr<std::unique_ptr<LocalExecutor>> executor = LocalExecutor::Create(config);
  ASSERT_TRUE(executor.ok()) << executor.status();
  EXPECT_EQ((*executor)->model_info().max_context_len, 128);
}

// ---- Mixture-of-experts checkpoints: every expert tensor is validated and named. ----

// Rewrites golden model `name`'s single safetensors file into `model` through `edit`, which
// may change or drop (return false for) each tensor.
void RewriteTensors(const std::string& name, const ModelCopy& model,
                    const std::function<bool(TensorToWrite&)>& edit) {
  auto original = SafetensorsFile::Open(kGolden + name + "/model.safetensors");
  ASSERT_TRUE(original.ok()) << original.status();
  std::vector<TensorToWrite> tensors;
  for (TensorToWrite t : TensorsOf(**original)) {
    if (edit(t)) tensors.push_back(t);
  }
  ASSERT_TRUE(WriteSafetensors(model.File("model.safetensors"), tensors).ok());
}

TEST(LoaderTest, MoeCopiesLoad) {
  for (const char* name : {"mixtral", "qwen2_moe", "qwen3_moe"}) {
    ModelCopy model(name);
    auto executor = LocalExecutor::Create(Config(model.dir()));
    ASSERT_TRUE(executor.ok()) << name << ": " << executor.status();
    EXPECT_GT((*executor)->model_info().num_experts, 0) << name;
  }
}

TEST(LoaderTest, MissingExpertTensor) {
  ModelCopy model("qwen2_moe");
  RewriteTensors("qwen2_moe", model, [](TensorToWrite& t) {
    return t.name != "model.layers.2.mlp.experts.3.up_proj.weight";
  });
  const std::string message =
      ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, model.dir());
  LOOM_EXPECT_CONTAINS(message, "missing tensor 'model.layers.2.mlp.experts.3.up_proj.weight'");
}

TEST(LoaderTest, MissingSharedExpertGate) {
  ModelCopy model("qwen2_moe");
  RewriteTensors("qwen2_moe", model, [](TensorToWrite& t) {
    return t.name != "model.layers.0.mlp.shared_expert_gate.weight";
  });
  const std::string message =
      ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, "missing tensor 'model.layers.0.mlp.shared_expert_gate.weight'");
}

TEST(LoaderTest, MixtralExpertWithTheWrongShapeOrDtype) {
  ModelCopy model("mixtral");
  RewriteTensors("mixtral", model, [](TensorToWrite& t) {
    if (t.name == "model.layers.0.block_sparse_moe.experts.5.w2.weight") t.shape = {96, 64};
    if (t.name == "model.layers.1.block_sparse_moe.experts.7.w1.weight") t.dtype = DType::kI16;
    return true;
  });
  const std::string message =
      ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, model.File("model.safetensors") +
                                    ": tensor 'model.layers.0.block_sparse_moe.experts.5.w2."
                                    "weight': expected shape [64, 96], found [96, 64]");
  LOOM_EXPECT_CONTAINS(message, "tensor 'model.layers.1.block_sparse_moe.experts.7.w1.weight': "
                                "dtype I16");
}

TEST(LoaderTest, FusedExpertsWithTheWrongShape) {
  ModelCopy model("qwen3_moe");
  RewriteTensors("qwen3_moe", model, [](TensorToWrite& t) {
    if (t.name == "model.layers.1.mlp.experts.gate_up_proj") t.shape = {8, 64, 128};
    return true;
  });
  const std::string message =
      ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, "tensor 'model.layers.1.mlp.experts.gate_up_proj': expected "
                                "shape [8, 128, 64], found [8, 64, 128]");
}

// A checkpoint that mixes the layouts (fused in layer 0, per-expert tensors elsewhere) is
// refused, naming the fused tensors the other layers lack.
TEST(LoaderTest, MixedExpertLayouts) {
  ModelCopy model("qwen3_moe");
  RewriteTensors("qwen3_moe", model, [](TensorToWrite& t) {
    return t.name.rfind("model.layers.1.mlp.experts.", 0) != 0;
  });
  const std::string message =
      ExpectCreateFails(Config(model.dir()), absl::StatusCode::kInvalidArgument);
  LOOM_EXPECT_CONTAINS(message, "missing tensor 'model.layers.1.mlp.experts.gate_up_proj'");
  LOOM_EXPECT_CONTAINS(message, "missing tensor 'model.layers.1.mlp.experts.down_proj'");
}

}  // namespace
}  // namespace loom
