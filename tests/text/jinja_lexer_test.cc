#include "server/text/jinja/lexer.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace loom::text::jinja {
namespace {

// Kinds and texts of the tokens of `source`, as "kind:text" strings.
std::vector<std::string> Lex(std::string_view source) {
  absl::StatusOr<std::vector<Token>> tokens = Tokenize(source);
  if (!tokens.ok()) return {"error: " + std::string(tokens.status().message())};
  std::vector<std::string> out;
  for (const Token& t : *tokens) {
    switch (t.kind) {
      case TokenKind::kText: out.push_back("text:" + t.text); break;
      case TokenKind::kVarBegin: out.push_back("{{"); break;
      case TokenKind::kVarEnd: out.push_back("}}"); break;
      case TokenKind::kBlockBegin: out.push_back("{%"); break;
      case TokenKind::kBlockEnd: out.push_back("%}"); break;
      case TokenKind::kName: out.push_back("name:" + t.text); break;
      case TokenKind::kString: out.push_back("str:" + t.text); break;
      case TokenKind::kInt: out.push_back("int:" + std::to_string(t.int_value)); break;
      case TokenKind::kFloat: out.push_back("float:" + t.text); break;
      case TokenKind::kOperator: out.push_back("op:" + t.text); break;
      case TokenKind::kEnd: break;
    }
  }
  return out;
}

using V = std::vector<std::string>;

TEST(JinjaLexerTest, TokenizesExpressions) {
  EXPECT_EQ(Lex("a {{ x.y[0] // 2 ** 1.5e2 }} b"),
            (V{"text:a ", "{{", "name:x", "op:.", "name:y", "op:[", "int:0", "op:]", "op://", "int:2",
               "op:**", "float:1.5e2", "}}", "text: b"}));
  EXPECT_EQ(Lex("{{ 'it\\'s' ~ \"\\n\\u00e9\" }}"), (V{"{{", "str:it's", "op:~", "str:\n\xC3\xA9", "}}"}));
  EXPECT_EQ(Lex("{{ {'a': {'b': 1}} }}"),
            (V{"{{", "op:{", "str:a", "op::", "op:{", "str:b", "op::", "int:1", "op:}", "op:}", "}}"}));
  EXPECT_EQ(Lex("{{ 1_000 }}"), (V{"{{", "int:1000", "}}"}));
}

TEST(JinjaLexerTest, TrimBlocksAndLstripBlocks) {
  EXPECT_EQ(Lex("  {% if x %}\n  body\n  {% endif %}\nafter"),
            (V{"{%", "name:if", "name:x", "%}", "text:  body\n", "{%", "name:endif", "%}", "text:after"}));
  // Variables are not lstripped and do not eat the newline.
  EXPECT_EQ(Lex("  {{ x }}\nend"), (V{"text:  ", "{{", "name:x", "}}", "text:\nend"}));
  // `+` keeps the indentation; a tag that does not start its line keeps the text before it.
  EXPECT_EQ(Lex("  {%+ if x %}a {% endif %}"),
            (V{"text:  ", "{%", "name:if", "name:x", "%}", "text:a ", "{%", "name:endif", "%}"}));
}

TEST(JinjaLexerTest, MinusStripsAllWhitespace) {
  EXPECT_EQ(Lex("a \n {{- x -}} \n b"), (V{"text:a", "{{", "name:x", "}}", "text:b"}));
  EXPECT_EQ(Lex("a\n\n{%- if x -%}\n\n  b"), (V{"text:a", "{%", "name:if", "name:x", "%}", "text:b"}));
}

TEST(JinjaLexerTest, CommentsAndRawBlocks) {
  EXPECT_EQ(Lex("a{# c {{ x }} #}\nb"), (V{"text:a", "text:b"}));
  EXPECT_EQ(Lex("{% raw %}{{ x }}{% endraw %}"), (V{"text:{{ x }}"}));
}

TEST(JinjaLexerTest, NormalizesNewlinesAndDropsOneTrailingNewline) {
  EXPECT_EQ(Lex("a\r\nb\rc\n"), (V{"text:a\nb\nc"}));
  EXPECT_EQ(Lex("a\n\n"), (V{"text:a\n"}));
}

TEST(JinjaLexerTest, ErrorsNamePosition) {
  EXPECT_EQ(Lex("ab\n  {{ 'x }}"), (V{"error: template syntax error at line 2, column 6: unexpected end of string"}));
  EXPECT_EQ(Lex("{{ x ) }}"), (V{"error: template syntax error at line 1, column 6: unexpected ')'"}));
  EXPECT_EQ(Lex("{{ x"), (V{"error: template syntax error at line 1, column 1: unexpected end of template, expected '}}'"}));
  EXPECT_EQ(Lex("{# x"), (V{"error: template syntax error at line 1, column 1: Missing end of comment tag"}));
  EXPECT_EQ(Lex("{{ x ? }}"), (V{"error: template syntax error at line 1, column 6: unexpected char '?'"}));
}

}  // namespace
}  // namespace loom::text::jinja
