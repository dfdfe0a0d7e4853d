#include "server/metrics/server_metrics.h"

#include "gtest/gtest.h"
#include "scheduler/scheduler.h"

namespace loom {
namespace {

bool Has(const std::string& text, const std::string& piece) {
  return text.find(piece) != std::string::npos;
}

TEST(ServerMetricsTest, RequestHistogramsCarryTheFinishReason) {
  ServerMetrics metrics(MetricsOptions{"tiny", false, 4096});
  RequestRecord ok;
  ok.finished_reason = "stop";
  ok.queue_s = 0.01;
  ok.ttft_s = 0.2;
  ok.e2e_s = 1.2;
  ok.prefill_s = 0.19;
  ok.decode_s = 1.0;
  ok.prompt_tokens = 12;
  ok.generation_tokens = 11;
  metrics.ObserveRequest(ok);
  RequestRecord aborted;
  aborted.finished_reason = "abort";
  aborted.e2e_s = 0.001;
  metrics.ObserveRequest(aborted);
  const std::string text = metrics.Render();
  EXPECT_TRUE(Has(text, R"(loom_e2e_request_latency_seconds_count{finished_reason="stop",model_name="tiny"} 1)"))
      << text;
  EXPECT_TRUE(Has(text, R"(loom_e2e_request_latency_seconds_count{finished_reason="abort",model_name="tiny"} 1)"));
  EXPECT_TRUE(Has(text, R"(loom_time_to_first_token_seconds_bucket{finished_reason="stop",model_name="tiny",le="0.25"} 1)"));
  // An aborted request that had no first token observes no time to first token.
  EXPECT_FALSE(Has(text, R"(loom_time_to_first_token_seconds_count{finished_reason="abort")"));
  EXPECT_TRUE(Has(text, R"(loom_request_success_total{finished_reason="stop",model_name="tiny"} 1)"));
  EXPECT_TRUE(Has(text, R"(loom_prompt_tokens_total{model_name="tiny"} 12)"));
  EXPECT_TRUE(Has(text, R"(loom_request_time_per_output_token_seconds_sum{finished_reason="stop",model_name="tiny"} 0.1)"));
  EXPECT_FALSE(Has(text, "vllm:"));
}

// Refused requests never ran: they are counted by reason in their own family, not as a
// finish reason of the success counter, and observe no request histogram (vLLM counts them
// only as HTTP responses).
TEST(ServerMetricsTest, RejectedRequestsAreCountedApartFromFinishedOnes) {
  ServerMetrics metrics(MetricsOptions{"tiny", true, 4096});
  metrics.ObserveRejected(absl::InvalidArgumentError("prompt too long"));
  metrics.ObserveRejected(absl::NotFoundError("no such model"));
  metrics.ObserveRejected(absl::ResourceExhaustedError("queue full"));
  metrics.ObserveRejected(absl::UnavailableError("draining"));
  const std::string text = metrics.Render();
  EXPECT_TRUE(Has(text, R"(loom_request_rejected_total{model_name="tiny",reason="invalid"} 2)"))
      << text;
  EXPECT_TRUE(Has(text, R"(loom_request_rejected_total{model_name="tiny",reason="overloaded"} 1)"));
  EXPECT_TRUE(Has(text, R"(loom_request_rejected_total{model_name="tiny",reason="unavailable"} 1)"));
  EXPECT_FALSE(Has(text, "rejected\""));  // no finished_reason="rejected" anywhere
  EXPECT_FALSE(Has(text, R"(loom_request_success_total{)"));
  EXPECT_FALSE(Has(text, R"(loom_e2e_request_latency_seconds_count{)"));
  EXPECT_FALSE(Has(text, "vllm:request_rejected"));
  EXPECT_TRUE(IsRejection(absl::ResourceExhaustedError("")));
  EXPECT_FALSE(IsRejection(absl::InternalError("step failed")));
}

TEST(ServerMetricsTest, SchedulerSnapshotsDriveGaugesAndCounters) {
  ServerMetrics metrics(MetricsOptions{"tiny", true, 4096});
  SchedulerStats s;
  s.num_running_requests = 3;
  s.num_waiting_requests = 2;
  s.num_blocks = 100;
  s.num_free_blocks = 75;
  s.prefix_cache_queried_tokens = 50;
  s.prefix_cache_hit_tokens = 20;
  s.num_preemptions = 1;
  metrics.UpdateScheduler(s);
  s.prefix_cache_queried_tokens = 80;
  metrics.UpdateScheduler(s);
  const std::string text = metrics.Render();
  for (const std::string prefix : {"loom_", "vllm:"}) {
    EXPECT_TRUE(Has(text, prefix + R"(num_requests_running{model_name="tiny"} 3)")) << text;
    EXPECT_TRUE(Has(text, prefix + R"(kv_cache_usage_perc{model_name="tiny"} 0.25)"));
    EXPECT_TRUE(Has(text, prefix + R"(prefix_cache_queries_total{model_name="tiny"} 80)"));
    EXPECT_TRUE(Has(text, prefix + R"(prefix_cache_hits_total{model_name="tiny"} 20)"));
    EXPECT_TRUE(Has(text, prefix + R"(num_preemptions_total{model_name="tiny"} 1)"));
  }
}

TEST(ServerMetricsTest, InterTokenLatencySplitsABatchOverItsTokens) {
  ServerMetrics metrics(MetricsOptions{"m", false, 1024});
  metrics.ObserveInterToken(0.3, 3);
  const std::string text = metrics.Render();
  EXPECT_TRUE(Has(text, R"(loom_inter_token_latency_seconds_count{model_name="m"} 3)")) << text;
  EXPECT_TRUE(Has(text, R"(loom_inter_token_latency_seconds_bucket{model_name="m",le="0.1"} 3)"));
}

// An MoE model with an expert cache: every expert cache series is there at 0 before the first
// step (so rates and alerts work from the start), then follows the engine's cumulative counters.
TEST(ServerMetricsTest, ExpertCacheFamiliesStartAtZeroAndFollowTheEngine) {
  MetricsOptions options{"moe", true, 4096};
  options.expert_cache_slots = 24;
  options.expert_slot_bytes = 1 << 20;
  ServerMetrics metrics(options);
  std::string text = metrics.Render();
  for (const char* series :
       {R"(loom_expert_cache_hits_total{model_name="moe"} 0)",
        R"(loom_expert_cache_misses_total{model_name="moe"} 0)",
        R"(loom_expert_cache_evictions_total{model_name="moe"} 0)",
        R"(loom_expert_prefetches_total{model_name="moe",outcome="issued"} 0)",
        R"(loom_expert_prefetches_total{model_name="moe",outcome="used"} 0)",
        R"(loom_expert_prefetches_total{model_name="moe",outcome="wasted"} 0)",
        R"(loom_expert_prefetches_total{model_name="moe",outcome="cancelled"} 0)",
        R"(loom_expert_prefetches_total{model_name="moe",outcome="dropped"} 0)",
        R"(loom_expert_cache_loaded_bytes_total{model_name="moe"} 0)",
        R"(loom_expert_cache_load_seconds_total{model_name="moe"} 0)",
        R"(loom_expert_cache_wait_seconds_total{model_name="moe"} 0)",
        R"(loom_expert_cache_slots{model_name="moe"} 24)",
        R"(loom_expert_cache_resident_experts{model_name="moe"} 0)",
        R"(loom_expert_cache_capacity_bytes{model_name="moe"} 25165824)"}) {
    EXPECT_TRUE(Has(text, series)) << series << "\n" << text;
  }
  EXPECT_FALSE(Has(text, "vllm:expert"));
  SchedulerStats s;
  s.expert_cache.slots = 24;
  s.expert_cache.resident = 20;
  s.expert_cache.hits = 90;
  s.expert_cache.misses = 10;
  s.expert_cache.evictions = 4;
  s.expert_cache.prefetches_issued = 7;
  s.expert_cache.prefetches_used = 5;
  s.expert_cache.prefetches_wasted = 1;
  s.expert_cache.prefetches_cancelled = 2;
  s.expert_cache.prefetches_dropped = 3;
  s.expert_cache.computed_at_home = 6;
  s.expert_cache.bytes_loaded = 17 << 20;
  s.expert_cache.load_seconds = 0.5;
  s.expert_cache.wait_seconds = 0.25;
  metrics.UpdateScheduler(s);
  s.expert_cache.hits = 120;
  s.expert_cache.load_seconds = 0.75;
  metrics.UpdateScheduler(s);
  text = metrics.Render();
  for (const char* series :
       {R"(loom_expert_cache_hits_total{model_name="moe"} 120)",
        R"(loom_expert_cache_misses_total{model_name="moe"} 10)",
        R"(loom_expert_cache_evictions_total{model_name="moe"} 4)",
        R"(loom_expert_prefetches_total{model_name="moe",outcome="issued"} 7)",
        R"(loom_expert_prefetches_total{model_name="moe",outcome="used"} 5)",
        R"(loom_expert_prefetches_total{model_name="moe",outcome="wasted"} 1)",
        R"(loom_expert_prefetches_total{model_name="moe",outcome="cancelled"} 2)",
        R"(loom_expert_prefetches_total{model_name="moe",outcome="dropped"} 3)",
        R"(loom_expert_cache_host_computes_total{model_name="moe"} 6)",
        R"(loom_expert_cache_loaded_bytes_total{model_name="moe"} 17825792)",
        R"(loom_expert_cache_load_seconds_total{model_name="moe"} 0.75)",
        R"(loom_expert_cache_wait_seconds_total{model_name="moe"} 0.25)",
        R"(loom_expert_cache_resident_experts{model_name="moe"} 20)"}) {
    EXPECT_TRUE(Has(text, series)) << series << "\n" << text;
  }
  // A snapshot from before the engine's first report (all zero) takes nothing back.
  metrics.UpdateScheduler(SchedulerStats{});
  text = metrics.Render();
  EXPECT_TRUE(Has(text, R"(loom_expert_cache_hits_total{model_name="moe"} 120)"));
  EXPECT_TRUE(Has(text, R"(loom_expert_cache_resident_experts{model_name="moe"} 20)"));
  EXPECT_TRUE(Has(text, R"(loom_expert_cache_slots{model_name="moe"} 24)"));
}

// A dense model (or every expert resident) declares no expert cache family.
TEST(ServerMetricsTest, NoExpertCacheNoExpertFamilies) {
  ServerMetrics metrics(MetricsOptions{"dense", false, 4096});
  SchedulerStats s;
  s.expert_cache.hits = 5;  // ignored: there is no cache to report
  metrics.UpdateScheduler(s);
  EXPECT_FALSE(Has(metrics.Render(), "expert"));
}

}  // namespace
}  // namespace loom
