// Conversions between the scheduler's plain data and the internal cluster API's messages
// (proto/loom/v1/cluster.proto): a request as it moves between instances, and the outputs the
// instance running it sends back to the instance holding the client's connection.
//
// Everything read from the wire is checked: a message from a peer is as untrusted as a client's.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "loom/v1/cluster.pb.h"
#include "scheduler/request.h"
#include "scheduler/scheduler.h"

namespace loom::cluster {

// The request part of a ResumeRequest (everything but the KV fields).
void MigrantToProto(const MigrantState& state, v1::ResumeRequest* out);
// Checks token ids against `vocab_size` and the sampling ranges (ValidateSamplingParams).
absl::StatusOr<MigrantState> MigrantFromProto(const v1::ResumeRequest& in, int32_t vocab_size,
                                              int64_t now_ms);

void OutputToProto(const ChoiceOutput& out, v1::RemoteOutput* msg);
// The choice index is 0 (migrated requests have one choice); `id` is the local request.
ChoiceOutput OutputFromProto(const v1::RemoteOutput& msg, RequestId id);

}  // namespace loom::cluster
