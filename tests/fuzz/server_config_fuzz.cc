// libFuzzer target for loomd's configuration file (--config FILE): arbitrary bytes as the JSON
// file. Loading must fail with a Status naming the problem or succeed; never crash.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "server/config/server_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string path = "/tmp/loom_server_config_fuzz." + std::to_string(getpid());
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  loom::ServerConfig config;
  bool help = false;
  const absl::Status status = loom::LoadServerConfig(
      {"--config", path}, [](const char*) -> const char* { return nullptr; }, &config, &help);
  if (!status.ok() && status.message().empty()) std::abort();
  return 0;
}
