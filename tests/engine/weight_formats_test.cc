// CheckWeightFormats: a model whose matrices a backend cannot run is refused at load, naming the
// format, rather than run wrong.
#include <gtest/gtest.h>

#include "engine/backend/cpu_backend.h"
#include "engine/models/decoder_weights.h"

namespace loom {
namespace {

// An Ops with the default format rule (float only), for the refusal path.
class FloatOnlyOps final : public Ops {
 public:
  void Embedding(const int32_t*, int32_t, const WeightView&, float*) override {}
  void RmsNorm(const float*, int64_t, int32_t, int32_t, const WeightView&, float, float*,
               int64_t) override {}
  void AddRmsNorm(float*, const float*, int32_t, int32_t, const WeightView&, float,
                  float*) override {}
  void Add(float*, const float*, int64_t) override {}
  void Linear(const float*, int64_t, int32_t, std::span<const LinearOutput>) override {}
  void Rope(float*, int64_t, int32_t, int32_t, int32_t, const float*, const float*) override {}
  void SiluMul(const float*, const float*, int32_t, int32_t, float*) override {}
  void HadamardRotate(float*, int64_t, int32_t) override {}
  void WriteKv(const KvWriteArgs&) override {}
  void PagedAttention(const PagedAttentionArgs&) override {}
};

DecoderWeights OneLayer(DType matrix_dtype) {
  static const uint8_t kBytes[64] = {};
  DecoderWeights w;
  w.embed_tokens = {kBytes, DType::kBF16, 4, 32};
  w.lm_head.weight = w.embed_tokens;
  w.layers.resize(1);
  for (LinearWeight* l : {&w.layers[0].q_proj, &w.layers[0].k_proj, &w.layers[0].v_proj,
                          &w.layers[0].o_proj, &w.layers[0].gate_proj, &w.layers[0].up_proj,
                          &w.layers[0].down_proj}) {
    l->weight = {kBytes, DType::kBF16, 1, 32};
  }
  w.layers[0].down_proj.weight.dtype = matrix_dtype;
  return w;
}

TEST(WeightFormatsTest, RefusesAFormatWithoutAKernel) {
  FloatOnlyOps float_only;
  EXPECT_TRUE(CheckWeightFormats(OneLayer(DType::kF16), float_only, "test").ok());
  const absl::Status status = CheckWeightFormats(OneLayer(DType::kQ4_K), float_only, "test");
  EXPECT_TRUE(absl::IsUnimplemented(status)) << status;
  EXPECT_NE(status.message().find("test backend has no kernel for linear weights stored as q4_k"),
            std::string_view::npos)
      << status;
}

TEST(WeightFormatsTest, CpuRunsEveryQuantizedFormat) {
  CpuOps cpu(1, cpu::MatmulPrecision::kHighest);
  for (DType d : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ4_K, DType::kQ5_K,
                  DType::kQ6_K, DType::kF32, DType::kF16, DType::kBF16}) {
    EXPECT_TRUE(CheckWeightFormats(OneLayer(d), cpu, "cpu").ok()) << DTypeName(d);
  }
  EXPECT_FALSE(cpu.SupportsWeightFormat(DType::kI8));
}

}  // namespace
}  // namespace loom
