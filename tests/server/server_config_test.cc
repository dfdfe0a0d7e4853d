#include "server/config/server_config.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>

#include "gtest/gtest.h"
#include "scheduler/experts/expert_cache_policy.h"

namespace loom {
namespace {

struct FakeEnv {
  std::map<std::string, std::string> vars;
  EnvLookup lookup() const {
    return [this](const char* name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  }
};

// One file per test process (ctest runs the tests of this binary as parallel processes), removed
// when the process exits.
std::string WriteTemp(const std::string& text) {
  struct RemovedAtExit {
    std::string path;
    ~RemovedAtExit() { std::remove(path.c_str()); }
  };
  static const RemovedAtExit file{::testing::TempDir() + "/" + std::to_string(getpid()) +
                                  ".loom_config_test.json"};
  std::ofstream(file.path) << text;
  return file.path;
}

absl::Status Load(const std::vector<std::string>& args, const FakeEnv& env, ServerConfig* c) {
  bool help = false;
  return LoadServerConfig(args, env.lookup(), c, &help);
}

TEST(ServerConfigTest, DefaultsFileEnvironmentFlagsInThatOrder) {
  const std::string file = WriteTemp(R"({"port": 9000, "max_num_seqs": 8, "api_keys": ["a", "b"],
                                         "strict_api": true})");
  FakeEnv env;
  env.vars["LOOM_MAX_NUM_SEQS"] = "16";
  env.vars["LOOM_KV_CACHE_DTYPE"] = "int4";
  ServerConfig c;
  ASSERT_TRUE(Load({"--config", file, "--max-num-seqs", "32", "--enable_prefix_caching=false"}, env,
                   &c).ok());
  EXPECT_EQ(c.port, 9000);                // file
  EXPECT_EQ(c.kv_cache_dtype, "int4");          // environment
  EXPECT_EQ(c.max_num_seqs, 32);          // flag beats environment beats file
  EXPECT_FALSE(c.enable_prefix_caching);  // flag
  EXPECT_TRUE(c.strict_api);
  EXPECT_EQ(c.api_keys, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(c.block_size, 0);  // default: 16, or 32 for low-bit KV
}

TEST(ServerConfigTest, ListsFromEnvironmentAndBooleanFlags) {
  FakeEnv env;
  env.vars["LOOM_API_KEYS"] = "k1, k2,,k3";
  ServerConfig c;
  ASSERT_TRUE(Load({"--strict-api"}, env, &c).ok());
  EXPECT_EQ(c.api_keys, (std::vector<std::string>{"k1", "k2", "k3"}));
  EXPECT_TRUE(c.strict_api);
}

TEST(ServerConfigTest, ErrorsNameTheKeyAndTheSource) {
  FakeEnv env;
  ServerConfig c;
  auto message = [&](const std::vector<std::string>& args, const FakeEnv& e) {
    absl::Status s = Load(args, e, &c);
    EXPECT_FALSE(s.ok());
    return std::string(s.message());
  };
  EXPECT_NE(message({"--port", "70000"}, env).find("--port: port must be in [0, 65535]"),
            std::string::npos);
  EXPECT_NE(message({"--frobnicate", "1"}, env).find("unknown flag --frobnicate"), std::string::npos);
  EXPECT_NE(message({"--kv-cache-dtype", "int3"}, env).find("not one of the allowed values"),
            std::string::npos);
  EXPECT_NE(message({"--port"}, env).find("needs a value"), std::string::npos);
  FakeEnv bad;
  bad.vars["LOOM_THREADS"] = "many";
  EXPECT_NE(message({}, bad).find("LOOM_THREADS: threads must be an integer"), std::string::npos);
  EXPECT_NE(message({"--config", WriteTemp(R"({"prot": 1})")}, env).find("unknown key 'prot'"),
            std::string::npos);
  EXPECT_NE(message({"--config", WriteTemp(R"({"port": "80"})")}, env).find("must be an integer"),
            std::string::npos);
  EXPECT_NE(message({"--config", WriteTemp(R"({"port": 9223372036854775808})")}, env)
                .find("port is out of range"),
            std::string::npos);
  EXPECT_NE(message({"--config", WriteTemp("{")}, env).find("loom_config_test.json"),
            std::string::npos);
  EXPECT_FALSE(Load({"--config", "/nonexistent/loom.json"}, env, &c).ok());
}

// Real-valued keys (gpu_memory_utilization): from a file, the environment and flags, with the
// range (0, 1] enforced in each.
TEST(ServerConfigTest, FractionsAreNumbersInRange) {
  FakeEnv env;
  ServerConfig c;
  EXPECT_DOUBLE_EQ(c.gpu_memory_utilization, 0.9);
  ASSERT_TRUE(Load({"--config", WriteTemp(R"({"gpu_memory_utilization": 0.5})")}, env, &c).ok());
  EXPECT_DOUBLE_EQ(c.gpu_memory_utilization, 0.5);
  env.vars["LOOM_GPU_MEMORY_UTILIZATION"] = "0.75";
  ASSERT_TRUE(Load({}, env, &c).ok());
  EXPECT_DOUBLE_EQ(c.gpu_memory_utilization, 0.75);
  ASSERT_TRUE(Load({"--gpu-memory-utilization", "1"}, env, &c).ok());
  EXPECT_DOUBLE_EQ(c.gpu_memory_utilization, 1.0);
  for (const char* bad : {"0", "1.5", "-0.2", "nan", "most", ""}) {
    SCOPED_TRACE(bad);
    absl::Status s = Load({"--gpu-memory-utilization", bad}, env, &c);
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("gpu_memory_utilization must be"), std::string_view::npos) << s;
  }
  absl::Status s = Load({"--config", WriteTemp(R"({"gpu_memory_utilization": "high"})")}, env, &c);
  EXPECT_NE(s.message().find("must be a number"), std::string_view::npos) << s;
}

TEST(ServerConfigTest, QuantizedActivationsIsF32OrInt8) {
  FakeEnv env;
  ServerConfig c;
  ASSERT_TRUE(Load({}, env, &c).ok());
  EXPECT_EQ(c.quantized_activations, "f32");
  ASSERT_TRUE(Load({"--quantized-activations", "int8"}, env, &c).ok());
  EXPECT_EQ(c.quantized_activations, "int8");
  env.vars["LOOM_QUANTIZED_ACTIVATIONS"] = "int4";
  const absl::Status s = Load({}, env, &c);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("quantized_activations"), std::string_view::npos) << s;
}

TEST(ServerConfigTest, FastBf16MatmulIsOffByDefault) {
  FakeEnv env;
  ServerConfig c;
  ASSERT_TRUE(Load({}, env, &c).ok());
  EXPECT_FALSE(c.fast_bf16_matmul);
  ASSERT_TRUE(Load({"--fast-bf16-matmul"}, env, &c).ok());
  EXPECT_TRUE(c.fast_bf16_matmul);
  env.vars["LOOM_FAST_BF16_MATMUL"] = "maybe";
  const absl::Status s = Load({}, env, &c);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("fast_bf16_matmul"), std::string_view::npos) << s;
}

// The expert cache's keys: off by default, sized in MiB, a policy the scheduler knows, a
// boolean that needs --flag=false to turn off, on either backend.
TEST(ServerConfigTest, ExpertCacheKeys) {
  FakeEnv env;
  ServerConfig c;
  ASSERT_TRUE(Load({}, env, &c).ok());
  EXPECT_EQ(c.expert_cache_mb, 0);
  EXPECT_EQ(c.expert_cache_policy, "activation");
  EXPECT_TRUE(c.expert_direct_io);
  ASSERT_TRUE(Load({"--config", WriteTemp(R"({"expert_cache_mb": 512, "expert_cache_policy": "lru"})")},
                   env, &c)
                  .ok());
  EXPECT_EQ(c.expert_cache_mb, 512);
  EXPECT_EQ(c.expert_cache_policy, "lru");
  env.vars["LOOM_EXPERT_CACHE_POLICY"] = "lfu";
  ASSERT_TRUE(Load({"--expert-direct-io=false", "--expert-cache-mb", "64"}, env, &c).ok());
  EXPECT_EQ(c.expert_cache_policy, "lfu");
  EXPECT_FALSE(c.expert_direct_io);
  EXPECT_EQ(c.expert_cache_mb, 64);
  ASSERT_TRUE(Load({"--expert_direct_io"}, env, &c).ok());
  EXPECT_TRUE(c.expert_direct_io);
  // Every policy the scheduler has is accepted; nothing else is.
  for (std::string_view name : ExpertCachePolicy::Names()) {
    ServerConfig d;
    ASSERT_TRUE(Load({"--expert-cache-policy", std::string(name)}, FakeEnv{}, &d).ok()) << name;
    EXPECT_EQ(d.expert_cache_policy, name);
  }
  absl::Status s = Load({"--expert-cache-policy", "fifo"}, FakeEnv{}, &c);
  EXPECT_NE(s.message().find("expert_cache_policy"), std::string_view::npos) << s;
  s = Load({"--expert-cache-mb", "-1"}, FakeEnv{}, &c);
  EXPECT_NE(s.message().find("expert_cache_mb must be in [0,"), std::string_view::npos) << s;
  s = Load({"--config", WriteTemp(R"({"expert_direct_io": "no"})")}, FakeEnv{}, &c);
  EXPECT_NE(s.message().find("expert_direct_io must be true or false"), std::string_view::npos)
      << s;
  // Both backends have an expert cache.
  ServerConfig cuda;
  ASSERT_TRUE(Load({"--backend", "cuda", "--expert-cache-mb", "256"}, FakeEnv{}, &cuda).ok());
  EXPECT_EQ(cuda.expert_cache_mb, 256);
  EXPECT_TRUE(Load({"--backend", "cuda", "--expert-cache-mb", "0"}, FakeEnv{}, &cuda).ok());
}

TEST(ServerConfigTest, HelpIsAnswered) {
  FakeEnv env;
  ServerConfig c;
  bool help = false;
  ASSERT_TRUE(LoadServerConfig({"--help"}, env.lookup(), &c, &help).ok());
  EXPECT_TRUE(help);
  EXPECT_NE(ServerConfigHelp().find("--drain_timeout_s (s)"), std::string::npos);
}

// configs/README.md carries the generated reference verbatim, so the document cannot drift from
// the code.
TEST(ServerConfigTest, TheReadmeListsEveryKey) {
  std::ifstream in(std::string(LOOM_SOURCE_DIR) + "/configs/README.md");
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find(ServerConfigReference()), std::string::npos)
      << "configs/README.md is out of date; its table must be:\n"
      << ServerConfigReference();
}

TEST(ServerConfigTest, TheShippedConfigsLoad) {
  for (const char* name : {"default.json"}) {
    FakeEnv env;
    ServerConfig c;
    const absl::Status s =
        Load({"--config", std::string(LOOM_SOURCE_DIR) + "/configs/" + name}, env, &c);
    EXPECT_TRUE(s.ok()) << name << ": " << s;
  }
}

}  // namespace
}  // namespace loom
