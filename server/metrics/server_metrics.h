// The server's Prometheus metrics (prometheus-cpp registry, text format served at /metrics).
//
// Families are named `loom_<name>` with a `model_name` label (underscores, not the `loom:` of
// shared/ARCHITECTURE.md §7: colons are reserved for recording rules and `promtool check
// metrics` rejects them in exposed names). With vLLM compatibility on, every family is
// registered a second time under vLLM's name (`vllm:<name>`, colon included, because that is
// what vLLM dashboards and routers query) with vLLM's buckets. loom's own histograms use the
// same buckets, so the two views agree.
//
// Request histograms are observed once per request when it ends, whatever the reason — stop,
// length, abort (client gone), deadline, rejected (admission, validation after parsing), error —
// with a `finished_reason` label; requests refused before they had any timing observe only what
// they have (e.g. the end-to-end latency of a 503).
//
// Thread safety: every method may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace loom {

struct SchedulerStats;

struct MetricsOptions {
  std::string model_name;
  bool vllm_compat = false;
  int32_t max_model_len = 4096;  // top of the 1-2-5 token-count buckets
};

// Timings of one finished request, in seconds from its arrival (negative = never reached).
struct RequestRecord {
  std::string finished_reason;  // stop, length, abort, deadline, rejected, error
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
  // One inter-token gap of a streaming request (between consecutive token batches, divided
  // over the tokens in the later batch).
  void ObserveInterToken(double seconds, int64_t num_tokens);
  // Gauges and cumulative counters from the engine loop's snapshot.
  void UpdateScheduler(const SchedulerStats& stats);
  // The Prometheus text exposition of everything.
  std::string Render() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom
