// Random-weight Hugging Face checkpoints in the shapes of real models, so that engine benchmarks
// move the same bytes and flops as the real thing without downloading weights.
//
// Weights are N(0, 0.02) (a fast approximation: sum of uniforms), norms 1.0, stored in the
// requested dtype; the folder gets config.json, generation_config.json and model.safetensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "kernels/common/dtype.h"

namespace loom::bench {

// Shape presets: "llama-1.1b" (TinyLlama: hidden 2048, 22 layers, 32/4 heads, ffn 5632, vocab
// 32000), "llama-134m" (768, 12 layers, 12/12 heads, ffn 2048, vocab 32000), "llama3-8b"
// (4096, 32 layers, 32/8 heads, ffn 14336, vocab 128256, rope theta 500000).
std::vector<std::string> ShapePresets();

// Writes the checkpoint into `dir` (created if missing). `seed` keys the weights.
absl::Status WriteRandomCheckpoint(const std::string& preset, DType dtype, uint64_t seed,
                                   const std::string& dir);

}  // namespace loom::bench
