// loomd: the serving daemon. Loads the model, starts the engine loop and the HTTP server, warms
// the engine up (then /readyz turns ready), and runs until SIGTERM/SIGINT, then drains:
// readiness fails, new requests get 503, in-flight ones may finish within drain_timeout_s, and
// the process exits 0.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "engine/common/file.h"
#include "engine/common/logging.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "engine/runtime/local_executor.h"
#include "server/api/router.h"
#include "server/cluster/cluster_agent.h"
#include "server/cluster/cluster_auth.h"
#include "server/cluster/instance_service.h"
#include "server/cluster/manager_main.h"
#include "server/cluster/migrator.h"
#include "server/config/server_config.h"
#include "server/grpc/grpc_server.h"
#include "server/http/http_server.h"
#include "server/serving/serving_context.h"
#include "server/serving/work_queue.h"
#include "server/text/model_text.h"

namespace loom {
namespace {

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

absl::StatusOr<EngineConfig> MakeEngineConfig(const ServerConfig& c) {
  EngineConfig e;
  e.model_dir = c.model.empty() ? std::string(LOOM_DEFAULT_MODEL_DIR) : c.model;
  if (c.model.empty()) {
    LOOM_LOG(kWarning, "no model given: serving ", BaseName(LOOM_DEFAULT_MODEL_DIR),
             ", a tiny random-weight model for tests whose text is noise; pass --model "
             "(deploy/quickstart.sh serves SmolLM2-135M-Instruct)");
  }
  LOOM_ASSIGN_OR_RETURN(e.backend, ParseBackendKind(c.backend));
  LOOM_RETURN_IF_ERROR(SetKvCacheFormat(c.kv_cache_dtype, c.kv_k_granularity,
                                        static_cast<int32_t>(c.block_size), e));
  e.kv_residual_tokens = static_cast<int32_t>(c.kv_residual_tokens);
  e.kv_hadamard = c.kv_hadamard;
  e.num_threads = static_cast<int>(c.threads);
  e.kv_cache_bytes = c.kv_cache_mb << 20;
  e.expert_cache_bytes = c.expert_cache_mb << 20;
  e.expert_direct_io = c.expert_direct_io;
  e.expert_host_compute = c.expert_host_compute == "always" ? ExpertHostCompute::kAlways
                          : c.expert_host_compute == "never" ? ExpertHostCompute::kNever
                                                             : ExpertHostCompute::kAuto;
  e.device = static_cast<int>(c.device);
  e.gpu_memory_utilization = c.gpu_memory_utilization;
  e.cuda_graphs = c.cuda_graphs;
  // The configuration only accepts "f32" and "int8".
  e.int8_activations = c.quantized_activations == "int8";
  e.fast_bf16_matmul = c.fast_bf16_matmul;
  // The configuration only accepts the three names.
  e.weight_memory = WeightMemoryFromName(c.weight_memory).value_or(WeightMemory::kAuto);
  e.max_num_batched_tokens = static_cast<int32_t>(c.max_num_batched_tokens);
  e.max_num_seqs = static_cast<int32_t>(c.max_num_seqs);
  e.populate_kv_cache = true;  // the whole cache resident from the start
  return e;
}

SchedulerConfig MakeSchedulerConfig(const ServerConfig& c) {
  SchedulerConfig s;
  s.max_num_batched_tokens = static_cast<int32_t>(c.max_num_batched_tokens);
  s.max_num_seqs = static_cast<int32_t>(c.max_num_seqs);
  s.max_prefill_chunk = static_cast<int32_t>(c.max_prefill_chunk);
  s.enable_prefix_caching = c.enable_prefix_caching;
  s.max_waiting_requests = static_cast<int32_t>(c.max_waiting_requests);
  s.max_waiting_prompt_tokens = c.max_waiting_prompt_tokens;
  // The configuration only accepts the names ExpertCachePolicy::Create knows.
  s.expert_cache.policy = c.expert_cache_policy;
  return s;
}

// The memory split of an MoE model served with an expert cache (issue 18 item 5): what the KV
// cache and the expert cache each take, and how much of the model's routed experts fit.
void LogExpertCache(const ServerConfig& config, const ModelInfo& model,
                    const KvCapacity& capacity) {
  if (capacity.expert_cache_slots <= 0) {
    if (config.expert_cache_mb > 0) {
      LOOM_LOG(kWarning, "expert_cache_mb is ", config.expert_cache_mb,
               " but the engine reports no expert cache (a dense model, or every expert kept "
               "resident): the setting is unused");
    }
    return;
  }
  int64_t num_sparse = 0;
  for (int32_t l = 0; l < model.num_layers; ++l) {
    const bool sparse = model.sparse_layers.empty() ||
                        (static_cast<size_t>(l) < model.sparse_layers.size() &&
                         model.sparse_layers[l]);
    num_sparse += sparse ? 1 : 0;
  }
  const int64_t num_routed = num_sparse * model.num_experts;
  const int64_t kv_bytes = int64_t{capacity.num_blocks} * capacity.bytes_per_block +
                           capacity.tail_bytes;
  const int64_t expert_bytes = int64_t{capacity.expert_cache_slots} * capacity.expert_slot_bytes;
  LOOM_LOG(kInfo, "memory split: KV cache ", kv_bytes >> 20, " MiB (", kv_bytes,
           " bytes); expert cache ", expert_bytes >> 20, " MiB (", capacity.expert_cache_slots,
           " slots x ", capacity.expert_slot_bytes, " bytes = ", expert_bytes, " bytes) holding ",
           capacity.expert_cache_slots, " of ", num_routed, " routed experts (",
           num_routed > 0 ? 100 * int64_t{capacity.expert_cache_slots} / num_routed : 0,
           " %); policy ", config.expert_cache_policy,
           config.backend == "cpu"
               ? StrCat(", direct I/O ", config.expert_direct_io ? "on" : "off")
               : StrCat(", experts in host memory, host compute ", config.expert_host_compute));
}

// Loads the text layer; a model without tokenizer or template still serves token ids.
void LoadText(const std::string& dir, ServingContext& ctx) {
  text::ModelText t = text::LoadModelText(dir);
  if (!t.tokenizer_status.ok()) {
    LOOM_LOG(kWarning, "no tokenizer (", t.tokenizer_status.message(), "): only token-id prompts");
  }
  if (!t.chat_status.ok()) {
    LOOM_LOG(kWarning, "no chat template (", t.chat_status.message(),
             "): /v1/chat/completions refused");
  }
  ctx.tokenizer = std::move(t.tokenizer);
  ctx.chat_template = std::move(t.chat);
}

// Runs one short greedy generation through the engine loop before the server reports ready, so
// that the first step's one-time costs (first touch of weights and buffers; on CUDA, graph
// capture) are paid here and a broken engine is found before any client is sent to it.
// Behind an expert cache the prompt is one token: the experts a step routes to are read from the
// file before it runs, and eight tokens route to nearly every expert of every layer (the 26.7 GB
// Mixtral-8x7B-shaped file took a minute to be ready on a 0.9 GB/s disk), where one token reads
// top-k per layer and step.
absl::Status WarmUp(ServingContext& ctx) {
  SchedRequest r;
  r.id = RequestId(ctx.next_request_id.fetch_add(1));
  r.max_new_tokens = ctx.model.max_context_len >= 3 ? 2 : 1;
  const int32_t max_len = ctx.capacity.expert_cache_slots > 0 ? 1 : 8;
  const int32_t len =
      std::max(1, std::min(max_len, ctx.model.max_context_len - r.max_new_tokens));
  for (int32_t i = 0; i < len; ++i) r.prompt.push_back(TokenId(i % ctx.model.vocab_size));
  r.sampling.temperature = 0.0f;
  std::shared_ptr<RequestStream> stream = ctx.engine->Submit(std::move(r));
  for (;;) {
    StreamBatch batch = stream->Wait(absl::Seconds(60));
    if (batch.done) return batch.error;
  }
}

int Run(const std::vector<std::string>& args) {
  ServerConfig config;
  bool help = false;
  if (absl::Status s = LoadServerConfig(args, std::getenv, &config, &help); !s.ok()) {
    std::fprintf(stderr, "loomd: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (help) {
    std::printf("%s", ServerConfigHelp().c_str());
    return 0;
  }
  // The cluster's control plane loads no model (server/cluster/manager_main.h).
  if (config.role == "manager") return cluster::RunManager(config, LOOM_VERSION);
  // Signals are taken by sigwait below; every thread started from here inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGUSR1);  // raised by the engine loop when the device is lost
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<EngineConfig> engine_config = MakeEngineConfig(config);
  if (!engine_config.ok()) {
    std::fprintf(stderr, "loomd: %s\n", std::string(engine_config.status().message()).c_str());
    return 2;
  }
  // How this instance calls the cluster's other processes (before the model loads: a wrong
  // file is a configuration error).
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> cluster_credentials =
      cluster::ClusterChannelCredentials(config);
  if (!cluster_credentials.ok()) {
    std::fprintf(stderr, "loomd: %s\n",
                 std::string(cluster_credentials.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<std::unique_ptr<LocalExecutor>> executor = LocalExecutor::Create(*engine_config);
  if (!executor.ok()) {
    std::fprintf(stderr, "loomd: %s\n", std::string(executor.status().message()).c_str());
    return 1;
  }
  ServingContext ctx;
  ctx.config = config;
  ctx.model = (*executor)->model_info();
  ctx.capacity = (*executor)->capacity();
  ctx.model_id = config.served_model_name.empty() ? ctx.model.name : config.served_model_name;
  ctx.now_ms = SteadyMs;
  LoadText(engine_config->model_dir, ctx);
  MetricsOptions metrics_options;
  metrics_options.model_name = ctx.model_id;
  metrics_options.vllm_compat = config.metrics_compat == "vllm";
  metrics_options.max_model_len = ctx.model.max_context_len;
  metrics_options.kv_cache_dtype = std::string(DTypeName(ctx.capacity.kv_dtype));
  metrics_options.kv_capacity_tokens = int64_t{ctx.capacity.num_blocks} * ctx.capacity.block_size;
  metrics_options.kv_bytes_per_token =
      static_cast<double>(ctx.capacity.bytes_per_block) / ctx.capacity.block_size;
  metrics_options.expert_cache_slots = ctx.capacity.expert_cache_slots;
  metrics_options.expert_slot_bytes = ctx.capacity.expert_slot_bytes;
  ServerMetrics metrics(metrics_options);
  ctx.metrics = &metrics;
  EngineLoop engine(**executor, MakeSchedulerConfig(config), SteadyMs);
  // A lost device (a sticky CUDA error) fails every request in the loop; the process then exits
  // with an error for its supervisor to restart it on a fresh device context.
  engine.SetFatalHandler([](const absl::Status&) { kill(getpid(), SIGUSR1); });
  ctx.engine = &engine;
  WorkQueue work(2);

  const int64_t tokens = int64_t{ctx.capacity.num_blocks} * ctx.capacity.block_size;
  LOOM_LOG(kInfo, "model ", ctx.model_id, " (", ctx.model.architecture, ", context ",
           ctx.model.max_context_len, "); KV cache ", DTypeName(ctx.capacity.kv_dtype), ", ",
           ctx.capacity.num_blocks, " blocks x ",
           ctx.capacity.block_size, " tokens = ", tokens, " tokens (",
           ctx.capacity.bytes_per_block / ctx.capacity.block_size, " bytes per token",
           ctx.capacity.tail_bytes > 0
               ? StrCat(", plus ", ctx.capacity.tail_bytes >> 20, " MiB of bf16 residual tails")
               : std::string(),
           "); at full context ",
           tokens / std::max(ctx.model.max_context_len, 1), " sequences fit at once");
  LogExpertCache(config, ctx.model, ctx.capacity);
  if (config.backend == "cpu") {
    LOOM_LOG(kInfo, "weights: ", ctx.model.weight_bytes >> 20, " MiB, read ",
             ctx.model.weights_in_anonymous_memory
                 ? "from a copy in anonymous memory (huge pages where the kernel allows)"
                 : "in place from the file mapping",
             " (weight_memory ", config.weight_memory, ")");
  }
  if (config.backend == "cpu" && IsQuantizedDType(ctx.model.weight_dtype) &&
      config.quantized_activations == "f32" && !config.fast_bf16_matmul) {
    LOOM_LOG(kInfo, "weights ", DTypeName(ctx.model.weight_dtype),
             ": matmuls take f32 activations, exact to the dequantized weights; "
             "--quantized-activations int8 runs llama.cpp's int8 arithmetic instead (faster: "
             "up to 2-3x for k-quants; about 0.5-0.8 % relative error in the matmuls), and on "
             "CPUs with AVX512-BF16 --fast-bf16-matmul prefills about twice as fast (weights "
             "and activations rounded to bf16)");
  }

  http::HttpServerOptions http_options;
  http_options.host = config.host;
  http_options.port = static_cast<int>(config.port);
  http_options.num_threads = static_cast<int>(config.http_threads);
  http_options.max_body_bytes = config.max_body_bytes;
  http_options.max_header_bytes = config.max_header_bytes;
  http_options.max_requests_per_connection = static_cast<int32_t>(config.max_requests_per_connection);
  http_options.idle_timeout = absl::Seconds(config.idle_timeout_s);
  absl::StatusOr<std::unique_ptr<http::HttpServer>> server =
      http::HttpServer::Start(http_options, api::MakeRouter(ctx, work, LOOM_VERSION));
  if (!server.ok()) {
    std::fprintf(stderr, "loomd: %s\n", std::string(server.status().message()).c_str());
    return 1;
  }
  // The cluster (shared/ARCHITECTURE.md §6): the internal Instance service shares the gRPC port;
  // with a manager configured, the agent reports load and carries out its orders.
  const std::string advertise = config.advertise_host.empty() || config.advertise_host == "0.0.0.0"
                                    ? (config.host == "0.0.0.0" ? "127.0.0.1" : config.host)
                                    : config.advertise_host;
  // Names this instance in logs and request keys; the gRPC address once it is known.
  std::string instance_id =
      config.instance_id.empty() ? StrCat(advertise, "/", getpid()) : config.instance_id;
  cluster::Migrator migrator(ctx, instance_id, *cluster_credentials);
  engine.SetAbortListener([&migrator](RequestId id) { migrator.OnAbort(id); });
  cluster::InstanceService instance_service(ctx, migrator);
  std::unique_ptr<GrpcServer> grpc;
  if (config.grpc_port >= 0) {
    GrpcServerOptions grpc_options{config.host, static_cast<int>(config.grpc_port),
                                   config.grpc_tls_cert_file, config.grpc_tls_key_file,
                                   {{&instance_service, "loom.v1.Instance"}}};
    absl::StatusOr<std::unique_ptr<GrpcServer>> started =
        GrpcServer::Start(grpc_options, ctx, work, LOOM_VERSION);
    if (!started.ok()) {
      std::fprintf(stderr, "loomd: %s\n", std::string(started.status().message()).c_str());
      return 1;
    }
    grpc = std::move(*started);
    std::printf("loomd gRPC listening on %s:%d\n", config.host.c_str(), grpc->port());
  }
  // Until this is done /readyz answers 503 "warming up" (/livez already answers).
  if (absl::Status s = WarmUp(ctx); !s.ok()) {
    std::fprintf(stderr, "loomd: the warm-up generation failed: %s\n",
                 std::string(s.message()).c_str());
    (*server)->Stop();
    if (grpc != nullptr) grpc->Stop();
    engine.Stop();
    return 1;
  }
  ctx.warmed_up = true;
  std::unique_ptr<cluster::ClusterAgent> agent;
  if (!config.cluster_manager.empty()) {
    if (grpc == nullptr) {
      LOOM_LOG(kWarning, "cluster_manager is set but grpc_port is off: not joining the cluster");
    } else {
      const std::string grpc_address = StrCat(advertise, ":", grpc->port());
      if (config.instance_id.empty()) {
        instance_id = grpc_address;
        migrator.SetInstanceId(instance_id);
      }
      agent = std::make_unique<cluster::ClusterAgent>(ctx, migrator, instance_id, grpc_address,
                                                      StrCat(advertise, ":", (*server)->port()));
      agent->Start();
      ctx.submit = [a = agent.get()](SchedRequest r) { return a->Submit(std::move(r)); };
      LOOM_LOG(kInfo, "cluster: instance ", instance_id, " reports to ", config.cluster_manager);
    }
  }
  // The port line is what scripts and tests wait for (it comes last).
  std::printf("loomd listening on %s:%d\n", config.host.c_str(), (*server)->port());
  std::fflush(stdout);

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  if (signal_number == SIGUSR1) {
    LOOM_LOG(kError, "the device was lost (see the error above); exiting for a restart");
    ctx.draining = true;
    if (agent != nullptr) agent->Stop();
    (*server)->Stop();
    if (grpc != nullptr) grpc->Stop();
    engine.Stop();
    return 3;
  }
  LOOM_LOG(kInfo, "signal ", signal_number, ": draining (up to ", config.drain_timeout_s, " s)");
  ctx.draining = true;
  if (grpc != nullptr) grpc->StartDraining();
  const int64_t deadline = SteadyMs() + config.drain_timeout_s * 1000;
  while (SteadyMs() < deadline) {
    const SchedulerStats s = engine.Stats().scheduler;
    if (s.num_running_requests == 0 && s.num_waiting_requests == 0 &&
        ctx.num_inflight_responses.load() == 0) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // The last bytes are queued; give the sockets a moment, then close everything.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  if (agent != nullptr) agent->Stop();
  (*server)->Stop();
  if (grpc != nullptr) grpc->Stop();
  engine.Stop();
  LOOM_LOG(kInfo, "stopped");
  return 0;
}

}  // namespace
}  // namespace loom

int main(int argc, char** argv) {
  return loom::Run(std::vector<std::string>(argv + 1, argv + argc));
}
