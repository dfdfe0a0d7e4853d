#include "server/text/jinja/lexer.h"

#include <cerrno>
#include <cstdlib>

#include "engine/common/strings.h"
#include "engine/common/utf8.h"

namespace loom::text::jinja {
namespace {

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f' ||
         (c >= 0x1C && c <= 0x1F);
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsNameStart(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
         static_cast<unsigned char>(c) >= 0x80;
}
bool IsNameChar(char c) { return IsNameStart(c) || IsDigit(c); }

// "\r\n" and "\r" become "\n"; one trailing newline is dropped.
std::string NormalizeSource(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

// Decodes Python "unicode-escape" sequences in a string literal body.
void DecodeEscape(std::string_view body, size_t* i, std::string& out) {
  const char c = body[*i + 1];
  auto hex = [&](int digits) -> bool {
    if (*i + 2 + digits > body.size()) return false;
    char32_t cp = 0;
    for (int k = 0; k < digits; ++k) {
      const char h = body[*i + 2 + k];
      int v = IsDigit(h) ? h - '0' : (h >= 'a' && h <= 'f') ? h - 'a' + 10 : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
      if (v < 0) return false;
      cp = cp * 16 + v;
    }
    AppendUtf8(cp, &out);
    *i += 2 + digits;
    return true;
  };
  switch (c) {
    case 'n': out.push_back('\n'); break;
    case 't': out.push_back('\t'); break;
    case 'r': out.push_back('\r'); break;
    case '\\': out.push_back('\\'); break;
    case '\'': out.push_back('\''); break;
    case '"': out.push_back('"'); break;
    case 'a': out.push_back('\a'); break;
    case 'b': out.push_back('\b'); break;
    case 'f': out.push_back('\f'); break;
    case 'v': out.push_back('\v'); break;
    case '\n': break;
    case 'x': if (hex(2)) return; out.append("\\x"); break;
    case 'u': if (hex(4)) return; out.append("\\u"); break;
    case 'U': if (hex(8)) return; out.append("\\U"); break;
    default:
      if (c >= '0' && c <= '7') {
        char32_t cp = 0;
        size_t k = *i + 1;
        for (int n = 0; n < 3 && k < body.size() && body[k] >= '0' && body[k] <= '7'; ++n, ++k) {
          cp = cp * 8 + (body[k] - '0');
        }
        AppendUtf8(cp, &out);
        *i = k;
        return;
      }
      out.push_back('\\');
      out.push_back(c);
  }
  *i += 2;
}

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(NormalizeSource(source)) {}

  absl::StatusOr<std::vector<Token>> Run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      const size_t start = FindTagStart(pos_);
      std::string text = src_.substr(pos_, start - pos_);
      if (start == src_.size()) {
        Emit(TokenKind::kText, std::move(text), pos_);
        break;
      }
      const char opener = src_[start + 1];
      const char sign = start + 2 < src_.size() ? src_[start + 2] : '\0';
      size_t body = start + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      const bool raw = opener == '%' && IsRawTag(body, "raw");
      StripBefore(text, sign, opener != '{', line_starting);
      if (!text.empty()) Emit(TokenKind::kText, std::move(text), pos_);
      absl::Status status;
      if (raw) {
        status = LexRaw(start, &line_starting);
      } else if (opener == '#') {
        status = LexComment(start, body, &line_starting);
      } else {
        status = LexTag(start, body, opener == '%', &line_starting);
      }
      if (!status.ok()) return status;
    }
    Emit(TokenKind::kEnd, "", src_.size());
    return std::move(tokens_);
  }

 private:
  size_t FindTagStart(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }

  // True when `word` (as a whole word) follows optional whitespace at `at`, then `%}`/`-%}`/`+%}`
  // after optional whitespace.
  bool IsRawTag(size_t at, std::string_view word) const {
    while (at < src_.size() && IsSpace(src_[at])) ++at;
    if (src_.compare(at, word.size(), word) != 0) return false;
    at += word.size();
    while (at < src_.size() && IsSpace(src_[at])) ++at;
    return src_.compare(at, 2, "%}") == 0 || src_.compare(at, 3, "-%}") == 0;
  }

  void StripBefore(std::string& text, char sign, bool block_like, bool line_starting) const {
    if (sign == '-') {
      size_t end = text.size();
      while (end > 0 && IsSpace(text[end - 1])) --end;
      text.resize(end);
    } else if (sign != '+' && block_like) {
      const size_t nl = text.rfind('\n');
      const size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if (l_pos == 0 && !line_starting) return;
      if (l_pos == text.size()) return;
      for (size_t i = l_pos; i < text.size(); ++i) {
        if (!IsSpace(text[i])) return;
      }
      text.resize(l_pos);
    }
  }

  // Consumes a tag end at `at` of length `len` (`-` variants already included) and the
  // whitespace it eats; sets pos_ and line_starting.
  void ConsumeEnd(size_t at, size_t len, char kind, bool trim, bool* line_starting) {
    size_t end = at + len;
    if (kind == '-') {
      while (end < src_.size() && IsSpace(src_[end])) ++end;
    } else if (kind != '+' && trim && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    *line_starting = end > 0 && src_[end - 1] == '\n';
    pos_ = end;
  }

  absl::Status LexComment(size_t start, size_t body, bool* line_starting) {
    const size_t close = src_.find("#}", body);
    if (close == std::string::npos) return Error(start, "Missing end of comment tag");
    char kind = ' ';
    size_t at = close;
    if (close > body && (src_[close - 1] == '-' || src_[close - 1] == '+')) {
      kind = src_[close - 1];
      at = close - 1;
    }
    ConsumeEnd(at, close + 2 - at, kind, true, line_starting);
    return absl::OkStatus();
  }

  absl::Status LexRaw(size_t start, bool* line_starting) {
    size_t after = src_.find("%}", start) + 2;
    if (src_[after - 3] == '-') {
      while (after < src_.size() && IsSpace(src_[after])) ++after;
    }
    for (size_t i = after; (i = src_.find("{%", i)) != std::string::npos; i += 2) {
      const char sign = i + 2 < src_.size() ? src_[i + 2] : '\0';
      const size_t body = i + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      if (!IsRawTag(body, "endraw")) continue;
      std::string text = src_.substr(after, i - after);
      StripBefore(text, sign, true, false);
      Emit(TokenKind::kText, std::move(text), after);
      const size_t close = src_.find("%}", body);
      const char kind = src_[close - 1] == '-' || src_[close - 1] == '+' ? src_[close - 1] : ' ';
      const size_t at = kind == ' ' ? close : close - 1;
      ConsumeEnd(at, close + 2 - at, kind, true, line_starting);
      return absl::OkStatus();
    }
    return Error(start, "Missing end of raw directive");
  }

  absl::Status LexTag(size_t start, size_t body, bool block, bool* line_starting) {
    Emit(block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, "", start);
    const char closer = block ? '%' : '}';
    std::vector<char> balance;
    size_t i = body;
    while (true) {
      while (i < src_.size() && IsSpace(src_[i])) ++i;
      if (i >= src_.size()) return Error(start, block ? "unexpected end of template, expected '%}'" : "unexpected end of template, expected '}}'");
      if (balance.empty()) {
        char kind = ' ';
        size_t at = i;
        if ((src_[i] == '-' || (block && src_[i] == '+')) && i + 1 < src_.size()) {
          kind = src_[i];
          at = i + 1;
        }
        if (src_.compare(at, 2, std::string{closer, '}'}) == 0) {
          Emit(block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, "", i);
          ConsumeEnd(i, at + 2 - i, kind, block, line_starting);
          return absl::OkStatus();
        }
      }
      absl::Status status = LexOne(&i, balance);
      if (!status.ok()) return status;
    }
  }

  absl::Status LexOne(size_t* pos, std::vector<char>& balance) {
    size_t i = *pos;
    const char c = src_[i];
    if (c == '\'' || c == '"') return LexString(pos);
    if (IsDigit(c)) return LexNumber(pos);
    if (IsNameStart(c)) {
      size_t j = i;
      while (j < src_.size() && IsNameChar(src_[j])) ++j;
      Emit(TokenKind::kName, src_.substr(i, j - i), i);
      *pos = j;
      return absl::OkStatus();
    }
    static constexpr std::string_view kTwo[] = {"//", "**", "==", "!=", ">=", "<="};
    for (std::string_view op : kTwo) {
      if (src_.compare(i, 2, op) == 0) {
        Emit(TokenKind::kOperator, std::string(op), i);
        *pos = i + 2;
        return absl::OkStatus();
      }
    }
    if (std::string_view("+-/*%~[](){}<>=.:|,;").find(c) == std::string_view::npos) {
      return Error(i, StrCat("unexpected char '", std::string(1, c), "'"));
    }
    if (c == '(' || c == '[' || c == '{') {
      if (balance.size() >= 1000) return Error(i, "brackets nested too deeply");
      balance.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (balance.empty()) return Error(i, StrCat("unexpected '", std::string(1, c), "'"));
      if (balance.back() != c) {
        return Error(i, StrCat("unexpected '", std::string(1, c), "', expected '",
                               std::string(1, balance.back()), "'"));
      }
      balance.pop_back();
    }
    Emit(TokenKind::kOperator, std::string(1, c), i);
    *pos = i + 1;
    return absl::OkStatus();
  }

  absl::Status LexString(size_t* pos) {
    const size_t start = *pos;
    const char quote = src_[start];
    std::string value;
    size_t i = start + 1;
    while (i < src_.size() && src_[i] != quote) {
      if (src_[i] == '\\' && i + 1 < src_.size()) {
        DecodeEscape(src_, &i, value);
      } else {
        value.push_back(src_[i++]);
      }
    }
    if (i >= src_.size()) return Error(start, "unexpected end of string");
    Emit(TokenKind::kString, std::move(value), start);
    *pos = i + 1;
    return absl::OkStatus();
  }

  absl::Status LexNumber(size_t* pos) {
    const size_t start = *pos;
    size_t i = start;
    auto digits = [&] {
      while (i < src_.size() && (IsDigit(src_[i]) || (src_[i] == '_' && i + 1 < src_.size() && IsDigit(src_[i + 1])))) ++i;
    };
    digits();
    bool is_float = false;
    const bool after_dot = !tokens_.empty() && tokens_.back().kind == TokenKind::kOperator &&
                           tokens_.back().text == ".";
    if (!after_dot && i + 1 < src_.size() && src_[i] == '.' && IsDigit(src_[i + 1])) {
      ++i;
      digits();
      is_float = true;
    }
    if (!after_dot && i < src_.size() && (src_[i] == 'e' || src_[i] == 'E')) {
      size_t j = i + 1;
      if (j < src_.size() && (src_[j] == '+' || src_[j] == '-')) ++j;
      if (j < src_.size() && IsDigit(src_[j])) {
        i = j;
        digits();
        is_float = true;
      }
    }
    std::string text;
    for (size_t k = start; k < i; ++k) {
      if (src_[k] != '_') text.push_back(src_[k]);
    }
    Token& token = Emit(is_float ? TokenKind::kFloat : TokenKind::kInt, text, start);
    if (is_float) {
      token.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      token.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) return Error(start, "integer literal too large");
    }
    *pos = i;
    return absl::OkStatus();
  }

  Token& Emit(TokenKind kind, std::string text, size_t offset) {
    Token token;
    token.kind = kind;
    token.text = std::move(text);
    LineColumnFast(offset, &token.line, &token.column);
    tokens_.push_back(std::move(token));
    return tokens_.back();
  }

  // Incremental line/column: offsets only grow, so continue from the last one.
  void LineColumnFast(size_t offset, int* line, int* column) {
    if (offset < lc_offset_) {
      lc_offset_ = 0;
      lc_line_ = 1;
      lc_column_ = 1;
    }
    for (; lc_offset_ < offset && lc_offset_ < src_.size(); ++lc_offset_) {
      if (src_[lc_offset_] == '\n') {
        ++lc_line_;
        lc_column_ = 1;
      } else if ((static_cast<unsigned char>(src_[lc_offset_]) & 0xC0) != 0x80) {
        ++lc_column_;
      }
    }
    *line = lc_line_;
    *column = lc_column_;
  }

  absl::Status Error(size_t offset, std::string_view message) const {
    int line = 1;
    int column = 1;
    LineColumn(src_, offset, &line, &column);
    return absl::InvalidArgumentError(StrCat("template syntax error at line ", line, ", column ", column, ": ", message));
  }

  std::string src_;
  size_t pos_ = 0;
  std::vector<Token> tokens_;
  size_t lc_offset_ = 0;
  int lc_line_ = 1;
  int lc_column_ = 1;
};

}  // namespace

void LineColumn(std::string_view source, size_t offset, int* line, int* column) {
  *line = 1;
  *column = 1;
  for (size_t i = 0; i < offset && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++*line;
      *column = 1;
    } else if ((static_cast<unsigned char>(source[i]) & 0xC0) != 0x80) {
      ++*column;
    }
  }
}

absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source) { return Lexer(source).Run(); }

}  // namespace loom::text::jinja
