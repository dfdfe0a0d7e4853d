// The HTTP/1.1 server under the OpenAI API: Boost.Beast, asynchronous, one strand per
// connection, a fixed pool of I/O threads. It parses requests within limits and hands each to
// one Handler; everything else (routing, auth, JSON) is above it.
//
// Limits: body size (413), header size (431), requests per connection (then it closes), idle
// time between requests and time to receive a request (then the connection is closed), and time
// a client may take to accept written bytes (then it is treated as gone). Errors the server
// itself produces use the OpenAI error envelope.
//
// Protocol (RFC 9110 / 9112):
// - Pipelining: requests on one connection are answered one at a time, in arrival order. While a
//   response is pending (whole or streamed) the connection keeps reading: bytes that arrive are
//   kept for the next request, up to max_pipelined_bytes (then reading pauses until the response
//   ends). Only EOF or an error on the connection means the client is gone; then the Responder's
//   cancel callback runs.
// - HEAD reaches the handler as "HEAD"; whatever it answers is sent without a body (a whole
//   response keeps the Content-Length its body would have).
// - `Expect: 100-continue` gets `100 Continue` once the header is accepted; a request refused
//   on its header alone (Content-Length over the body limit: 413) is answered without reading
//   the body. Any other expectation is a 417.
// - HTTP/1.0: keep-alive only when the request asks for it (answered with
//   `Connection: keep-alive`); a streamed response has no chunked coding but ends when the
//   server closes the connection.
// - A connection that ends after a response is closed gracefully: the server shuts its sending
//   side and drops what the client still sends for a short while, so the client reads the
//   response before the connection goes.
//
// Thread safety: Start and Stop from one owner thread; handlers run on I/O threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "server/http/http_types.h"

namespace loom::http {

struct HttpServerOptions {
  std::string host = "0.0.0.0";
  int port = 8000;  // 0 = any free port (see HttpServer::port)
  int num_threads = 2;
  int64_t max_body_bytes = int64_t{32} << 20;
  int64_t max_header_bytes = int64_t{64} << 10;
  int32_t max_requests_per_connection = 10000;
  absl::Duration idle_timeout = absl::Seconds(60);
  absl::Duration request_read_timeout = absl::Seconds(30);
  absl::Duration write_timeout = absl::Seconds(60);
  // Bytes read ahead on a connection while its response is pending (pipelined requests).
  int64_t max_pipelined_bytes = int64_t{64} << 10;
};

class HttpServer {
 public:
  // Binds, listens and starts the I/O threads. Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const HttpServerOptions& options,
                                                           Handler handler);
  ~HttpServer();  // Stop()

  // The bound port (useful with port 0).
  int port() const;
  // Stops accepting, closes every connection (cancelling pending responses) and joins the
  // threads. Idempotent.
  void Stop();

  class Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The OpenAI error envelope: {"error":{"message","type","param","code"}}; `param` null when empty.
std::string ErrorBody(std::string_view message, std::string_view type, std::string_view param,
                      int code);
Response ErrorResponse(int status, std::string_view message, std::string_view type,
                       std::string_view param = "");

}  // namespace loom::http
