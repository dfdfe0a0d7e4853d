// The cluster manager's process, `loomd --role=manager`: the Manager gRPC service
// (manager_service.h) on grpc_port, the HTTP routes (manager_http.h) on port, and the pairing
// thread. It loads no model and never sees a token.
//
// Prints "loom manager gRPC listening on HOST:PORT" once gRPC serves, then "loom manager
// listening on HOST:PORT" (the HTTP port) last, once both serve: scripts and tests wait for it.
// SIGTERM or SIGINT stops it: /readyz fails, both servers close, and it returns 0.
#pragma once

#include <string_view>

#include "server/config/server_config.h"

namespace loom::cluster {

// Runs the manager until SIGTERM/SIGINT; the process exit code (0 after a signal, 1 when a
// server cannot start, 2 for a configuration a manager cannot run with). Blocks SIGTERM and
// SIGINT in the calling thread (and so in every thread it starts): call it before starting any
// other thread.
int RunManager(const ServerConfig& config, std::string_view version);

}  // namespace loom::cluster
