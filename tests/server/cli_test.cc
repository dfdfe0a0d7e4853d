// The `loom` command-line tool (server/cli), run as a process: bad arguments give exit code 2 and
// one line on stderr naming the problem; a good run prints the engine's tokens and the timing
// lines, and --json prints one JSON object with the documented fields.
#include <stdlib.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/runtime/local_executor.h"
#include "gtest/gtest.h"
#include "scheduler/offline_batch.h"
#include "tests/engine/weights_test_util.h"

namespace loom {
namespace {

using testing_util::ReadBytes;
using testing_util::TempFolder;

const std::string kModel = std::string(LOOM_SOURCE_DIR) + "/tests/golden/models/llama2_mha";

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

// `arg` in single quotes for /bin/sh.
void AppendQuoted(std::string& command, const std::string& arg) {
  command.append(" '");
  for (char c : arg) {
    if (c == '\'') {
      command.append("'\\''");
    } else {
      command.push_back(c);
    }
  }
  command.push_back('\'');
}

// Runs `loom args...` with stdout and stderr captured separately (in a folder of its own, since
// a test's TempFolder is named after the test).
CliRun Loom(const std::vector<std::string>& args) {
  std::string dir = ::testing::TempDir() + "/loom_cli_XXXXXX";
  EXPECT_NE(mkdtemp(dir.data()), nullptr);
  std::string command;
  AppendQuoted(command, LOOM_CLI_PATH);
  for (const std::string& arg : args) AppendQuoted(command, arg);
  command.append(" >");
  AppendQuoted(command, dir + "/out");
  command.append(" 2>");
  AppendQuoted(command, dir + "/err");
  command.append(" </dev/null");
  const int status = std::system(command.c_str());
  CliRun run;
  run.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.out = ReadBytes(dir + "/out");
  run.err = ReadBytes(dir + "/err");
  std::error_code ignored;
  std::filesystem::remove_all(dir, ignored);
  return run;
}

// `loom generate` on the test model with `extra` arguments.
CliRun Generate(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"generate", "--model", kModel, "--threads", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return Loom(args);
}

// Expects exit code 2, nothing on stdout and exactly one stderr line containing `part`.
void ExpectUsageError(const CliRun& run, const std::string& part) {
  EXPECT_EQ(run.exit_code, 2) << run.err;
  EXPECT_EQ(run.out, "");
  ASSERT_FALSE(run.err.empty());
  EXPECT_EQ(run.err.back(), '\n') << run.err;
  EXPECT_EQ(std::count(run.err.begin(), run.err.end(), '\n'), 1) << run.err;
  LOOM_EXPECT_CONTAINS(run.err, part);
}

TEST(CliTest, NoCommandPrintsUsage) {
  const CliRun run = Loom({});
  EXPECT_EQ(run.exit_code, 2);
  LOOM_EXPECT_CONTAINS(run.err, "usage: loom <command>");
}

TEST(CliTest, UnknownCommand) {
  const CliRun run = Loom({"frobnicate"});
  EXPECT_EQ(run.exit_code, 2);
  LOOM_EXPECT_CONTAINS(run.err, "loom: unknown command 'frobnicate'");
}

TEST(CliTest, VersionAndHelp) {
  CliRun run = Loom({"version"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  LOOM_EXPECT_CONTAINS(run.out, "loom ");
  LOOM_EXPECT_CONTAINS(run.out, "cpu: ");
  run = Loom({"generate", "--help"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  LOOM_EXPECT_CONTAINS(run.out, "--prompt-ids VALUE");
  LOOM_EXPECT_CONTAINS(run.out, "--kv-cache-dtype VALUE");
}

TEST(CliTest, BadFlags) {
  ExpectUsageError(Generate({"--bogus", "1"}), "loom generate: unknown flag --bogus");
  ExpectUsageError(Generate({"--prompt-ids"}), "loom generate: --prompt-ids needs a value");
  ExpectUsageError(Generate({"stray"}), "loom generate: unexpected argument 'stray'");
  ExpectUsageError(Generate({"--max-tokens", "ten"}),
                   "loom generate: --max-tokens: 'ten' is not an integer");
  ExpectUsageError(Generate({"--temperature=hot"}),
                   "loom generate: --temperature: 'hot' is not a number");
  ExpectUsageError(Generate({"--json=maybe"}), "loom generate: --json: 'maybe' is not a boolean");
}

TEST(CliTest, MissingOrBadModel) {
  ExpectUsageError(Loom({"generate", "--prompt-ids", "1,2"}), "loom generate: --model is required");
  TempFolder folder;
  const std::string missing = folder.File("no_model");
  ExpectUsageError(Loom({"generate", "--model", missing, "--prompt-ids", "1,2"}),
                   missing + "/config.json");
  // A folder without a model in it.
  ExpectUsageError(Loom({"generate", "--model", folder.path(), "--prompt-ids", "1,2"}),
                   folder.path() + "/config.json");
  // A file where the folder should be.
  testing_util::WriteBytes(folder.File("file"), "x");
  ExpectUsageError(Loom({"generate", "--model", folder.File("file"), "--prompt-ids", "1,2"}),
                   folder.File("file") + "/config.json");
}

TEST(CliTest, BadPromptIds) {
  ExpectUsageError(Generate({"--prompt-ids", "1,x"}),
                   "loom generate: --prompt-ids: 'x' is not an integer");
  ExpectUsageError(Generate({"--prompt-ids", ""}), "loom generate: --prompt-ids: empty list");
  ExpectUsageError(Generate({"--prompt-ids", "1,,2"}),
                   "loom generate: --prompt-ids: '' is not an integer");
  ExpectUsageError(Generate({"--prompt-ids", "1,512"}),
                   "loom generate: prompt token 512 is outside the vocabulary [0, 512)");
  ExpectUsageError(Generate({"--prompt-ids", "-1"}),
                   "loom generate: prompt token -1 is outside the vocabulary");
  ExpectUsageError(Generate({"--prompt-ids", "99999999999"}),
                   "loom generate: --prompt-ids: 99999999999 is out of range");
  ExpectUsageError(Generate({}), "loom generate: give at least one --prompt, --chat or --prompt-ids");
}

// A model folder with the weights but no tokenizer.json: text prompts are refused clearly.
TEST(CliTest, PromptTextNeedsATokenizer) {
  TempFolder folder;
  for (const char* name : {"config.json", "generation_config.json", "model.safetensors"}) {
    std::filesystem::copy_file(kModel + "/" + name, folder.File(name));
  }
  ExpectUsageError(Loom({"generate", "--model", folder.path(), "--prompt", "Hello"}),
                   "--prompt: the model folder has no tokenizer.json; pass --prompt-ids");
  ExpectUsageError(Loom({"generate", "--model", folder.path(), "--chat", R"([{"role":"user","content":"x"}])"}),
                   "--chat: the model folder has no tokenizer.json or no chat template");
}

// A tokenizer.json that exists but does not load is reported as such, with the reason, not as a
// missing file.
TEST(CliTest, PromptTextWithABrokenTokenizer) {
  TempFolder folder;
  for (const char* name : {"config.json", "generation_config.json", "model.safetensors",
                           "tokenizer_config.json"}) {
    std::filesystem::copy_file(kModel + "/" + name, folder.File(name));
  }
  testing_util::WriteBytes(folder.File("tokenizer.json"), "{\"model\": [");
  CliRun run = Loom({"generate", "--model", folder.path(), "--prompt", "Hello"});
  ExpectUsageError(run, "--prompt: the model folder's tokenizer.json could not be loaded: ");
  LOOM_EXPECT_CONTAINS(run.err, "tokenizer.json");
  EXPECT_EQ(run.err.find("has no tokenizer.json"), std::string::npos) << run.err;
  LOOM_EXPECT_CONTAINS(run.err, "; pass --prompt-ids");
  run = Loom({"generate", "--model", folder.path(), "--chat", R"([{"role":"user","content":"x"}])"});
  ExpectUsageError(run, "--chat: the model folder's tokenizer.json could not be loaded: ");
  EXPECT_EQ(run.err.find("has no tokenizer.json"), std::string::npos) << run.err;
}

// --prompt goes through the folder's tokenizer and --chat through its chat template; the output
// is the same as feeding the ids the tokenizer gives.
TEST(CliTest, TextPromptsAndChats) {
  CliRun text = Generate({"--prompt", "Hello world", "--max-tokens", "4", "--json"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  const nlohmann::json out = nlohmann::json::parse(text.out);
  EXPECT_EQ(out["results"][0]["tokens"].size(), 4u);
  EXPECT_TRUE(out["results"][0]["text"].is_string());
  CliRun chat = Generate({"--chat", R"([{"role":"user","content":"Hi"}])", "--max-tokens", "3"});
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  LOOM_EXPECT_CONTAINS(chat.out, "text: ");
  ExpectUsageError(Generate({"--chat", "[{not json"}), "--chat: ");
  ExpectUsageError(Generate({"--chat", R"({"role":"user"})"}), "--chat: ");
}

TEST(CliTest, PromptLongerThanTheContext) {
  std::string ids = "1";
  for (int i = 1; i < 120; ++i) ids.append(",").append(std::to_string(i));
  ExpectUsageError(Generate({"--prompt-ids", ids}),
                   "prompt of 120 tokens plus 32 new tokens exceeds the context of 128");
  ExpectUsageError(Generate({"--prompt-ids", "1,2", "--max-tokens", "127"}),
                   "prompt of 2 tokens plus 127 new tokens exceeds the context of 128");
}

TEST(CliTest, BadEngineAndSamplingValues) {
  ExpectUsageError(Generate({"--prompt-ids", "1", "--kv-cache-dtype", "bogus"}),
                   "loom generate: --kv-cache-dtype: KV cache dtype must be auto, bf16, f16, f32, "
                   "fp8-e4m3, int8, int4 or int2, got 'bogus'");
  ExpectUsageError(Generate({"--prompt-ids", "1", "--kv-k-granularity", "row"}),
                   "K granularity must be channel or token, got 'row'");
  ExpectUsageError(Generate({"--prompt-ids", "1", "--backend", "tpu"}), "tpu");
  ExpectUsageError(Generate({"--prompt-ids", "1", "--block-size", "-1"}),
                   "block size must be >= 0");
  ExpectUsageError(Generate({"--prompt-ids", "1", "--block-size", "2000"}),
                   "block_size must be in [1, 1024], got 2000");
  ExpectUsageError(Generate({"--prompt-ids", "1", "--kv-cache-mb", "0"}),
                   "KV cache of 0 bytes holds no block");
  ExpectUsageError(Generate({"--prompt-ids", "1", "--max-tokens", "0"}),
                   "--max-tokens and --batch must be positive");
  ExpectUsageError(Generate({"--prompt-ids", "1", "--temperature", "-1"}),
                   "temperature must be a finite number >= 0");
  ExpectUsageError(Generate({"--prompt-ids", "1", "--top-p", "1.5"}), "top_p must be in (0, 1]");
  ExpectUsageError(Generate({"--prompt-ids", "1", "--logprobs", "21"}),
                   "logprobs must be in [0, 20]");
  ExpectUsageError(Generate({"--prompt-ids", "1", "--threads", "-2"}), "threads must be >= 0");
}

// Values past int32 are errors, not silently truncated (4294967312 would become 16).
TEST(CliTest, OutOfRangeIntegersAreNotTruncated) {
  for (const char* flag : {"--block-size", "--top-k", "--logprobs", "--threads", "--max-tokens",
                           "--max-batch-tokens", "--prefill-chunk", "--batch"}) {
    ExpectUsageError(Generate({"--prompt-ids", "1", flag, "4294967312"}),
                     std::string("loom generate: ") + flag + ": '4294967312' is out of range");
  }
  ExpectUsageError(Generate({"--prompt-ids", "1", "--kv-cache-mb", "9223372036854775807"}),
                   "--kv-cache-mb: 9223372036854775807 is out of range");
  ExpectUsageError(Generate({"--prompt-ids", "1", "--kv-cache-mb", "-1"}),
                   "--kv-cache-mb: -1 is out of range");
  ExpectUsageError(Generate({"--prompt-ids", "1", "--batch", "2000000000"}),
                   "--batch: at most 1048576 sequences in all");
  ExpectUsageError(Generate({"--prompt-ids", "1", "--threads", "100000"}),
                   "num_threads must be at most 1024");
}

// The tokens the engine itself gives for `prompt` with the CLI's defaults (greedy, bf16 cache,
// block size 16, one thread), run in this process.
std::vector<TokenId> EngineTokens(const std::vector<TokenId>& prompt, int32_t count) {
  EngineConfig config;
  config.model_dir = kModel;
  config.num_threads = 1;
  absl::StatusOr<std::unique_ptr<LocalExecutor>> executor = LocalExecutor::Create(config);
  EXPECT_TRUE(executor.ok()) << executor.status();
  if (!executor.ok()) return {};
  OfflineRequest request;
  request.prompt = prompt;
  request.sampling.temperature = 0.0f;
  request.max_new_tokens = count;
  absl::StatusOr<std::vector<OfflineResult>> results =
      RunOffline(**executor, std::vector<OfflineRequest>{request});
  EXPECT_TRUE(results.ok()) << results.status();
  return results.ok() ? results->at(0).output_tokens : std::vector<TokenId>();
}

std::string Join(const std::vector<TokenId>& tokens) {
  std::string out;
  for (TokenId t : tokens) out += " " + std::to_string(t.value());
  return out;
}

TEST(CliTest, GoodRunPrintsTokensAndTimings) {
  const CliRun run = Generate({"--prompt-ids", "1, 17,42", "--max-tokens", "5", "--ignore-eos"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  const std::vector<TokenId> want = EngineTokens({TokenId(1), TokenId(17), TokenId(42)}, 5);
  ASSERT_EQ(want.size(), 5u);
  LOOM_EXPECT_CONTAINS(run.out, "[0] 3 prompt tokens -> 5 tokens (length):" + Join(want) + "\n");
  EXPECT_TRUE(std::regex_search(
      run.out, std::regex(R"(\nprefill: 3 tokens in [0-9.]+ ms = [0-9.]+ tokens/s\n)")))
      << run.out;
  EXPECT_TRUE(std::regex_search(
      run.out,
      std::regex(R"(\ndecode:  4 tokens in [0-9.]+ ms = [0-9.]+ tokens/s )"
                 R"(\(5 steps in all, 1 threads\)\n)")))
      << run.out;
}

TEST(CliTest, JsonOutput) {
  const CliRun run = Generate({"--prompt-ids", "5,6,7,8", "--prompt-ids", "9", "--max-tokens", "3",
                               "--batch", "2", "--ignore-eos", "--json"});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  nlohmann::json json;
  ASSERT_NO_THROW(json = nlohmann::json::parse(run.out)) << run.out;
  ASSERT_TRUE(json["results"].is_array());
  ASSERT_EQ(json["results"].size(), 4u);
  const std::vector<TokenId> want =
      EngineTokens({TokenId(5), TokenId(6), TokenId(7), TokenId(8)}, 3);
  for (size_t i = 0; i < 4; ++i) {
    const nlohmann::json& result = json["results"][i];
    EXPECT_EQ(result["prompt_tokens"], i < 2 ? 4 : 1);
    EXPECT_EQ(result["finish_reason"], "length");
    ASSERT_TRUE(result["tokens"].is_array());
    ASSERT_EQ(result["tokens"].size(), 3u);
    for (size_t t = 0; t < 3; ++t) {
      const int token = result["tokens"][t].get<int>();
      EXPECT_GE(token, 0);
      EXPECT_LT(token, 512);
      if (i < 2) {
        EXPECT_EQ(token, want[t].value());  // greedy: both copies alike
      }
    }
  }
  const nlohmann::json& timing = json["timing"];
  for (const char* field : {"prefill_tokens", "prefill_ms", "prefill_tokens_per_s", "decode_tokens",
                            "decode_ms", "decode_tokens_per_s", "steps", "threads"}) {
    EXPECT_TRUE(timing.contains(field)) << field;
    EXPECT_TRUE(timing[field].is_number()) << field;
  }
  EXPECT_EQ(timing["prefill_tokens"], 10);
  EXPECT_EQ(timing["threads"], 1);
  EXPECT_GE(timing["steps"].get<int>(), 3);
}

}  // namespace
}  // namespace loom
