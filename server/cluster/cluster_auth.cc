#include "server/cluster/cluster_auth.h"

#include <string_view>

#include "engine/common/file.h"
#include "engine/common/strings.h"
#include "server/api/router.h"

namespace loom::cluster {

grpc::Status AuthorizeClusterCall(const grpc::ServerContext& call,
                                  const std::vector<std::string>& keys) {
  if (keys.empty()) return grpc::Status::OK;
  const auto& md = call.client_metadata();
  auto it = md.find("authorization");
  if (it != md.end() &&
      api::AuthorizedBearer(std::string_view(it->second.data(), it->second.size()), keys)) {
    return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED, "a valid API key is required");
}

void AddClusterAuth(grpc::ClientContext& call, const std::vector<std::string>& keys) {
  if (!keys.empty()) call.AddMetadata("authorization", "Bearer " + keys.front());
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> ClusterChannelCredentials(
    const ServerConfig& config) {
  if (config.cluster_tls_ca_file.empty()) return grpc::InsecureChannelCredentials();
  absl::StatusOr<std::string> roots = ReadFile(config.cluster_tls_ca_file, 1 << 20);
  if (!roots.ok()) {
    return absl::InvalidArgumentError(StrCat("cluster_tls_ca_file: ", roots.status().message()));
  }
  if (roots->find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
    return absl::InvalidArgumentError(StrCat("cluster_tls_ca_file ", config.cluster_tls_ca_file,
                                             " holds no PEM certificate"));
  }
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = *std::move(roots);
  return grpc::SslCredentials(ssl);
}

}  // namespace loom::cluster
