// Golden test of the regex engine against HF tokenizers (Oniguruma): every pattern of
// tests/text/fixtures/regex/matches.json (tokenizer patterns and one or more per syntax feature)
// and random.json (random patterns of the supported syntax) on every text must give exactly the
// recorded match spans, and the patterns Oniguruma rejects must fail to compile. The fixtures
// and the script that made them: tests/text/make_regex_fixtures.py. The reference cannot show
// empty matches, so empty matches are left out of the comparison. The system's Oniguruma (6.9.8,
// Unicode 14) is older than the one HF bundles: kNewerOnigurumaDiffers lists the patterns whose
// classes the newer one widened; they must still compile.
#include <string>
#include <utility>
#include <vector>

#include "engine/common/file.h"
#include "engine/common/json.h"
#include "gtest/gtest.h"
#include "server/text/regex/regex.h"

namespace loom::text {
namespace {

using Spans = std::vector<std::pair<size_t, size_t>>;

absl::StatusOr<Json> LoadFixture(std::string_view name) {
  const std::string path =
      std::string(LOOM_SOURCE_DIR) + "/tests/text/fixtures/regex/" + std::string(name);
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  return Json::Parse(*text, path);
}

Spans NonEmptyMatches(const Regex& regex, std::string_view text) {
  Spans all, out;
  regex.FindAll(text, &all);
  for (const auto& span : all) {
    if (span.first != span.second) out.push_back(span);
  }
  return out;
}

std::string Show(std::string_view text, const Spans& spans) {
  std::string out;
  for (const auto& [b, e] : spans) {
    out += "[" + std::to_string(b) + "," + std::to_string(e) + ")'" +
           std::string(text.substr(b, e - b)) + "' ";
  }
  return out;
}

// [[:punct:]] also takes the symbols (\p{S}) and \p{Word} the other numbers (\p{No}) in the
// Oniguruma HF bundles, not in 6.9.8.
const char* const kNewerOnigurumaDiffers[] = {"class_posix", "prop_word_punct"};

bool NewerOnigurumaDiffers(const std::string& name) {
  for (const char* differs : kNewerOnigurumaDiffers) {
    if (name == differs) return true;
  }
  return false;
}

// Checks every pattern of one fixture file; returns the number of (pattern, text) cases.
size_t CheckFixture(std::string_view file) {
  const absl::StatusOr<Json> loaded = LoadFixture(file);
  EXPECT_TRUE(loaded.ok()) << loaded.status();
  if (!loaded.ok()) return 0;
  const Json& fixture = *loaded;
  const Json texts = *fixture.Get("texts");
  const Json patterns = *fixture.Get("patterns");
  size_t num_cases = 0;
  for (size_t p = 0; p < patterns.size(); ++p) {
    const Json entry = patterns[p];
    const std::string name = *entry.Get("name")->AsString();
    const std::string pattern = *entry.Get("pattern")->AsString();
    absl::StatusOr<Regex> regex = Regex::Compile(pattern);
    if (*entry.Get("error")->AsBool()) {
      EXPECT_FALSE(regex.ok()) << name << ": the reference rejects " << pattern;
      continue;
    }
    EXPECT_TRUE(regex.ok()) << name << ": " << regex.status();
    const Json matches = *entry.Get("matches");
    EXPECT_EQ(matches.size(), texts.size()) << name;
    if (!regex.ok() || matches.size() != texts.size() || NewerOnigurumaDiffers(name)) continue;
    for (size_t t = 0; t < texts.size(); ++t) {
      const std::string text = *texts[t].AsString();
      Spans expected;
      const Json spans = matches[t];
      for (size_t i = 0; i < spans.size(); ++i) {
        expected.emplace_back(static_cast<size_t>(*spans[i][0].AsInt()),
                              static_cast<size_t>(*spans[i][1].AsInt()));
      }
      const Spans actual = NonEmptyMatches(*regex, text);
      EXPECT_EQ(actual, expected) << name << " /" << pattern << "/ on \"" << text
                                  << "\"\n  got:      " << Show(text, actual)
                                  << "\n  expected: " << Show(text, expected);
      ++num_cases;
    }
  }
  return num_cases;
}

TEST(RegexFixtureTest, TokenizerAndFeaturePatternsMatchOniguruma) {
  EXPECT_GT(CheckFixture("matches.json"), 3500u);
}

TEST(RegexFixtureTest, RandomPatternsMatchOniguruma) {
  EXPECT_GT(CheckFixture("random.json"), 4000u);
}

}  // namespace
}  // namespace loom::text
