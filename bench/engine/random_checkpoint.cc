#include "bench/engine/random_checkpoint.h"

#include <sys/stat.h>

#include <cstdio>
#include <map>
#include <memory>

#include "engine/common/json.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "engine/models/architecture.h"
#include "engine/models/decoder_weights.h"
#include "engine/weights/safetensors_writer.h"

namespace loom::bench {
namespace {

struct Shape {
  int hidden, layers, heads, kv_heads, ffn, vocab, max_pos;
  double rope_theta;
  // Mixture of experts (Mixtral's architecture; ffn is then one expert's): 0 for dense.
  int experts = 0, experts_per_tok = 0;
};

const std::map<std::string, Shape>& Presets() {
  static const std::map<std::string, Shape> presets = {
      {"llama-134m", {768, 12, 12, 12, 2048, 32000, 2048, 10000.0}},
      {"llama-1.1b", {2048, 22, 32, 4, 5632, 32000, 2048, 10000.0}},
      {"llama3-8b", {4096, 32, 32, 8, 14336, 128256, 8192, 500000.0}},
      // Mixtral's layout at a quarter of its width and half its depth: 128 routed experts of
      // 22 MB in bf16 (2.8 GB), 3.0 GB in all.
      {"mixtral-mini", {1024, 16, 16, 4, 3584, 32000, 4096, 1000000.0, 8, 2}},
  };
  return presets;
}

std::string ConfigJson(const Shape& s, DType dtype) {
  const char* torch_dtype = dtype == DType::kBF16 ? "bfloat16" : dtype == DType::kF16 ? "float16" : "float32";
  const std::string head =
      s.experts > 0
          ? StrCat("{\n  \"architectures\": [\"MixtralForCausalLM\"],\n  \"model_type\": "
                   "\"mixtral\",\n  \"num_local_experts\": ",
                   s.experts, ",\n  \"num_experts_per_tok\": ", s.experts_per_tok, ",\n")
          : std::string("{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"model_type\": "
                        "\"llama\",\n");
  return StrCat(head,
                "  \"hidden_size\": ", s.hidden, ",\n  \"intermediate_size\": ", s.ffn,
                ",\n  \"num_hidden_layers\": ", s.layers, ",\n  \"num_attention_heads\": ", s.heads,
                ",\n  \"num_key_value_heads\": ", s.kv_heads, ",\n  \"vocab_size\": ", s.vocab,
                ",\n  \"max_position_embeddings\": ", s.max_pos, ",\n  \"rms_norm_eps\": 1e-05,\n",
                "  \"rope_theta\": ", s.rope_theta, ",\n  \"hidden_act\": \"silu\",\n",
                "  \"tie_word_embeddings\": false,\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n",
                "  \"torch_dtype\": \"", torch_dtype, "\"\n}\n");
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return absl::PermissionDeniedError(StrCat("cannot write ", path));
  const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  return std::fclose(f) == 0 && ok ? absl::OkStatus()
                                   : absl::DataLossError(StrCat("cannot write ", path));
}

// xorshift64* stream; Irwin-Hall sum of 4 uniforms approximates N(0, 1) after scaling.
class Gaussian {
 public:
  explicit Gaussian(uint64_t seed) : state_(seed * 0x9E3779B97F4A7C15ull | 1) {}
  float Next() {
    float sum = 0;
    for (int i = 0; i < 4; ++i) {
      state_ ^= state_ >> 12;
      state_ ^= state_ << 25;
      state_ ^= state_ >> 27;
      sum += static_cast<float>((state_ * 0x2545F4914F6CDD1Dull) >> 40) * (1.0f / 16777216.0f);
    }
    return (sum - 2.0f) * 1.7320508f;  // variance of the sum is 4/12
  }

 private:
  uint64_t state_;
};

// Streams `elements` values of one tensor in chunks: norms are 1, everything else N(0, 0.02).
TensorProducer Producer(int64_t elements, DType dtype, bool is_norm, uint64_t seed) {
  return [=](const ByteSink& sink) -> absl::Status {
    constexpr int64_t kChunk = 1 << 16;
    std::vector<uint8_t> buffer(kChunk * DTypeSize(dtype));
    Gaussian gauss(seed);
    for (int64_t done = 0; done < elements; done += kChunk) {
      const int64_t n = std::min(kChunk, elements - done);
      for (int64_t i = 0; i < n; ++i) {
        StoreFromF32(buffer.data(), dtype, i, is_norm ? 1.0f : 0.02f * gauss.Next());
      }
      LOOM_RETURN_IF_ERROR(sink(buffer.data(), n * DTypeSize(dtype)));
    }
    return absl::OkStatus();
  };
}

}  // namespace

std::vector<std::string> ShapePresets() {
  std::vector<std::string> names;
  for (const auto& [name, shape] : Presets()) names.push_back(name);
  return names;
}

absl::Status WriteRandomCheckpoint(const std::string& preset, DType dtype, uint64_t seed,
                                   const std::string& dir) {
  auto it = Presets().find(preset);
  if (it == Presets().end()) return absl::InvalidArgumentError(StrCat("unknown shape ", preset));
  ::mkdir(dir.c_str(), 0755);
  const std::string config_text = ConfigJson(it->second, dtype);
  LOOM_RETURN_IF_ERROR(WriteText(dir + "/config.json", config_text));
  LOOM_RETURN_IF_ERROR(WriteText(dir + "/generation_config.json",
                                 "{\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2\n}\n"));
  LOOM_ASSIGN_OR_RETURN(const Json json, Json::Parse(config_text));
  LOOM_ASSIGN_OR_RETURN(const ModelConfig config, ParseModelConfig(json));
  std::vector<TensorToWrite> tensors;
  uint64_t index = 0;
  for (const ExpectedTensor& t : ExpectedDecoderTensors(config)) {
    if (!t.required) continue;
    int64_t elements = 1;
    for (int64_t d : t.shape) elements *= d;
    const bool is_norm = t.name.find("norm") != std::string::npos;
    tensors.push_back({t.name, dtype, t.shape, nullptr, Producer(elements, dtype, is_norm, seed + ++index)});
  }
  return WriteSafetensors(dir + "/model.safetensors", tensors,
                          {{"format", "pt"}, {"generator", "loom random checkpoint"}});
}

}  // namespace loom::bench
