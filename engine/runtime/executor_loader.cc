// LocalExecutor::Create: from a model folder to a ready executor.
#include <algorithm>
#include <map>
#include <optional>

#include "engine/backend/cpu_backend.h"
#include "engine/common/file.h"
#include "engine/common/logging.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "engine/experts/stored_experts.h"
#include "engine/models/architecture.h"
#include "engine/runtime/local_executor.h"

namespace loom {
namespace {

constexpr int kMaxThreads = 1024;

absl::StatusOr<ModelConfig> LoadModelConfig(const std::string& dir, const GgufFile* gguf) {
  if (gguf != nullptr) {
    // A GGUF file carries its hyper-parameters as metadata: seen as the config.json they make.
    LOOM_ASSIGN_OR_RETURN(const std::string text, GgufConfigJson(*gguf));
    LOOM_ASSIGN_OR_RETURN(const Json json, Json::Parse(text, dir + " (metadata)"));
    LOOM_ASSIGN_OR_RETURN(ModelConfig config, ParseModelConfig(json));
    LOOM_ASSIGN_OR_RETURN(config.rope.freq_factors, GgufRopeFactors(*gguf, config.head_dim));
    return config;
  }
  LOOM_ASSIGN_OR_RETURN(const std::string text, ReadFile(dir + "/config.json", 16 << 20));
  LOOM_ASSIGN_OR_RETURN(const Json json, Json::Parse(text, dir + "/config.json"));
  LOOM_ASSIGN_OR_RETURN(ModelConfig config, ParseModelConfig(json));
  const std::string generation = dir + "/generation_config.json";
  if (FileExists(generation)) {
    LOOM_ASSIGN_OR_RETURN(const std::string gen_text, ReadFile(generation, 16 << 20));
    LOOM_ASSIGN_OR_RETURN(const Json gen_json, Json::Parse(gen_text, generation));
    LOOM_RETURN_IF_ERROR(MergeGenerationConfig(gen_json, config));
  }
  return config;
}

absl::Status CheckEngineConfig(const EngineConfig& c) {
  if (c.block_size < 1 || c.block_size > 1024) {
    return absl::InvalidArgumentError(StrCat("block_size must be in [1, 1024], got ", c.block_size));
  }
  if (!IsKvCacheDType(c.kv_dtype)) {
    return absl::InvalidArgumentError(
        "kv cache dtype must be auto, f32, bf16, f16, fp8-e4m3, int8, int4 or int2");
  }
  if (c.kv_residual_tokens < 0 || c.kv_residual_tokens > 65536) {
    return absl::InvalidArgumentError(
        StrCat("kv_residual_tokens must be in [0, 65536], got ", c.kv_residual_tokens));
  }
  if (c.max_num_batched_tokens < 1 || c.max_num_seqs < 1 || c.max_logit_rows < 1) {
    return absl::InvalidArgumentError(
        "max_num_batched_tokens, max_num_seqs and max_logit_rows must be positive");
  }
  if (!(c.gpu_memory_utilization > 0.0 && c.gpu_memory_utilization <= 1.0)) {
    return absl::InvalidArgumentError(StrCat("gpu_memory_utilization must be in (0, 1], got ",
                                             c.gpu_memory_utilization));
  }
  if (c.num_kv_blocks < 0 || c.kv_cache_bytes < 0 || c.max_context_len < 0 || c.num_threads < 0) {
    return absl::InvalidArgumentError("KV cache size, context length and threads must be >= 0");
  }
  // Thread creation failing is fatal without exceptions: refuse absurd counts up front.
  if (c.num_threads > kMaxThreads) {
    return absl::InvalidArgumentError(
        StrCat("num_threads must be at most ", kMaxThreads, ", got ", c.num_threads));
  }
  return absl::OkStatus();
}

ModelInfo MakeModelInfo(const EngineConfig& engine, const ModelConfig& m, const Checkpoint& ckpt) {
  ModelInfo info;
  info.architecture = m.architecture;
  info.name = std::string(BaseName(engine.model_dir));
  constexpr std::string_view kGgufSuffix = ".gguf";
  if (ckpt.gguf() != nullptr && info.name.ends_with(kGgufSuffix)) {
    info.name.resize(info.name.size() - kGgufSuffix.size());
  }
  info.vocab_size = m.vocab_size;
  info.max_context_len = engine.max_context_len > 0
                             ? std::min(engine.max_context_len, m.max_position_embeddings)
                             : m.max_position_embeddings;
  info.num_layers = m.num_layers;
  info.hidden_size = m.hidden_size;
  info.num_heads = m.num_heads;
  info.num_kv_heads = m.num_kv_heads;
  info.head_dim = m.head_dim;
  if (m.is_moe()) {
    info.num_experts = m.moe.num_experts;
    info.num_experts_per_tok = m.moe.num_experts_per_tok;
    info.sparse_layers = m.layer_sparse;
  }
  info.eos_token_ids = m.eos_token_ids;
  info.bos_token_id = m.bos_token_id;
  std::map<DType, int64_t> bytes_by_dtype;
  for (const TensorInfo* t : ckpt.tensors()) bytes_by_dtype[t->dtype] += t->num_bytes;
  int64_t most = -1;
  for (const auto& [dtype, bytes] : bytes_by_dtype) {
    if (bytes > most) {
      most = bytes;
      info.weight_dtype = dtype;
    }
  }
  info.num_parameters = ckpt.num_parameters();
  info.weight_bytes = ckpt.total_bytes();
  info.weights_in_anonymous_memory = ckpt.in_anonymous_memory();
  info.decode_weight_bytes = info.weight_bytes;
  const TensorInfo* embedding = ckpt.Find("model.embed_tokens.weight");
  if (embedding != nullptr && !m.tie_word_embeddings) {
    info.decode_weight_bytes -= embedding->num_bytes;
  }
  return info;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ExpertProvider>> LocalExecutor::CreateExpertCache(
    const EngineConfig& config, const ModelConfig& model_config, const DecoderWeights& weights) {
  ExpertStoreOptions store_options;
  store_options.budget_bytes = config.expert_cache_bytes;
  store_options.direct_io = config.expert_direct_io;
  // A backend with device memory caches experts there, from a copy in host memory.
  const bool in_memory = config.expert_home_in_memory || !backend_->host_memory();
  std::unique_ptr<StoredExpertProvider> stored;
  if (in_memory) {
    HostComputeOptions host;
    host.mode = config.expert_host_compute;
    host.max_expert_rows = config.max_num_batched_tokens;
    host.max_rows = config.max_num_batched_tokens * model_config.moe.num_experts_per_tok;
    host.grouped_tables = config.moe_grouped_experts;
    if (host.mode != ExpertHostCompute::kNever) {
      if (backend_->host_memory()) {
        host.ops = &backend_->ops();
      } else {
        BackendOptions cpu;
        cpu.num_threads = config.num_threads;
        host_compute_backend_ = std::make_unique<CpuBackend>(cpu);
        host.ops = &host_compute_backend_->ops();
      }
    }
    LOOM_ASSIGN_OR_RETURN(stored, StoredExpertProvider::CreateInHostMemory(
                                      weights.experts, model_config.moe.num_experts, *backend_,
                                      store_options, host));
  } else {
    LOOM_ASSIGN_OR_RETURN(stored, StoredExpertProvider::Create(weights.experts,
                                                               model_config.moe.num_experts,
                                                               *checkpoint_, store_options));
  }
  expert_store_ = &stored->store();
  for (int32_t l = 0; l < model_config.num_layers; ++l) {
    if (model_config.IsSparseLayer(l)) sparse_layer_index_.push_back(l);
  }
  const ExpertStoreStats stats = expert_store_->Stats();
  capacity_.expert_cache_slots = stats.num_slots;
  capacity_.expert_slot_bytes = expert_store_->slot_bytes();
  const std::string home =
      in_memory ? "loaded from a copy in host memory"
                : StrCat("read from the file; reads ", stats.direct_io ? "bypass" : "go through",
                         " the page cache");
  LOOM_LOG(kInfo, "expert cache: ", stats.num_slots, " slots of ",
           expert_store_->slot_bytes() >> 10, " KiB (", config.expert_cache_bytes >> 10,
           " KiB budget, ", backend_->name(), " memory) for ", model_config.moe.num_experts,
           " experts x ",
           std::count(model_config.layer_sparse.begin(), model_config.layer_sparse.end(), true),
           " sparse layers; experts are ", home);
  return std::unique_ptr<ExpertProvider>(std::move(stored));
}

absl::StatusOr<std::unique_ptr<LocalExecutor>> LocalExecutor::Create(const EngineConfig& config) {
  LOOM_RETURN_IF_ERROR(CheckEngineConfig(config));
  std::unique_ptr<LocalExecutor> ex(new LocalExecutor());
  ex->config_ = config;
  // A folder's config.json is read first (its absence is the clearest error); a GGUF file's
  // hyper-parameters are in the file itself.
  const bool gguf = IsGgufFile(config.model_dir);
  ModelConfig model_config;
  if (!gguf) {
    LOOM_ASSIGN_OR_RETURN(model_config, LoadModelConfig(config.model_dir, nullptr));
  }
  MapOptions map_options;
  // With an expert cache the routed experts stay in the file: nothing is faulted in at load.
  map_options.populate = config.populate_weights && config.expert_cache_bytes == 0;
  // The CPU backend reads the weights where they are (from a copy in anonymous memory, unless
  // config.weight_memory says otherwise); a device backend copies them once from the mapping, and
  // an expert cache reads the routed experts from the file.
  const bool may_have_expert_cache =
      config.expert_cache_bytes > 0 && (gguf || model_config.is_moe());
  map_options.memory = config.backend == BackendKind::kCpu && !may_have_expert_cache
                           ? config.weight_memory
                           : WeightMemory::kFile;
  LOOM_ASSIGN_OR_RETURN(Checkpoint checkpoint, Checkpoint::Open(config.model_dir, map_options));
  ex->checkpoint_ = std::make_unique<Checkpoint>(std::move(checkpoint));
  if (gguf) {
    if (ex->checkpoint_->gguf() == nullptr) {
      return absl::FailedPreconditionError(StrCat(config.model_dir, ": changed while loading"));
    }
    LOOM_ASSIGN_OR_RETURN(model_config, LoadModelConfig(config.model_dir, ex->checkpoint_->gguf()));
  }
  std::vector<std::string> unexpected;
  LOOM_ASSIGN_OR_RETURN(DecoderWeights weights,
                        BindDecoderWeights(model_config, *ex->checkpoint_, &unexpected));
  std::erase(unexpected, "rope_freqs.weight");  // a GGUF file's RoPE factors, read above
  if (!unexpected.empty()) {
    LOOM_LOG(kWarning, config.model_dir, ": ignoring ", unexpected.size(),
             " tensors the architecture does not use, e.g. ", unexpected.front());
  }
  ex->info_ = MakeModelInfo(config, model_config, *ex->checkpoint_);

  BackendOptions backend_options;
  backend_options.kind = config.backend;
  backend_options.num_threads = config.num_threads;
  backend_options.fast_bf16_matmul = config.fast_bf16_matmul;
  backend_options.int8_activations = config.int8_activations;
  backend_options.device = config.device;
  backend_options.pretend_graphs = config.cpu_pretend_graphs;
  LOOM_ASSIGN_OR_RETURN(ex->backend_, CreateBackend(backend_options));
  if (model_config.is_moe() && !ex->backend_->ops().SupportsMoe()) {
    // Before any weight is copied to the device.
    return absl::UnimplementedError(StrCat("the ", ex->backend_->name(),
                                           " backend does not run mixture-of-experts models (",
                                           model_config.architecture, ")"));
  }
  LOOM_RETURN_IF_ERROR(CheckWeightFormats(weights, ex->backend_->ops(), ex->backend_->name()));
  const bool expert_cache = model_config.is_moe() && config.expert_cache_bytes > 0;
  LOOM_ASSIGN_OR_RETURN(const int64_t device_weight_bytes,
                        MoveDecoderWeightsTo(*ex->backend_, weights, expert_cache));
  // Before the checkpoint's mapping may close: the expert cache reads the experts from it.
  std::unique_ptr<ExpertProvider> experts;
  if (expert_cache) {
    LOOM_ASSIGN_OR_RETURN(experts, ex->CreateExpertCache(config, model_config, weights));
  }
  if (device_weight_bytes > 0) {
    // Every view now points into device memory, but the routed experts' with an expert cache,
    // which has its own copy of them: the mapping of the files is no longer needed.
    if (expert_cache) weights.experts.clear();
    ex->checkpoint_.reset();
    LOOM_LOG(kInfo, "weights: ", device_weight_bytes >> 20, " MiB copied to ",
             ex->backend_->name());
  }
  if (auto* cpu = dynamic_cast<CpuBackend*>(ex->backend_.get())) {
    ex->host_pool_ = &cpu->cpu_ops().pool();
  } else {
    ex->own_pool_ = std::make_unique<cpu::ThreadPool>(config.num_threads);
    ex->host_pool_ = ex->own_pool_.get();
  }
  ex->sampler_scratch_.resize(ex->host_pool_->num_threads());

  const int32_t max_tokens = config.max_num_batched_tokens;
  LOOM_ASSIGN_OR_RETURN(ex->model_,
                        DecoderModel::Create(model_config, std::move(weights), *ex->backend_,
                                             max_tokens, std::min(config.max_logit_rows, max_tokens),
                                             std::move(experts), config.moe_grouped_experts));
  ex->rope_ = std::make_unique<RopeTable>(model_config.rope, model_config.head_dim);
  const int32_t blocks_per_seq =
      (ex->info_.max_context_len + config.block_size - 1) / config.block_size;
  OpsLimits limits;
  limits.max_num_tokens = max_tokens;
  limits.max_in_features = std::max<int64_t>(
      {model_config.hidden_size, model_config.q_dim(), model_config.intermediate_size,
       model_config.moe.expert_intermediate_size,
       model_config.moe.shared_expert_intermediate_size});
  // Every sequence of a step computes at least one token.
  limits.max_num_seqs = std::min(config.max_num_seqs, max_tokens);
  limits.num_heads = model_config.num_heads;
  limits.head_dim = model_config.head_dim;
  limits.max_seq_len = blocks_per_seq * config.block_size;
  if (model_config.is_moe()) {
    limits.moe_num_experts = model_config.moe.num_experts;
    limits.moe_top_k = model_config.moe.num_experts_per_tok;
  }
  LOOM_RETURN_IF_ERROR(ex->backend_->ops().Reserve(limits));
  LOOM_RETURN_IF_ERROR(ex->AllocateStepInputs(
      max_tokens, limits.max_num_seqs, blocks_per_seq));
  // A mixture-of-experts step waits for its routing on the host (Ops::MoeRoute) where the
  // device's memory is not the host's, so it cannot be captured, unless its experts run grouped
  // from the device's expert tables (DecoderModel::grouped_expert_tokens): then decode steps of
  // up to that many sequences are graphs.
  const int32_t grouped = ex->model_->grouped_expert_tokens();
  const bool moe_syncs = model_config.is_moe() && !ex->backend_->host_memory() && grouped == 0;
  if (moe_syncs && config.cuda_graphs) {
    LOOM_LOG(kInfo, "CUDA graphs off: a mixture-of-experts step routes its tokens on the host");
  }
  if (ex->backend_->supports_graphs() && config.cuda_graphs && !moe_syncs) {
    // Powers of two to 8, then every multiple of 8 (a padded row costs little next to a
    // separate graph per size), up to what one step may hold.
    int32_t largest = std::min(config.max_num_seqs, max_tokens);
    if (model_config.is_moe() && !ex->backend_->host_memory()) {
      largest = std::min(largest, grouped);
    }
    for (int32_t b = 1; b <= largest; b = b < 8 ? b * 2 : b + 8) {
      ex->graph_batch_sizes_.push_back(b);
    }
    if (ex->graph_batch_sizes_.empty() || ex->graph_batch_sizes_.back() != largest) {
      ex->graph_batch_sizes_.push_back(largest);
    }
  }

  KvPoolShape shape;
  shape.num_layers = model_config.num_layers;
  shape.num_kv_heads = model_config.num_kv_heads;
  shape.head_dim = model_config.head_dim;
  shape.block_size = config.block_size;
  shape.dtype = config.kv_dtype;
  if (config.kv_dtype_auto) {
    shape.dtype = IsFloatDType(ex->info_.weight_dtype) ? ex->info_.weight_dtype : DType::kF16;
  }
  shape.k_per_token = config.kv_k_per_token;
  shape.code_order = ex->backend_->ops().PackedKvCodeOrder();
  // One residual tail per sequence the engine may hold (the scheduler's running set).
  if (IsLowBitKvDType(shape.dtype)) {
    shape.num_tail_slots = config.max_num_seqs;
    shape.tail_blocks = 1 + (config.kv_residual_tokens + config.block_size - 1) / config.block_size;
    const int32_t hd = model_config.head_dim;
    shape.hadamard = config.kv_hadamard && hd > 0 && (hd & (hd - 1)) == 0;
  }
  LOOM_RETURN_IF_ERROR(ex->backend_->ops().CheckKvFormat(shape.Format(model_config.num_heads)));
  int64_t num_blocks = config.num_kv_blocks;
  int64_t kv_budget = config.kv_cache_bytes;
  if (std::optional<Backend::MemoryInfo> memory = ex->backend_->DeviceMemory()) {
    // What the device may hold in all, less what is in use now (weights, activations,
    // workspace, other processes), less room for graphs and library state.
    constexpr int64_t kHeadroomBytes = int64_t{512} << 20;
    const int64_t used = memory->total_bytes - memory->free_bytes;
    kv_budget = static_cast<int64_t>(config.gpu_memory_utilization *
                                     static_cast<double>(memory->total_bytes)) -
                used - kHeadroomBytes;
    LOOM_LOG(kInfo, "device memory: ", memory->total_bytes >> 20, " MiB, ", used >> 20,
             " MiB in use; gpu_memory_utilization ", config.gpu_memory_utilization, " leaves ",
             std::max<int64_t>(kv_budget, 0) >> 20, " MiB for the KV cache");
  }
  // The residual tails come out of the same budget as the blocks.
  if (num_blocks == 0) {
    num_blocks = std::max<int64_t>(kv_budget - shape.TailBytes(), 0) / shape.BytesPerBlock();
  }
  // More blocks than max_num_seqs full-length sequences could use is wasted memory.
  num_blocks = std::min({num_blocks, int64_t{blocks_per_seq} * config.max_num_seqs,
                         int64_t{INT32_MAX}});
  if (num_blocks < 1) {
    return absl::InvalidArgumentError(StrCat("KV cache of ", kv_budget,
                                             " bytes holds no block of ", shape.BytesPerBlock(),
                                             " bytes"));
  }
  LOOM_ASSIGN_OR_RETURN(ex->kv_, KvPool::Create(shape, static_cast<int32_t>(num_blocks),
                                                *ex->backend_, config.populate_kv_cache));

  ex->capacity_.num_blocks = static_cast<int32_t>(num_blocks);
  ex->capacity_.block_size = config.block_size;
  ex->capacity_.kv_dtype = shape.dtype;
  ex->capacity_.bytes_per_block = shape.BytesPerBlock();
  ex->capacity_.tail_bytes = shape.TailBytes();
  ex->capacity_.tail_slot_bytes = shape.TailSlotBytes();
  ex->capacity_.kv_layout = shape.Layout();
  ex->capacity_.max_num_batched_tokens = max_tokens;
  ex->capacity_.max_num_seqs = config.max_num_seqs;
  return ex;
}

}  // namespace loom
