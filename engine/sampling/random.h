// The sampler's counter-based random numbers.
//
// A draw is a pure function of (seed, counter): no generator state is kept or advanced, so a
// sequence gets the same numbers whichever thread samples it, whatever else is in the batch and
// after a preemption that recomputes it. The hash is the SplitMix64 output function applied
// twice: once to the seed alone (so that nearby seeds give unrelated streams) and once to the
// counter's position in the stream of that hashed seed.
#pragma once

#include <cstdint>

namespace loom::sampling_internal {

// The SplitMix64 finaliser: a bijection on 64-bit words with full avalanche.
constexpr uint64_t Mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// 64 random bits for position `counter` of the stream named by `seed`.
constexpr uint64_t CounterRandom64(uint64_t seed, uint64_t counter) {
  constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ULL;
  return Mix64(Mix64(seed ^ 0x6A09E667F3BCC909ULL) + kGolden * (counter + 1));
}

// A uniform double in [0, 1) with 53 random bits, for position `counter` of stream `seed`.
constexpr double CounterUniform(uint64_t seed, uint64_t counter) {
  return static_cast<double>(CounterRandom64(seed, counter) >> 11) * 0x1.0p-53;
}

}  // namespace loom::sampling_internal
