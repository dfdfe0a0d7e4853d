// Expert-cache simulator: replays synthetic MoE routing traces (synthetic_traces.h) through the
// scheduler's expert-cache policies (scheduler/experts/) and reports, per model shape, batch
// size, cache size and policy: hit ratio, on-demand misses per token, prefetch accuracy, wasted
// prefetches and loads (on-demand + prefetch) per token. No model runs; the numbers are about
// which experts move, not how long moving takes.
//
// The step loop, as the engine would drive it: a continuous batch of `batch` requests; a
// request's first step computes its whole prompt, every later step one output token. In each
// step, layer by layer:
//   1. the router's choice for the layer is known: the batch's set of needed experts;
//   2. every request's activation matrix takes the layer's counts (and so does the global
//      popularity); the activation policy gets the batch forecast at this layer (the sum of
//      every request's ExpertPredictor forecast);
//   3. each needed expert is accessed (a hit, or an on-demand load) and pinned;
//   4. the activation policy plans up to `prefetch_per_layer` prefetches for the next layers
//      (they are loaded while the layer computes, and count as loads);
//   5. the layer's experts are unpinned.
// A finished request's matrix goes into the trace collection. Matching: during a request's
// first step at every layer (it has no history yet), afterwards once per step.
//
// Usage: expert_cache_sim [--requests N] [--batch 1,8] [--prefetch-per-layer N] [--seed N]
// Writes a Markdown report to stdout. Deterministic: the same flags give the same output.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bench/experts/synthetic_traces.h"
#include "scheduler/experts/activation_matrix.h"
#include "scheduler/experts/expert_cache_policy.h"
#include "scheduler/experts/expert_predictor.h"
#include "scheduler/experts/trace_collection.h"

namespace loom::bench {
namespace {

struct SimConfig {
  std::string policy;
  bool prefetch = false;
  int32_t capacity_slots = 0;
  int32_t batch = 1;
  int32_t prefetch_per_layer = 2;
  int32_t collection_capacity = 64;
};

struct SimResult {
  ExpertCacheStats stats;
  int64_t num_tokens = 0;
  int64_t num_prefetched_unused_at_end = 0;
};

[[noreturn]] void Die(const absl::Status& status) {
  std::fprintf(stderr, "expert_cache_sim: %s\n", status.ToString().c_str());
  std::exit(1);
}

template <typename T>
T OrDie(absl::StatusOr<T> value) {
  if (!value.ok()) Die(value.status());
  return *std::move(value);
}

void OrDie(const absl::Status& status) {
  if (!status.ok()) Die(status);
}

struct ActiveRequest {
  const RequestTrace* trace = nullptr;
  int32_t next_token = 0;
  bool first_step = true;
  ActivationMatrix matrix;
  std::vector<double> prior;
};

class Simulation {
 public:
  Simulation(const MoeShape& shape, const SimConfig& config)
      : shape_(shape),
        config_(config),
        policy_(OrDie(ExpertCachePolicy::Create(
            config.policy, {.num_layers = shape.num_layers,
                            .num_experts = shape.num_experts,
                            .capacity_slots = config.capacity_slots,
                            .enable_prefetch = config.prefetch}))),
        predictor_(OrDie(ExpertPredictor::Create({.top_k = shape.top_k}))),
        collection_(OrDie(TraceCollection::Create(
            shape.num_layers, shape.num_experts, {.capacity = config.collection_capacity}))),
        popularity_(OrDie(ActivationMatrix::Zeros(shape.num_layers, shape.num_experts))) {}

  SimResult Run(const std::vector<RequestTrace>& traces);

 private:
  bool predicts() const { return config_.policy == "activation"; }
  void Rematch(ActiveRequest& request, bool credit);
  void RunLayer(std::vector<ActiveRequest>& batch, int32_t layer);

  MoeShape shape_;
  SimConfig config_;
  std::unique_ptr<ExpertCachePolicy> policy_;
  ExpertPredictor predictor_;
  TraceCollection collection_;
  ActivationMatrix popularity_;
  SimResult result_;
};

void Simulation::Rematch(ActiveRequest& request, bool credit) {
  std::vector<ExpertMatch> matches = OrDie(predictor_.Match(request.matrix, collection_));
  if (credit && !matches.empty()) collection_.CreditMatch(matches.front().entry_id);
  request.prior = OrDie(predictor_.Prior(matches, collection_, &popularity_));
}

void Simulation::RunLayer(std::vector<ActiveRequest>& batch, int32_t layer) {
  const int32_t k = shape_.top_k;
  std::vector<ExpertKey> needed;
  for (ActiveRequest& request : batch) {
    const int32_t num_tokens = request.first_step ? request.trace->prompt_len : 1;
    for (int32_t t = request.next_token; t < request.next_token + num_tokens; ++t) {
      const size_t base = (static_cast<size_t>(t) * shape_.num_layers + layer) * k;
      for (int32_t i = 0; i < k; ++i) {
        const ExpertKey key{layer, request.trace->experts[base + i]};
        OrDie(request.matrix.Add(key));
        OrDie(popularity_.Add(key));
        needed.push_back(key);
      }
    }
  }
  std::sort(needed.begin(), needed.end());
  needed.erase(std::unique(needed.begin(), needed.end()), needed.end());
  if (predicts()) {
    ExpertForecast forecast =
        OrDie(ExpertForecast::Zeros(shape_.num_layers, shape_.num_experts, layer));
    for (ActiveRequest& request : batch) {
      // A request's first step has no history: match again with every layer it has run.
      if (request.first_step && layer > 0) Rematch(request, /*credit=*/false);
      OrDie(forecast.Add(OrDie(predictor_.Forecast(request.matrix, request.prior, layer))));
    }
    OrDie(policy_->SetForecast(std::move(forecast)));
  }
  for (ExpertKey key : needed) {
    OrDie(policy_->Access(key).status());
    OrDie(policy_->Pin(key));
  }
  policy_->PlanPrefetch(config_.prefetch_per_layer);
  for (ExpertKey key : needed) OrDie(policy_->Unpin(key));
}

SimResult Simulation::Run(const std::vector<RequestTrace>& traces) {
  std::vector<ActiveRequest> batch;
  size_t next = 0;
  while (next < traces.size() || !batch.empty()) {
    while (static_cast<int32_t>(batch.size()) < config_.batch && next < traces.size()) {
      ActiveRequest request;
      request.trace = &traces[next++];
      request.matrix = OrDie(ActivationMatrix::Zeros(shape_.num_layers, shape_.num_experts));
      batch.push_back(std::move(request));
    }
    if (predicts()) {
      for (ActiveRequest& request : batch) Rematch(request, /*credit=*/!request.first_step);
    }
    for (int32_t layer = 0; layer < shape_.num_layers; ++layer) RunLayer(batch, layer);
    for (ActiveRequest& request : batch) {
      const int32_t num_tokens = request.first_step ? request.trace->prompt_len : 1;
      result_.num_tokens += num_tokens;
      request.next_token += num_tokens;
      request.first_step = false;
    }
    auto done = [](const ActiveRequest& r) {
      return r.next_token >= r.trace->prompt_len + r.trace->output_len;
    };
    for (ActiveRequest& request : batch) {
      if (done(request)) OrDie(collection_.Insert(request.matrix).status());
    }
    batch.erase(std::remove_if(batch.begin(), batch.end(), done), batch.end());
  }
  result_.stats = policy_->stats();
  result_.num_prefetched_unused_at_end = policy_->num_prefetched_unused();
  return result_;
}

struct Flags {
  int32_t num_requests = 256;
  std::vector<int32_t> batches = {1, 8};
  int32_t prefetch_per_layer = 2;
  uint64_t seed = 1;
};

Flags ParseFlags(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "expert_cache_sim: %s needs a value\n", argv[i]);
      std::exit(2);
    }
    const char* value = argv[++i];
    if (arg == "--requests") {
      flags.num_requests = std::atoi(value);
    } else if (arg == "--prefetch-per-layer") {
      flags.prefetch_per_layer = std::atoi(value);
    } else if (arg == "--seed") {
      flags.seed = std::strtoull(value, nullptr, 10);
    } else if (arg == "--batch") {
      flags.batches.clear();
      for (const char* p = value; *p != '\0';) {
        flags.batches.push_back(std::atoi(p));
        p = std::strchr(p, ',');
        if (p == nullptr) break;
        ++p;
      }
    } else {
      std::fprintf(stderr, "expert_cache_sim: unknown flag %s\n", argv[i - 1]);
      std::exit(2);
    }
  }
  if (flags.num_requests < 1 || flags.prefetch_per_layer < 0 || flags.batches.empty() ||
      *std::min_element(flags.batches.begin(), flags.batches.end()) < 1) {
    std::fprintf(stderr, "expert_cache_sim: --requests and --batch must be >= 1, "
                         "--prefetch-per-layer >= 0\n");
    std::exit(2);
  }
  return flags;
}

struct PolicyVariant {
  const char* label;
  const char* policy;
  bool prefetch;
};

constexpr PolicyVariant kVariants[] = {
    {"lru", "lru", false},
    {"lfu", "lfu", false},
    {"activation, no prefetch", "activation", false},
    {"activation", "activation", true},
};

void Report(const MoeShape& shape, const TraceConfig& trace_config, const Flags& flags) {
  const std::vector<RequestTrace> traces = MakeTraces(shape, trace_config);
  const int32_t num_total = shape.num_layers * shape.num_experts;
  for (int32_t batch : flags.batches) {
    std::printf("\n### %s: %d layers x %d experts, top-%d, batch %d\n\n", shape.name.c_str(),
                shape.num_layers, shape.num_experts, shape.top_k, batch);
    std::printf("| cache | policy | hit ratio | misses / token | prefetches / token | "
                "prefetch accuracy | wasted prefetches | loads / token |\n");
    std::printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
    for (int32_t percent : {100, 50, 25}) {
      for (const PolicyVariant& variant : kVariants) {
        SimConfig config{.policy = variant.policy,
                         .prefetch = variant.prefetch,
                         .capacity_slots = num_total * percent / 100,
                         .batch = batch,
                         .prefetch_per_layer = flags.prefetch_per_layer};
        const SimResult r = Simulation(shape, config).Run(traces);
        const ExpertCacheStats& s = r.stats;
        const double tokens = static_cast<double>(r.num_tokens);
        const int64_t wasted = s.prefetches_wasted + r.num_prefetched_unused_at_end;
        const std::string accuracy =
            s.prefetches_issued == 0
                ? std::string("—")
                : std::to_string(static_cast<double>(s.prefetches_used) / s.prefetches_issued)
                      .substr(0, 5);
        std::printf("| %d %% (%d) | %s | %.4f | %.3f | %.3f | %s | %lld | %.3f |\n", percent,
                    config.capacity_slots, variant.label,
                    static_cast<double>(s.hits) / static_cast<double>(s.hits + s.misses),
                    s.misses / tokens, s.prefetches_issued / tokens, accuracy.c_str(),
                    static_cast<long long>(wasted), (s.misses + s.prefetches_issued) / tokens);
      }
    }
  }
}

}  // namespace
}  // namespace loom::bench

int main(int argc, char** argv) {
  using loom::bench::MoeShape;
  using loom::bench::TraceConfig;
  const loom::bench::Flags flags = loom::bench::ParseFlags(argc, argv);
  std::printf("## Expert cache simulator\n\n");
  std::printf("Flags: --requests %d --prefetch-per-layer %d --seed %llu --batch", flags.num_requests,
              flags.prefetch_per_layer, static_cast<unsigned long long>(flags.seed));
  for (size_t i = 0; i < flags.batches.size(); ++i) {
    std::printf("%s%d", i == 0 ? " " : ",", flags.batches[i]);
  }
  std::printf("\n");
  // Mixtral-8x7B: 32 layers of 8 experts, top-2. A 64-expert shape like DeepSeek-V2-Lite:
  // 26 MoE layers of 64 routed experts, top-6.
  const MoeShape shapes[] = {{"Mixtral-8x7B shape", 32, 8, 2}, {"64-expert shape", 26, 64, 6}};
  for (const MoeShape& shape : shapes) {
    TraceConfig config{.num_requests = flags.num_requests,
                       .core_size = shape.top_k + std::max(1, shape.top_k / 2),
                       .seed = flags.seed};
    std::printf("\nTraces (%s): %d requests, %d topics, Zipf exponent %.2f, topic core %d "
                "experts per layer boosted %.0fx, prompt %d-%d tokens, output %d-%d tokens.\n",
                shape.name.c_str(), config.num_requests, config.num_topics, config.zipf_exponent,
                config.core_size, config.core_boost, config.min_prompt_len, config.max_prompt_len,
                config.min_output_len, config.max_output_len);
    loom::bench::Report(shape, config, flags);
  }
  return 0;
}
