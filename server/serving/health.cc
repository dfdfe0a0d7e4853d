#include "server/serving/health.h"

#include "engine/common/status.h"
#include "engine/common/strings.h"

namespace loom {

HealthOptions HealthOptionsFor(const ServerConfig& config) {
  HealthOptions o;
  o.step_timeout_ms = config.livez_step_timeout_s * 1000;
  o.max_consecutive_failed_steps = config.livez_max_failed_steps;
  o.max_waiting_requests = config.max_waiting_requests;
  o.max_waiting_prompt_tokens = config.max_waiting_prompt_tokens;
  return o;
}

absl::Status CheckLiveness(const EngineLoopStats& stats, int64_t now_ms,
                           const HealthOptions& options) {
  if (stats.device_lost) return absl::UnavailableError("the device was lost");
  if (stats.num_consecutive_failed_steps >= options.max_consecutive_failed_steps) {
    return absl::UnavailableError(StrCat("the last ", stats.num_consecutive_failed_steps,
                                         " engine steps failed"));
  }
  const int64_t stalled_ms = now_ms - stats.last_progress_ms;
  if (!stats.idle && stalled_ms > options.step_timeout_ms) {
    return absl::UnavailableError(StrCat("the engine loop has work but no step returned for ",
                                         stalled_ms, " ms (bound ", options.step_timeout_ms,
                                         " ms)"));
  }
  return absl::OkStatus();
}

absl::Status CheckReadiness(const EngineLoopStats& stats, int64_t now_ms,
                            const ServingState& state, const HealthOptions& options) {
  if (state.draining) return absl::UnavailableError("draining");
  if (!state.warmed_up) return absl::UnavailableError("warming up");
  LOOM_RETURN_IF_ERROR(CheckLiveness(stats, now_ms, options));
  const SchedulerStats& s = stats.scheduler;
  if (options.max_waiting_requests > 0 && s.num_waiting_requests >= options.max_waiting_requests) {
    return absl::UnavailableError(StrCat("the waiting queue is full (", s.num_waiting_requests,
                                         " requests)"));
  }
  if (options.max_waiting_prompt_tokens > 0 &&
      s.num_waiting_prompt_tokens >= options.max_waiting_prompt_tokens) {
    return absl::UnavailableError(StrCat("the waiting queue is full (",
                                         s.num_waiting_prompt_tokens, " prompt tokens)"));
  }
  return absl::OkStatus();
}

}  // namespace loom
