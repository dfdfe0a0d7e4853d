// loom's gRPC API (proto/loom/v1/generation.proto) on the serving core, with the standard
// grpc.health.v1 service ("" and "loom.v1.Generation": SERVING, NOT_SERVING once draining) and
// server reflection (v1alpha from gRPC, v1 from reflection_v1.h). The callback API: one reactor
// per Generate stream, at most one write in flight, OnCancel aborts the request. The same API
// keys as HTTP (`authorization: Bearer KEY` metadata); TLS when a certificate and key are given.
//
// Requests are validated by the HTTP API's rules (generate_params.h); one that does not parse is
// INVALID_ARGUMENT. Abort reaches only the caller's own requests (request_registry.h).
//
// Thread safety: Start/Stop from the owner; handlers run on gRPC's threads and the WorkQueue.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/serving/serving_context.h"
#include "server/serving/work_queue.h"

namespace grpc {
class Service;
}

namespace loom {

struct GrpcServerOptions {
  std::string host = "0.0.0.0";
  int port = 0;  // 0 = any free port (see GrpcServer::port)
  // PEM files; both empty = plaintext.
  std::string tls_cert_file;
  std::string tls_key_file;
  // More services on the same port (the internal cluster API), with their full names (for
  // reflection); they must outlive the server.
  struct ExtraService {
    grpc::Service* service = nullptr;
    std::string name;
  };
  std::vector<ExtraService> extra_services;
};

class GrpcServer {
 public:
  static absl::StatusOr<std::unique_ptr<GrpcServer>> Start(const GrpcServerOptions& options,
                                                           ServingContext& context,
                                                           WorkQueue& work, std::string version);
  ~GrpcServer();
  int port() const;
  // Health checks answer NOT_SERVING from now on (the process is draining).
  void StartDraining();
  // Ends every stream (cancelling its request) and stops serving.
  void Stop();

  class Impl;

 private:
  explicit GrpcServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom
