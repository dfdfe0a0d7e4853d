#include "server/text/detokenizer.h"

#include <algorithm>
#include <utility>

#include "absl/types/span.h"

namespace loom::text {
namespace {

constexpr std::string_view kReplacementUtf8 = "\xEF\xBF\xBD";

}  // namespace

Detokenizer::Detokenizer(const Tokenizer* tokenizer, Options options)
    : tokenizer_(tokenizer), options_(std::move(options)) {
  std::erase_if(options_.stop_strings, [](const std::string& s) { return s.empty(); });
}

std::string Detokenizer::DecodeRange(size_t begin, size_t end) const {
  return tokenizer_->Decode(absl::MakeConstSpan(ids_).subspan(begin, end - begin),
                            options_.skip_special_tokens);
}

bool Detokenizer::EndsInByteFallbackToken() const {
  // The last id that reaches the decoder: skipped special tokens and unknown ids do not end a
  // byte run.
  for (size_t i = ids_.size(); i-- > 0;) {
    std::optional<std::string> token = tokenizer_->IdToToken(ids_[i]);
    if (!token || (options_.skip_special_tokens && tokenizer_->IsSpecial(ids_[i]))) continue;
    return token->size() == 6 && token->starts_with("<0x") && token->back() == '>';
  }
  return false;
}

std::optional<std::string> Detokenizer::NewText(bool flush) {
  const size_t read = boundaries_.back();
  const size_t end = ids_.size();
  if (read == end) return std::string();
  if (!flush && EndsInByteFallbackToken()) return std::nullopt;
  // Window start: the start of the last emitted chunk, moved back while the window's prefix
  // decodes to nothing (a leading-space strip or "▁" drop would then hit the new text).
  size_t b = boundaries_.size() >= 2 ? boundaries_.size() - 2 : 0;
  std::string prefix = DecodeRange(boundaries_[b], read);
  while (prefix.empty() && b > 0) {
    --b;
    prefix = DecodeRange(boundaries_[b], read);
  }
  std::string full = DecodeRange(boundaries_[b], end);
  if (!flush && full.ends_with(kReplacementUtf8)) return std::nullopt;
  if (!full.starts_with(prefix)) {
    // The window's decoding disagrees with what was emitted (a decoder changed earlier text):
    // nothing can be taken back, so emit what follows the common prefix.
    const auto mismatch = std::mismatch(prefix.begin(), prefix.end(), full.begin(), full.end());
    size_t common = static_cast<size_t>(mismatch.first - prefix.begin());
    // Never split a character.
    while (common > 0 && common < full.size() &&
           (static_cast<unsigned char>(full[common]) & 0xC0) == 0x80) {
      --common;
    }
    prefix.resize(common);
  }
  boundaries_.push_back(end);
  // Boundaries older than the window are not needed again unless chunks decode to nothing;
  // keep the list short.
  if (boundaries_.size() > 64 && b > 32) {
    boundaries_.erase(boundaries_.begin(), boundaries_.begin() + static_cast<ptrdiff_t>(b - 1));
  }
  return full.substr(prefix.size());
}

std::string Detokenizer::ApplyStops(std::string_view text, bool flush) {
  stop_tail_.append(text);
  if (options_.stop_strings.empty()) return std::exchange(stop_tail_, std::string());
  // The earliest occurrence of any stop string (first listed on ties).
  size_t best_pos = std::string::npos;
  for (size_t i = 0; i < options_.stop_strings.size(); ++i) {
    const size_t pos = stop_tail_.find(options_.stop_strings[i]);
    if (pos < best_pos) {
      best_pos = pos;
      stop_index_ = i;
    }
  }
  if (best_pos != std::string::npos) {
    std::string out = stop_tail_.substr(0, best_pos);
    stop_tail_.clear();
    return out;
  }
  // Hold the longest suffix that is a proper prefix of a stop string.
  size_t hold = 0;
  if (!flush) {
    for (const std::string& stop : options_.stop_strings) {
      for (size_t len = std::min(stop.size() - 1, stop_tail_.size()); len > hold; --len) {
        if (std::string_view(stop_tail_).substr(stop_tail_.size() - len) ==
            std::string_view(stop).substr(0, len)) {
          hold = len;
          break;
        }
      }
    }
  }
  std::string out = stop_tail_.substr(0, stop_tail_.size() - hold);
  stop_tail_.erase(0, stop_tail_.size() - hold);
  return out;
}

std::string Detokenizer::Add(int32_t id) {
  ids_.push_back(id);
  if (stopped() || finished_) return std::string();
  std::optional<std::string> text = NewText(/*flush=*/false);
  if (!text.has_value() || text->empty()) return std::string();
  return ApplyStops(*text, /*flush=*/false);
}

std::string Detokenizer::Finish() {
  if (stopped() || finished_) return std::string();
  finished_ = true;
  std::optional<std::string> text = NewText(/*flush=*/true);
  return ApplyStops(text.value_or(std::string()), /*flush=*/true);
}

}  // namespace loom::text
