// libFuzzer target for what a peer instance sends over the internal cluster API: arbitrary
// bytes as a serialized loom.v1.ResumeRequest (a migrated or forwarded request arriving at
// Instance.Resume), converted by MigrantFromProto, which checks every token id, count and
// sampling range; and the same bytes as a loom.v1.RemoteOutput (what a relay reads back from the
// instance that runs the request). A message that parses is refused with INVALID_ARGUMENT and a
// reason, or gives a state the scheduler may take: a prompt, tokens in the vocabulary, no more
// generated than max_new_tokens, valid sampling. Nothing crashes or overflows.
#include <cstdint>
#include <cstdlib>

#include "server/cluster/wire.h"

namespace {

constexpr int32_t kVocab = 1000;
constexpr int64_t kNowMs = 1000;

bool InVocab(loom::TokenId t) { return t.value() >= 0 && t.value() < kVocab; }

void CheckResume(const loom::v1::ResumeRequest& in) {
  absl::StatusOr<loom::MigrantState> state = loom::cluster::MigrantFromProto(in, kVocab, kNowMs);
  if (!state.ok()) {
    if (state.status().code() != absl::StatusCode::kInvalidArgument ||
        state.status().message().empty()) {
      std::abort();
    }
    return;
  }
  const loom::SchedRequest& r = state->params;
  if (r.prompt.empty() || r.n != 1) std::abort();
  if (state->tokens.size() < r.prompt.size()) std::abort();
  for (loom::TokenId t : state->tokens) {
    if (!InVocab(t)) std::abort();
  }
  for (loom::TokenId t : r.stop_token_ids) {
    if (!InVocab(t)) std::abort();
  }
  const size_t generated = state->tokens.size() - r.prompt.size();
  if (r.max_new_tokens < 0 || generated > static_cast<size_t>(r.max_new_tokens)) std::abort();
  if (r.deadline_ms < 0 || (r.deadline_ms != 0 && r.deadline_ms < kNowMs)) std::abort();
  if (!loom::ValidateSamplingParams(r.sampling, kVocab).ok()) std::abort();
  // What the source would send on for a second move round-trips.
  loom::v1::ResumeRequest again;
  loom::cluster::MigrantToProto(*state, &again);
  absl::StatusOr<loom::MigrantState> back =
      loom::cluster::MigrantFromProto(again, kVocab, kNowMs);
  if (!back.ok() || back->tokens != state->tokens) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::v1::ResumeRequest resume;
  if (resume.ParseFromArray(data, static_cast<int>(size))) CheckResume(resume);
  loom::v1::RemoteOutput output;
  if (output.ParseFromArray(data, static_cast<int>(size))) {
    const loom::ChoiceOutput out = loom::cluster::OutputFromProto(output, loom::RequestId(1));
    if (out.index != 0 || static_cast<int32_t>(out.finish) < 0 ||
        out.finish > loom::FinishReason::kDeadline) {
      std::abort();
    }
  }
  return 0;
}
