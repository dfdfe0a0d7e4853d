#include "server/text/regex/regex.h"

#include <oniguruma.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "engine/common/logging.h"
#include "engine/common/strings.h"
#include "engine/common/utf8.h"
#include "server/text/regex/split_scanner.h"

namespace loom::text {

namespace regex_internal {

// Owns one compiled Oniguruma regex. onig_search only reads the regex_t (all match state lives
// in the per-call region, match parameters and the library's per-call stack), so one Program is
// searched from many threads at once.
struct Program {
  Program(OnigRegex compiled, SplitScanFn split_scan) : regex(compiled), scan(split_scan) {}
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  ~Program() { onig_free(regex); }

  OnigRegex regex;
  // The hand-written scanner giving the same matches, when the pattern has one.
  SplitScanFn scan;
};

}  // namespace regex_internal

namespace {

// The onig crate's default (and HF's, which never changes it): a match attempt at one start
// position gives up after this many backtracks.
constexpr unsigned long kRetryLimitInMatch = 10'000'000;
// One search (all start positions from one point on) gives up after this many backtracks plus
// kRetriesPerByte for each byte left to search, so a hostile pattern costs bounded time per
// byte instead of hanging.
constexpr unsigned long kRetryLimitInSearchBase = 20'000'000;
constexpr unsigned long kRetriesPerByte = 1'000;
// The backtrack stack (entries, each a few words) may grow to this plus kStackEntriesPerByte
// for each byte of the text.
constexpr unsigned int kMatchStackBase = 1u << 20;
constexpr unsigned int kStackEntriesPerByte = 16;
// Ill-formed UTF-8 bytes read as this (a symbol, as U+FFFD is) when FindAll gets them.
constexpr char kIllFormedStandIn = '~';

// Oniguruma's global tables are set up once, before the first compile, by whichever thread gets
// there first. onig_end is never called: compiled regexes live until the process exits.
void InitializeOnigurumaOnce() {
  static const int status = [] {
    OnigEncoding encodings[] = {ONIG_ENCODING_UTF8};
    return onig_initialize(encodings, 1);
  }();
  LOOM_CHECK(status == ONIG_NORMAL, "Oniguruma failed to initialize (code ", status, ")");
}

std::string OnigMessage(int code, OnigErrorInfo* info) {
  OnigUChar buffer[ONIG_MAX_ERROR_MESSAGE_LEN];
  const int len = info != nullptr ? onig_error_code_to_str(buffer, code, info)
                                  : onig_error_code_to_str(buffer, code);
  return std::string(reinterpret_cast<const char*>(buffer), len > 0 ? len : 0);
}

// `text` with every byte of an ill-formed UTF-8 sequence replaced by kIllFormedStandIn, so byte
// offsets are unchanged and Oniguruma (which trusts lead bytes) never reads past the end.
std::string StandInIllFormed(std::string_view text) {
  std::string out(text);
  for (size_t pos = 0; pos < text.size();) {
    size_t len = 1;
    const char32_t cp = DecodeUtf8(text, pos, &len);
    if (cp == kReplacementChar && text.substr(pos, len) != "\xEF\xBF\xBD") {
      out.replace(pos, len, len, kIllFormedStandIn);
    }
    pos += len;
  }
  return out;
}

struct RegionDeleter {
  void operator()(OnigRegion* region) const { onig_region_free(region, /*free_self=*/1); }
};
struct MatchParamDeleter {
  void operator()(OnigMatchParam* param) const { onig_free_match_param(param); }
};

// Length of the code point at text[pos] (1 for a stray continuation byte), as Rust's
// `chars().next().len_utf8()` over the well-formed text.
size_t CodePointLen(std::string_view text, size_t pos) {
  size_t step = 1;
  while (pos + step < text.size() && (static_cast<uint8_t>(text[pos + step]) & 0xC0) == 0x80) {
    ++step;
  }
  return step;
}

}  // namespace

Regex::Regex(std::shared_ptr<const regex_internal::Program> program)
    : program_(std::move(program)) {}

Regex::~Regex() = default;

absl::StatusOr<Regex> Regex::Compile(std::string_view pattern) {
  return Compile(pattern, /*use_split_scanner=*/true);
}

absl::StatusOr<Regex> Regex::CompileWithoutFastPath(std::string_view pattern) {
  return Compile(pattern, /*use_split_scanner=*/false);
}

absl::StatusOr<Regex> Regex::Compile(std::string_view pattern, bool use_split_scanner) {
  // HF reads patterns as Rust strings, which are always well-formed.
  if (!IsValidUtf8(pattern)) {
    return absl::InvalidArgumentError("invalid regular expression: not valid UTF-8");
  }
  InitializeOnigurumaOnce();
  const auto* begin = reinterpret_cast<const OnigUChar*>(pattern.data());
  OnigRegex compiled = nullptr;
  OnigErrorInfo info;
  // What the onig crate's Regex::new (HF tokenizers' SysRegex) passes: no options, the default
  // syntax.
  const int code = onig_new(&compiled, begin, begin + pattern.size(), ONIG_OPTION_NONE,
                            ONIG_ENCODING_UTF8, ONIG_SYNTAX_DEFAULT, &info);
  if (code != ONIG_NORMAL) {
    return absl::InvalidArgumentError(
        StrCat("invalid regular expression: ", OnigMessage(code, &info)));
  }
  // Compiled by onig all the same: syntax errors and CompileWithoutFastPath stay Oniguruma's.
  const regex_internal::SplitScanFn scan =
      use_split_scanner ? regex_internal::FindSplitScanner(pattern) : nullptr;
  return Regex(std::make_shared<const regex_internal::Program>(compiled, scan));
}

// Mirrors the onig crate's FindMatches: an empty match that ends where the previous match ended
// is not reported; the search then moves one code point on.
void Regex::FindAll(std::string_view text,
                    std::vector<std::pair<size_t, size_t>>* matches) const {
  if (program_ == nullptr) return;
  std::string stand_in;
  if (!IsValidUtf8(text)) {
    stand_in = StandInIllFormed(text);
    text = stand_in;
  }
  if (program_->scan != nullptr && program_->scan(text, matches)) return;
  const std::unique_ptr<OnigRegion, RegionDeleter> region(onig_region_new());
  const std::unique_ptr<OnigMatchParam, MatchParamDeleter> param(onig_new_match_param());
  if (region == nullptr || param == nullptr) return;
  onig_initialize_match_param(param.get());
  onig_set_retry_limit_in_match_of_match_param(param.get(), kRetryLimitInMatch);
  const uint64_t stack_limit = kMatchStackBase + uint64_t{kStackEntriesPerByte} * text.size();
  onig_set_match_stack_limit_size_of_match_param(
      param.get(), static_cast<unsigned int>(std::min<uint64_t>(stack_limit, UINT32_MAX)));

  const auto* str = reinterpret_cast<const OnigUChar*>(text.data());
  const OnigUChar* str_end = str + text.size();
  size_t from = 0;
  bool have_last = false;
  size_t last_end = 0;
  while (from <= text.size()) {
    onig_set_retry_limit_in_search_of_match_param(
        param.get(), kRetryLimitInSearchBase + kRetriesPerByte * (text.size() - from));
    const int found = onig_search_with_param(program_->regex, str, str_end, str + from, str_end,
                                             region.get(), ONIG_OPTION_NONE, param.get());
    // No match, or a limit ran out (where HF's onig crate would panic): nothing more matches.
    if (found < 0) return;
    const size_t begin = static_cast<size_t>(region->beg[0]);
    const size_t end = static_cast<size_t>(region->end[0]);
    if (begin == end && have_last && end == last_end) {
      if (from == text.size()) return;
      from += CodePointLen(text, from);
      continue;
    }
    matches->emplace_back(begin, end);
    from = end;
    have_last = true;
    last_end = end;
  }
}

}  // namespace loom::text
