// The default bodies of the optional Ops (mixture-of-experts): a backend that has no kernels for
// them reports SupportsMoe() false (or MaxGroupedExpertTokens() 0, for the grouped experts), so
// these never run.
#include "engine/backend/ops.h"

#include "engine/common/logging.h"

namespace loom {

void Ops::MoeRoute(const MoeRouteArgs&) {
  LOOM_CHECK(false, "MoeRoute on a backend without mixture-of-experts kernels");
}

void Ops::GatherRows(const float*, int64_t, const int32_t*, int32_t, int32_t, float*) {
  LOOM_CHECK(false, "GatherRows on a backend without mixture-of-experts kernels");
}

void Ops::MoeInitOutput(const float*, const float*, int32_t, int32_t, float*) {
  LOOM_CHECK(false, "MoeInitOutput on a backend without mixture-of-experts kernels");
}

void Ops::MoeScatterAdd(const float*, int32_t, int32_t, const int32_t*, const float*, float*) {
  LOOM_CHECK(false, "MoeScatterAdd on a backend without mixture-of-experts kernels");
}

absl::StatusOr<std::unique_ptr<ExpertTable>> Ops::CreateExpertTable(
    std::span<const ExpertWeights>) {
  return absl::UnimplementedError("this backend runs no grouped experts");
}

void Ops::UpdateExpertTable(ExpertTable&, std::span<const ExpertWeights>) {
  LOOM_CHECK(false, "UpdateExpertTable on a backend without grouped experts");
}

void Ops::MoeGroupedExperts(const MoeGroupedArgs&) {
  LOOM_CHECK(false, "MoeGroupedExperts on a backend without grouped experts");
}

void Ops::MoeCombine(const float*, int32_t, int32_t, int32_t, const int32_t*, const float*,
                     float*) {
  LOOM_CHECK(false, "MoeCombine on a backend without grouped experts");
}

}  // namespace loom
