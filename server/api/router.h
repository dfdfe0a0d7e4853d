// The HTTP routes of loomd and what guards them: API keys on every route but the probes, 404 for
// unknown paths, 405 (with `Allow`) for a known path with the wrong method. Every GET route also
// answers HEAD, as GET without the body.
//
//   GET  /livez /readyz /health      probes (no key needed)
//   GET  /version /v1/models /metrics
//   POST /v1/completions /v1/chat/completions /tokenize /detokenize
#pragma once

#include "server/http/http_types.h"
#include "server/serving/serving_context.h"
#include "server/serving/work_queue.h"

namespace loom::api {

// The handler for HttpServer. `context` and `work` must outlive every request it serves.
http::Handler MakeRouter(ServingContext& context, WorkQueue& work, std::string version);

// Whether `header` (an Authorization value) carries one of `keys` as a Bearer token. The time it
// takes does not depend on how much of a key matched.
bool AuthorizedBearer(std::string_view header, const std::vector<std::string>& keys);

}  // namespace loom::api
