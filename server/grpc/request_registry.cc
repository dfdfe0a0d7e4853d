#include "server/grpc/request_registry.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "engine/common/logging.h"
#include "engine/common/strings.h"

namespace loom {

void OsRandomBytes(std::span<uint8_t> out) {
  size_t filled = 0;
  while (filled < out.size()) {
    const ssize_t n = getrandom(out.data() + filled, out.size() - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    LOOM_CHECK(n > 0, "getrandom failed: ", std::strerror(errno));
    filled += static_cast<size_t>(n);
  }
}

RequestRegistry::RequestRegistry(RandomBytes random) : random_(std::move(random)) {}

std::string RequestRegistry::RandomHex(int num_bytes) {
  std::vector<uint8_t> bytes(static_cast<size_t>(num_bytes));
  random_(bytes);
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    hex.push_back(kDigits[b >> 4]);
    hex.push_back(kDigits[b & 0xf]);
  }
  return hex;
}

std::string RequestRegistry::Add(std::string_view owner, std::string_view wanted, RequestId id) {
  std::lock_guard<std::mutex> lock(mu_);
  std::string name = wanted.empty() ? StrCat("grpc-", RandomHex(16)) : std::string(wanted);
  // A clash is the owner's own running name (or, for assigned names, a 2^-128 chance).
  while (running_.contains(Key(owner, name))) {
    name = StrCat(wanted.empty() ? "grpc" : wanted, "-", RandomHex(16));
  }
  running_.emplace(Key(owner, name), id);
  return name;
}

void RequestRegistry::Remove(std::string_view owner, std::string_view name) {
  std::lock_guard<std::mutex> lock(mu_);
  running_.erase(Key(owner, name));
}

std::optional<RequestId> RequestRegistry::Find(std::string_view owner,
                                               std::string_view name) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = running_.find(Key(owner, name));
  if (it == running_.end()) return std::nullopt;
  return it->second;
}

}  // namespace loom
