// ErrorResponseFor (api_status.h): the HTTP side of the Status table. Kept apart from the table
// itself so that the request parsers and the table build without the HTTP server (the fuzzers).
#include <string>

#include "server/api/api_status.h"
#include "server/http/http_server.h"

namespace loom::api {

http::Response ErrorResponseFor(const absl::Status& status, int64_t retry_after_s) {
  http::Response r = http::ErrorResponse(HttpStatusFor(status.code()), std::string(status.message()),
                                         OpenAiErrorType(status.code()), ParamOf(status));
  if (r.status == 503) r.headers.emplace_back("Retry-After", std::to_string(retry_after_s));
  return r;
}

}  // namespace loom::api
