// The server's Prometheus metrics (prometheus-cpp registry, text format served at /metrics).
//
// Families are named `loom_<name>` with a `model_name` label (underscores, not the `loom:` of
// shared/ARCHITECTURE.md §7: colons are reserved for recording rules and `promtool check
// metrics` rejects them in exposed names). With vLLM compatibility on, every family is
// registered a second time under vLLM's name (`vllm:<name>`, colon included, because that is
// what vLLM dashboards and routers query) with vLLM's buckets. loom's own histograms use the
// same buckets, so the two views agree.
//
// Request histograms and `request_success_total` are observed once per request that the engine
// accepted, when it ends, whatever the reason — stop, length, abort (client gone), deadline,
// error — with a `finished_reason` label. Requests refused instead (bad input, a full queue,
// draining; before or at admission) never ran: like vLLM, which counts them only as HTTP
// responses, loom keeps them out of the success counter and the latency histograms, and counts
// them in `loom_request_rejected_total{reason}` (reason: invalid, overloaded, unavailable; no
// `vllm:` mirror, vLLM has no such family).
//
// Mixture-of-experts models with an expert cache (MetricsOptions::expert_cache_slots > 0) also
// get the expert cache's families, every series present at 0 from the start, fed from the
// engine's counters in SchedulerStats::expert_cache (loom_ names only; vLLM has none):
//   loom_expert_cache_hits_total, _misses_total, _evictions_total     counters
//   loom_expert_prefetches_total{outcome}  issued, used, wasted, cancelled, dropped
//   loom_expert_cache_loaded_bytes_total, loom_expert_cache_load_seconds_total
//   loom_expert_cache_wait_seconds_total   time steps waited for experts to arrive (the stall
//                                          the cache's misses cost, beside the loader's time)
//   loom_expert_cache_slots, loom_expert_cache_resident_experts       gauges
//   loom_expert_cache_capacity_bytes       the cache's RAM (slots x slot bytes), constant, the
//                                          expert side of the memory split whose KV side is
//                                          loom_kv_cache_capacity_tokens x _bytes_per_token
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/status.h"

namespace loom {

struct SchedulerStats;

// Whether a request that ended with `status` was refused rather than run: InvalidArgument,
// OutOfRange, NotFound, Unimplemented (bad input), ResourceExhausted (queue full), Unavailable
// (draining). Other errors are failures of accepted requests.
bool IsRejection(const absl::Status& status);
// The `reason` label of a refusal: "invalid", "overloaded" or "unavailable".
std::string_view RejectionReason(absl::StatusCode code);

struct MetricsOptions {
  std::string model_name;
  bool vllm_compat = false;
  int32_t max_model_len = 4096;  // top of the 1-2-5 token-count buckets
  // The KV cache as configured, exported as constant gauges labelled with its format.
  std::string kv_cache_dtype{};
  int64_t kv_capacity_tokens = 0;
  double kv_bytes_per_token = 0;
  // The expert cache (KvCapacity::expert_cache_slots / expert_slot_bytes); 0 slots: none, and no
  // expert cache family is declared.
  int32_t expert_cache_slots = 0;
  int64_t expert_slot_bytes = 0;
};

// Timings of one finished request, in seconds from its arrival (negative = never reached).
struct RequestRecord {
  std::string finished_reason;  // stop, length, abort, deadline, error
  double queue_s = -1;          // arrival -> first scheduled
  double ttft_s = -1;           // arrival -> first token
  double e2e_s = 0;             // arrival -> end
  double prefill_s = -1;        // first scheduled -> first token
  double decode_s = -1;         // first token -> end
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  int32_t n = 1;
};

class ServerMetrics {
 public:
  explicit ServerMetrics(const MetricsOptions& options);
  ~ServerMetrics();

  void ObserveRequest(const RequestRecord& record);
  // One request refused before it ran, labelled with RejectionReason(status.code()).
  void ObserveRejected(const absl::Status& status);
  // One inter-token gap of a streaming request (between consecutive token batches, divided
  // over the tokens in the later batch).
  void ObserveInterToken(double seconds, int64_t num_tokens);
  // Gauges and cumulative counters from the engine loop's snapshot (the expert cache's too).
  void UpdateScheduler(const SchedulerStats& stats);
  // A live migration out of this instance ended: loom_migrations_total{outcome} (committed,
  // aborted: the request stayed here, failed: it ended with an error) and, when committed,
  // loom_migration_downtime_seconds.
  void ObserveMigration(std::string_view outcome, double downtime_s);
  // A new request the manager's dispatch sent to another instance, counted when that instance
  // accepts it (it runs there; this instance relays its outputs): loom_requests_forwarded_total.
  void ObserveForwarded();
  // The Prometheus text exposition of everything.
  std::string Render() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom
