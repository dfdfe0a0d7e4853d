// prometheus-cpp behind ServerMetrics. prometheus-cpp may throw (bad label names, which loom
// never produces), so this is the one server file built with exceptions.
#include "server/metrics/server_metrics.h"

#include <mutex>
#include <optional>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "scheduler/scheduler.h"

namespace loom {
namespace {

using prometheus::Histogram;

const Histogram::BucketBoundaries kTtftBuckets = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1, 2.5, 5, 7.5, 10, 20, 40, 80, 160, 640, 2560};
const Histogram::BucketBoundaries kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,
                                                 0.3,  0.4,   0.5,  0.75,  1,   2.5,  5,
                                                 7.5,  10,    20,   40,    80};
const Histogram::BucketBoundaries kLatencyBuckets = {
    0.3, 0.5, 0.8, 1, 1.5, 2, 2.5, 5, 10, 15, 20, 30, 40, 50, 60, 120, 240, 480, 960, 1920, 7680};

// 1, 2, 5, 10, 20, 50, ... up to `max`.
Histogram::BucketBoundaries OneTwoFive(int64_t max) {
  Histogram::BucketBoundaries b;
  for (int64_t scale = 1;; scale *= 10) {
    for (int64_t m : {1, 2, 5}) {
      if (m * scale > max) return b;
      b.push_back(static_cast<double>(m * scale));
    }
  }
}

// One view of every family under one name prefix ("loom_" or "vllm:").
struct View {
  prometheus::Gauge* running;
  prometheus::Gauge* waiting;
  prometheus::Gauge* kv_usage;
  prometheus::Counter* prefix_queries;
  prometheus::Counter* prefix_hits;
  prometheus::Counter* preemptions;
  prometheus::Counter* prompt_tokens;
  prometheus::Counter* generation_tokens;
  prometheus::Family<prometheus::Counter>* success;
  prometheus::Family<prometheus::Counter>* rejected;  // loom_ view only
  prometheus::Family<Histogram>* ttft;
  prometheus::Family<Histogram>* itl;
  prometheus::Family<Histogram>* tpot;
  prometheus::Family<Histogram>* e2e;
  prometheus::Family<Histogram>* queue;
  prometheus::Family<Histogram>* prefill;
  prometheus::Family<Histogram>* decode;
  prometheus::Family<Histogram>* prompt_len;
  prometheus::Family<Histogram>* generation_len;
  prometheus::Family<Histogram>* params_n;
};

// The expert cache's series (loom_ only), declared when the model has one.
struct ExpertView {
  prometheus::Counter* hits;
  prometheus::Counter* misses;
  prometheus::Counter* evictions;
  prometheus::Counter* prefetches_issued;
  prometheus::Counter* prefetches_used;
  prometheus::Counter* prefetches_wasted;
  prometheus::Counter* prefetches_cancelled;
  prometheus::Counter* prefetches_dropped;
  prometheus::Counter* host_computes;
  prometheus::Counter* loaded_bytes;
  prometheus::Counter* load_seconds;
  prometheus::Counter* wait_seconds;
  prometheus::Gauge* slots;
  prometheus::Gauge* resident;
};

}  // namespace

class ServerMetrics::Impl {
 public:
  explicit Impl(const MetricsOptions& options)
      : options_(options),
        registry_(std::make_shared<prometheus::Registry>()),
        length_buckets_(OneTwoFive(options.max_model_len)) {
    views_.push_back(MakeView("loom_"));
    migrations_ = &prometheus::BuildCounter()
                       .Name("loom_migrations_total")
                       .Help("Live migrations out of this instance, by outcome.")
                       .Register(*registry_);
    forwarded_ = &prometheus::BuildCounter()
                      .Name("loom_requests_forwarded_total")
                      .Help("New requests run on another instance by the manager's dispatch.")
                      .Register(*registry_);
    migration_downtime_ = &prometheus::BuildHistogram()
                               .Name("loom_migration_downtime_seconds")
                               .Help("Freeze to the destination's first output, per migration.")
                               .Register(*registry_);
    // Every series exists from the start at 0, so that rates and alerts on them work before the
    // first migration (and a scrape shows every family loomd declares).
    const prometheus::Labels model{{"model_name", options.model_name}};
    for (const char* outcome : {"committed", "aborted", "failed"}) {
      migrations_->Add({{"model_name", options.model_name}, {"outcome", outcome}});
    }
    forwarded_->Add(model);
    migration_downtime_->Add(model, kItlBuckets);
    if (options.vllm_compat) views_.push_back(MakeView("vllm:"));
    if (options.expert_cache_slots > 0) experts_ = MakeExpertView();
    if (!options.kv_cache_dtype.empty()) {
      const prometheus::Labels labels{{"model_name", options.model_name},
                                      {"kv_cache_dtype", options.kv_cache_dtype}};
      prometheus::BuildGauge()
          .Name("loom_kv_cache_capacity_tokens")
          .Help("Tokens the KV cache holds in its format.")
          .Register(*registry_)
          .Add(labels)
          .Set(static_cast<double>(options.kv_capacity_tokens));
      prometheus::BuildGauge()
          .Name("loom_kv_cache_bytes_per_token")
          .Help("KV cache bytes one token takes (all layers, K and V, scales and zeros).")
          .Register(*registry_)
          .Add(labels)
          .Set(options.kv_bytes_per_token);
    }
  }

  void ObserveRequest(const RequestRecord& r) {
    const prometheus::Labels labels{{"model_name", options_.model_name},
                                    {"finished_reason", r.finished_reason}};
    std::lock_guard<std::mutex> lock(mu_);
    for (View& v : views_) {
      v.success->Add(labels).Increment();
      v.e2e->Add(labels, kLatencyBuckets).Observe(r.e2e_s);
      if (r.queue_s >= 0) v.queue->Add(labels, kLatencyBuckets).Observe(r.queue_s);
      if (r.ttft_s >= 0) v.ttft->Add(labels, kTtftBuckets).Observe(r.ttft_s);
      if (r.prefill_s >= 0) v.prefill->Add(labels, kLatencyBuckets).Observe(r.prefill_s);
      if (r.decode_s >= 0) v.decode->Add(labels, kLatencyBuckets).Observe(r.decode_s);
      if (r.decode_s >= 0 && r.generation_tokens > 1) {
        v.tpot->Add(labels, kItlBuckets).Observe(r.decode_s / (r.generation_tokens - 1));
      }
      v.prompt_len->Add(labels, length_buckets_).Observe(static_cast<double>(r.prompt_tokens));
      v.generation_len->Add(labels, length_buckets_)
          .Observe(static_cast<double>(r.generation_tokens));
      v.params_n->Add(labels, Histogram::BucketBoundaries{1, 2, 5, 10, 20}).Observe(r.n);
      v.prompt_tokens->Increment(static_cast<double>(r.prompt_tokens));
      v.generation_tokens->Increment(static_cast<double>(r.generation_tokens));
    }
  }

  void ObserveRejected(std::string_view reason) {
    const prometheus::Labels labels{{"model_name", options_.model_name},
                                    {"reason", std::string(reason)}};
    std::lock_guard<std::mutex> lock(mu_);
    for (View& v : views_) {
      if (v.rejected != nullptr) v.rejected->Add(labels).Increment();
    }
  }

  void ObserveMigration(std::string_view outcome, double downtime_s) {
    const prometheus::Labels labels{{"model_name", options_.model_name},
                                    {"outcome", std::string(outcome)}};
    std::lock_guard<std::mutex> lock(mu_);
    migrations_->Add(labels).Increment();
    if (outcome == "committed") {
      migration_downtime_->Add({{"model_name", options_.model_name}}, kItlBuckets)
          .Observe(downtime_s);
    }
  }

  void ObserveForwarded() {
    std::lock_guard<std::mutex> lock(mu_);
    forwarded_->Add({{"model_name", options_.model_name}}).Increment();
  }

  void ObserveInterToken(double seconds, int64_t num_tokens) {
    if (num_tokens <= 0) return;
    const prometheus::Labels labels{{"model_name", options_.model_name}};
    std::lock_guard<std::mutex> lock(mu_);
    for (View& v : views_) {
      Histogram& h = v.itl->Add(labels, kItlBuckets);
      for (int64_t i = 0; i < num_tokens; ++i) h.Observe(seconds / num_tokens);
    }
  }

  void UpdateScheduler(const SchedulerStats& s) {
    std::lock_guard<std::mutex> lock(mu_);
    const double usage =
        s.num_blocks > 0 ? 1.0 - static_cast<double>(s.num_free_blocks) / s.num_blocks : 0.0;
    for (View& v : views_) {
      v.running->Set(s.num_running_requests);
      v.waiting->Set(s.num_waiting_requests);
      v.kv_usage->Set(usage);
      Advance(v.prefix_queries, s.prefix_cache_queried_tokens);
      Advance(v.prefix_hits, s.prefix_cache_hit_tokens);
      Advance(v.preemptions, s.num_preemptions);
    }
    if (experts_.has_value()) UpdateExperts(s.expert_cache);
  }

  std::string Render() const {
    return prometheus::TextSerializer().Serialize(registry_->Collect());
  }

 private:
  // Counters mirror cumulative snapshots: add what the snapshot gained.
  static void Advance(prometheus::Counter* c, int64_t total) {
    Advance(c, static_cast<double>(total));
  }
  static void Advance(prometheus::Counter* c, double total) {
    const double delta = total - c->Value();
    if (delta > 0) c->Increment(delta);
  }

  // Called with mu_ held. Counters before the engine's first report (slots 0) are all zero and
  // change nothing; the slots gauge keeps the configured value until then.
  void UpdateExperts(const ExpertCacheCounters& c) {
    ExpertView& v = *experts_;
    Advance(v.hits, c.hits);
    Advance(v.misses, c.misses);
    Advance(v.evictions, c.evictions);
    Advance(v.prefetches_issued, c.prefetches_issued);
    Advance(v.prefetches_used, c.prefetches_used);
    Advance(v.prefetches_wasted, c.prefetches_wasted);
    Advance(v.prefetches_cancelled, c.prefetches_cancelled);
    Advance(v.prefetches_dropped, c.prefetches_dropped);
    Advance(v.host_computes, c.computed_at_home);
    Advance(v.loaded_bytes, c.bytes_loaded);
    Advance(v.load_seconds, c.load_seconds);
    Advance(v.wait_seconds, c.wait_seconds);
    if (c.slots > 0) {
      v.slots->Set(c.slots);
      v.resident->Set(c.resident);
    }
  }

  ExpertView MakeExpertView() {
    const prometheus::Labels model{{"model_name", options_.model_name}};
    // Names without the "loom_" prefix, added here as MakeView's callers do.
    auto counter = [&](const std::string& name, const std::string& help) {
      return &prometheus::BuildCounter().Name("loom_" + name).Help(help).Register(*registry_).Add(
          model);
    };
    auto gauge = [&](const std::string& name, const std::string& help) {
      return &prometheus::BuildGauge().Name("loom_" + name).Help(help).Register(*registry_).Add(
          model);
    };
    ExpertView v;
    v.hits = counter("expert_cache_hits_total",
                     "Routed experts a step found in the expert cache.");
    v.misses = counter("expert_cache_misses_total",
                       "Routed experts a step had to load on demand.");
    v.evictions = counter("expert_cache_evictions_total",
                          "Experts evicted from the expert cache.");
    auto& prefetches = prometheus::BuildCounter()
                           .Name("loom_expert_prefetches_total")
                           .Help("Expert prefetch hints by outcome: issued (load started), used, "
                                 "wasted (evicted unused), cancelled (replaced before their "
                                 "load), dropped (no slot).")
                           .Register(*registry_);
    auto outcome = [&](const char* name) {
      return &prefetches.Add({{"model_name", options_.model_name}, {"outcome", name}});
    };
    v.prefetches_issued = outcome("issued");
    v.prefetches_used = outcome("used");
    v.prefetches_wasted = outcome("wasted");
    v.prefetches_cancelled = outcome("cancelled");
    v.prefetches_dropped = outcome("dropped");
    v.host_computes = counter("expert_cache_host_computes_total",
                              "Routed experts a step computed where they live instead of "
                              "loading them (a GPU's expert cache: on the host CPU, or read in "
                              "place from host memory by a small step's kernels).");
    v.loaded_bytes = counter("expert_cache_loaded_bytes_total",
                             "Bytes of experts read into the expert cache.");
    v.load_seconds = counter("expert_cache_load_seconds_total",
                             "Time the expert loader spent reading.");
    v.wait_seconds = counter("expert_cache_wait_seconds_total",
                             "Time steps waited for experts to arrive in the expert cache.");
    v.slots = gauge("expert_cache_slots", "Experts the expert cache holds at once.");
    v.slots->Set(options_.expert_cache_slots);
    v.resident = gauge("expert_cache_resident_experts", "Experts in the expert cache now.");
    gauge("expert_cache_capacity_bytes",
          "RAM of the expert cache (slots x bytes of one expert), beside the KV cache's.")
        ->Set(static_cast<double>(options_.expert_cache_slots) *
              static_cast<double>(options_.expert_slot_bytes));
    return v;
  }

  View MakeView(const std::string& prefix) {
    const prometheus::Labels model{{"model_name", options_.model_name}};
    auto gauge = [&](const std::string& name, const std::string& help) {
      return &prometheus::BuildGauge().Name(prefix + name).Help(help).Register(*registry_).Add(model);
    };
    auto counter = [&](const std::string& name, const std::string& help) {
      return &prometheus::BuildCounter().Name(prefix + name).Help(help).Register(*registry_).Add(model);
    };
    auto histogram = [&](const std::string& name, const std::string& help) {
      return &prometheus::BuildHistogram().Name(prefix + name).Help(help).Register(*registry_);
    };
    View v;
    v.running = gauge("num_requests_running", "Requests being computed.");
    v.waiting = gauge("num_requests_waiting", "Requests waiting to be scheduled.");
    v.kv_usage = gauge("kv_cache_usage_perc", "Fraction of KV cache blocks in use (0-1).");
    v.prefix_queries = counter("prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.");
    v.prefix_hits = counter("prefix_cache_hits_total", "Prompt tokens found in the prefix cache.");
    v.preemptions = counter("num_preemptions_total", "Sequences preempted (recomputed later).");
    v.prompt_tokens = counter("prompt_tokens_total", "Prompt tokens of finished requests.");
    v.generation_tokens = counter("generation_tokens_total", "Generated tokens of finished requests.");
    v.success = &prometheus::BuildCounter()
                     .Name(prefix + "request_success_total")
                     .Help("Finished requests by reason.")
                     .Register(*registry_);
    v.rejected = nullptr;
    if (prefix == "loom_") {
      v.rejected = &prometheus::BuildCounter()
                        .Name(prefix + "request_rejected_total")
                        .Help("Requests refused before they ran, by reason.")
                        .Register(*registry_);
    }
    v.ttft = histogram("time_to_first_token_seconds", "Arrival to first token.");
    v.itl = histogram("inter_token_latency_seconds", "Time between streamed tokens.");
    v.tpot = histogram("request_time_per_output_token_seconds", "Decode time per output token.");
    v.e2e = histogram("e2e_request_latency_seconds", "Arrival to end, every finish reason.");
    v.queue = histogram("request_queue_time_seconds", "Arrival to first scheduled.");
    v.prefill = histogram("request_prefill_time_seconds", "First scheduled to first token.");
    v.decode = histogram("request_decode_time_seconds", "First token to end.");
    v.prompt_len = histogram("request_prompt_tokens", "Prompt length of finished requests.");
    v.generation_len = histogram("request_generation_tokens", "Generated tokens of finished requests.");
    v.params_n = histogram("request_params_n", "The n parameter of finished requests.");
    return v;
  }

  MetricsOptions options_;
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* migrations_ = nullptr;
  prometheus::Family<Histogram>* migration_downtime_ = nullptr;
  prometheus::Family<prometheus::Counter>* forwarded_ = nullptr;
  Histogram::BucketBoundaries length_buckets_;
  std::vector<View> views_;
  std::optional<ExpertView> experts_;
  std::mutex mu_;
};

bool IsRejection(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kUnimplemented:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnavailable:
      return true;
    default:
      return false;
  }
}

std::string_view RejectionReason(absl::StatusCode code) {
  if (code == absl::StatusCode::kResourceExhausted) return "overloaded";
  if (code == absl::StatusCode::kUnavailable) return "unavailable";
  return "invalid";
}

ServerMetrics::ServerMetrics(const MetricsOptions& options)
    : impl_(std::make_unique<Impl>(options)) {}
ServerMetrics::~ServerMetrics() = default;
void ServerMetrics::ObserveRequest(const RequestRecord& r) { impl_->ObserveRequest(r); }
void ServerMetrics::ObserveRejected(const absl::Status& status) {
  impl_->ObserveRejected(RejectionReason(status.code()));
}
void ServerMetrics::ObserveInterToken(double s, int64_t n) { impl_->ObserveInterToken(s, n); }
void ServerMetrics::ObserveForwarded() { impl_->ObserveForwarded(); }
void ServerMetrics::ObserveMigration(std::string_view outcome, double downtime_s) {
  impl_->ObserveMigration(outcome, downtime_s);
}
void ServerMetrics::UpdateScheduler(const SchedulerStats& s) { impl_->UpdateScheduler(s); }
std::string ServerMetrics::Render() const { return impl_->Render(); }

}  // namespace loom
