#include "server/api/api_status.h"

#include "absl/strings/cord.h"
#include "engine/common/strings.h"

namespace loom::api {
namespace {
constexpr std::string_view kParamPayload = "loom.param";
}  // namespace

absl::Status ParamError(std::string_view param, std::string_view message) {
  absl::Status status = absl::InvalidArgumentError(AbslView(message));
  status.SetPayload(AbslView(kParamPayload), absl::Cord(AbslView(param)));
  return status;
}

std::string ParamOf(const absl::Status& status) {
  auto payload = status.GetPayload(AbslView(kParamPayload));
  return payload.has_value() ? std::string(*payload) : std::string();
}

int HttpStatusFor(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk: return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kFailedPrecondition: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

std::string_view OpenAiErrorType(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kFailedPrecondition: return "invalid_request_error";
    case absl::StatusCode::kUnauthenticated: return "authentication_error";
    case absl::StatusCode::kPermissionDenied: return "permission_error";
    case absl::StatusCode::kNotFound: return "not_found_error";
    case absl::StatusCode::kResourceExhausted: return "overloaded_error";
    case absl::StatusCode::kUnavailable: return "unavailable_error";
    case absl::StatusCode::kDeadlineExceeded: return "timeout_error";
    default: return "internal_error";
  }
}

int GrpcCodeFor(absl::StatusCode code) { return static_cast<int>(code); }

}  // namespace loom::api
