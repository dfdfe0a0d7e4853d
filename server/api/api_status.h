// The one table from absl::Status to HTTP status, OpenAI error type and gRPC code
// (STYLE.md: errors), and the `param` a validation error names.
//
//   InvalidArgument, OutOfRange  -> 400 invalid_request_error
//   Unauthenticated              -> 401 authentication_error
//   PermissionDenied             -> 403 permission_error
//   NotFound                     -> 404 not_found_error
//   ResourceExhausted            -> 503 overloaded_error (+ Retry-After; the queue is full)
//   Unavailable                  -> 503 unavailable_error (+ Retry-After; draining / stopping)
//   DeadlineExceeded             -> 504 timeout_error
//   Unimplemented                -> 400 invalid_request_error ("not supported")
//   anything else                -> 500 internal_error
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "server/http/http_types.h"

namespace loom::api {

// An InvalidArgument error about request field `param` (carried with the status).
absl::Status ParamError(std::string_view param, std::string_view message);
// The field a ParamError names, or "".
std::string ParamOf(const absl::Status& status);

int HttpStatusFor(absl::StatusCode code);
std::string_view OpenAiErrorType(absl::StatusCode code);
// grpc::StatusCode values are the absl ones; kept as a function so the mapping lives here.
int GrpcCodeFor(absl::StatusCode code);

// The HTTP response for an error: its status, the OpenAI envelope, and Retry-After on a 503.
http::Response ErrorResponseFor(const absl::Status& status, int64_t retry_after_s = 1);

}  // namespace loom::api
