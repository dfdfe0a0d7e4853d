// What every request handler shares: the model's identity and text layer, the engine loop, the
// metrics, the clock and the configuration. Built once by loomd (or a test) and read-only after
// that, apart from the components that are themselves thread-safe.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "engine/api/model_info.h"
#include "scheduler/engine_loop.h"
#include "server/config/server_config.h"
#include "server/metrics/server_metrics.h"
#include "server/text/chat_template.h"
#include "server/text/tokenizer/tokenizer.h"

namespace loom {

struct ServingContext {
  ServerConfig config;
  ModelInfo model;
  KvCapacity capacity;
  std::string model_id;  // what clients send as `model`
  // Absent when the model folder has no tokenizer.json / chat template: text requests are then
  // refused with a clear error, token-id requests still work.
  std::unique_ptr<text::Tokenizer> tokenizer;
  std::optional<text::ChatTemplate> chat_template;
  EngineLoop* engine = nullptr;
  // Where new requests go; null = engine->Submit. In a cluster, the agent may run them on
  // another instance (the manager's dispatch) and relay their outputs.
  std::function<std::shared_ptr<RequestStream>(SchedRequest)> submit;
  ServerMetrics* metrics = nullptr;
  std::function<int64_t()> now_ms;
  std::atomic<uint64_t> next_request_id{1};
  std::atomic<uint64_t> next_seed{0x5eed};
  // Set once the model is loaded and a first generation has gone through the engine (readiness).
  std::atomic<bool> warmed_up{false};
  // Set by SIGTERM: readiness fails and new requests get 503.
  std::atomic<bool> draining{false};
  // HTTP/gRPC responses started and not yet finished (what a drain waits for).
  std::atomic<int64_t> num_inflight_responses{0};
  // InstanceLoad.num_dispatched_in: incremented on the engine loop as each request the manager's
  // dispatch sent here enters the scheduler, and read there by the load snapshot.
  std::atomic<uint64_t> num_dispatched_in{0};
};

}  // namespace loom
