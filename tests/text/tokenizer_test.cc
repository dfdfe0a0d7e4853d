// Tokenizer API and error handling: token lookups, special tokens from tokenizer_config.json,
// the add_bos_token rule, BPE affixes, thread safety, and clear errors for bad tokenizer.json.
#include "server/text/tokenizer/tokenizer.h"

#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/common/file.h"
#include "gtest/gtest.h"

namespace loom::text {
namespace {

std::string FixtureDir(const std::string& style) {
  return std::string(LOOM_SOURCE_DIR) + "/tests/text/fixtures/tokenizers/" + style;
}

std::unique_ptr<Tokenizer> Load(const std::string& style) {
  auto tok = Tokenizer::LoadFromDir(FixtureDir(style));
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

// A tokenizer.json with the given model and pre-tokenizer (JSON text).
std::string Json(const std::string& model, const std::string& pre = "null",
                 const std::string& post = "null", const std::string& added = "[]") {
  return "{\"version\":\"1.0\",\"added_tokens\":" + added +
         ",\"normalizer\":null,\"pre_tokenizer\":" + pre + ",\"post_processor\":" + post +
         ",\"decoder\":null,\"model\":" + model + "}";
}

// `json` with its null normalizer replaced by `normalizer`.
std::string WithNormalizer(std::string json, const std::string& normalizer) {
  const std::string key = "\"normalizer\":null";
  return json.replace(json.find(key), key.size(), "\"normalizer\":" + normalizer);
}

const char kAffixModel[] =
    R"({"type":"BPE","dropout":null,"unk_token":"[UNK]","continuing_subword_prefix":"##",)"
    R"("end_of_word_suffix":"</w>","fuse_unk":false,"byte_fallback":false,)"
    R"("vocab":{"[UNK]":0,"a":1,"##b":2,"##c</w>":3,"a##b":4,"ab":5,"##b</w>":6,"ab</w>":7,"c":8},)"
    R"("merges":[["a","##b"],["a","##b</w>"]]})";

TEST(TokenizerTest, Llama3SpecialTokens) {
  std::unique_ptr<Tokenizer> tok = Load("llama3");
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), 512);
  ASSERT_TRUE(tok->bos_token_id().has_value());
  EXPECT_EQ(tok->bos_token(), "<|begin_of_text|>");
  EXPECT_EQ(tok->eos_token(), "<|eot_id|>");
  EXPECT_EQ(tok->TokenToId("<|begin_of_text|>"), tok->bos_token_id());
  ASSERT_EQ(tok->eos_token_ids().size(), 1u);
  EXPECT_EQ(tok->IdToToken(tok->eos_token_ids()[0]), "<|eot_id|>");
  EXPECT_TRUE(tok->IsSpecial(*tok->bos_token_id()));
  EXPECT_FALSE(tok->IsSpecial(*tok->TokenToId("a")));
  EXPECT_EQ(tok->IdToToken(512), std::nullopt);
  EXPECT_EQ(tok->IdToToken(-1), std::nullopt);
  EXPECT_EQ(tok->TokenToId("no such token"), std::nullopt);
  const std::vector<int32_t> ids = tok->Encode("Hi", true);
  ASSERT_FALSE(ids.empty());
  EXPECT_EQ(ids[0], *tok->bos_token_id());
  // Unknown ids are skipped by Decode.
  std::vector<int32_t> with_bad = ids;
  with_bad.insert(with_bad.begin() + 1, {-5, 100000});
  EXPECT_EQ(tok->Decode(with_bad, true), "Hi");
}

TEST(TokenizerTest, BosFallsBackToThePostProcessor) {
  const std::string dir = FixtureDir("llama2");
  auto json = loom::ReadFile(dir + "/tokenizer.json");
  ASSERT_TRUE(json.ok());
  auto tok = Tokenizer::FromJson(*json, "");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->bos_token_id(), (*tok)->TokenToId("<s>"));
  EXPECT_EQ((*tok)->bos_token(), "<s>");
  EXPECT_TRUE((*tok)->eos_token_ids().empty());
}

TEST(TokenizerTest, QwenHasNoBos) {
  std::unique_ptr<Tokenizer> tok = Load("qwen2");
  ASSERT_NE(tok, nullptr);
  EXPECT_FALSE(tok->bos_token_id().has_value());
  EXPECT_EQ(tok->Encode("Hi", true), tok->Encode("Hi", false));
  EXPECT_EQ(tok->eos_token_ids(), std::vector<int32_t>{*tok->TokenToId("<|im_end|>")});
}

TEST(TokenizerTest, ConfigAddsBosOnlyWithoutPostProcessor) {
  const std::string model =
      R"({"type":"BPE","vocab":{"<s>":0,"</s>":1,"a":2,"b":3,"ab":4},"merges":["a b"]})";
  const std::string added =
      R"([{"id":0,"content":"<s>","special":true},{"id":1,"content":"</s>","special":true}])";
  const std::string config =
      R"({"bos_token":{"content":"<s>"},"eos_token":"</s>","add_bos_token":true,"add_eos_token":true})";
  auto tok = Tokenizer::FromJson(Json(model, "null", "null", added), config);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->Encode("ab", true), (std::vector<int32_t>{0, 4, 1}));
  EXPECT_EQ((*tok)->Encode("ab", false), (std::vector<int32_t>{4}));
  EXPECT_EQ((*tok)->Encode("a<s>b", false), (std::vector<int32_t>{2, 0, 3}));
  // With a post-processor in tokenizer.json, that alone decides.
  const std::string post =
      R"({"type":"TemplateProcessing","single":[{"Sequence":{"id":"A","type_id":0}}],)"
      R"("special_tokens":{}})";
  tok = Tokenizer::FromJson(Json(model, "null", post, added), config);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->Encode("ab", true), (std::vector<int32_t>{4}));
}

TEST(TokenizerTest, BpeAffixesMatchReference) {
  // Expected ids recorded from HF tokenizers 0.23 on the same JSON.
  auto tok = Tokenizer::FromJson(Json(kAffixModel, R"({"type":"WhitespaceSplit"})"), "");
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->Encode("ab", false), (std::vector<int32_t>{7}));
  EXPECT_EQ((*tok)->Encode("abc", false), (std::vector<int32_t>{5, 3}));
  EXPECT_EQ((*tok)->Encode("a b", false), (std::vector<int32_t>{0, 0}));
  EXPECT_EQ((*tok)->Encode("abx", false), (std::vector<int32_t>{5, 0}));
  EXPECT_EQ((*tok)->Encode("xxa", false), (std::vector<int32_t>{0, 0, 0}));
  EXPECT_EQ((*tok)->Encode("c", false), (std::vector<int32_t>{0}));
}

TEST(TokenizerTest, EncodeIsThreadSafe) {
  std::unique_ptr<Tokenizer> tok = Load("gpt2");
  ASSERT_NE(tok, nullptr);
  std::vector<std::string> texts;
  for (int i = 0; i < 200; ++i) texts.push_back("text number " + std::to_string(i * 7919) + " go");
  std::vector<std::vector<int32_t>> expected;
  for (const auto& t : texts) expected.push_back(tok->Encode(t, true));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (size_t i = 0; i < texts.size(); ++i) {
          mismatches[t] += tok->Encode(texts[(i + t * 13) % texts.size()], true) !=
                           expected[(i + t * 13) % texts.size()];
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int m : mismatches) EXPECT_EQ(m, 0);
}

struct BadCase {
  const char* name;
  std::string json;
  const char* message_part;
};

TEST(TokenizerTest, BadJsonGivesClearErrors) {
  const std::string ok_model = R"({"type":"BPE","vocab":{"a":0,"b":1,"ab":2},"merges":["a b"]})";
  const std::vector<BadCase> cases = {
      {"syntax", "{\"model\": ", "tokenizer.json"},
      {"not object", "[1, 2]", "expected a JSON object"},
      {"no model", R"({"normalizer":null})", "model"},
      {"wordpiece", Json(R"({"type":"WordPiece","vocab":{}})"), "WordPiece"},
      {"unigram", Json(R"({"type":"Unigram","vocab":[]})"), "Unigram"},
      {"dropout", Json(R"({"type":"BPE","dropout":0.1,"vocab":{},"merges":[]})"), "dropout"},
      {"vocab type", Json(R"({"type":"BPE","vocab":{"a":"zero"},"merges":[]})"), "model.vocab"},
      {"huge id", Json(R"({"type":"BPE","vocab":{"a":99999999999},"merges":[]})"), "token id"},
      {"sparse id", Json(R"({"type":"BPE","vocab":{"a":0,"b":3000000},"merges":[]})"),
       "far past the vocabulary size"},
      {"negative id", Json(R"({"type":"BPE","vocab":{"a":-1},"merges":[]})"), "token id"},
      {"merge missing", Json(R"({"type":"BPE","vocab":{"a":0},"merges":["a b"]})"), "merges"},
      {"merge shape", Json(R"({"type":"BPE","vocab":{"a":0},"merges":[["a"]]})"), "merges"},
      {"merged missing", Json(R"({"type":"BPE","vocab":{"a":0,"b":1},"merges":["a b"]})"), "ab"},
      {"unk missing", Json(R"({"type":"BPE","unk_token":"<unk>","vocab":{},"merges":[]})"), "unk"},
      {"bad normalizer", WithNormalizer(Json(ok_model), R"({"type":"Precompiled"})"),
       "Precompiled"},
      {"bad pre", Json(ok_model, R"({"type":"Fancy"})"), "Fancy"},
      {"bad behavior",
       Json(ok_model, R"({"type":"Split","pattern":{"String":"a"},"behavior":"X"})"), "behavior"},
      {"bad pattern", Json(ok_model, R"({"type":"Split","pattern":{"Nope":"a"}})"), "pattern"},
      {"bad regex", Json(ok_model, R"({"type":"Split","pattern":{"Regex":"(unclosed"}})"), "Regex"},
      {"bad post", Json(ok_model, "null", R"({"type":"Weird"})"), "Weird"},
      {"template name",
       Json(
           ok_model, "null",
           R"({"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"X"}}],"special_tokens":{}})"),
       "X"},
      {"post id",
       Json(ok_model, "null", R"({"type":"BertProcessing","sep":["x",1],"cls":["y",7]})"),
       "post_processor"},
      {"added type", Json(ok_model, "null", "null", R"([{"id":"x","content":"a"}])"),
       "added_tokens"},
      {"added id", Json(ok_model, "null", "null", R"([{"id":-3,"content":"a"}])"), "added_tokens"},
  };
  for (const BadCase& c : cases) {
    auto tok = Tokenizer::FromJson(c.json, "");
    ASSERT_FALSE(tok.ok()) << c.name;
    EXPECT_EQ(tok.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(std::string(tok.status().message()).find(c.message_part), std::string::npos)
        << c.name << ": " << tok.status();
    EXPECT_NE(std::string(tok.status().message()).find("tokenizer.json"), std::string::npos)
        << c.name << ": " << tok.status();
  }
  auto tok = Tokenizer::FromJson(Json(ok_model), "{\"bos_token\": 5}");
  ASSERT_FALSE(tok.ok());
  EXPECT_NE(std::string(tok.status().message()).find("tokenizer_config.json"), std::string::npos);
}

TEST(TokenizerTest, MissingDirectoryIsNotFound) {
  auto tok = Tokenizer::LoadFromDir(FixtureDir("no_such_style"));
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(std::string(tok.status().message()).find("tokenizer.json"), std::string::npos);
}

}  // namespace
}  // namespace loom::text
