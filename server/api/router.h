// The HTTP routes of loomd and what guards them: API keys on every route but the probes (and
// /metrics when metrics_require_api_key is off), 404 for unknown paths, 405 (with `Allow`) for a
// known path with the wrong method. Every GET route also answers HEAD, as GET without the body.
//
//   GET  /livez /readyz /health      probes (no key needed; 503 with the reason when failing,
//                                    server/serving/health.h)
//   GET  /version /v1/models /v1/models/{id} /metrics
//   POST /v1/completions /v1/chat/completions /tokenize /detokenize
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/http/http_types.h"
#include "server/serving/serving_context.h"
#include "server/serving/work_queue.h"

namespace loom::api {

// The handler for HttpServer. `context` and `work` must outlive every request it serves.
http::Handler MakeRouter(ServingContext& context, WorkQueue& work, std::string version);

// Whether `header` (an Authorization value) carries one of `keys` as a Bearer token. The scheme
// is matched case-insensitively (RFC 9110). The time it takes does not depend on how much of a
// key matched.
bool AuthorizedBearer(std::string_view header, const std::vector<std::string>& keys);

// `text` with %XX escapes decoded (a path segment such as a model id); nullopt for a malformed
// escape.
std::optional<std::string> PercentDecode(std::string_view text);

}  // namespace loom::api
