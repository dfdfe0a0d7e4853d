#include "server/grpc/grpc_server.h"

#include <deque>
#include <mutex>
#include <utility>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/container/flat_hash_map.h"
#include "engine/common/file.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "loom/v1/generation.grpc.pb.h"
#include "server/api/api_status.h"
#include "server/api/openai_params.h"
#include "server/api/router.h"
#include "server/serving/generation.h"

namespace loom {
namespace {

namespace v1 = ::loom::v1;

grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(api::GrpcCodeFor(s.code())),
                      std::string(s.message()));
}

// Checks and converts a GenerateRequest; the prompt is tokenized here.
absl::StatusOr<GenerationRequest> ToGeneration(const ServingContext& ctx,
                                               const v1::GenerateRequest& in) {
  GenerationRequest r;
  if (in.has_token_ids()) {
    for (int32_t id : in.token_ids().ids()) {
      if (id < 0 || id >= ctx.model.vocab_size) {
        return absl::InvalidArgumentError(
            StrCat("token id ", id, " is outside the vocabulary [0, ", ctx.model.vocab_size, ")"));
      }
      r.prompt_ids.push_back(id);
    }
  } else if (in.has_text()) {
    if (ctx.tokenizer == nullptr) {
      return absl::InvalidArgumentError("this model has no tokenizer; send token_ids");
    }
    r.prompt_ids = ctx.tokenizer->Encode(in.text(), /*add_special_tokens=*/true);
  }
  if (r.prompt_ids.empty()) return absl::InvalidArgumentError("the prompt is empty");
  r.max_tokens = in.max_tokens() > 0 ? in.max_tokens() : 16;
  if (static_cast<int64_t>(r.prompt_ids.size()) + r.max_tokens > ctx.model.max_context_len) {
    return absl::InvalidArgumentError(
        StrCat("the prompt (", r.prompt_ids.size(), " tokens) plus max_tokens (", r.max_tokens,
               ") exceeds the model's context of ", ctx.model.max_context_len, " tokens"));
  }
  const api::ParseLimits limits;  // the same bounds as the HTTP API
  r.n = in.n() > 0 ? in.n() : 1;
  if (r.n > limits.max_n) {
    return absl::InvalidArgumentError(StrCat("n must be at most ", limits.max_n));
  }
  if (in.stop_size() > limits.max_stop_strings) {
    return absl::InvalidArgumentError(StrCat("at most ", limits.max_stop_strings, " stop strings"));
  }
  SamplingParams& s = r.sampling;
  const v1::SamplingParams& p = in.sampling();
  if (p.has_temperature()) s.temperature = p.temperature();
  if (p.has_top_p()) s.top_p = p.top_p();
  s.top_k = p.top_k();
  s.min_p = p.min_p();
  if (p.has_repetition_penalty()) s.repetition_penalty = p.repetition_penalty();
  s.frequency_penalty = p.frequency_penalty();
  s.presence_penalty = p.presence_penalty();
  for (const auto& [id, bias] : p.logit_bias()) s.logit_bias.emplace_back(TokenId(id), bias);
  if (p.has_seed()) {
    s.seed = p.seed();
    r.has_seed = true;
  }
  s.min_tokens = in.min_tokens();
  s.logprobs = in.has_logprobs() ? in.logprobs() : -1;
  LOOM_RETURN_IF_ERROR(ValidateSamplingParams(s, ctx.model.vocab_size));
  for (const std::string& stop : in.stop()) {
    if (stop.empty() || static_cast<int32_t>(stop.size()) > limits.max_stop_string_bytes) {
      return absl::InvalidArgumentError(
          StrCat("stop strings must have 1 to ", limits.max_stop_string_bytes, " bytes"));
    }
    r.stop.push_back(stop);
  }
  for (int32_t id : in.stop_token_ids()) {
    if (id < 0 || id >= ctx.model.vocab_size) {
      return absl::InvalidArgumentError(StrCat("stop token id ", id, " is outside the vocabulary"));
    }
    r.stop_token_ids.push_back(id);
  }
  r.ignore_eos = in.ignore_eos();
  r.skip_special_tokens = in.skip_special_tokens();
  r.priority = in.priority();
  r.cache_salt = in.cache_salt();
  return r;
}

bool Authorized(const ServingContext& ctx, const grpc::CallbackServerContext* call) {
  if (ctx.config.api_keys.empty()) return true;
  const auto& md = call->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return false;
  return api::AuthorizedBearer(std::string_view(it->second.data(), it->second.size()),
                               ctx.config.api_keys);
}

class Service;

// One Generate stream. Deleted in OnDone; work posted to the WorkQueue reaches it through
// Shared, which OnDone detaches under its lock.
class GenerateReactor : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  struct Shared {
    std::mutex mu;
    GenerateReactor* reactor = nullptr;
  };

  GenerateReactor(Service& service, grpc::CallbackServerContext* call,
                  const v1::GenerateRequest& request);
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;
  void Pump();

 private:
  void ContinueLocked();
  void Append(const ChoiceEvent& e);

  Service& service_;
  ServingContext& ctx_;
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  std::string request_id_;
  std::mutex mu_;
  std::shared_ptr<Generation> generation_;
  std::deque<v1::GenerateResponse> queue_;
  bool writing_ = false;
  bool done_ = false;
  bool finish_called_ = false;
  bool wrote_any_ = false;
  grpc::Status final_;
};

class Service final : public v1::Generation::CallbackService {
 public:
  Service(ServingContext& ctx, WorkQueue& work, std::string version)
      : ctx_(ctx), work_(work), version_(std::move(version)) {}

  grpc::ServerWriteReactor<v1::GenerateResponse>* Generate(
      grpc::CallbackServerContext* call, const v1::GenerateRequest* request) override {
    return new GenerateReactor(*this, call, *request);
  }

  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* call, const v1::AbortRequest* req,
                                  v1::AbortResponse*) override {
    grpc::ServerUnaryReactor* reactor = call->DefaultReactor();
    if (!Authorized(ctx_, call)) {
      reactor->Finish(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or invalid API key"));
      return reactor;
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = running_.find(req->request_id());
      if (it != running_.end()) ctx_.engine->Abort(it->second);
    }
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* call,
                                         const v1::GetModelInfoRequest*,
                                         v1::ModelInfo* out) override {
    grpc::ServerUnaryReactor* reactor = call->DefaultReactor();
    if (!Authorized(ctx_, call)) return Deny(reactor);
    out->set_id(ctx_.model_id);
    out->set_architecture(ctx_.model.architecture);
    out->set_vocab_size(ctx_.model.vocab_size);
    out->set_max_context_len(ctx_.model.max_context_len);
    for (TokenId t : ctx_.model.eos_token_ids) out->add_eos_token_ids(t.value());
    out->set_bos_token_id(ctx_.model.bos_token_id.value());
    out->set_num_parameters(ctx_.model.num_parameters);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* call,
                                          const v1::GetServerInfoRequest*,
                                          v1::ServerInfo* out) override {
    grpc::ServerUnaryReactor* reactor = call->DefaultReactor();
    if (!Authorized(ctx_, call)) return Deny(reactor);
    out->set_version(version_);
    out->set_backend(ctx_.config.backend);
    out->set_kv_block_size(ctx_.capacity.block_size);
    out->set_kv_num_blocks(ctx_.capacity.num_blocks);
    out->set_max_num_seqs(ctx_.capacity.max_num_seqs);
    out->set_max_num_batched_tokens(ctx_.capacity.max_num_batched_tokens);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerUnaryReactor* GetLoad(grpc::CallbackServerContext* call, const v1::GetLoadRequest*,
                                    v1::Load* out) override {
    grpc::ServerUnaryReactor* reactor = call->DefaultReactor();
    if (!Authorized(ctx_, call)) return Deny(reactor);
    const SchedulerStats s = ctx_.engine->Stats().scheduler;
    out->set_num_running_requests(s.num_running_requests);
    out->set_num_waiting_requests(s.num_waiting_requests);
    out->set_num_free_blocks(s.num_free_blocks);
    out->set_kv_cache_usage(s.num_blocks > 0 ? 1.0 - double(s.num_free_blocks) / s.num_blocks : 0);
    out->set_draining(ctx_.draining.load());
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  ServingContext& ctx() { return ctx_; }
  WorkQueue& work() { return work_; }

  // Request ids clients may abort by.
  std::string Register(const std::string& wanted, RequestId id) {
    std::lock_guard<std::mutex> lock(mu_);
    std::string name = wanted.empty() ? StrCat("grpc-", id) : wanted;
    if (running_.contains(name)) name = StrCat(name, "-", id);
    running_[name] = id;
    return name;
  }
  void Unregister(const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    running_.erase(name);
  }

 private:
  static grpc::ServerUnaryReactor* Deny(grpc::ServerUnaryReactor* reactor) {
    reactor->Finish(grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or invalid API key"));
    return reactor;
  }

  ServingContext& ctx_;
  WorkQueue& work_;
  const std::string version_;
  std::mutex mu_;
  absl::flat_hash_map<std::string, RequestId> running_;
};

GenerateReactor::GenerateReactor(Service& service, grpc::CallbackServerContext* call,
                                 const v1::GenerateRequest& request)
    : service_(service), ctx_(service.ctx()) {
  shared_->reactor = this;
  absl::Status status;
  absl::StatusOr<GenerationRequest> r;
  if (!Authorized(ctx_, call)) {
    status = absl::UnauthenticatedError("missing or invalid API key");
  } else if (ctx_.draining.load()) {
    status = absl::UnavailableError("the server is shutting down");
  } else if (r = ToGeneration(ctx_, request); !r.ok()) {
    status = r.status();
  }
  if (!status.ok()) {
    finish_called_ = true;
    Finish(ToGrpc(status));
    return;
  }
  ctx_.num_inflight_responses.fetch_add(1);
  generation_ = Generation::Start(ctx_, std::move(*r), ctx_.now_ms());
  request_id_ = service_.Register(request.request_id(), generation_->id());
  std::weak_ptr<Shared> weak = shared_;
  WorkQueue* work = &service_.work();
  generation_->SetNotifier([weak, work] {
    work->Post([weak] {
      if (auto s = weak.lock()) {
        std::lock_guard<std::mutex> lock(s->mu);
        if (s->reactor != nullptr) s->reactor->Pump();
      }
    });
  });
  std::lock_guard<std::mutex> lock(shared_->mu);
  Pump();
}

void GenerateReactor::Append(const ChoiceEvent& e) {
  if (!e.token_ids.empty() || !e.text.empty()) {
    v1::GenerateResponse msg;
    msg.set_request_id(request_id_);
    v1::Chunk* chunk = msg.mutable_chunk();
    chunk->set_index(e.index);
    for (int32_t id : e.token_ids) chunk->add_token_ids(id);
    chunk->set_text(e.text);
    for (const PositionLogprobs& p : e.logprobs) {
      v1::TokenLogprob* lp = chunk->add_logprobs();
      lp->set_token_id(p.token.token_id.value());
      lp->set_logprob(p.token.logprob);
      for (const TokenLogprob& t : p.top) {
        v1::TopLogprob* top = lp->add_top();
        top->set_token_id(t.token_id.value());
        top->set_logprob(t.logprob);
      }
    }
    queue_.push_back(std::move(msg));
  }
  if (!e.finish_reason.empty()) {
    v1::GenerateResponse msg;
    msg.set_request_id(request_id_);
    v1::Completion* c = msg.mutable_completion();
    c->set_index(e.index);
    c->set_finish_reason(e.finish_reason);
    if (e.matched_stop.has_value()) c->set_matched_stop(*e.matched_stop);
    c->set_prompt_tokens(generation_->prompt_tokens());
    c->set_completion_tokens(e.completion_tokens);
    c->set_cached_tokens(generation_->cached_tokens());
    queue_.push_back(std::move(msg));
  }
}

void GenerateReactor::Pump() {
  std::lock_guard<std::mutex> lock(mu_);
  if (done_ || generation_ == nullptr) return;
  Generation::Batch batch = generation_->Poll();
  if (!batch.error.ok()) {
    if (!wrote_any_ && queue_.empty()) {
      final_ = ToGrpc(batch.error);  // before the first message: a real status
    } else {
      v1::GenerateResponse msg;
      msg.set_request_id(request_id_);
      msg.mutable_error()->set_code(api::GrpcCodeFor(batch.error.code()));
      msg.mutable_error()->set_message(std::string(batch.error.message()));
      queue_.push_back(std::move(msg));
    }
    done_ = true;
  } else {
    for (const ChoiceEvent& e : batch.events) Append(e);
    done_ = batch.done;
  }
  ContinueLocked();
}

void GenerateReactor::ContinueLocked() {
  if (writing_ || finish_called_) return;
  if (!queue_.empty()) {
    writing_ = true;
    wrote_any_ = true;
    StartWrite(&queue_.front());
    return;
  }
  if (done_) {
    finish_called_ = true;
    ctx_.num_inflight_responses.fetch_sub(1);
    Finish(final_);
  }
}

void GenerateReactor::OnWriteDone(bool ok) {
  std::lock_guard<std::mutex> lock(mu_);
  writing_ = false;
  if (!queue_.empty()) queue_.pop_front();
  if (!ok) {  // the stream broke: the client is gone
    queue_.clear();
    if (!done_) generation_->Cancel();
    done_ = true;
  }
  ContinueLocked();
}

void GenerateReactor::OnCancel() {
  std::lock_guard<std::mutex> lock(mu_);
  if (generation_ == nullptr || finish_called_) return;
  if (!done_) {
    generation_->Cancel();
    done_ = true;
  }
  // Drop what was not sent; a message being written stays until OnWriteDone.
  queue_.erase(queue_.begin() + (writing_ && !queue_.empty() ? 1 : 0), queue_.end());
  final_ = grpc::Status::CANCELLED;
  ContinueLocked();
}

void GenerateReactor::OnDone() {
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    shared_->reactor = nullptr;
  }
  if (!request_id_.empty()) service_.Unregister(request_id_);
  delete this;
}

}  // namespace

class GrpcServer::Impl {
 public:
  Impl(ServingContext& ctx, WorkQueue& work, std::string version)
      : service_(ctx, work, std::move(version)) {}

  absl::Status Start(const GrpcServerOptions& options) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::reflection::InitProtoReflectionServerBuilderPlugin();
    std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
    if (!options.tls_cert_file.empty() || !options.tls_key_file.empty()) {
      LOOM_ASSIGN_OR_RETURN(std::string cert, ReadFile(options.tls_cert_file, 1 << 20));
      LOOM_ASSIGN_OR_RETURN(std::string key, ReadFile(options.tls_key_file, 1 << 20));
      grpc::SslServerCredentialsOptions ssl;
      ssl.pem_key_cert_pairs.push_back({key, cert});
      creds = grpc::SslServerCredentials(ssl);
    }
    grpc::ServerBuilder builder;
    builder.AddListeningPort(StrCat(options.host, ":", options.port), creds, &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      return absl::UnavailableError(
          StrCat("cannot serve gRPC on ", options.host, ":", options.port));
    }
    return absl::OkStatus();
  }

  void Stop() {
    if (server_ != nullptr) {
      server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
      server_->Wait();
      server_.reset();
    }
  }

  int port() const { return port_; }

 private:
  Service service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

absl::StatusOr<std::unique_ptr<GrpcServer>> GrpcServer::Start(const GrpcServerOptions& options,
                                                              ServingContext& context,
                                                              WorkQueue& work, std::string version) {
  auto impl = std::make_unique<Impl>(context, work, std::move(version));
  LOOM_RETURN_IF_ERROR(impl->Start(options));
  return std::unique_ptr<GrpcServer>(new GrpcServer(std::move(impl)));
}

GrpcServer::GrpcServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GrpcServer::~GrpcServer() { Stop(); }
int GrpcServer::port() const { return impl_->port(); }
void GrpcServer::Stop() { impl_->Stop(); }

}  // namespace loom
