// Liveness and readiness of loomd (shared/ARCHITECTURE.md §7), decided from a snapshot of the
// engine loop and the serving state, so that the probes say what is true:
//
//   live   the engine loop is stepping when it has work: not live when it is busy and no step
//          has returned within `step_timeout_ms`, when the last `max_consecutive_failed_steps`
//          steps all failed, or when the device was lost.
//   ready  live, the model loaded and warmed up, not draining, and below the admission caps
//          (a load balancer should send new requests elsewhere rather than get 503s).
//
// Pure functions of their arguments: tests pass any snapshot and any time.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "scheduler/engine_loop.h"
#include "server/config/server_config.h"

namespace loom {

struct HealthOptions {
  // A busy engine loop with no step returned for longer than this is stuck.
  int64_t step_timeout_ms = 60000;
  // This many failed steps in a row (and no success since) mean the engine cannot serve.
  int64_t max_consecutive_failed_steps = 5;
  // The scheduler's admission caps (0 = none): at the cap new requests would get 503.
  int64_t max_waiting_requests = 0;
  int64_t max_waiting_prompt_tokens = 0;
};

// The options loomd's configuration sets (livez_*, max_waiting_*).
HealthOptions HealthOptionsFor(const ServerConfig& config);

// OK when live; Unavailable saying why not. `now_ms` is on the engine loop's clock.
absl::Status CheckLiveness(const EngineLoopStats& stats, int64_t now_ms,
                           const HealthOptions& options);

// The serving state readiness looks at besides the engine loop.
struct ServingState {
  bool warmed_up = false;  // the model loaded and a first generation went through the engine
  bool draining = false;   // SIGTERM arrived
};

// OK when ready; Unavailable saying why not.
absl::Status CheckReadiness(const EngineLoopStats& stats, int64_t now_ms,
                            const ServingState& state, const HealthOptions& options);

}  // namespace loom
