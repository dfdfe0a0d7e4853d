// Unit tests of server/text/regex: syntax errors, the syntax the old hand-written engine lacked,
// the find_iter rules for empty matches, the limits on hostile patterns, and sharing between
// threads. Agreement with HF tokenizers on the tokenizer patterns is tested by
// regex_fixture_test.cc.
#include "server/text/regex/regex.h"

#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace loom::text {
namespace {

using Spans = std::vector<std::pair<size_t, size_t>>;

Spans Find(std::string_view pattern, std::string_view text) {
  absl::StatusOr<Regex> regex = Regex::Compile(pattern);
  EXPECT_TRUE(regex.ok()) << pattern << ": " << regex.status();
  Spans out;
  if (regex.ok()) regex->FindAll(text, &out);
  return out;
}

std::vector<std::string> Pieces(std::string_view pattern, std::string_view text) {
  std::vector<std::string> out;
  for (const auto& [b, e] : Find(pattern, text)) out.emplace_back(text.substr(b, e - b));
  return out;
}

std::string CompileError(std::string_view pattern) {
  absl::StatusOr<Regex> regex = Regex::Compile(pattern);
  EXPECT_FALSE(regex.ok()) << pattern;
  if (regex.ok()) return "";
  EXPECT_EQ(regex.status().code(), absl::StatusCode::kInvalidArgument);
  return std::string(regex.status().message());
}

const char kGpt2[] =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

TEST(RegexTest, SplitsLikeGpt2) {
  EXPECT_EQ(Pieces(kGpt2, "Hello world's 123 ..  x\n"),
            (std::vector<std::string>{"Hello", " world", "'s", " 123", " ..", " ", " x", "\n"}));
}

TEST(RegexTest, ReportsByteOffsetsInUtf8) {
  EXPECT_EQ(Find(R"(\p{L}+)", "\xC3\xA9t\xC3\xA9 \xE4\xB8\xAD"), (Spans{{0, 5}, {6, 9}}));
}

// Errors carry Oniguruma's own message.
TEST(RegexTest, ErrorsCarryOnigurumasMessage) {
  EXPECT_NE(CompileError("(ab").find("end pattern with unmatched parenthesis"), std::string::npos);
  EXPECT_NE(CompileError("ab)").find("unmatched close parenthesis"), std::string::npos);
  EXPECT_NE(CompileError("x[a-").find("premature end of char-class"), std::string::npos);
  EXPECT_NE(CompileError(R"(a\p{Klingon})").find("invalid character property name"),
            std::string::npos);
  EXPECT_NE(CompileError(R"((a)\2)").find("invalid backref number"), std::string::npos);
  EXPECT_NE(CompileError("*a").find("target of repeat operator is not specified"),
            std::string::npos);
  EXPECT_NE(CompileError("[z-a]").find("empty range in char class"), std::string::npos);
  EXPECT_NE(CompileError("a\xFF" "b").find("not valid UTF-8"), std::string::npos);
}

// What the hand-written engine lacked: backreferences, scripts and POSIX brackets (which it read
// as a class of the characters ":alph").
TEST(RegexTest, BackreferencesScriptsAndPosixBrackets) {
  EXPECT_EQ(Pieces(R"((\p{L})\1+)", "aab xxxy"), (std::vector<std::string>{"aa", "xxx"}));
  EXPECT_EQ(Pieces(R"((?<q>['"]).*?\k<q>)", R"(say "it's" 'x')"),
            (std::vector<std::string>{R"("it's")", "'x'"}));
  EXPECT_EQ(Pieces(R"(\p{Han}+)", "ab\xE4\xB8\xAD\xE6\x96\x87 \xE3\x81\x8B"),  // 中文 か
            (std::vector<std::string>{"\xE4\xB8\xAD\xE6\x96\x87"}));
  EXPECT_EQ(Pieces("[[:alpha:]]+", "ha: lp"), (std::vector<std::string>{"ha", "lp"}));
  EXPECT_EQ(Pieces("[[:^alpha:][:digit:]]+", "ab12 :c"), (std::vector<std::string>{"12 :"}));
  EXPECT_EQ(Pieces(R"(\p{Alpha}+)", "\xC3\xA9t\xC3\xA9 1"),
            (std::vector<std::string>{"\xC3\xA9t\xC3\xA9"}));
}

TEST(RegexTest, DeepNestingIsAnErrorNotACrash) {
  CompileError(std::string(100000, '('));
  CompileError(std::string(100000, '['));
  std::string quantifiers = "a";
  for (int i = 0; i < 5000; ++i) quantifiers += "{1}";
  CompileError(quantifiers);
  std::string lookaheads;
  for (int i = 0; i < 5000; ++i) lookaheads += "(?=";
  CompileError(lookaheads);
}

// HF compiles with Oniguruma's default syntax (ONIG_SYNTAX_ONIGURUMA), not Ruby's: (?W) (ASCII
// \w) is an option there, and a reversed interval is read as {2,3}, as HF reads it.
TEST(RegexTest, UsesTheOnigurumaSyntax) {
  EXPECT_EQ(Pieces(R"((?W)\w+)", "\xC3\xA9t\xC3\xA9 ab"), (std::vector<std::string>{"t", "ab"}));
  EXPECT_EQ(Pieces("ab{3,2}", "abbb abb ab"), (std::vector<std::string>{"abbb", "abb"}));
}

TEST(RegexTest, HugeRepeatCountsAreAnError) {
  EXPECT_NE(CompileError("a{100001}").find("too big number for repeat range"), std::string::npos);
}

// The onig crate's find_iter: an empty match right where the previous match ended is skipped.
TEST(RegexTest, EmptyMatchesFollowFindIter) {
  EXPECT_EQ(Find("a*", "baab"), (Spans{{0, 0}, {1, 3}, {4, 4}}));
  EXPECT_EQ(Find("", "ab"), (Spans{{0, 0}, {1, 1}, {2, 2}}));
  EXPECT_EQ(Find("", ""), (Spans{{0, 0}}));
  EXPECT_EQ(Find(R"(\b)", "ab cd"), (Spans{{0, 0}, {2, 2}, {3, 3}, {5, 5}}));
  // The empty match after "é" resumes one code point (two bytes) later.
  EXPECT_EQ(Find("x*", "\xC3\xA9x"), (Spans{{0, 0}, {2, 3}}));
}

TEST(RegexTest, QuantifierFlavours) {
  EXPECT_EQ(Pieces("a+?", "aaa"), (std::vector<std::string>{"a", "a", "a"}));
  EXPECT_EQ(Pieces("a{2,3}", "aaaaaaa"), (std::vector<std::string>{"aaa", "aaa"}));
  EXPECT_TRUE(Find("a++a", "aaaa").empty());  // possessive gives nothing back
  EXPECT_EQ(Pieces("(?:ab)*?c", "ababc"), (std::vector<std::string>{"ababc"}));
  EXPECT_EQ(Pieces("(?:a|b?)*c", "abbac"), (std::vector<std::string>{"abbac"}));
}

TEST(RegexTest, LookaroundsAndAnchors) {
  EXPECT_EQ(Pieces(R"(\s+(?!\S))", "a   b"), (std::vector<std::string>{"  "}));
  EXPECT_EQ(Pieces(R"((?<=a+)x)", "aax bx"), (std::vector<std::string>{"x"}));
  EXPECT_EQ(Pieces(R"((?<!\d)\d)", "12 3"), (std::vector<std::string>{"1", "3"}));
  EXPECT_EQ(Pieces("^a|a$", "a\na\nba"), (std::vector<std::string>{"a", "a", "a"}));
  EXPECT_EQ(Find(R"(\Aa)", "aa"), (Spans{{0, 1}}));
}

TEST(RegexTest, CaseInsensitiveUsesSimpleUnicodeFolding) {
  EXPECT_EQ(Pieces("(?i:'s)", "'s 'S '\xC5\xBF"),  // ſ folds to s
            (std::vector<std::string>{"'s", "'S", "'\xC5\xBF"}));
  EXPECT_EQ(Pieces("(?i)k", "kK\xE2\x84\xAA"),  // Kelvin sign
            (std::vector<std::string>{"k", "K", "\xE2\x84\xAA"}));
  EXPECT_EQ(Pieces("(?i:\xCF\x83)+", "\xCE\xA3\xCF\x83\xCF\x82"),  // Σσς
            (std::vector<std::string>{"\xCE\xA3\xCF\x83\xCF\x82"}));
  EXPECT_TRUE(Find(R"((?i)\p{Lu})", "abc").empty());  // properties are not folded
}

// Oniguruma also folds to and from multi-character foldings (ß ~ ss), except inside lookbehind.
TEST(RegexTest, CaseInsensitiveMultiCharacterFolds) {
  EXPECT_EQ(Pieces("(?i)stra\xC3\x9F" "e", "STRASSE strasse STRA\xE1\xBA\x9E" "E"),
            (std::vector<std::string>{"STRASSE", "strasse", "STRA\xE1\xBA\x9E" "E"}));
  EXPECT_EQ(Pieces("(?i)ss", "\xC3\x9F"), (std::vector<std::string>{"\xC3\x9F"}));
  EXPECT_EQ(Pieces("(?i)[\xC3\x9F]", "SS"), (std::vector<std::string>{"SS"}));
  EXPECT_EQ(Pieces("(?i)\xEF\xAC\x81+", "FIfi\xEF\xAC\x81"),  // ﬁ+
            (std::vector<std::string>{"FIfi\xEF\xAC\x81"}));
  EXPECT_TRUE(Find("(?i)(?<=\xC3\x9F)x", "ssx").empty());
  EXPECT_TRUE(Find("(?i)[^\xC3\x9F]", "\xC3\x9F").empty());
}

// Exponential backtracking is cut off by Oniguruma's retry limits: the search ends quickly.
TEST(RegexTest, CatastrophicBacktrackingTerminates) {
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(Find("(a*)*b", std::string(5000, 'a')).empty());
  EXPECT_TRUE(Find("(?:a|a)*c", std::string(200, 'a')).empty());
  EXPECT_TRUE(Find("(?:(?:a+)+)+b", std::string(3000, 'a')).empty());
  EXPECT_TRUE(Find("(?:x+x+)+y", std::string(2000, 'x')).empty());
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 20.0);
}

// Once a limit runs out (where HF's onig crate panics), nothing further is reported, even a
// match after the hostile stretch; what matched before it stays.
TEST(RegexTest, ARetryLimitEndsTheSearch) {
  const std::string text = "xxy " + std::string(300, 'x') + "z xxy";
  EXPECT_EQ(Find("(?:x+x+)+y", text), (Spans{{0, 3}}));
}

TEST(RegexTest, LongRunsAreMatchedWhole) {
  // A legitimate long match must not be cut by the per-position budget.
  const std::string spaces(3000000, ' ');
  EXPECT_EQ(Find(R"(\s+)", spaces), (Spans{{0, spaces.size()}}));
  const std::string text = spaces + "x";
  EXPECT_EQ(Find(R"(\s+(?!\S)|\s+)", text), (Spans{{0, spaces.size() - 1},
                                                  {spaces.size() - 1, spaces.size()}}));
}

TEST(RegexTest, CopiesShareTheProgramAndThreadsShareCopies) {
  absl::StatusOr<Regex> compiled = Regex::Compile(kGpt2);
  ASSERT_TRUE(compiled.ok());
  const Regex copy = *compiled;
  std::string text;
  for (int i = 0; i < 2000; ++i) text += "It's 42 \xE4\xB8\xAD\xE6\x96\x87 words!  ";
  Spans expected;
  copy.FindAll(text, &expected);
  ASSERT_GT(expected.size(), 10000u);
  std::vector<Spans> results(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] { compiled->FindAll(text, &results[t]); });
  }
  for (auto& thread : threads) thread.join();
  for (const Spans& r : results) EXPECT_EQ(r, expected);
}

TEST(RegexTest, DefaultConstructedMatchesNothing) {
  const Regex regex;
  Spans spans;
  regex.FindAll("anything", &spans);
  EXPECT_TRUE(spans.empty());
}

TEST(RegexTest, FindAllAppends) {
  absl::StatusOr<Regex> regex = Regex::Compile("b");
  ASSERT_TRUE(regex.ok());
  Spans spans{{7, 8}};
  regex->FindAll("abab", &spans);
  EXPECT_EQ(spans, (Spans{{7, 8}, {1, 2}, {3, 4}}));
}

}  // namespace
}  // namespace loom::text
