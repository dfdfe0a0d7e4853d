// The gRPC API's running requests, under the names clients abort them by, each owned by the
// caller that started it.
//
// A name is the client's own request_id, or, when it gave none, "grpc-" and 128 random bits in
// hex, which nobody can guess. Names live per owner (the API key when the server has keys, the
// client's connection otherwise): Find answers only the owner's own requests, so aborting
// somebody else's request looks exactly like aborting an unknown one, and one client's names
// never collide with, or reveal, another's. A client that reuses one of its own running names
// gets that name with a random suffix.
//
// Thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "scheduler/request.h"

namespace loom {

// Fills its argument with unpredictable bytes.
using RandomBytes = std::function<void(std::span<uint8_t>)>;

// The operating system's cryptographic randomness (getrandom(2)). Crashes if the OS has none to
// give, which cannot happen on a supported kernel.
void OsRandomBytes(std::span<uint8_t> out);

class RequestRegistry {
 public:
  explicit RequestRegistry(RandomBytes random = OsRandomBytes);

  // Registers `id`, started by `owner`, under `wanted` (already validated; empty = assign one).
  // Returns the name the client sees in its responses.
  std::string Add(std::string_view owner, std::string_view wanted, RequestId id);
  // Forgets a name Add returned.
  void Remove(std::string_view owner, std::string_view name);
  // The request `owner` runs under `name`, if any.
  std::optional<RequestId> Find(std::string_view owner, std::string_view name) const;

 private:
  using Key = std::pair<std::string, std::string>;  // (owner, name)

  std::string RandomHex(int num_bytes);

  RandomBytes random_;
  mutable std::mutex mu_;
  absl::flat_hash_map<Key, RequestId> running_;
};

}  // namespace loom
