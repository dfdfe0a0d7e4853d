#include "server/text/chat_template.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace loom::text {
namespace {

// A fresh folder under the test's temporary directory, removed at the end of the test.
class ModelDir {
 public:
  ModelDir() {
    const char* tmp = std::getenv("TEST_TMPDIR");
    path_ = std::filesystem::path(tmp != nullptr ? tmp : "/tmp") /
            ("loom_chat_template_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ModelDir() { std::filesystem::remove_all(path_); }
  void Write(const std::string& name, const std::string& text) const {
    std::ofstream(path_ / name, std::ios::binary) << text;
  }
  std::string path() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  std::filesystem::path path_;
};

std::string RenderUser(const ChatTemplate& chat, bool with_tools = false) {
  ChatRenderRequest request;
  request.messages_json = R"([{"role": "user", "content": "hi"}])";
  if (with_tools) request.tools_json = R"([{"type": "function", "function": {"name": "f"}}])";
  absl::StatusOr<std::string> out = chat.Render(request);
  return out.ok() ? *out : "ERROR " + std::string(out.status().message());
}

TEST(ChatTemplateTest, LoadsFromTokenizerConfigWithAddedTokens) {
  ModelDir dir;
  dir.Write("tokenizer_config.json", R"({
    "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},
    "eos_token": "</s>",
    "chat_template": "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{{ eos_token }}|{{ pad_token is defined }}"
  })");
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::LoadFromDir(dir.path());
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(chat->special_tokens().bos_token, "<s>");
  EXPECT_FALSE(chat->special_tokens().pad_token.has_value());
  EXPECT_EQ(RenderUser(*chat), "<s>[user]hi</s>|False");
}

TEST(ChatTemplateTest, JinjaFileWinsOverJsonAndConfig) {
  ModelDir dir;
  dir.Write("tokenizer_config.json", R"({"eos_token": "E", "chat_template": "config"})");
  dir.Write("chat_template.json", R"({"chat_template": "json {{ eos_token }}"})");
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::LoadFromDir(dir.path());
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(RenderUser(*chat), "json E");
  dir.Write("chat_template.jinja", "jinja {{ eos_token }}\n");
  chat = ChatTemplate::LoadFromDir(dir.path());
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(RenderUser(*chat), "jinja E");
}

TEST(ChatTemplateTest, NamedTemplatesPickToolUseWhenToolsAreGiven) {
  ModelDir dir;
  dir.Write("tokenizer_config.json", R"({"chat_template": [
    {"name": "default", "template": "plain"},
    {"name": "tool_use", "template": "tools={{ tools | length }}"},
    {"name": "rag", "template": "unused"}]})");
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::LoadFromDir(dir.path());
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_EQ(RenderUser(*chat), "plain");
  EXPECT_EQ(RenderUser(*chat, true), "tools=1");
}

TEST(ChatTemplateTest, MissingTemplateIsNotFound) {
  ModelDir dir;
  dir.Write("tokenizer_config.json", R"({"eos_token": "</s>"})");
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::LoadFromDir(dir.path());
  ASSERT_FALSE(chat.ok());
  EXPECT_EQ(chat.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ChatTemplate::LoadFromDir(dir.path() + "/does-not-exist").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ChatTemplateTest, BadTemplateOrConfigIsInvalidArgument) {
  ModelDir dir;
  dir.Write("tokenizer_config.json", R"({"chat_template": "{% if %}"})");
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::LoadFromDir(dir.path());
  ASSERT_FALSE(chat.ok());
  EXPECT_EQ(chat.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(chat.status().message()).find("tokenizer_config.json"), std::string::npos);
  dir.Write("tokenizer_config.json", "{not json");
  EXPECT_EQ(ChatTemplate::LoadFromDir(dir.path()).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ChatTemplateTest, ContextMatchesApplyChatTemplate) {
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::FromSource(
      "{{ tools is none }} {{ documents is none }} {{ add_generation_prompt }} {{ bos_token }} "
      "{{ enable_thinking }} {{ extra | tojson }}",
      SpecialTokens{"<s>", "</s>", std::nullopt, std::nullopt});
  ASSERT_TRUE(chat.ok()) << chat.status();
  ChatRenderRequest request;
  request.add_generation_prompt = true;
  request.kwargs_json = R"({"enable_thinking": false, "extra": {"b": 1, "a": 2}, "bos_token": "<B>"})";
  absl::StatusOr<std::string> out = chat->Render(request);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "True True True <B> False {\"b\": 1, \"a\": 2}");
}

TEST(ChatTemplateTest, ContinueFinalMessageCutsAfterTheLastContent) {
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::FromSource(
      "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>{% endfor %}", {});
  ASSERT_TRUE(chat.ok());
  ChatRenderRequest request;
  request.messages_json =
      R"([{"role": "user", "content": "Write"}, {"role": "assistant", "content": "Once upon "}])";
  request.continue_final_message = true;
  absl::StatusOr<std::string> out = chat->Render(request);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "<user>Write</user><assistant>Once upon");
  request.add_generation_prompt = true;
  EXPECT_FALSE(chat->Render(request).ok());
}

TEST(ChatTemplateTest, RequestErrorsAreInvalidArgument) {
  absl::StatusOr<ChatTemplate> chat = ChatTemplate::FromSource(
      "{% if messages[0].role != 'user' %}{{ raise_exception('first must be user') }}{% endif %}ok", {});
  ASSERT_TRUE(chat.ok());
  ChatRenderRequest request;
  request.messages_json = "[{\"role\": ";
  EXPECT_EQ(chat->Render(request).status().code(), absl::StatusCode::kInvalidArgument);
  request.messages_json = R"([{"role": "system", "content": "x"}])";
  absl::StatusOr<std::string> out = chat->Render(request);
  ASSERT_FALSE(out.ok());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(std::string(out.status().message()).ends_with("first must be user"));
  request.messages_json = R"([{"role": "user", "content": "x"}])";
  request.kwargs_json = "[1]";
  EXPECT_FALSE(chat->Render(request).ok());
  EXPECT_FALSE(ChatTemplate::FromSource("{{ unclosed", {}).ok());
}

}  // namespace
}  // namespace loom::text
