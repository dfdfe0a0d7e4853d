// Replays tests/text/fixtures/templates/*.json, produced by make_template_fixtures.py with Python
// jinja2 in Hugging Face's chat-template environment: every case must render byte for byte the
// same text, or fail where jinja2 failed (with the same message when the template called
// raise_exception).

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "engine/common/file.h"
#include "gtest/gtest.h"
#include "server/text/chat_template.h"

namespace loom::text {
namespace {

using jinja::Value;

const std::string kFixtureDir = std::string(LOOM_SOURCE_DIR) + "/tests/text/fixtures/templates";
const std::string kTemplateDir = std::string(LOOM_SOURCE_DIR) + "/tests/text/templates";

std::vector<std::string> FixtureFiles() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(kFixtureDir, ec)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

const Value& Member(const Value& dict, std::string_view key) {
  static const Value* const kMissing = new Value();
  const Value* v = dict.AsDict().Find(key);
  return v != nullptr ? *v : *kMissing;
}

std::optional<std::string> OptionalString(const Value& dict, std::string_view key) {
  const Value& v = Member(dict, key);
  if (!v.IsString()) return std::nullopt;
  return v.AsString();
}

bool EndsWith(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

TEST(ChatTemplateFixtureTest, FindsFixtures) {
  // The generator writes 8 model-style templates, 8 feature templates and an error template.
  EXPECT_GE(FixtureFiles().size(), 17u);
}

class FixtureFileTest : public testing::TestWithParam<std::string> {};

TEST_P(FixtureFileTest, MatchesJinja2) {
  absl::StatusOr<std::string> text = ReadFile(kFixtureDir + "/" + GetParam());
  ASSERT_TRUE(text.ok()) << text.status();
  absl::StatusOr<Value> doc = jinja::ParseJson(*text);
  ASSERT_TRUE(doc.ok()) << doc.status();
  absl::StatusOr<std::string> source = ReadFile(kTemplateDir + "/" + Member(*doc, "template").AsString());
  ASSERT_TRUE(source.ok()) << source.status();
  const Value& tokens = Member(*doc, "special_tokens");
  SpecialTokens special{OptionalString(tokens, "bos_token"), OptionalString(tokens, "eos_token"),
                        OptionalString(tokens, "unk_token"), OptionalString(tokens, "pad_token")};
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::FromSource(*source, special);
  ASSERT_TRUE(chat.ok()) << chat.status();

  const jinja::ValueList& cases = Member(*doc, "cases").AsList();
  ASSERT_FALSE(cases.empty());
  for (const Value& c : cases) {
    SCOPED_TRACE(Member(c, "name").AsString());
    ChatRenderRequest request;
    request.messages = Member(c, "messages");
    if (!Member(c, "tools").IsNone()) request.tools = Member(c, "tools");
    request.add_generation_prompt = Member(c, "add_generation_prompt").AsBool();
    request.kwargs = Member(c, "kwargs");
    request.options.now_unix_seconds = Member(*doc, "now_unix_seconds").AsInt();
    absl::StatusOr<std::string> rendered = chat->Render(request);
    const Value& expected = Member(c, "expected");
    if (expected.IsString()) {
      ASSERT_TRUE(rendered.ok()) << rendered.status();
      EXPECT_EQ(*rendered, expected.AsString());
      continue;
    }
    EXPECT_FALSE(rendered.ok()) << "jinja2 failed with: " << Member(c, "error").AsString()
                                << "\nbut loom rendered:\n" << *rendered;
    if (!rendered.ok()) {
      EXPECT_EQ(rendered.status().code(), absl::StatusCode::kInvalidArgument);
    }
    if (!rendered.ok() && Member(c, "raise").AsBool()) {
      EXPECT_TRUE(EndsWith(std::string(rendered.status().message()), Member(c, "error").AsString()))
          << rendered.status().message() << "\nexpected to end with: " << Member(c, "error").AsString();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Templates, FixtureFileTest, testing::ValuesIn(FixtureFiles()),
                         [](const testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param.substr(0, info.param.find('.'));
                           return name;
                         });

}  // namespace
}  // namespace loom::text
