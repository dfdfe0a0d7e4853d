// GGUF tokenizers against transformers: every file under tests/text/fixtures/gguf/ (and the real
// SmolLM2-135M-Instruct GGUF when build/models has it) must give exactly the ids, texts and chat
// renders that `AutoTokenizer.from_pretrained(dir, gguf_file=name)` recorded in <name>.cases.json
// (make_gguf_fixtures.py). Then the conversion's own rules on GGUF files built here.
#include "server/text/gguf_text.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <cmath>
#include <vector>

#include "engine/common/file.h"
#include "engine/common/json.h"
#include "gtest/gtest.h"
#include "server/text/gguf_vocab.h"
#include "server/text/model_text.h"

namespace loom::text {
namespace {

std::string FixturePath(const std::string& name) {
  return std::string(LOOM_SOURCE_DIR) + "/tests/text/fixtures/gguf/" + name;
}

std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  }
  return out;
}

std::vector<int32_t> Ids(const Json& array) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < array.size(); ++i) ids.push_back(static_cast<int32_t>(*array[i].AsInt()));
  return ids;
}

std::optional<std::string> OptionalString(const Json& object, const std::string& key) {
  std::optional<Json> v = object.Find(key);
  if (!v || v->IsNull()) return std::nullopt;
  return *v->AsString();
}

struct Fixture {
  const char* name;   // <name>.cases.json
  const char* model;  // the GGUF file, relative to the source tree
};

const Fixture kFixtures[] = {
    {"gpt2_llama3", "tests/text/fixtures/gguf/gpt2_llama3.gguf"},
    {"gpt2_qwen2", "tests/text/fixtures/gguf/gpt2_qwen2.gguf"},
    {"gpt2_default", "tests/text/fixtures/gguf/gpt2_default.gguf"},
    {"spm_llama", "tests/text/fixtures/gguf/spm_llama.gguf"},
    {"spm_noprefix", "tests/text/fixtures/gguf/spm_noprefix.gguf"},
    {"spm_gemma2", "tests/text/fixtures/gguf/spm_gemma2.gguf"},
    {"spm_phi3", "tests/text/fixtures/gguf/spm_phi3.gguf"},
    // 98 MB, not committed: deploy/install-deps.sh puts it there.
    {"smollm2", "build/models/SmolLM2-135M-Instruct.Q4_1.gguf"},
};

void PrintTo(const Fixture& fixture, std::ostream* os) { *os << fixture.name; }

class GgufFixtureTest : public ::testing::TestWithParam<Fixture> {};

TEST_P(GgufFixtureTest, MatchesTransformers) {
  const Fixture& fixture = GetParam();
  const std::string model = std::string(LOOM_SOURCE_DIR) + "/" + fixture.model;
  if (!std::filesystem::exists(model)) GTEST_SKIP() << model << " is not there";
  ModelText text = LoadModelText(model);
  ASSERT_TRUE(text.tokenizer_status.ok()) << text.tokenizer_status;
  ASSERT_NE(text.tokenizer, nullptr);
  const Tokenizer& tok = *text.tokenizer;
  absl::StatusOr<std::string> raw = ReadFile(FixturePath(std::string(fixture.name) + ".cases.json"));
  ASSERT_TRUE(raw.ok()) << raw.status();
  absl::StatusOr<Json> cases = Json::Parse(*raw);
  ASSERT_TRUE(cases.ok()) << cases.status();

  const Json reference = *cases->Get("reference");
  EXPECT_EQ(OptionalString(reference, "bos_token").value_or(""), tok.bos_token());
  EXPECT_EQ(OptionalString(reference, "eos_token").value_or(""), tok.eos_token());
  if (std::optional<Json> bos = reference.Find("bos_token_id"); bos && !bos->IsNull()) {
    EXPECT_EQ(tok.bos_token_id(), *bos->AsInt());
  } else {
    EXPECT_EQ(tok.bos_token_id(), std::nullopt);
  }
  if (std::optional<Json> eos = reference.Find("eos_token_id"); eos && !eos->IsNull()) {
    ASSERT_FALSE(tok.eos_token_ids().empty());
    EXPECT_EQ(tok.eos_token_ids()[0], *eos->AsInt());
  }
  for (int32_t id : Ids(*reference.Get("special_ids"))) EXPECT_TRUE(tok.IsSpecial(id)) << id;

  int matched = 0;
  const Json encode = *cases->Get("encode");
  for (size_t i = 0; i < encode.size(); ++i) {
    const Json c = encode[i];
    const std::string input =
        c.Has("input_hex") ? FromHex(*c.GetString("input_hex")) : *c.GetString("input");
    SCOPED_TRACE(testing::Message() << "encode case " << i << ": " << c.Dump());
    const std::vector<int32_t> ids = tok.Encode(input, true);
    const std::vector<int32_t> ids_no_special = tok.Encode(input, false);
    const std::vector<int32_t> ref = Ids(*c.Get("ids"));
    const std::string decoded = tok.Decode(ref, false);
    const std::string decoded_skip = tok.Decode(ref, true);
    EXPECT_EQ(ids, ref);
    EXPECT_EQ(ids_no_special, Ids(*c.Get("ids_no_special")));
    EXPECT_EQ(decoded, *c.GetString("decoded"));
    EXPECT_EQ(decoded_skip, *c.GetString("decoded_skip_special"));
    matched += ids == ref && ids_no_special == Ids(*c.Get("ids_no_special")) &&
               decoded == *c.GetString("decoded") &&
               decoded_skip == *c.GetString("decoded_skip_special");
  }
  const Json decode = *cases->Get("decode");
  for (size_t i = 0; i < decode.size(); ++i) {
    const Json c = decode[i];
    SCOPED_TRACE(testing::Message() << "decode case " << i << ": " << c.Dump());
    const std::vector<int32_t> ids = Ids(*c.Get("ids"));
    const std::string decoded = tok.Decode(ids, false);
    const std::string decoded_skip = tok.Decode(ids, true);
    EXPECT_EQ(decoded, *c.GetString("decoded"));
    EXPECT_EQ(decoded_skip, *c.GetString("decoded_skip_special"));
    matched +=
        decoded == *c.GetString("decoded") && decoded_skip == *c.GetString("decoded_skip_special");
  }

  const Json chats = *cases->Get("chat");
  if (chats.size() == 0) {
    EXPECT_FALSE(text.chat.has_value());
    EXPECT_EQ(text.chat_status.code(), absl::StatusCode::kNotFound) << text.chat_status;
  } else {
    ASSERT_TRUE(text.chat.has_value()) << text.chat_status;
  }
  for (size_t i = 0; i < chats.size(); ++i) {
    const Json c = chats[i];
    SCOPED_TRACE(testing::Message() << "chat case " << i << ": " << c.Dump());
    ChatRenderRequest request;
    request.messages_json = c.Get("messages")->Dump();
    request.add_generation_prompt = *c.Get("add_generation_prompt")->AsBool();
    absl::StatusOr<std::string> rendered = text.chat->Render(request);
    ASSERT_TRUE(rendered.ok()) << rendered.status();
    EXPECT_EQ(*rendered, *c.GetString("rendered"));
    matched += *rendered == *c.GetString("rendered");
  }
  std::printf("[ gguf %s ] %d of %zu cases match (%zu strings encoded)\n", fixture.name, matched,
              encode.size() + decode.size() + chats.size(), encode.size());
  EXPECT_EQ(matched, static_cast<int>(encode.size() + decode.size() + chats.size()));
}

INSTANTIATE_TEST_SUITE_P(Files, GgufFixtureTest, ::testing::ValuesIn(kFixtures),
                         [](const auto& info) { return std::string(info.param.name); });

// A GGUF file with metadata only, written here (little-endian, version 3, no tensors).
class GgufBuilder {
 public:
  void String(const std::string& key, const std::string& value) { Key(key, 8), Str(value); }
  void U32(const std::string& key, uint32_t value) { Key(key, 4), Pod(value); }
  void Bool(const std::string& key, bool value) { Key(key, 7), Pod(static_cast<uint8_t>(value)); }
  void Strings(const std::string& key, const std::vector<std::string>& values) {
    Key(key, 9);
    Pod(uint32_t{8});
    Pod(static_cast<uint64_t>(values.size()));
    for (const std::string& v : values) Str(v);
  }
  void I32s(const std::string& key, const std::vector<int32_t>& values) {
    Key(key, 9);
    Pod(uint32_t{5});
    Pod(static_cast<uint64_t>(values.size()));
    for (int32_t v : values) Pod(v);
  }
  void F32s(const std::string& key, const std::vector<float>& values) {
    Key(key, 9);
    Pod(uint32_t{6});
    Pod(static_cast<uint64_t>(values.size()));
    for (float v : values) Pod(v);
  }

  // The file's bytes.
  std::vector<uint8_t> Bytes() const {
    std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
    auto pod = [&](auto v) {
      const auto* p = reinterpret_cast<const uint8_t*>(&v);
      out.insert(out.end(), p, p + sizeof(v));
    };
    pod(uint32_t{3});
    pod(uint64_t{0});
    pod(static_cast<uint64_t>(count_));
    out.insert(out.end(), body_.begin(), body_.end());
    while (out.size() % 32 != 0) out.push_back(0);
    return out;
  }

 private:
  template <typename T>
  void Pod(T v) {
    const auto* p = reinterpret_cast<const uint8_t*>(&v);
    body_.insert(body_.end(), p, p + sizeof(v));
  }
  void Str(const std::string& s) {
    Pod(static_cast<uint64_t>(s.size()));
    body_.insert(body_.end(), s.begin(), s.end());
  }
  void Key(const std::string& key, uint32_t type) {
    ++count_;
    Str(key);
    Pod(type);
  }

  std::vector<uint8_t> body_;
  size_t count_ = 0;
};

// A byte-level vocabulary: the letters a..d, "ab", "abc", " " as "Ġ", and two control tokens.
GgufBuilder ByteLevelFile(const std::string& pre) {
  GgufBuilder b;
  b.String("general.architecture", "llama");
  b.String("tokenizer.ggml.model", "gpt2");
  if (!pre.empty()) b.String("tokenizer.ggml.pre", pre);
  b.Strings("tokenizer.ggml.tokens",
            {"a", "b", "c", "d", "ab", "abc", "\xC4\xA0", "<|end|>", "<|eot|>", "1", "2", "12"});
  b.I32s("tokenizer.ggml.token_type", {1, 1, 1, 1, 1, 1, 1, 3, 3, 1, 1, 1});
  b.Strings("tokenizer.ggml.merges", {"a b", "ab c", "1 2"});
  b.U32("tokenizer.ggml.eos_token_id", 7);
  b.U32("tokenizer.ggml.eot_token_id", 8);
  return b;
}

struct Loaded {
  std::vector<uint8_t> bytes;
  std::unique_ptr<GgufFile> file;
};

Loaded Parse(const GgufBuilder& b) {
  Loaded l;
  l.bytes = b.Bytes();
  absl::StatusOr<std::unique_ptr<GgufFile>> file =
      GgufFile::Parse(std::span<const uint8_t>(l.bytes.data(), l.bytes.size()), "test.gguf");
  EXPECT_TRUE(file.ok()) << file.status();
  if (file.ok()) l.file = std::move(*file);
  return l;
}

TEST(GgufTextTest, ByteLevelWithEndOfTurnAsEos) {
  Loaded l = Parse(ByteLevelFile("llama-bpe"));
  ASSERT_NE(l.file, nullptr);
  ModelText text = ModelTextFromGguf(*l.file);
  ASSERT_TRUE(text.tokenizer_status.ok()) << text.tokenizer_status;
  const Tokenizer& tok = *text.tokenizer;
  // "abc" merges whole; the Llama 3 split keeps "12" in one piece (digits in threes).
  EXPECT_EQ(tok.Encode("abc", true), (std::vector<int32_t>{5}));
  EXPECT_EQ(tok.Encode("12", false), (std::vector<int32_t>{11}));
  EXPECT_EQ(tok.Encode("a<|end|>b", false), (std::vector<int32_t>{0, 7, 1}));
  EXPECT_EQ(tok.Decode({0, 7, 1}, /*skip_special_tokens=*/true), "ab");
  // Generation stops on end of turn as on EOS.
  EXPECT_EQ(tok.eos_token_ids(), (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(tok.eos_token(), "<|end|>");
  // The byte-level builder's own "<|endoftext|>" is new: the next id past the vocabulary.
  EXPECT_EQ(tok.TokenToId("<|endoftext|>"), 12);
  EXPECT_EQ(text.chat_status.code(), absl::StatusCode::kNotFound);
}

TEST(GgufTextTest, UnknownPreTokenizerFallsBackToGpt2WithAWarning) {
  for (const std::string pre : {"", "default", "gpt2", "brand-new"}) {
    SCOPED_TRACE(pre);
    Loaded l = Parse(ByteLevelFile(pre));
    ASSERT_NE(l.file, nullptr);
    absl::StatusOr<GgufVocab> vocab = ReadGgufVocab(*l.file);
    ASSERT_TRUE(vocab.ok()) << vocab.status();
    std::vector<std::string> warnings;
    absl::StatusOr<std::unique_ptr<Tokenizer>> tok = TokenizerFromGguf(*vocab, &warnings);
    ASSERT_TRUE(tok.ok()) << tok.status();
    EXPECT_EQ(warnings.size(), pre == "brand-new" ? 1u : 0u);
    if (!warnings.empty()) {
      EXPECT_NE(warnings[0].find("brand-new"), std::string::npos);
    }
    // GPT-2's regex also keeps a run of digits together.
    EXPECT_EQ((*tok)->Encode("12abc", false), (std::vector<int32_t>{11, 5}));
  }
}

TEST(GgufTextTest, SentencePieceMergesFromScores) {
  // Tokens by id: the scores alone decide the merges (generate_merges).
  const std::vector<std::string_view> tokens = {"a", "b", "c", "ab", "bc", "abc", "ca"};
  const std::vector<double> scores = {0, 0, 0, -1, -2, -3, -1};
  const std::vector<std::pair<std::string, std::string>> merges = GenerateMerges(tokens, scores);
  // Highest score first, equal scores in token order ("ab" before "ca"); at equal scores the
  // longer left part first ("ab"+"c" before "a"+"bc").
  const std::vector<std::pair<std::string, std::string>> want = {
      {"a", "b"}, {"c", "a"}, {"b", "c"}, {"ab", "c"}, {"a", "bc"}};
  EXPECT_EQ(merges, want);
}

TEST(GgufTextTest, SentencePieceFile) {
  GgufBuilder b;
  b.String("general.architecture", "llama");
  b.String("tokenizer.ggml.model", "llama");
  b.Strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "<0x41>", "\xE2\x96\x81", "h", "i",
                                      "hi", "\xE2\x96\x81hi"});
  b.F32s("tokenizer.ggml.scores", {0, 0, 0, 0, -1, -2, -3, -4, -5});
  b.I32s("tokenizer.ggml.token_type", {2, 3, 3, 6, 1, 1, 1, 1, 1});
  b.U32("tokenizer.ggml.bos_token_id", 1);
  b.U32("tokenizer.ggml.eos_token_id", 2);
  b.U32("tokenizer.ggml.padding_token_id", 99);  // past the vocabulary: ignored
  b.String("tokenizer.chat_template", "{{ bos_token }}{{ messages[0]['content'] }}{{ eos_token }}");
  Loaded l = Parse(b);
  ASSERT_NE(l.file, nullptr);
  absl::StatusOr<GgufVocab> vocab = ReadGgufVocab(*l.file);
  ASSERT_TRUE(vocab.ok()) << vocab.status();
  EXPECT_EQ(vocab->pad_id, std::nullopt);
  ASSERT_EQ(vocab->warnings.size(), 1u);
  ModelText text = ModelTextFromGguf(*l.file);
  ASSERT_TRUE(text.tokenizer_status.ok()) << text.tokenizer_status;
  // BOS by default for a llama vocabulary; "▁hi" merges; "A" falls back to its byte.
  EXPECT_EQ(text.tokenizer->Encode("hi A", true), (std::vector<int32_t>{1, 8, 4, 3}));
  EXPECT_EQ(text.tokenizer->Decode({1, 8, 4, 3}, true), "hi A");
  ASSERT_TRUE(text.chat.has_value()) << text.chat_status;
  ChatRenderRequest request;
  request.messages_json = R"([{"role": "user", "content": "x"}])";
  absl::StatusOr<std::string> rendered = text.chat->Render(request);
  ASSERT_TRUE(rendered.ok()) << rendered.status();
  EXPECT_EQ(*rendered, "<s>x</s>");
}

TEST(GgufTextTest, Errors) {
  {
    GgufBuilder b;  // no tokenizer at all
    b.String("general.architecture", "llama");
    Loaded l = Parse(b);
    ASSERT_NE(l.file, nullptr);
    ModelText text = ModelTextFromGguf(*l.file);
    EXPECT_EQ(text.tokenizer, nullptr);
    EXPECT_EQ(text.tokenizer_status.code(), absl::StatusCode::kNotFound) << text.tokenizer_status;
  }
  {
    GgufBuilder b;
    b.String("tokenizer.ggml.model", "t5");
    b.Strings("tokenizer.ggml.tokens", {"a"});
    Loaded l = Parse(b);
    ASSERT_NE(l.file, nullptr);
    ModelText text = ModelTextFromGguf(*l.file);
    EXPECT_EQ(text.tokenizer_status.code(), absl::StatusCode::kUnimplemented);
    EXPECT_NE(text.tokenizer_status.message().find("t5"), std::string::npos);
  }
  {
    GgufBuilder b;
    b.String("tokenizer.ggml.model", "gpt2");
    b.Strings("tokenizer.ggml.tokens", {"a", "b", "ab"});
    b.Strings("tokenizer.ggml.merges", {"a  b"});
    Loaded l = Parse(b);
    ASSERT_NE(l.file, nullptr);
    ModelText text = ModelTextFromGguf(*l.file);
    EXPECT_EQ(text.tokenizer_status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(text.tokenizer_status.message().find("tokenizer.ggml.merges[0]"), std::string::npos)
        << text.tokenizer_status;
  }
  {
    GgufBuilder b;
    b.String("tokenizer.ggml.model", "llama");
    b.Strings("tokenizer.ggml.tokens", {"a", "\xFF"});
    Loaded l = Parse(b);
    ASSERT_NE(l.file, nullptr);
    absl::StatusOr<GgufVocab> vocab = ReadGgufVocab(*l.file);
    EXPECT_EQ(vocab.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(vocab.status().message().find("tokenizer.ggml.tokens[1]"), std::string::npos);
  }
  {
    GgufBuilder b;
    b.String("tokenizer.ggml.model", "llama");
    b.Strings("tokenizer.ggml.tokens", {"a", "b"});
    b.F32s("tokenizer.ggml.scores", {0.0f, std::nanf("")});
    Loaded l = Parse(b);
    ASSERT_NE(l.file, nullptr);
    EXPECT_EQ(ReadGgufVocab(*l.file).status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(GgufTextTest, LoadModelTextStillReadsFolders) {
  ModelText text = LoadModelText(std::string(LOOM_SOURCE_DIR) + "/tests/text/fixtures/tokenizers/llama3");
  EXPECT_TRUE(text.tokenizer_status.ok()) << text.tokenizer_status;
  ModelText missing = LoadModelText(FixturePath("no-such-file.gguf"));
  EXPECT_EQ(missing.tokenizer, nullptr);
  EXPECT_FALSE(missing.tokenizer_status.ok());
}

}  // namespace
}  // namespace loom::text
