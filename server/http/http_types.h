// Plain HTTP request/response types between the Beast server (http_server.cc, the only file
// that includes Boost) and the route handlers.
//
// Handlers answer through a Responder, from any thread and at any time: once with Send (a whole
// response), or with StartStream, any number of Write calls and End (a chunked body such as
// server-sent events). Nothing a handler calls blocks on the client: writes are queued on the
// connection and flushed by its own thread. When the client goes away, the cancel callback runs
// once and later calls are ignored. Calls after Send or End are ignored. A HEAD request is
// answered like GET: the server drops the body.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace loom::http {

struct Request {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target without its query string
  std::string query;   // after '?', undecoded
  // Header names lower-cased, in arrival order.
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  std::string remote;  // peer address, for logs

  // The first header named `name` (lower-case), or empty.
  std::string_view Header(std::string_view name) const;
};

struct Response {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

class Responder {
 public:
  virtual ~Responder() = default;
  virtual void Send(Response response) = 0;
  // Starts a chunked response with `status` and these headers (content type included).
  virtual void StartStream(int status, std::string content_type,
                           std::vector<std::pair<std::string, std::string>> headers) = 0;
  virtual void Write(std::string chunk) = 0;
  virtual void End() = 0;
  // Runs once, on an I/O thread, when the client disconnects before the response ended. Set it
  // before starting work that should stop with the client. Must not block.
  virtual void OnCancel(std::function<void()> cancel) = 0;
  // True once the client is gone.
  virtual bool cancelled() const = 0;
};

using Handler = std::function<void(const Request&, std::shared_ptr<Responder>)>;

}  // namespace loom::http
