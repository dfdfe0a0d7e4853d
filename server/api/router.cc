#include "server/api/router.h"

#include <cctype>
#include <optional>
#include <utility>

#include "engine/common/json_writer.h"
#include "engine/common/strings.h"
#include "server/api/api_status.h"
#include "server/api/completions.h"
#include "server/http/http_server.h"
#include "server/serving/health.h"

namespace loom::api {
namespace {

constexpr std::string_view kModelsPrefix = "/v1/models/";

http::Response Json200(std::string body) {
  http::Response r;
  r.body = std::move(body);
  return r;
}

void SendStatus(http::Responder& r, const absl::Status& s) { r.Send(ErrorResponseFor(s)); }

// The model object of GET /v1/models and GET /v1/models/{id}.
void WriteModel(const ServingContext& c, JsonWriter& w) {
  w.BeginObject();
  w.Key("id");
  w.String(c.model_id);
  w.Key("object");
  w.String("model");
  w.Key("created");
  w.Int(0);
  w.Key("owned_by");
  w.String("loom");
  w.Key("max_model_len");
  w.Int(c.model.max_context_len);
  w.EndObject();
}

std::string ModelsBody(const ServingContext& c) {
  JsonWriter w;
  w.BeginObject();
  w.Key("object");
  w.String("list");
  w.Key("data");
  w.BeginArray();
  WriteModel(c, w);
  w.EndArray();
  w.EndObject();
  return std::move(w).Take();
}

// GET /v1/models/{id}: the model object, or 404 for an id this server does not serve.
void RetrieveModel(const ServingContext& c, std::string_view encoded_id, http::Responder& r) {
  const std::optional<std::string> id = PercentDecode(encoded_id);
  if (!id.has_value() || *id != c.model_id) {
    return SendStatus(r, absl::NotFoundError(StrCat("The model `", id.value_or(std::string(encoded_id)),
                                                    "` does not exist; this server serves `",
                                                    c.model_id, "`")));
  }
  JsonWriter w;
  WriteModel(c, w);
  r.Send(Json200(std::move(w).Take()));
}

// POST /tokenize: {"prompt": "..."} or {"messages": [...]} (+ add_special_tokens).
void Tokenize(const ServingContext& c, const http::Request& req, http::Responder& r) {
  if (c.tokenizer == nullptr) return SendStatus(r, ParamError("", "this model has no tokenizer"));
  absl::StatusOr<TokenizeParams> t = ParseTokenizeRequest(req.body);
  if (!t.ok()) return SendStatus(r, t.status());
  std::vector<int32_t> ids;
  if (t->is_chat) {
    absl::StatusOr<std::vector<int32_t>> rendered = RenderChatPrompt(c, t->chat);
    if (!rendered.ok()) return SendStatus(r, rendered.status());
    ids = std::move(*rendered);
  } else {
    ids = c.tokenizer->Encode(t->prompt, t->add_special_tokens);
  }
  JsonWriter w;
  w.BeginObject();
  w.Key("count");
  w.Int(static_cast<int64_t>(ids.size()));
  w.Key("max_model_len");
  w.Int(c.model.max_context_len);
  w.Key("tokens");
  w.BeginArray();
  for (int32_t id : ids) w.Int(id);
  w.EndArray();
  w.EndObject();
  r.Send(Json200(std::move(w).Take()));
}

// POST /detokenize: {"tokens": [ids]}.
void Detokenize(const ServingContext& c, const http::Request& req, http::Responder& r) {
  if (c.tokenizer == nullptr) return SendStatus(r, ParamError("", "this model has no tokenizer"));
  absl::StatusOr<std::vector<int32_t>> ids = ParseDetokenizeRequest(req.body, c.model.vocab_size);
  if (!ids.ok()) return SendStatus(r, ids.status());
  JsonWriter w;
  w.BeginObject();
  w.Key("prompt");
  w.String(c.tokenizer->Decode(*ids, false));
  w.EndObject();
  r.Send(Json200(std::move(w).Take()));
}

bool IsProbe(std::string_view path) {
  return path == "/livez" || path == "/readyz" || path == "/health";
}

// Whether `path` may be fetched without an API key.
bool IsOpen(const ServingContext& c, std::string_view path) {
  return IsProbe(path) || (path == "/metrics" && !c.config.metrics_require_api_key);
}

// 200 with `ok_body` when `status` is OK, else 503 in the OpenAI envelope with the reason.
void SendProbe(http::Responder& r, const absl::Status& status, std::string ok_body) {
  if (status.ok()) return r.Send(Json200(std::move(ok_body)));
  r.Send(ErrorResponseFor(status));
}

absl::Status Liveness(const ServingContext& c) {
  if (c.engine == nullptr) return absl::UnavailableError("the engine is not running");
  return CheckLiveness(c.engine->Stats(), c.now_ms(), HealthOptionsFor(c.config));
}

absl::Status Readiness(const ServingContext& c) {
  if (c.engine == nullptr) return absl::UnavailableError("the engine is not running");
  ServingState state;
  state.warmed_up = c.warmed_up.load();
  state.draining = c.draining.load();
  return CheckReadiness(c.engine->Stats(), c.now_ms(), state, HealthOptionsFor(c.config));
}

}  // namespace

std::optional<std::string> PercentDecode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out += text[i];
      continue;
    }
    int value = 0;
    for (size_t j = i + 1; j <= i + 2; ++j) {
      const char ch = j < text.size() ? text[j] : '\0';
      const int digit = std::isdigit(static_cast<unsigned char>(ch)) ? ch - '0'
                        : (ch >= 'a' && ch <= 'f')                    ? ch - 'a' + 10
                        : (ch >= 'A' && ch <= 'F')                    ? ch - 'A' + 10
                                                                      : -1;
      if (digit < 0) return std::nullopt;
      value = value * 16 + digit;
    }
    out += static_cast<char>(value);
    i += 2;
  }
  return out;
}

bool AuthorizedBearer(std::string_view header, const std::vector<std::string>& keys) {
  // RFC 9110 §11.1: the scheme is case-insensitive, followed by one or more spaces.
  constexpr std::string_view kScheme = "bearer";
  if (header.size() <= kScheme.size()) return false;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return false;
  }
  std::string_view token = header.substr(kScheme.size());
  if (token.front() != ' ') return false;
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  bool any = false;
  for (const std::string& key : keys) {
    // Compare every byte of the longer of the two, so timing reveals nothing about prefixes.
    unsigned diff = key.size() == token.size() ? 0u : 1u;
    const size_t n = std::max(key.size(), token.size());
    for (size_t i = 0; i < n; ++i) {
      const unsigned char a = i < key.size() ? static_cast<unsigned char>(key[i]) : 0;
      const unsigned char b = i < token.size() ? static_cast<unsigned char>(token[i]) : 0;
      diff |= a ^ b;
    }
    any |= diff == 0;
  }
  return any;
}

http::Handler MakeRouter(ServingContext& context, WorkQueue& work, std::string version) {
  return [&context, &work, version = std::move(version)](
             const http::Request& req, std::shared_ptr<http::Responder> responder) {
    const std::string& path = req.path;
    if (!context.config.api_keys.empty() && !IsOpen(context, path) &&
        !AuthorizedBearer(req.Header("authorization"), context.config.api_keys)) {
      http::Response r = http::ErrorResponse(401, "missing or invalid API key",
                                             "authentication_error");
      r.headers.emplace_back("WWW-Authenticate", "Bearer");
      return responder->Send(std::move(r));
    }
    // HEAD is GET without the body (the HTTP server drops it). A 405 names the route's methods.
    const auto method_is = [&](std::string_view m) {
      if (req.method == m || (m == "GET" && req.method == "HEAD")) return true;
      http::Response r = http::ErrorResponse(405, StrCat(req.method, " is not allowed on ", path),
                                             "invalid_request_error");
      r.headers.emplace_back("Allow", m == "GET" ? "GET, HEAD" : std::string(m));
      responder->Send(std::move(r));
      return false;
    };
    if (path == "/livez") {
      if (method_is("GET")) SendProbe(*responder, Liveness(context), R"({"status":"ok"})");
    } else if (path == "/readyz" || path == "/health") {
      if (method_is("GET")) SendProbe(*responder, Readiness(context), R"({"status":"ready"})");
    } else if (path == "/version") {
      if (method_is("GET")) responder->Send(Json200(StrCat("{\"version\":", JsonQuote(version), "}")));
    } else if (path == "/v1/models") {
      if (method_is("GET")) responder->Send(Json200(ModelsBody(context)));
    } else if (path.starts_with(kModelsPrefix) && path.size() > kModelsPrefix.size()) {
      if (method_is("GET")) RetrieveModel(context, path.substr(kModelsPrefix.size()), *responder);
    } else if (path == "/metrics") {
      if (!method_is("GET")) return;
      http::Response r;
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      if (context.metrics != nullptr) {
        context.metrics->UpdateScheduler(context.engine->Stats().scheduler);
        r.body = context.metrics->Render();
      }
      responder->Send(std::move(r));
    } else if (path == "/v1/completions") {
      if (method_is("POST")) HandleCompletion(context, work, EndpointKind::kCompletion, req, responder);
    } else if (path == "/v1/chat/completions") {
      if (method_is("POST")) HandleCompletion(context, work, EndpointKind::kChat, req, responder);
    } else if (path == "/tokenize") {
      if (method_is("POST")) Tokenize(context, req, *responder);
    } else if (path == "/detokenize") {
      if (method_is("POST")) Detokenize(context, req, *responder);
    } else {
      responder->Send(http::ErrorResponse(404, StrCat("no route for ", path), "not_found_error"));
    }
  };
}

}  // namespace loom::api
