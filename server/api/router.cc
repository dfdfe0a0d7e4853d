#include "server/api/router.h"

#include <utility>

#include "engine/common/json.h"
#include "engine/common/json_writer.h"
#include "engine/common/strings.h"
#include "server/api/api_status.h"
#include "server/api/completions.h"
#include "server/http/http_server.h"

namespace loom::api {
namespace {

http::Response Json200(std::string body) {
  http::Response r;
  r.body = std::move(body);
  return r;
}

void SendStatus(http::Responder& r, const absl::Status& s) { r.Send(ErrorResponseFor(s)); }

std::string ModelsBody(const ServingContext& c) {
  JsonWriter w;
  w.BeginObject();
  w.Key("object");
  w.String("list");
  w.Key("data");
  w.BeginArray();
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
  w.EndArray();
  w.EndObject();
  return std::move(w).Take();
}

// POST /tokenize: {"prompt": "..."} or {"messages": [...]} (+ add_special_tokens).
void Tokenize(const ServingContext& c, const http::Request& req, http::Responder& r) {
  if (c.tokenizer == nullptr) return SendStatus(r, ParamError("", "this model has no tokenizer"));
  absl::StatusOr<Json> body = Json::Parse(req.body, "request body");
  if (!body.ok() || !body->IsObject()) return SendStatus(r, ParamError("", "the body must be a JSON object"));
  std::vector<int32_t> ids;
  if (body->Has("messages")) {
    CompletionParams p;
    p.kind = EndpointKind::kChat;
    p.messages_json = req.body;
    absl::StatusOr<bool> agp = body->GetBool("add_generation_prompt", true);
    if (!agp.ok()) return SendStatus(r, ParamError("add_generation_prompt", "must be a boolean"));
    p.add_generation_prompt = *agp;
    absl::StatusOr<std::vector<int32_t>> rendered = RenderChatPrompt(c, p);
    if (!rendered.ok()) return SendStatus(r, rendered.status());
    ids = std::move(*rendered);
  } else {
    absl::StatusOr<std::string> prompt = body->GetString("prompt");
    if (!prompt.ok()) return SendStatus(r, ParamError("prompt", "'prompt' must be a string"));
    absl::StatusOr<bool> special = body->GetBool("add_special_tokens", true);
    if (!special.ok()) return SendStatus(r, ParamError("add_special_tokens", "must be a boolean"));
    ids = c.tokenizer->Encode(*prompt, *special);
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
  absl::StatusOr<Json> body = Json::Parse(req.body, "request body");
  if (!body.ok() || !body->IsObject()) return SendStatus(r, ParamError("", "the body must be a JSON object"));
  std::optional<Json> tokens = body->Find("tokens");
  if (!tokens.has_value() || !tokens->IsArray()) {
    return SendStatus(r, ParamError("tokens", "'tokens' must be an array of token ids"));
  }
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tokens->size(); ++i) {
    absl::StatusOr<int64_t> id = (*tokens)[i].AsInt();
    if (!id.ok() || *id < 0 || *id >= c.model.vocab_size) {
      return SendStatus(r, ParamError("tokens", StrCat("token ids must be integers in [0, ",
                                                       c.model.vocab_size, ")")));
    }
    ids.push_back(static_cast<int32_t>(*id));
  }
  JsonWriter w;
  w.BeginObject();
  w.Key("prompt");
  w.String(c.tokenizer->Decode(ids, false));
  w.EndObject();
  r.Send(Json200(std::move(w).Take()));
}

bool IsProbe(std::string_view path) {
  return path == "/livez" || path == "/readyz" || path == "/health";
}

}  // namespace

bool AuthorizedBearer(std::string_view header, const std::vector<std::string>& keys) {
  constexpr std::string_view kPrefix = "Bearer ";
  if (header.size() < kPrefix.size() || header.substr(0, kPrefix.size()) != kPrefix) return false;
  const std::string_view token = header.substr(kPrefix.size());
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
    if (!context.config.api_keys.empty() && !IsProbe(path) &&
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
      if (method_is("GET")) responder->Send(Json200(R"({"status":"ok"})"));
    } else if (path == "/readyz" || path == "/health") {
      if (!method_is("GET")) return;
      if (context.draining.load()) {
        http::Response r = http::ErrorResponse(503, "draining", "unavailable_error");
        responder->Send(std::move(r));
      } else {
        responder->Send(Json200(R"({"status":"ready"})"));
      }
    } else if (path == "/version") {
      if (method_is("GET")) responder->Send(Json200(StrCat("{\"version\":", JsonQuote(version), "}")));
    } else if (path == "/v1/models") {
      if (method_is("GET")) responder->Send(Json200(ModelsBody(context)));
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
