// libFuzzer target for the gRPC API's requests: arbitrary bytes as a serialized
// loom.v1.GenerateRequest, as the server receives them (its methods parse raw bytes), then the
// conversion into the shared parameters and the validation both APIs use. A message that does
// not parse is INVALID_ARGUMENT; one that does must be refused with a 4xx-class Status or give
// parameters within the documented limits; nothing crashes.
#include <cstdint>
#include <cstdlib>

#include "server/api/api_status.h"
#include "server/grpc/completion_params.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  loom::v1::GenerateRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  loom::api::ParseLimits limits;
  limits.vocab_size = 1000;
  auto params = loom::ToCompletionParams(request, limits);
  if (!params.ok()) {
    const int http = loom::api::HttpStatusFor(params.status().code());
    if (http < 400 || http >= 500 || params.status().message().empty()) std::abort();
    return 0;
  }
  if (params->prompts.size() != 1 || params->n < 1 || params->n > limits.max_n) std::abort();
  for (int32_t id : params->prompts.front().ids) {
    if (id < 0 || id >= limits.vocab_size) std::abort();
  }
  for (int32_t id : params->stop_token_ids) {
    if (id < 0 || id >= limits.vocab_size) std::abort();
  }
  if (params->request_id.size() > 256) std::abort();
  return 0;
}
