// How the cluster's processes (instances and the manager) trust each other's gRPC calls.
//
// - Keys: a server with API keys (`api_keys`) accepts a cluster call only with
//   `authorization: Bearer KEY` for one of them, as on its public API; a caller presents the
//   first of its own keys. The cluster's processes share their keys.
// - TLS: with `cluster_tls_ca_file` (PEM roots that sign the instances' and the manager's gRPC
//   certificates, grpc_tls_cert_file), the calls one process makes to another (load reports,
//   dispatch, migration, forwarded requests) use TLS and check the peer against those roots;
//   without it they are plaintext, for a private network.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "server/config/server_config.h"

namespace loom::cluster {

// OK when `keys` is empty or the call carries one of them; UNAUTHENTICATED otherwise.
grpc::Status AuthorizeClusterCall(const grpc::ServerContext& call,
                                  const std::vector<std::string>& keys);

// Adds the first of `keys` to an outgoing call (nothing when there are none).
void AddClusterAuth(grpc::ClientContext& call, const std::vector<std::string>& keys);

// The credentials of the calls this process makes to the cluster's other processes: TLS
// against `config.cluster_tls_ca_file` when it is set, plaintext otherwise. Errors: the file
// cannot be read or holds no PEM certificate.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClusterChannelCredentials(
    const ServerConfig& config);

}  // namespace loom::cluster
