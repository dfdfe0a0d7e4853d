// Streaming detokenization: for every fixture tokenizer, what the Detokenizer emits token by token
// must add up to Decode(all ids) exactly, for encoded hard strings and for random id sequences;
// stop strings cut the text before the first stop string, even across tokens.
#include "server/text/detokenizer.h"

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/text/tokenizer/tokenizer.h"
#include "engine/common/utf8.h"

namespace loom::text {
namespace {

const char* const kStyles[] = {"llama3",  "gpt2",  "qwen2",  "deepseek_v3", "llama2",
                               "mistral", "gemma", "digits", "splits",      "affixes"};

std::unique_ptr<Tokenizer> Load(const std::string& style) {
  auto tok = Tokenizer::LoadFromDir(std::string(LOOM_SOURCE_DIR) +
                                    "/tests/text/fixtures/tokenizers/" + style);
  EXPECT_TRUE(tok.ok()) << tok.status();
  return tok.ok() ? std::move(*tok) : nullptr;
}

// Streams `ids`; checks every chunk is well-formed UTF-8 and returns their concatenation.
std::string Stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip_special,
                   std::vector<std::string> stops = {}, Detokenizer* out = nullptr) {
  Detokenizer local(&tok, {skip_special, std::move(stops)});
  Detokenizer& detok = out != nullptr ? *out : local;
  std::string text;
  for (int32_t id : ids) {
    std::string chunk = detok.Add(id);
    EXPECT_TRUE(IsValidUtf8(chunk));
    text += chunk;
  }
  text += detok.Finish();
  return text;
}

const char* const kTexts[] = {
    "Hello world, this is a streaming test.",
    " leading space",
    "  two leading spaces",
    "emoji 😀👍🏽 family 👨‍👩‍👧‍👦 and 中文字符 and Привет",
    "line1\nline2\r\n\tindented",
    "numbers 1234567 3.14159",
    "ｗｉｄｅ chars ²½",
    "",
};

class DetokenizerTest : public ::testing::TestWithParam<const char*> {};

TEST_P(DetokenizerTest, EncodedTextStreamsLikeDecode) {
  std::unique_ptr<Tokenizer> tok = Load(GetParam());
  ASSERT_NE(tok, nullptr);
  for (const char* text : kTexts) {
    for (bool add_special : {false, true}) {
      const std::vector<int32_t> ids = tok->Encode(text, add_special);
      for (bool skip : {false, true}) {
        SCOPED_TRACE(testing::Message() << "text=\"" << text << "\" skip=" << skip);
        EXPECT_EQ(Stream(*tok, ids, skip), tok->Decode(ids, skip));
      }
    }
  }
}

TEST_P(DetokenizerTest, RandomIdsStreamLikeDecode) {
  std::unique_ptr<Tokenizer> tok = Load(GetParam());
  ASSERT_NE(tok, nullptr);
  std::mt19937 rng(1234);
  int checked = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 40);
    std::vector<int32_t> ids;
    for (int i = 0; i < n; ++i) {
      // Half the time low ids: byte tokens and single bytes, which split characters.
      ids.push_back(static_cast<int32_t>(rng() % 2 == 0 ? rng() % 270 : rng() % tok->vocab_size()));
    }
    const bool skip = trial % 2 == 0;
    SCOPED_TRACE(testing::Message() << "trial " << trial);
    EXPECT_EQ(Stream(*tok, ids, skip), tok->Decode(ids, skip));
    ++checked;
  }
  EXPECT_EQ(checked, 400);
}

TEST_P(DetokenizerTest, StopStringsCutTheText) {
  std::unique_ptr<Tokenizer> tok = Load(GetParam());
  ASSERT_NE(tok, nullptr);
  const std::string text = "The answer is 42. Stop here and more text after here.";
  const std::vector<int32_t> ids = tok->Encode(text, false);
  const std::string full = tok->Decode(ids, true);
  // The stop string as this tokenizer spells "here" (some lowercase or join with spaces).
  std::string stop = tok->Decode(tok->Encode("here", false), true);
  stop.erase(0, stop.find_first_not_of(' '));
  ASSERT_FALSE(stop.empty());
  const size_t stop_at = full.find(stop);
  ASSERT_NE(stop_at, std::string::npos) << full << " / " << stop;
  Detokenizer detok(tok.get(), {true, {"never matches", stop}});
  const std::string streamed = Stream(*tok, ids, true, {}, &detok);
  EXPECT_EQ(streamed, full.substr(0, stop_at));
  EXPECT_TRUE(detok.stopped());
  EXPECT_EQ(detok.stop_index(), 1u);
  EXPECT_EQ(detok.Add(ids[0]), "");

  // A stop string that never completes: its partial match is held and finally flushed.
  Detokenizer partial(tok.get(), {true, {full.substr(full.size() - 3) + "!"}});
  EXPECT_EQ(Stream(*tok, ids, true, {}, &partial), full);
  EXPECT_FALSE(partial.stopped());
}

TEST_P(DetokenizerTest, RandomStopStringsNeverLeak) {
  std::unique_ptr<Tokenizer> tok = Load(GetParam());
  ASSERT_NE(tok, nullptr);
  std::mt19937 rng(7);
  int stopped = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<int32_t> ids;
    const int n = 1 + static_cast<int>(rng() % 60);
    for (int i = 0; i < n; ++i) {
      ids.push_back(
          static_cast<int32_t>(rng() % 2 ? rng() % tok->vocab_size() : 250 + rng() % 262));
    }
    const std::string full = tok->Decode(ids, true);
    // Stop strings cut from the text itself (so they do occur), plus one that never does.
    std::vector<std::string> stops = {"never occurs \x01"};
    for (int k = 0; k < 2 && full.size() >= 2; ++k) {
      const std::string stop = full.substr(rng() % full.size(), 1 + rng() % 6);
      if (IsValidUtf8(stop)) stops.push_back(stop);
    }
    Detokenizer detok(tok.get(), {true, stops});
    const std::string out = Stream(*tok, ids, true, {}, &detok);
    SCOPED_TRACE(testing::Message() << "trial " << trial);
    ASSERT_EQ(full.compare(0, out.size(), out), 0) << "emitted text is not a prefix of Decode";
    for (const std::string& stop : stops) EXPECT_EQ(out.find(stop), std::string::npos) << stop;
    if (detok.stopped()) {
      ++stopped;
      const std::string& stop = stops[*detok.stop_index()];
      EXPECT_EQ(full.compare(out.size(), stop.size(), stop), 0);
    } else {
      EXPECT_EQ(out, full);
    }
  }
  EXPECT_GT(stopped, 100);
}

INSTANTIATE_TEST_SUITE_P(Styles, DetokenizerTest, ::testing::ValuesIn(kStyles),
                         [](const auto& info) { return std::string(info.param); });

TEST(DetokenizerHoldTest, PartialStopIsHeldUntilDecided) {
  std::unique_ptr<Tokenizer> tok = Load("llama3");
  ASSERT_NE(tok, nullptr);
  // Encode "ab" and "c" separately so "ab" arrives before the stop string "abc" is decided.
  std::vector<int32_t> ids = tok->Encode("xx ab", false);
  const std::vector<int32_t> tail = tok->Encode("d", false);
  Detokenizer detok(tok.get(), {true, {"abc"}});
  std::string emitted;
  for (int32_t id : ids) emitted += detok.Add(id);
  EXPECT_EQ(emitted.find("ab"), std::string::npos) << emitted;
  for (int32_t id : tail) emitted += detok.Add(id);
  emitted += detok.Finish();
  EXPECT_EQ(emitted, "xx abd");
  EXPECT_FALSE(detok.stopped());
}

TEST(DetokenizerHoldTest, SplitCharacterIsHeldThenCompleted) {
  std::unique_ptr<Tokenizer> tok = Load("llama2");
  ASSERT_NE(tok, nullptr);
  // "€" is E2 82 AC: three byte-fallback tokens.
  const std::vector<int32_t> ids = {*tok->TokenToId("<0xE2>"), *tok->TokenToId("<0x82>"),
                                    *tok->TokenToId("<0xAC>")};
  Detokenizer detok(tok.get(), {true, {}});
  EXPECT_EQ(detok.Add(ids[0]), "");
  EXPECT_EQ(detok.Add(ids[1]), "");
  std::string text = detok.Add(ids[2]);
  text += detok.Finish();
  EXPECT_EQ(text, "\xE2\x82\xAC");

  Detokenizer cut(tok.get(), {true, {}});
  EXPECT_EQ(cut.Add(ids[0]), "");
  EXPECT_EQ(cut.Finish(), tok->Decode({ids[0]}, true));
  EXPECT_EQ(cut.Finish(), "");
}

}  // namespace
}  // namespace loom::text
