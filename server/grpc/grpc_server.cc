#include "server/grpc/grpc_server.h"

#include <deque>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "engine/common/file.h"
#include "engine/common/logging.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "loom/v1/generation.grpc.pb.h"
#include "server/api/api_status.h"
#include "server/api/router.h"
#include "server/grpc/generate_params.h"
#include "server/grpc/reflection_v1.h"
#include "server/grpc/request_registry.h"
#include "server/serving/generation.h"

namespace loom {
namespace {

namespace v1 = ::loom::v1;

constexpr std::string_view kHealthService = "grpc.health.v1.Health";

// A ParamError's message that does not name its field gets it in front, so a gRPC client always
// learns which field was wrong.
grpc::Status ToGrpc(const absl::Status& s) {
  std::string message(s.message());
  const std::string param = api::ParamOf(s);
  if (!param.empty() && message.find(param) == std::string::npos) {
    message = StrCat(param, ": ", message);
  }
  return grpc::Status(static_cast<grpc::StatusCode>(api::GrpcCodeFor(s.code())), message);
}

// Requests arrive as bytes (raw methods) so that one which does not parse is answered
// INVALID_ARGUMENT with a message; gRPC's typed handlers answer UNIMPLEMENTED without one.
template <typename Message>
grpc::Status ParseRaw(const grpc::ByteBuffer* raw, Message* out) {
  grpc::ByteBuffer copy(*raw);  // deserializing consumes the buffer; the copy shares the bytes
  if (grpc::SerializationTraits<Message>::Deserialize(&copy, out).ok()) {
    return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      StrCat("the request is not a valid ", Message::descriptor()->full_name(),
                             " message (it does not parse as protobuf)"));
}

grpc::ByteBuffer Serialize(const google::protobuf::Message& message) {
  grpc::ByteBuffer out;
  bool own_buffer = false;
  const grpc::Status s = grpc::GenericSerialize<grpc::ProtoBufferWriter, google::protobuf::Message>(
      message, &out, &own_buffer);
  LOOM_CHECK(s.ok(), "cannot serialize a ", message.GetDescriptor()->full_name(), ": ",
             s.error_message());
  return out;
}

const grpc::Status& Unauthenticated() {
  static const auto* status =
      new grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "missing or invalid API key");
  return *status;
}

std::string_view AuthorizationHeader(const grpc::CallbackServerContext* call) {
  const auto& md = call->client_metadata();
  auto it = md.find("authorization");
  if (it == md.end()) return {};
  return std::string_view(it->second.data(), it->second.size());
}

bool Authorized(const ServingContext& ctx, const grpc::CallbackServerContext* call) {
  return ctx.config.api_keys.empty() ||
         api::AuthorizedBearer(AuthorizationHeader(call), ctx.config.api_keys);
}

// Whose request this is, for Abort: the API key when the server has keys (the caller passed
// Authorized, so the header is "Bearer <one of the keys>"), otherwise the client's connection.
std::string OwnerOf(const ServingContext& ctx, const grpc::CallbackServerContext* call) {
  if (!ctx.config.api_keys.empty()) return StrCat("key:", AuthorizationHeader(call));
  return StrCat("peer:", call->peer());
}

class Service;

// One Generate stream. Deleted in OnDone; work posted to the WorkQueue reaches it through
// Shared, which OnDone detaches under its lock.
class GenerateReactor : public grpc::ServerWriteReactor<grpc::ByteBuffer> {
 public:
  struct Shared {
    std::mutex mu;
    GenerateReactor* reactor = nullptr;
  };

  GenerateReactor(Service& service, grpc::CallbackServerContext* call,
                  const grpc::ByteBuffer* raw_request);
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;
  void Pump();

 private:
  // Why the request cannot start (bad input, no key, draining), or OK.
  absl::Status Check(grpc::CallbackServerContext* call, const grpc::ByteBuffer* raw_request,
                     GenerationRequest* out, std::string* wanted_id);
  void ContinueLocked();
  void Append(const ChoiceEvent& e);
  void Enqueue(v1::GenerateResponse& msg);

  Service& service_;
  ServingContext& ctx_;
  std::shared_ptr<Shared> shared_ = std::make_shared<Shared>();
  std::string owner_;
  std::string request_id_;
  std::mutex mu_;
  std::shared_ptr<Generation> generation_;
  std::deque<grpc::ByteBuffer> queue_;
  bool writing_ = false;
  bool done_ = false;
  bool finish_called_ = false;
  bool wrote_any_ = false;
  grpc::Status final_;
};

// The typed methods' requests, parsed from bytes (see ParseRaw).
using RawGenerationService = v1::Generation::WithRawCallbackMethod_Generate<
    v1::Generation::WithRawCallbackMethod_Abort<v1::Generation::WithRawCallbackMethod_GetModelInfo<
        v1::Generation::WithRawCallbackMethod_GetServerInfo<
            v1::Generation::WithRawCallbackMethod_GetLoad<v1::Generation::Service>>>>>;

class Service final : public RawGenerationService {
 public:
  Service(ServingContext& ctx, WorkQueue& work, std::string version)
      : ctx_(ctx), work_(work), version_(std::move(version)) {}

  grpc::ServerWriteReactor<grpc::ByteBuffer>* Generate(grpc::CallbackServerContext* call,
                                                       const grpc::ByteBuffer* request) override {
    return new GenerateReactor(*this, call, request);
  }

  // Only the caller's own requests; anybody else's id is treated exactly as an unknown one.
  grpc::ServerUnaryReactor* Abort(grpc::CallbackServerContext* call, const grpc::ByteBuffer* in,
                                  grpc::ByteBuffer* out) override {
    return Unary<v1::AbortRequest, v1::AbortResponse>(
        call, in, out, [&](const v1::AbortRequest& req, v1::AbortResponse*) {
          if (std::optional<RequestId> id = registry_.Find(OwnerOf(ctx_, call), req.request_id())) {
            ctx_.engine->Abort(*id);
          }
        });
  }

  grpc::ServerUnaryReactor* GetModelInfo(grpc::CallbackServerContext* call,
                                         const grpc::ByteBuffer* in,
                                         grpc::ByteBuffer* out) override {
    return Unary<v1::GetModelInfoRequest, v1::ModelInfo>(
        call, in, out, [&](const v1::GetModelInfoRequest&, v1::ModelInfo* info) {
          info->set_id(ctx_.model_id);
          info->set_architecture(ctx_.model.architecture);
          info->set_vocab_size(ctx_.model.vocab_size);
          info->set_max_context_len(ctx_.model.max_context_len);
          for (TokenId t : ctx_.model.eos_token_ids) info->add_eos_token_ids(t.value());
          info->set_bos_token_id(ctx_.model.bos_token_id.value());
          info->set_num_parameters(ctx_.model.num_parameters);
        });
  }

  grpc::ServerUnaryReactor* GetServerInfo(grpc::CallbackServerContext* call,
                                          const grpc::ByteBuffer* in,
                                          grpc::ByteBuffer* out) override {
    return Unary<v1::GetServerInfoRequest, v1::ServerInfo>(
        call, in, out, [&](const v1::GetServerInfoRequest&, v1::ServerInfo* info) {
          info->set_version(version_);
          info->set_backend(ctx_.config.backend);
          info->set_kv_block_size(ctx_.capacity.block_size);
          info->set_kv_num_blocks(ctx_.capacity.num_blocks);
          info->set_max_num_seqs(ctx_.capacity.max_num_seqs);
          info->set_max_num_batched_tokens(ctx_.capacity.max_num_batched_tokens);
        });
  }

  grpc::ServerUnaryReactor* GetLoad(grpc::CallbackServerContext* call, const grpc::ByteBuffer* in,
                                    grpc::ByteBuffer* out) override {
    return Unary<v1::GetLoadRequest, v1::Load>(
        call, in, out, [&](const v1::GetLoadRequest&, v1::Load* load) {
          const SchedulerStats s = ctx_.engine->Stats().scheduler;
          load->set_num_running_requests(s.num_running_requests);
          load->set_num_waiting_requests(s.num_waiting_requests);
          load->set_num_free_blocks(s.num_free_blocks);
          load->set_kv_cache_usage(
              s.num_blocks > 0 ? 1.0 - double(s.num_free_blocks) / s.num_blocks : 0);
          load->set_draining(ctx_.draining.load());
        });
  }

  ServingContext& ctx() { return ctx_; }
  WorkQueue& work() { return work_; }
  RequestRegistry& registry() { return registry_; }

 private:
  // A unary call: the API key, the request parsed, `answer` fills the response.
  template <typename Request, typename Response, typename Answer>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* call, const grpc::ByteBuffer* in,
                                  grpc::ByteBuffer* out, Answer answer) {
    grpc::ServerUnaryReactor* reactor = call->DefaultReactor();
    Request request;
    grpc::Status status = Authorized(ctx_, call) ? ParseRaw(in, &request) : Unauthenticated();
    if (status.ok()) {
      Response response;
      answer(request, &response);
      *out = Serialize(response);
    }
    reactor->Finish(status);
    return reactor;
  }

  ServingContext& ctx_;
  WorkQueue& work_;
  const std::string version_;
  RequestRegistry registry_;
};

GenerateReactor::GenerateReactor(Service& service, grpc::CallbackServerContext* call,
                                 const grpc::ByteBuffer* raw_request)
    : service_(service), ctx_(service.ctx()) {
  shared_->reactor = this;
  GenerationRequest r;
  std::string wanted_id;
  if (absl::Status status = Check(call, raw_request, &r, &wanted_id); !status.ok()) {
    finish_called_ = true;
    Finish(ToGrpc(status));
    return;
  }
  ctx_.num_inflight_responses.fetch_add(1);
  generation_ = Generation::Start(ctx_, std::move(r), ctx_.now_ms());
  owner_ = OwnerOf(ctx_, call);
  request_id_ = service_.registry().Add(owner_, wanted_id, generation_->id());
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

absl::Status GenerateReactor::Check(grpc::CallbackServerContext* call,
                                    const grpc::ByteBuffer* raw_request, GenerationRequest* out,
                                    std::string* wanted_id) {
  if (!Authorized(ctx_, call)) return absl::UnauthenticatedError("missing or invalid API key");
  v1::GenerateRequest request;
  if (grpc::Status parsed = ParseRaw(raw_request, &request); !parsed.ok()) {
    return absl::InvalidArgumentError(AbslView(parsed.error_message()));
  }
  if (ctx_.draining.load()) return absl::UnavailableError("the server is shutting down");
  LOOM_ASSIGN_OR_RETURN(*out, ToGenerationRequest(ctx_, request));
  *wanted_id = request.request_id();
  return absl::OkStatus();
}

void GenerateReactor::Enqueue(v1::GenerateResponse& msg) {
  msg.set_request_id(request_id_);
  queue_.push_back(Serialize(msg));
}

void GenerateReactor::Append(const ChoiceEvent& e) {
  if (!e.token_ids.empty() || !e.text.empty()) {
    v1::GenerateResponse msg;
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
    Enqueue(msg);
  }
  if (!e.finish_reason.empty()) {
    v1::GenerateResponse msg;
    v1::Completion* c = msg.mutable_completion();
    c->set_index(e.index);
    c->set_finish_reason(e.finish_reason);
    if (e.matched_stop.has_value()) c->set_matched_stop(*e.matched_stop);
    c->set_prompt_tokens(generation_->prompt_tokens());
    c->set_completion_tokens(e.completion_tokens);
    c->set_cached_tokens(generation_->cached_tokens());
    Enqueue(msg);
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
      msg.mutable_error()->set_code(api::GrpcCodeFor(batch.error.code()));
      msg.mutable_error()->set_message(std::string(batch.error.message()));
      Enqueue(msg);
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
  if (!request_id_.empty()) service_.registry().Remove(owner_, request_id_);
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
    // Reflection v1 lists what v1alpha lists: every service on the port.
    std::vector<std::string> names = {v1::Generation::service_full_name(),
                                      std::string(kHealthService),
                                      "grpc.reflection.v1alpha.ServerReflection",
                                      "grpc.reflection.v1.ServerReflection"};
    for (const GrpcServerOptions::ExtraService& extra : options.extra_services) {
      names.push_back(extra.name);
    }
    reflection_v1_ = MakeReflectionV1Service(std::move(names));
    grpc::ServerBuilder builder;
    builder.AddListeningPort(StrCat(options.host, ":", options.port), creds, &port_);
    builder.RegisterService(&service_);
    builder.RegisterService(reflection_v1_.get());
    for (const GrpcServerOptions::ExtraService& extra : options.extra_services) {
      builder.RegisterService(extra.service);
    }
    server_ = builder.BuildAndStart();
    if (server_ == nullptr || port_ == 0) {
      return absl::UnavailableError(
          StrCat("cannot serve gRPC on ", options.host, ":", options.port));
    }
    // The overall status ("") is SERVING from the start; the API's own name must be known too.
    server_->GetHealthCheckService()->SetServingStatus(v1::Generation::service_full_name(), true);
    return absl::OkStatus();
  }

  void StartDraining() {
    if (server_ != nullptr) server_->GetHealthCheckService()->SetServingStatus(false);
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
  std::unique_ptr<grpc::Service> reflection_v1_;
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
void GrpcServer::StartDraining() { impl_->StartDraining(); }

}  // namespace loom
