// Strong id types shared by the scheduler, the engine and the server.
//
// Ids are never bare integers (STYLE.md): a SequenceId cannot be passed where a BlockId is
// expected. Each wraps an integer `value()`, compares, hashes (absl and std) and prints.
#pragma once

#include <compare>
#include <cstdint>
#include <functional>
#include <ostream>

namespace loom {

template <typename Tag, typename Rep>
class StrongId {
 public:
  using ValueType = Rep;
  constexpr StrongId() = default;
  constexpr explicit StrongId(Rep value) : value_(value) {}
  constexpr Rep value() const { return value_; }
  constexpr auto operator<=>(const StrongId&) const = default;

  template <typename H>
  friend H AbslHashValue(H h, const StrongId& id) {
    return H::combine(std::move(h), id.value_);
  }
  friend std::ostream& operator<<(std::ostream& os, const StrongId& id) { return os << id.value_; }
  template <typename Sink>
  friend void AbslStringify(Sink& sink, const StrongId& id) {
    sink.Append(std::to_string(id.value_));
  }

 private:
  Rep value_{};
};

// One engine-side sequence (a request has one per `n` choice).
using SequenceId = StrongId<struct SequenceIdTag, uint64_t>;
// One physical KV block: `block_size` token slots of every layer's K and V.
using BlockId = StrongId<struct BlockIdTag, int32_t>;
// A vocabulary entry.
using TokenId = StrongId<struct TokenIdTag, int32_t>;

}  // namespace loom

template <typename Tag, typename Rep>
struct std::hash<loom::StrongId<Tag, Rep>> {
  size_t operator()(const loom::StrongId<Tag, Rep>& id) const { return std::hash<Rep>()(id.value()); }
};
