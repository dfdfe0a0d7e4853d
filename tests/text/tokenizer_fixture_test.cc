// Golden test: every fixture tokenizer under tests/text/fixtures/tokenizers/<style>/ must give
// exactly the ids and texts HF `tokenizers` recorded in cases.json (make_tokenizer_fixtures.py).
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/common/file.h"
#include "engine/common/json.h"
#include "gtest/gtest.h"
#include "server/text/tokenizer/tokenizer.h"

namespace loom::text {
namespace {

const char* const kStyles[] = {"llama3",  "gpt2",  "qwen2",  "deepseek_v3", "llama2",
                               "mistral", "gemma", "digits", "splits",      "affixes", "oniguruma"};

std::string FixtureDir(const std::string& style) {
  return std::string(LOOM_SOURCE_DIR) + "/tests/text/fixtures/tokenizers/" + style;
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

class FixtureTest : public ::testing::TestWithParam<const char*> {};

TEST_P(FixtureTest, MatchesReference) {
  const std::string dir = FixtureDir(GetParam());
  absl::StatusOr<std::unique_ptr<Tokenizer>> tok = Tokenizer::LoadFromDir(dir);
  ASSERT_TRUE(tok.ok()) << tok.status();
  EXPECT_EQ((*tok)->vocab_size(), 512);
  absl::StatusOr<std::string> text = ReadFile(dir + "/cases.json");
  ASSERT_TRUE(text.ok()) << text.status();
  absl::StatusOr<Json> cases = Json::Parse(*text);
  ASSERT_TRUE(cases.ok()) << cases.status();
  const Json encode = *cases->Get("encode");
  int matched = 0;
  for (size_t i = 0; i < encode.size(); ++i) {
    const Json c = encode[i];
    const std::string input =
        c.Has("input_hex") ? FromHex(*c.GetString("input_hex")) : *c.GetString("input");
    SCOPED_TRACE(testing::Message() << "encode case " << i << ": " << c.Dump());
    const std::vector<int32_t> ids = (*tok)->Encode(input, true);
    const std::vector<int32_t> ids_no_special = (*tok)->Encode(input, false);
    EXPECT_EQ(ids, Ids(*c.Get("ids")));
    EXPECT_EQ(ids_no_special, Ids(*c.Get("ids_no_special")));
    const std::vector<int32_t> ref = Ids(*c.Get("ids"));
    const std::string decoded = (*tok)->Decode(ref, false);
    const std::string decoded_skip = (*tok)->Decode(ref, true);
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
    const std::string decoded = (*tok)->Decode(ids, false);
    const std::string decoded_skip = (*tok)->Decode(ids, true);
    EXPECT_EQ(decoded, *c.GetString("decoded"));
    EXPECT_EQ(decoded_skip, *c.GetString("decoded_skip_special"));
    matched +=
        decoded == *c.GetString("decoded") && decoded_skip == *c.GetString("decoded_skip_special");
  }
  // Every id's token string, and back.
  const Json id_to_token = *cases->Get("id_to_token");
  ASSERT_EQ(id_to_token.size(), 512u);
  int tokens_matched = 0;
  for (size_t id = 0; id < id_to_token.size(); ++id) {
    const std::optional<std::string> token = (*tok)->IdToToken(static_cast<int32_t>(id));
    if (id_to_token[id].IsNull()) {
      EXPECT_EQ(token, std::nullopt) << id;
      tokens_matched += !token.has_value();
      continue;
    }
    EXPECT_EQ(token, *id_to_token[id].AsString()) << id;
    tokens_matched += token == *id_to_token[id].AsString();
  }
  EXPECT_EQ(tokens_matched, 512);
  std::printf("[ style %s ] %d of %zu cases match\n", GetParam(), matched,
              encode.size() + decode.size());
}

INSTANTIATE_TEST_SUITE_P(Styles, FixtureTest, ::testing::ValuesIn(kStyles),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace loom::text
