#include "server/cluster/manager_main.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <string>

#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/status/statusor.h"
#include "engine/common/file.h"
#include "engine/common/logging.h"
#include "engine/common/status.h"
#include "engine/common/strings.h"
#include "server/cluster/manager_http.h"
#include "server/cluster/manager_service.h"
#include "server/http/http_server.h"

namespace loom::cluster {
namespace {

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

ManagerPolicyOptions PolicyOptionsFrom(const ServerConfig& c) {
  ManagerPolicyOptions o;
  o.instance_timeout_ms = c.manager_instance_timeout_ms;
  o.dispatch_top_k = static_cast<int32_t>(c.manager_dispatch_top_k);
  o.migrate_out_below = c.manager_migrate_out_below;
  o.migration = c.manager_migration;
  o.migrate_in_above = c.manager_migrate_in_above;
  o.scale_out_below = c.manager_scale_out_below;
  o.scale_in_above = c.manager_scale_in_above;
  return o;
}

// The gRPC server with the Manager service and grpc.health.v1; TLS when a certificate and key
// are configured (as loomd's own gRPC API).
absl::StatusOr<std::unique_ptr<grpc::Server>> StartGrpc(const ServerConfig& config,
                                                        ManagerService& service, int* port) {
  grpc::EnableDefaultHealthCheckService(true);
  std::shared_ptr<grpc::ServerCredentials> creds = grpc::InsecureServerCredentials();
  if (!config.grpc_tls_cert_file.empty() || !config.grpc_tls_key_file.empty()) {
    LOOM_ASSIGN_OR_RETURN(std::string cert, ReadFile(config.grpc_tls_cert_file, 1 << 20));
    LOOM_ASSIGN_OR_RETURN(std::string key, ReadFile(config.grpc_tls_key_file, 1 << 20));
    grpc::SslServerCredentialsOptions ssl;
    ssl.pem_key_cert_pairs.push_back({key, cert});
    creds = grpc::SslServerCredentials(ssl);
  }
  grpc::ServerBuilder builder;
  builder.AddListeningPort(StrCat(config.host, ":", config.grpc_port), creds, port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *port == 0) {
    return absl::UnavailableError(
        StrCat("cannot serve gRPC on ", config.host, ":", config.grpc_port));
  }
  server->GetHealthCheckService()->SetServingStatus(v1::Manager::service_full_name(), true);
  return server;
}

absl::StatusOr<std::unique_ptr<http::HttpServer>> StartHttp(const ServerConfig& config,
                                                            ManagerService& service,
                                                            const std::atomic<bool>& stopping) {
  http::HttpServerOptions o;
  o.host = config.host;
  o.port = static_cast<int>(config.port);
  o.num_threads = static_cast<int>(config.http_threads);
  o.max_body_bytes = config.max_body_bytes;
  o.max_header_bytes = config.max_header_bytes;
  o.max_requests_per_connection = static_cast<int32_t>(config.max_requests_per_connection);
  o.idle_timeout = absl::Seconds(config.idle_timeout_s);
  return http::HttpServer::Start(o, MakeManagerRouter(service, config, stopping));
}

void StopGrpc(grpc::Server& server) {
  server.Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  server.Wait();
}

}  // namespace

int RunManager(const ServerConfig& config, std::string_view version) {
  if (config.grpc_port < 0) {
    std::fprintf(stderr, "loomd: a manager needs its gRPC port (--grpc-port; 0 = any free)\n");
    return 2;
  }
  // Signals are taken by sigwait below; every thread started from here inherits the mask.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  ManagerService service(PolicyOptionsFrom(config), std::random_device{}(), SteadyMs,
                         config.api_keys);
  std::atomic<bool> stopping{false};
  int grpc_port = 0;
  absl::StatusOr<std::unique_ptr<grpc::Server>> grpc = StartGrpc(config, service, &grpc_port);
  if (!grpc.ok()) {
    std::fprintf(stderr, "loomd: %s\n", std::string(grpc.status().message()).c_str());
    return 1;
  }
  std::printf("loom manager gRPC listening on %s:%d\n", config.host.c_str(), grpc_port);
  absl::StatusOr<std::unique_ptr<http::HttpServer>> http = StartHttp(config, service, stopping);
  if (!http.ok()) {
    std::fprintf(stderr, "loomd: %s\n", std::string(http.status().message()).c_str());
    StopGrpc(**grpc);
    return 1;
  }
  service.StartPairing(config.manager_pair_interval_ms);
  LOOM_LOG(kInfo, "loom ", version, " cluster manager: instance timeout ",
           config.manager_instance_timeout_ms, " ms, pairing every ",
           config.manager_pair_interval_ms, " ms, dispatch among the top ",
           config.manager_dispatch_top_k);
  // The port line is what scripts and tests wait for (it comes last).
  std::printf("loom manager listening on %s:%d\n", config.host.c_str(), (*http)->port());
  std::fflush(stdout);

  int signal_number = 0;
  sigwait(&signals, &signal_number);
  LOOM_LOG(kInfo, "signal ", signal_number, ": stopping the manager");
  stopping = true;
  service.StopPairing();
  (*http)->Stop();
  StopGrpc(**grpc);
  LOOM_LOG(kInfo, "stopped");
  return 0;
}

}  // namespace loom::cluster
