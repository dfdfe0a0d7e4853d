// The GGUF reader (engine/weights/gguf.h) and the Hugging Face view of a GGUF model
// (engine/weights/gguf_model.h): well-formed files parse with every value and tensor where the
// file put it; every malformed or truncated file is refused with the right code and a message
// naming what is wrong; llama q/k rows are put back in Hugging Face order.
#include "engine/weights/gguf.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "engine/common/json.h"
#include "engine/common/status.h"
#include "engine/layers/rope_table.h"
#include "engine/models/architecture.h"
#include "engine/weights/checkpoint.h"
#include "engine/weights/gguf_model.h"
#include "kernels/ref/quant_ref.h"
#include "tests/engine/gguf_builder.h"
#include "tests/engine/weights_test_util.h"

namespace loom {
namespace {

using testing::GgufBuilder;
using testing_util::TempFolder;

absl::StatusOr<std::unique_ptr<GgufFile>> ParseBytes(const std::vector<uint8_t>& bytes) {
  return GgufFile::Parse(std::span<const uint8_t>(bytes.data(), bytes.size()), "t.gguf");
}

std::vector<uint8_t> Q8Row(const std::vector<float>& x) {
  std::vector<uint8_t> row(DTypeRowBytes(DType::kQ8_0, static_cast<int64_t>(x.size())));
  ref::QuantizeRow(DType::kQ8_0, x.data(), static_cast<int64_t>(x.size()), row.data());
  return row;
}

TEST(GgufTest, ParsesMetadataAndTensors) {
  std::vector<float> bias = {1.5f, -2.0f, 3.25f};
  std::vector<float> matrix(64);
  for (int i = 0; i < 64; ++i) matrix[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
  const std::vector<uint8_t> bytes =
      GgufBuilder(3, 64)
          .Str("general.architecture", "llama")
          .U32("llama.block_count", 7)
          .I32("negative", -5)
          .F32("eps", 1e-5f)
          .F64("theta", 500000.0)
          .Bool("flag", true)
          .U64("big", 1ull << 40)
          .U64("too_big", ~0ull)
          .StrArray("tokens", {"a", "", "\xe2\x96\x81hello"})
          .I32Array("types", {1, 3, -1})
          .F32Tensor("b", {3}, bias)
          .Tensor("w", {32, 2}, 8,
                  [&] {
                    std::vector<uint8_t> rows = Q8Row({matrix.begin(), matrix.begin() + 32});
                    std::vector<uint8_t> second = Q8Row({matrix.begin() + 32, matrix.end()});
                    rows.insert(rows.end(), second.begin(), second.end());
                    return rows;
                  }())
          .Build();
  absl::StatusOr<std::unique_ptr<GgufFile>> file = ParseBytes(bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufFile& f = **file;
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64);
  EXPECT_EQ(f.data_offset() % 64, 0);
  EXPECT_EQ(f.GetString("general.architecture"), "llama");
  EXPECT_EQ(f.GetInt("llama.block_count"), 7);
  EXPECT_EQ(f.GetInt("negative"), -5);
  EXPECT_FLOAT_EQ(static_cast<float>(*f.GetFloat("eps")), 1e-5f);
  EXPECT_EQ(f.GetFloat("theta"), 500000.0);
  EXPECT_EQ(f.GetFloat("llama.block_count"), 7.0);  // integers read as numbers too
  EXPECT_EQ(f.GetBool("flag"), true);
  EXPECT_EQ(f.GetInt("big"), int64_t{1} << 40);
  EXPECT_EQ(f.GetInt("too_big"), std::nullopt);  // does not fit an int64
  EXPECT_EQ(f.GetString("llama.block_count"), std::nullopt);
  EXPECT_EQ(f.GetInt("absent"), std::nullopt);
  const GgufValue* tokens = f.Find("tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->type(), GgufType::kArray);
  EXPECT_EQ(tokens->element_type(), GgufType::kString);
  ASSERT_EQ(tokens->size(), 3);
  EXPECT_EQ(tokens->StringAt(0), "a");
  EXPECT_EQ(tokens->StringAt(1), "");
  EXPECT_EQ(tokens->StringAt(2), "\xe2\x96\x81hello");
  EXPECT_EQ(tokens->StringAt(3), std::nullopt);
  EXPECT_EQ(tokens->IntAt(0), std::nullopt);
  const GgufValue* types = f.Find("types");
  ASSERT_NE(types, nullptr);
  EXPECT_EQ(types->IntAt(2), -1);
  EXPECT_EQ(types->IntAt(-1), std::nullopt);

  ASSERT_EQ(f.tensors().size(), 2u);
  const GgufTensor* b = f.FindTensor("b");
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(b->dtype, DType::kF32);
  EXPECT_EQ(b->shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(b->num_bytes, 12);
  EXPECT_EQ(std::memcmp(b->data, bias.data(), 12), 0);
  const GgufTensor* w = f.FindTensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::kQ8_0);
  EXPECT_EQ(w->dims, (std::vector<int64_t>{32, 2}));
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 32}));  // [rows, cols]
  EXPECT_EQ(w->num_bytes, 68);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w->data) % 64,
            reinterpret_cast<uintptr_t>(bytes.data()) % 64);
  std::vector<float> decoded(64);
  ref::DequantizeRow(DType::kQ8_0, w->data, 64, decoded.data());
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(decoded[i], matrix[i], 0.01f) << i;
}

TEST(GgufTest, AcceptsVersion2AndNoTensors) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file = ParseBytes(GgufBuilder(2).U32("k", 1).Build());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ((*file)->version(), 2u);
  EXPECT_TRUE((*file)->tensors().empty());
}

// Every prefix of a valid file is refused cleanly (DataLoss, or InvalidArgument for prefixes
// too short to be recognised), never read past its end (ASan would catch it).
TEST(GgufTest, EveryTruncationIsRefused) {
  const std::vector<uint8_t> bytes = GgufBuilder()
                                         .Str("general.architecture", "llama")
                                         .StrArray("tokens", {"x", "yz"})
                                         .F32Tensor("t", {4}, {1, 2, 3, 4})
                                         .Build();
  ASSERT_TRUE(ParseBytes(bytes).ok());
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(n));
    absl::Status status = ParseBytes(prefix).status();
    ASSERT_FALSE(status.ok()) << n;
    EXPECT_TRUE(absl::IsDataLoss(status) || (n < 4 && absl::IsInvalidArgument(status)))
        << n << ": " << status;
  }
}

struct BadCase {
  std::string name;
  std::vector<uint8_t> bytes;
  absl::StatusCode code;
  std::string message;
};

std::vector<uint8_t> WithVersion(uint32_t version) { return GgufBuilder(version).Build(); }

TEST(GgufTest, RefusesMalformedFiles) {
  std::vector<uint8_t> bad_magic = GgufBuilder().Build();
  bad_magic[0] = 'X';
  std::vector<uint8_t> q40_row(18 * 2, 0);
  const std::vector<BadCase> cases = {
      {"magic", bad_magic, absl::StatusCode::kInvalidArgument, "not a GGUF file"},
      {"version1", WithVersion(1), absl::StatusCode::kInvalidArgument, "version 1"},
      {"version4", WithVersion(4), absl::StatusCode::kInvalidArgument, "version 4"},
      {"huge counts", GgufBuilder().Counts(1ull << 60, 1ull << 60).Build(),
       absl::StatusCode::kDataLoss, "more than the file"},
      {"unknown value type", GgufBuilder().RawKv("k", 13, {0, 0, 0, 0}).Build(),
       absl::StatusCode::kInvalidArgument, "unknown value type 13"},
      {"nested array", GgufBuilder().RawKv("k", 9, {9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}).Build(),
       absl::StatusCode::kInvalidArgument, "arrays"},
      {"array longer than file",
       GgufBuilder().RawKv("k", 9, {4, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}).Build(),
       absl::StatusCode::kDataLoss, "promises"},
      {"duplicate key", GgufBuilder().U32("k", 1).U32("k", 2).Build(),
       absl::StatusCode::kInvalidArgument, "'k' repeats"},
      {"duplicate tensor", GgufBuilder().F32Tensor("t", {1}, {1}).F32Tensor("t", {1}, {2}).Build(),
       absl::StatusCode::kInvalidArgument, "'t' appears twice"},
      {"bad alignment", GgufBuilder().U32("general.alignment", 3).Build(),
       absl::StatusCode::kInvalidArgument, "power of two"},
      {"five dims", GgufBuilder().F32Tensor("t", {1, 1, 1, 1, 1}, {1}).Build(),
       absl::StatusCode::kInvalidArgument, "5 dims"},
      {"dims overflow", GgufBuilder().F32Tensor("t", {1ull << 40, 1ull << 40}, {1}).Build(),
       absl::StatusCode::kInvalidArgument, "overflows"},
      {"row bytes overflow", GgufBuilder().F32Tensor("t", {1ull << 62}, {1}).Build(),
       absl::StatusCode::kInvalidArgument, "too large"},
      {"unsupported type", GgufBuilder().Tensor("t", {32}, 6, std::vector<uint8_t>(22)).Build(),
       absl::StatusCode::kUnimplemented, "type Q5_0"},
      {"unknown type", GgufBuilder().Tensor("t", {32}, 99, std::vector<uint8_t>(22)).Build(),
       absl::StatusCode::kInvalidArgument, "type 99"},
      {"partial block", GgufBuilder().Tensor("t", {48}, 2, q40_row).Build(),
       absl::StatusCode::kInvalidArgument, "not whole Q4_0 blocks"},
      {"misaligned", GgufBuilder().OffsetSkew(4).F32Tensor("t", {1}, {1}).Build(),
       absl::StatusCode::kInvalidArgument, "not a multiple of the alignment"},
      {"past the end", GgufBuilder().OffsetSkew(64).F32Tensor("t", {4}, {1, 2, 3, 4}).Build(),
       absl::StatusCode::kDataLoss, "past the end"},
  };
  for (const BadCase& c : cases) {
    absl::Status status = ParseBytes(c.bytes).status();
    EXPECT_EQ(status.code(), c.code) << c.name << ": " << status;
    LOOM_EXPECT_CONTAINS(std::string(status.message()), c.message) << c.name;
  }
}

TEST(GgufTest, MapsTensorNames) {
  EXPECT_EQ(HfTensorName("token_embd.weight"), "model.embed_tokens.weight");
  EXPECT_EQ(HfTensorName("output_norm.weight"), "model.norm.weight");
  EXPECT_EQ(HfTensorName("output.weight"), "lm_head.weight");
  EXPECT_EQ(HfTensorName("blk.12.attn_q.bias"), "model.layers.12.self_attn.q_proj.bias");
  EXPECT_EQ(HfTensorName("blk.0.attn_output.weight"), "model.layers.0.self_attn.o_proj.weight");
  EXPECT_EQ(HfTensorName("blk.3.attn_k_norm.weight"), "model.layers.3.self_attn.k_norm.weight");
  EXPECT_EQ(HfTensorName("blk.1.ffn_norm.weight"),
            "model.layers.1.post_attention_layernorm.weight");
  EXPECT_EQ(HfTensorName("blk.1.ffn_down.weight"), "model.layers.1.mlp.down_proj.weight");
  EXPECT_EQ(HfTensorName("blk.x.ffn_down.weight"), "blk.x.ffn_down.weight");
  EXPECT_EQ(HfTensorName("rope_freqs.weight"), "rope_freqs.weight");
}

// A one-layer llama GGUF with f32 weights whose q/k rows hold their own GGUF row index.
std::vector<uint8_t> TinyLlama(const std::string& arch, bool tied) {
  constexpr int hidden = 8, heads = 2, kv_heads = 1, head_dim = 4, ffn = 16, vocab = 10;
  auto rows_numbered = [](int rows, int cols) {
    std::vector<float> v(static_cast<size_t>(rows) * cols);
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < cols; ++c) v[r * cols + c] = static_cast<float>(r);
    }
    return v;
  };
  const uint64_t h = hidden;
  GgufBuilder b;
  b.Str("general.architecture", arch)
      .U32(arch + ".block_count", 1)
      .U32(arch + ".context_length", 256)
      .U32(arch + ".embedding_length", hidden)
      .U32(arch + ".feed_forward_length", ffn)
      .U32(arch + ".attention.head_count", heads)
      .U32(arch + ".attention.head_count_kv", kv_heads)
      .F32(arch + ".rope.freq_base", 10000.0f)
      .F32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f)
      .U32("tokenizer.ggml.bos_token_id", 1)
      .U32("tokenizer.ggml.eos_token_id", 2)
      .U32("tokenizer.ggml.eot_token_id", 3)
      .F32Tensor("token_embd.weight", {h, vocab}, rows_numbered(vocab, hidden))
      .F32Tensor("blk.0.attn_norm.weight", {h}, std::vector<float>(hidden, 1.0f))
      .F32Tensor("blk.0.attn_q.weight", {h, heads * head_dim},
                 rows_numbered(heads * head_dim, hidden))
      .F32Tensor("blk.0.attn_k.weight", {h, kv_heads * head_dim},
                 rows_numbered(kv_heads * head_dim, hidden))
      .F32Tensor("blk.0.attn_v.weight", {h, kv_heads * head_dim},
                 rows_numbered(kv_heads * head_dim, hidden))
      .F32Tensor("blk.0.attn_output.weight", {h, h}, rows_numbered(hidden, hidden))
      .F32Tensor("blk.0.ffn_norm.weight", {h}, std::vector<float>(hidden, 1.0f))
      .F32Tensor("blk.0.ffn_gate.weight", {h, ffn}, rows_numbered(ffn, hidden))
      .F32Tensor("blk.0.ffn_up.weight", {h, ffn}, rows_numbered(ffn, hidden))
      .F32Tensor("blk.0.ffn_down.weight", {ffn, h}, rows_numbered(hidden, ffn))
      .F32Tensor("output_norm.weight", {h}, std::vector<float>(hidden, 1.0f));
  if (arch == "qwen3") {
    b.F32Tensor("blk.0.attn_q_norm.weight", {head_dim}, std::vector<float>(head_dim, 1.0f));
    b.F32Tensor("blk.0.attn_k_norm.weight", {head_dim}, std::vector<float>(head_dim, 1.0f));
  }
  if (!tied) b.F32Tensor("output.weight", {h, vocab}, rows_numbered(vocab, hidden));
  return b.Build();
}

float FirstOfRow(const TensorInfo& t, int64_t row) {
  return static_cast<const float*>(t.data)[row * t.shape[1]];
}

TEST(GgufModelTest, LlamaConfigAndUnpermutedRows) {
  TempFolder folder;
  const std::string path = folder.File("tiny.bin");  // recognised by content, not by name
  const std::vector<uint8_t> bytes = TinyLlama("llama", true);
  testing_util::WriteBytes(
      path, std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  ASSERT_TRUE(IsGgufFile(path));
  for (const WeightMemory memory : {WeightMemory::kFile, WeightMemory::kAnonymous}) {
    absl::StatusOr<Checkpoint> copy = Checkpoint::Open(path, {.memory = memory});
    ASSERT_TRUE(copy.ok()) << copy.status();
    ASSERT_NE(copy->gguf(), nullptr);
    EXPECT_EQ(copy->in_anonymous_memory(), memory == WeightMemory::kAnonymous);
    EXPECT_EQ(copy->gguf()->in_anonymous_memory(), memory == WeightMemory::kAnonymous);
    EXPECT_EQ(std::memcmp(copy->gguf()->mapping(), bytes.data(), bytes.size()), 0);
  }
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(path);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  ASSERT_NE(checkpoint->gguf(), nullptr);

  absl::StatusOr<std::string> config_text = GgufConfigJson(*checkpoint->gguf());
  ASSERT_TRUE(config_text.ok()) << config_text.status();
  absl::StatusOr<Json> json = Json::Parse(*config_text, "config");
  ASSERT_TRUE(json.ok()) << json.status();
  absl::StatusOr<ModelConfig> config = ParseModelConfig(*json);
  ASSERT_TRUE(config.ok()) << config.status() << "\n" << *config_text;
  EXPECT_EQ(config->architecture, "LlamaForCausalLM");
  EXPECT_EQ(config->hidden_size, 8);
  EXPECT_EQ(config->num_heads, 2);
  EXPECT_EQ(config->num_kv_heads, 1);
  EXPECT_EQ(config->head_dim, 4);
  EXPECT_EQ(config->vocab_size, 10);
  EXPECT_EQ(config->max_position_embeddings, 256);
  EXPECT_TRUE(config->tie_word_embeddings);
  EXPECT_EQ(config->bos_token_id, TokenId{1});
  EXPECT_EQ(config->eos_token_ids, (std::vector<TokenId>{TokenId{2}, TokenId{3}}));

  // Head of 4 rows: GGUF rows (0,1,2,3) hold HF rows (0,2,1,3), so HF row r comes from GGUF row
  // 2i + j where r = 2j + i.
  const TensorInfo* q = checkpoint->Find("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  const std::vector<float> want_q = {0, 2, 1, 3, 4, 6, 5, 7};
  for (int r = 0; r < 8; ++r) EXPECT_EQ(FirstOfRow(*q, r), want_q[r]) << r;
  const TensorInfo* k = checkpoint->Find("model.layers.0.self_attn.k_proj.weight");
  ASSERT_NE(k, nullptr);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(FirstOfRow(*k, r), want_q[r]) << r;
  const TensorInfo* v = checkpoint->Find("model.layers.0.self_attn.v_proj.weight");
  ASSERT_NE(v, nullptr);
  for (int r = 0; r < 4; ++r) EXPECT_EQ(FirstOfRow(*v, r), r) << r;  // v is not permuted
  EXPECT_EQ(checkpoint->Find("lm_head.weight"), nullptr);
}

// A q tensor with no columns and 2^60 rows holds no bytes: mapping it has nothing to reorder and
// returns at once (it once walked every row, a hang the fuzzer found).
TEST(GgufModelTest, EmptyPermutedTensorMapsWithoutWalkingItsRows) {
  GgufBuilder b;
  b.Str("general.architecture", "llama")
      .U32("llama.attention.head_count", 2)
      .Tensor("blk.0.attn_q.weight", {0, uint64_t{1} << 60}, 0, {});
  const std::vector<uint8_t> bytes = b.Build();
  absl::StatusOr<std::unique_ptr<GgufFile>> file = ParseBytes(bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::unique_ptr<GgufTensorView>> view = MapGgufTensors(**file);
  ASSERT_TRUE(view.ok()) << view.status();
  ASSERT_EQ((*view)->tensors.size(), 1u);
  EXPECT_EQ((*view)->tensors[0].num_bytes, 0);
}

TEST(GgufModelTest, Qwen3IsNotPermutedAndHasItsClass) {
  const std::vector<uint8_t> bytes = TinyLlama("qwen3", false);
  absl::StatusOr<std::unique_ptr<GgufFile>> file = ParseBytes(bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::unique_ptr<GgufTensorView>> view = MapGgufTensors(**file);
  ASSERT_TRUE(view.ok()) << view.status();
  for (const TensorInfo& t : (*view)->tensors) {
    if (t.name == "model.layers.0.self_attn.q_proj.weight") {
      for (int r = 0; r < 8; ++r) EXPECT_EQ(FirstOfRow(t, r), r);
    }
  }
  absl::StatusOr<std::string> config = GgufConfigJson(**file);
  ASSERT_TRUE(config.ok()) << config.status();
  LOOM_EXPECT_CONTAINS(*config, "\"Qwen3ForCausalLM\"");
  LOOM_EXPECT_CONTAINS(*config, "\"tie_word_embeddings\":false");
}

TEST(GgufModelTest, RefusesUnknownArchitectureAndMissingKeys) {
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      ParseBytes(GgufBuilder().Str("general.architecture", "mamba").Build());
  ASSERT_TRUE(file.ok());
  absl::Status status = GgufConfigJson(**file).status();
  EXPECT_TRUE(absl::IsUnimplemented(status)) << status;
  LOOM_EXPECT_CONTAINS(std::string(status.message()), "'mamba' is not supported");

  file = ParseBytes(GgufBuilder().Str("general.architecture", "llama").Build());
  ASSERT_TRUE(file.ok());
  status = GgufConfigJson(**file).status();
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  LOOM_EXPECT_CONTAINS(std::string(status.message()), "no llama.embedding_length");

  file = ParseBytes(GgufBuilder().U32("x", 1).Build());
  ASSERT_TRUE(file.ok());
  status = GgufConfigJson(**file).status();
  LOOM_EXPECT_CONTAINS(std::string(status.message()), "general.architecture");
}

// The metadata of a tiny mixture-of-experts file (2 layers, hidden 8, feed_forward_length 16,
// 4 experts, top 2) with a router in the layers of `sparse`; `extra` adds keys.
std::vector<uint8_t> MoeFile(const std::string& arch, const std::vector<int>& sparse,
                             const std::function<void(GgufBuilder&)>& extra = {}) {
  GgufBuilder b;
  b.Str("general.architecture", arch)
      .U32(arch + ".block_count", 2)
      .U32(arch + ".embedding_length", 8)
      .U32(arch + ".feed_forward_length", 16)
      .U32(arch + ".attention.head_count", 2)
      .U32(arch + ".expert_count", 4)
      .U32(arch + ".expert_used_count", 2)
      .F32Tensor("token_embd.weight", {8, 10}, std::vector<float>(80, 0.0f));
  for (int layer : sparse) {
    b.F32Tensor("blk." + std::to_string(layer) + ".ffn_gate_inp.weight", {8, 4},
                std::vector<float>(32, 0.0f));
  }
  if (extra) extra(b);
  return b.Build();
}

absl::StatusOr<ModelConfig> MoeConfigOf(const std::vector<uint8_t>& bytes) {
  LOOM_ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, ParseBytes(bytes));
  LOOM_ASSIGN_OR_RETURN(const std::string text, GgufConfigJson(*file));
  LOOM_ASSIGN_OR_RETURN(const Json json, Json::Parse(text, "config"));
  return ParseModelConfig(json);
}

TEST(GgufModelTest, Qwen2MoeMetadataBecomesTheMoeConfig) {
  absl::StatusOr<ModelConfig> c = MoeConfigOf(MoeFile("qwen2moe", {0}, [](GgufBuilder& b) {
    b.U32("qwen2moe.expert_feed_forward_length", 6).U32(
        "qwen2moe.expert_shared_feed_forward_length", 12);
  }));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "Qwen2MoeForCausalLM");
  EXPECT_EQ(c->moe.num_experts, 4);
  EXPECT_EQ(c->moe.num_experts_per_tok, 2);
  EXPECT_EQ(c->moe.expert_intermediate_size, 6);
  EXPECT_EQ(c->moe.shared_expert_intermediate_size, 12);
  EXPECT_FALSE(c->moe.norm_topk_prob) << "llama.cpp's qwen2moe does not renormalize";
  EXPECT_EQ(c->moe.naming, ExpertNaming::kQwen);
  EXPECT_EQ(c->intermediate_size, 16) << "the dense layers' size";
  EXPECT_EQ(c->layer_sparse, (std::vector<bool>{true, false})) << "no router: a dense layer";
}

TEST(GgufModelTest, MoeDefaultsAreLlamaCpps) {
  // qwen3moe: renormalized, expert size feed_forward_length / expert_used_count.
  absl::StatusOr<ModelConfig> c = MoeConfigOf(MoeFile("qwen3moe", {0, 1}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "Qwen3MoeForCausalLM");
  EXPECT_TRUE(c->moe.norm_topk_prob);
  EXPECT_EQ(c->moe.expert_intermediate_size, 8);
  EXPECT_EQ(c->moe.shared_expert_intermediate_size, 0);
  EXPECT_EQ(c->layer_sparse, (std::vector<bool>{true, true}));
  // expert_weights_norm, when written, decides.
  c = MoeConfigOf(MoeFile("qwen3moe", {0, 1},
                          [](GgufBuilder& b) { b.Bool("qwen3moe.expert_weights_norm", false); }));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_FALSE(c->moe.norm_topk_prob);
  // qwen2moe's shared expert defaults to feed_forward_length.
  c = MoeConfigOf(MoeFile("qwen2moe", {0, 1}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->moe.shared_expert_intermediate_size, 16);
}

TEST(GgufModelTest, LlamaWithExpertsIsMixtral) {
  absl::StatusOr<ModelConfig> c = MoeConfigOf(MoeFile("llama", {0, 1}));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->architecture, "MixtralForCausalLM");
  EXPECT_EQ(c->moe.num_experts, 4);
  EXPECT_EQ(c->moe.expert_intermediate_size, 16) << "Mixtral's feed_forward_length is per expert";
  EXPECT_TRUE(c->moe.norm_topk_prob);
  EXPECT_EQ(c->moe.naming, ExpertNaming::kMixtral);
  // A dense llama file stays Llama.
  absl::StatusOr<std::unique_ptr<GgufFile>> dense = ParseBytes(TinyLlama("llama", true));
  ASSERT_TRUE(dense.ok());
  absl::StatusOr<std::string> text = GgufConfigJson(**dense);
  ASSERT_TRUE(text.ok()) << text.status();
  LOOM_EXPECT_CONTAINS(*text, "\"LlamaForCausalLM\"");
}

TEST(GgufModelTest, RefusesMoeItCannotRunNamingTheKey) {
  struct Case {
    std::string arch;
    std::vector<int> sparse;
    std::function<void(GgufBuilder&)> extra;
    std::string want;
  };
  const Case cases[] = {
      {"qwen3moe", {0, 1}, [](GgufBuilder& b) { b.U32("qwen3moe.expert_gating_func", 2); },
       "qwen3moe.expert_gating_func"},
      {"qwen2moe", {0, 1}, [](GgufBuilder& b) { b.F32("qwen2moe.expert_weights_scale", 2.5f); },
       "qwen2moe.expert_weights_scale"},
      {"qwen3moe", {0, 1}, [](GgufBuilder& b) { b.U32("qwen3moe.expert_group_count", 4); },
       "qwen3moe.expert_group_count"},
      {"llama", {0, 1}, [](GgufBuilder& b) { b.Bool("llama.expert_weights_norm", false); },
       "llama.expert_weights_norm"},
      {"llama", {1}, {}, "blk.0.ffn_gate_inp.weight"},
      {"qwen2", {0, 1}, {}, "qwen2.expert_count"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ModelConfig> config = MoeConfigOf(MoeFile(c.arch, c.sparse, c.extra));
    EXPECT_TRUE(absl::IsUnimplemented(config.status())) << c.want << ": " << config.status();
    LOOM_EXPECT_CONTAINS(std::string(config.status().message()), c.want);
  }
  // Counts out of range are invalid, naming the key.
  absl::StatusOr<ModelConfig> config = MoeConfigOf(
      MoeFile("qwen3moe", {0, 1}, [](GgufBuilder& b) { b.U32("qwen3moe.expert_used_count", 5); }));
  EXPECT_TRUE(absl::IsInvalidArgument(config.status())) << config.status();
  LOOM_EXPECT_CONTAINS(std::string(config.status().message()), "qwen3moe.expert_used_count");
}

TEST(GgufModelTest, MoeTensorsGetHuggingFaceNames) {
  EXPECT_EQ(HfTensorName("blk.3.ffn_gate_inp.weight"), "model.layers.3.mlp.gate.weight");
  EXPECT_EQ(HfTensorName("blk.3.ffn_gate_exps.weight"), "model.layers.3.mlp.experts.gate_proj");
  EXPECT_EQ(HfTensorName("blk.3.ffn_up_exps.weight"), "model.layers.3.mlp.experts.up_proj");
  EXPECT_EQ(HfTensorName("blk.3.ffn_down_exps.weight"), "model.layers.3.mlp.experts.down_proj");
  EXPECT_EQ(HfTensorName("blk.0.ffn_up_shexp.weight"),
            "model.layers.0.mlp.shared_expert.up_proj.weight");
  EXPECT_EQ(HfTensorName("blk.0.ffn_gate_inp_shexp.weight"),
            "model.layers.0.mlp.shared_expert_gate.weight");
  // The shared expert's gate written as a vector is seen as the [1, hidden] matrix.
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      ParseBytes(MoeFile("qwen2moe", {0, 1}, [](GgufBuilder& b) {
        b.F32Tensor("blk.0.ffn_gate_inp_shexp.weight", {8}, std::vector<float>(8, 0.0f));
      }));
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::unique_ptr<GgufTensorView>> view = MapGgufTensors(**file);
  ASSERT_TRUE(view.ok()) << view.status();
  bool found = false;
  for (const TensorInfo& t : (*view)->tensors) {
    if (t.name != "model.layers.0.mlp.shared_expert_gate.weight") continue;
    found = true;
    EXPECT_EQ(t.shape, (std::vector<int64_t>{1, 8}));
  }
  EXPECT_TRUE(found);
}

// Llama 3.1 scaling as GGUF carries it: per-frequency divisors that reproduce the llama3 formula.
TEST(GgufModelTest, RopeFreqFactorsReproduceLlama3Scaling) {
  RopeConfig llama3;
  llama3.theta = 500000.0;
  llama3.scaling = RopeConfig::Scaling::kLlama3;
  llama3.factor = 8.0;
  const RopeTable scaled(llama3, 64);
  RopeConfig plain;
  plain.theta = 500000.0;
  const RopeTable unscaled(plain, 64);
  std::vector<float> factors(32);
  for (int i = 0; i < 32; ++i) factors[i] = unscaled.inv_freq()[i] / scaled.inv_freq()[i];
  const std::vector<uint8_t> bytes = GgufBuilder()
                                         .Str("general.architecture", "llama")
                                         .F32Tensor("rope_freqs.weight", {32}, factors)
                                         .Build();
  absl::StatusOr<std::unique_ptr<GgufFile>> file = ParseBytes(bytes);
  ASSERT_TRUE(file.ok()) << file.status();
  absl::StatusOr<std::vector<float>> read = GgufRopeFactors(**file, 64);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, factors);
  plain.freq_factors = *read;
  const RopeTable from_factors(plain, 64);
  for (int i = 0; i < 32; ++i) {
    EXPECT_NEAR(from_factors.inv_freq()[i], scaled.inv_freq()[i], 1e-6f * scaled.inv_freq()[i]);
  }
  EXPECT_GT(factors[31], 7.9f);  // the lowest frequency is divided by the factor
  EXPECT_FALSE(GgufRopeFactors(**file, 32).ok());  // wrong length
}

// The real default model, when install-deps has fetched it.
TEST(GgufModelTest, SmolLM2File) {
  const std::string path =
      std::string(LOOM_SOURCE_DIR) + "/build/models/SmolLM2-135M-Instruct.Q4_1.gguf";
  if (!IsGgufFile(path)) GTEST_SKIP() << "no " << path << " (deploy/install-deps.sh fetches it)";
  absl::StatusOr<Checkpoint> checkpoint = Checkpoint::Open(path);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
  EXPECT_EQ(checkpoint->tensors().size(), 272u);
  const TensorInfo* embed = checkpoint->Find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->dtype, DType::kQ8_0);
  EXPECT_EQ(embed->shape, (std::vector<int64_t>{49152, 576}));
  const TensorInfo* down = checkpoint->Find("model.layers.29.mlp.down_proj.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->dtype, DType::kQ4_1);
  EXPECT_EQ(down->shape, (std::vector<int64_t>{576, 1536}));
  absl::StatusOr<std::string> text = GgufConfigJson(*checkpoint->gguf());
  ASSERT_TRUE(text.ok()) << text.status();
  absl::StatusOr<ModelConfig> config = ParseModelConfig(*Json::Parse(*text, "config"));
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->num_layers, 30);
  EXPECT_EQ(config->num_heads, 9);
  EXPECT_EQ(config->num_kv_heads, 3);
  EXPECT_EQ(config->head_dim, 64);
  EXPECT_EQ(config->intermediate_size, 1536);
  EXPECT_EQ(config->rope.theta, 100000.0);
  EXPECT_TRUE(config->tie_word_embeddings);
}

}  // namespace
}  // namespace loom
