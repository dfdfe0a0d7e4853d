// The cluster manager's HTTP routes, in the style of loomd's (server/api/router.h): JSON bodies,
// errors in the OpenAI envelope, 404 for unknown paths, 405 (with `Allow`) for a known path with
// the wrong method, HEAD on every GET route, and with `api_keys` set, `Authorization: Bearer KEY`
// on every route but the probes (and /metrics when metrics_require_api_key is off).
//
//   GET  /livez                       200 while the process runs
//   GET  /readyz                      200 while serving, 503 once stopping
//   GET  /metrics                     Prometheus text (RenderManagerMetrics)
//   GET  /v1/instances                {"object":"list","data":[instance...]}, ordered by id
//   POST /v1/instances/{id}/drain     marks the instance draining; 404 for an unknown id
//
// Thread safety: the handler runs on the HTTP server's I/O threads; the service locks itself.
#pragma once

#include <atomic>
#include <string>

#include "loom/v1/cluster.pb.h"
#include "server/cluster/manager_policy.h"
#include "server/cluster/manager_service.h"
#include "server/config/server_config.h"
#include "server/http/http_types.h"

namespace loom::cluster {

// The handler for HttpServer. `service`, `config` and `stopping` must outlive it.
http::Handler MakeManagerRouter(ManagerService& service, const ServerConfig& config,
                                const std::atomic<bool>& stopping);

// The Prometheus text exposition (format 0.0.4) of `summary`: gauges loom_manager_instances,
// loom_manager_instances_draining, loom_manager_average_freeness, loom_manager_scale_signal
// (+1 out, 0, -1 in); counters loom_manager_dispatches_total,
// loom_manager_migration_orders_total, loom_manager_instances_dropped_total.
std::string RenderManagerMetrics(const ClusterSummary& summary);

// GET /v1/instances' body. Non-finite numbers (a draining instance's -infinity) are null.
std::string InstancesJson(const v1::ListInstancesReply& instances);

}  // namespace loom::cluster
