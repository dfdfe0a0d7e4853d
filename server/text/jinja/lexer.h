// Tokenizer for Jinja template source, with Hugging Face's environment settings.
//
// Produces a flat token stream: text runs (already whitespace-controlled), tag delimiters and
// the expression tokens inside tags. Whitespace handling follows jinja2's lexer with
// trim_blocks=True and lstrip_blocks=True: `{%-`/`-%}` strip all whitespace on that side, a
// block or comment tag eats the one newline after it, and the indentation before a block or
// comment tag that starts a line is removed (`{%+` keeps it). Raw blocks become text and comments
// vanish. Line breaks are normalized to "\n" and one trailing newline is dropped
// (keep_trailing_newline=False). Pure function; any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::text::jinja {

enum class TokenKind : uint8_t {
  kText,        // literal template text
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,        // identifier or keyword
  kString,      // string literal (escapes decoded)
  kInt,
  kFloat,
  kOperator,  // punctuation: + - * / // % ** ~ == != < <= > >= = ( ) [ ] { } . : | ,
  kEnd,       // end of input
};

// One token. `text` holds the text run, name, decoded string or operator spelling.
struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
  int column = 1;
};

// Line and column (1-based, in characters) of byte `offset` of `source`.
void LineColumn(std::string_view source, size_t offset, int* line, int* column);

// Tokenizes `source`. Errors (unterminated tag, comment or string, unbalanced brackets, a
// character that starts no token) are InvalidArgument naming line and column.
absl::StatusOr<std::vector<Token>> Tokenize(std::string_view source);

}  // namespace loom::text::jinja
