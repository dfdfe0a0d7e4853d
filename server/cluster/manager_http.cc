#include "server/cluster/manager_http.h"

#include <cmath>
#include <cstdio>
#include <optional>
#include <string_view>
#include <utility>

#include "engine/common/json_writer.h"
#include "engine/common/strings.h"
#include "server/api/api_status.h"
#include "server/api/router.h"
#include "server/http/http_server.h"

namespace loom::cluster {
namespace {

constexpr std::string_view kInstancesPath = "/v1/instances";
constexpr std::string_view kDrainSuffix = "/drain";

http::Response Json200(std::string body) {
  http::Response r;
  r.body = std::move(body);
  return r;
}

// One metric family: HELP, TYPE and its single sample. Values are finite by construction
// (ClusterSummary); a non-finite one would still be written as 0, never as NaN.
void AppendMetric(std::string& out, std::string_view name, std::string_view type,
                  std::string_view help, double value) {
  out += StrCat("# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", name, " ");
  if (!std::isfinite(value)) value = 0.0;
  // Integers exactly, fractions with enough digits to round-trip.
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  out += StrCat(buffer, "\n");
}

void WriteLoad(const v1::InstanceLoad& l, JsonWriter& w) {
  w.BeginObject();
  for (const auto& [name, value] : LoadCounts(l)) {
    w.Key(name);
    w.Int(value);
  }
  w.Key("has_high_priority");
  w.Bool(l.has_high_priority());
  w.Key("draining");
  w.Bool(l.draining());
  w.Key("freeness");
  w.Double(l.freeness());
  w.Key("dispatch_freeness");
  w.Double(l.dispatch_freeness());
  w.EndObject();
}

// POST /v1/instances/{id}/drain with the id percent-decoded.
void HandleDrain(ManagerService& service, std::string_view encoded_id, http::Responder& r) {
  const std::optional<std::string> id = api::PercentDecode(encoded_id);
  if (!id.has_value() || id->empty()) {
    return r.Send(api::ErrorResponseFor(
        absl::InvalidArgumentError(StrCat("malformed instance id `", encoded_id, "`"))));
  }
  if (absl::Status s = service.DrainInstance(*id); !s.ok()) {
    return r.Send(api::ErrorResponseFor(s));
  }
  JsonWriter w;
  w.BeginObject();
  w.Key("instance_id");
  w.String(*id);
  w.Key("draining");
  w.Bool(true);
  w.EndObject();
  r.Send(Json200(std::move(w).Take()));
}

// Whether `path` may be fetched without an API key.
bool IsOpen(const ServerConfig& config, std::string_view path) {
  return path == "/livez" || path == "/readyz" ||
         (path == "/metrics" && !config.metrics_require_api_key);
}

// The `{id}` of /v1/instances/{id}/drain, or nullopt for any other path.
std::optional<std::string_view> DrainTarget(std::string_view path) {
  if (!path.starts_with(kInstancesPath) || !path.ends_with(kDrainSuffix)) return std::nullopt;
  path.remove_prefix(kInstancesPath.size());
  path.remove_suffix(kDrainSuffix.size());
  if (path.size() < 2 || path.front() != '/' || path.find('/', 1) != std::string_view::npos) {
    return std::nullopt;
  }
  return path.substr(1);
}

}  // namespace

std::string RenderManagerMetrics(const ClusterSummary& s) {
  std::string out;
  AppendMetric(out, "loom_manager_instances", "gauge",
               "Instances reporting to the manager, draining ones included.", s.num_instances);
  AppendMetric(out, "loom_manager_instances_draining", "gauge",
               "Instances being drained.", s.num_draining);
  AppendMetric(out, "loom_manager_average_freeness", "gauge",
               "Average freeness (free KV blocks per running request) of the instances "
               "that are not draining.",
               s.average_freeness);
  AppendMetric(out, "loom_manager_scale_signal", "gauge",
               "1: add an instance, 0: keep, -1: remove one.",
               static_cast<double>(static_cast<int>(s.scale_signal)));
  AppendMetric(out, "loom_manager_dispatches_total", "counter",
               "Dispatch answers that named an instance.", static_cast<double>(s.num_dispatches));
  AppendMetric(out, "loom_manager_migration_orders_total", "counter",
               "Migration orders handed to instances.",
               static_cast<double>(s.num_migration_orders));
  AppendMetric(out, "loom_manager_instances_dropped_total", "counter",
               "Instances dropped after staying silent past the timeout.",
               static_cast<double>(s.num_instances_dropped));
  return out;
}

std::string InstancesJson(const v1::ListInstancesReply& instances) {
  JsonWriter w;
  w.BeginObject();
  w.Key("object");
  w.String("list");
  w.Key("data");
  w.BeginArray();
  for (const v1::InstanceStatus& i : instances.instances()) {
    w.BeginObject();
    w.Key("instance_id");
    w.String(i.instance_id());
    w.Key("grpc_address");
    w.String(i.grpc_address());
    w.Key("http_address");
    w.String(i.http_address());
    w.Key("draining");
    w.Bool(i.draining());
    w.Key("last_report_age_ms");
    w.Int(i.last_report_age_ms());
    w.Key("load");
    WriteLoad(i.load(), w);
    w.EndObject();
  }
  w.EndArray();
  w.EndObject();
  return std::move(w).Take();
}

http::Handler MakeManagerRouter(ManagerService& service, const ServerConfig& config,
                                const std::atomic<bool>& stopping) {
  return [&service, &config, &stopping](const http::Request& req,
                                        std::shared_ptr<http::Responder> responder) {
    const std::string& path = req.path;
    if (!config.api_keys.empty() && !IsOpen(config, path) &&
        !api::AuthorizedBearer(req.Header("authorization"), config.api_keys)) {
      http::Response r = http::ErrorResponse(401, "missing or invalid API key",
                                             "authentication_error");
      r.headers.emplace_back("WWW-Authenticate", "Bearer");
      return responder->Send(std::move(r));
    }
    const auto method_is = [&](std::string_view m) {
      if (req.method == m || (m == "GET" && req.method == "HEAD")) return true;
      http::Response r = http::ErrorResponse(405, StrCat(req.method, " is not allowed on ", path),
                                             "invalid_request_error");
      r.headers.emplace_back("Allow", m == "GET" ? "GET, HEAD" : std::string(m));
      responder->Send(std::move(r));
      return false;
    };
    if (path == "/livez") {
      if (method_is("GET")) responder->Send(Json200(R"({"status":"ok"})"));
    } else if (path == "/readyz") {
      if (!method_is("GET")) return;
      if (stopping.load()) {
        return responder->Send(
            api::ErrorResponseFor(absl::UnavailableError("the manager is stopping")));
      }
      responder->Send(Json200(R"({"status":"ready"})"));
    } else if (path == "/metrics") {
      if (!method_is("GET")) return;
      http::Response r;
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = RenderManagerMetrics(service.Summary());
      responder->Send(std::move(r));
    } else if (path == kInstancesPath) {
      if (method_is("GET")) responder->Send(Json200(InstancesJson(service.List())));
    } else if (std::optional<std::string_view> id = DrainTarget(path); id.has_value()) {
      if (method_is("POST")) HandleDrain(service, *id, *responder);
    } else {
      responder->Send(http::ErrorResponse(404, StrCat("no route for ", path), "not_found_error"));
    }
  };
}

}  // namespace loom::cluster
