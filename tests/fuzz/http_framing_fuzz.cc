// libFuzzer target for the HTTP/1.1 framing around Beast: the input is written as raw bytes to a
// real HttpServer on a loopback port (started once, with small limits), the client half-closes,
// and the answer is read to the end. Any request line, header, chunked body, pipelined sequence,
// `Expect`, HEAD or HTTP/1.0 form must be answered or refused without crashing the server (ASan
// and UBSan watch its threads too), and the server must still answer a plain request afterwards.
//
// The handler answers a whole response, or, for paths starting with /stream, a streamed one
// written from another thread, so pending responses meet pipelined input.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <thread>

#include "server/http/http_server.h"

namespace {

using loom::http::HttpServer;
using loom::http::HttpServerOptions;
using loom::http::Request;
using loom::http::Responder;
using loom::http::Response;

void Answer(const Request& request, std::shared_ptr<Responder> responder) {
  if (request.path.rfind("/stream", 0) == 0) {
    responder->StartStream(200, "text/event-stream", {});
    std::thread([responder, n = request.body.size()] {
      for (size_t i = 0; i < 3 + n % 3; ++i) responder->Write("data: x\n\n");
      responder->End();
    }).detach();
    return;
  }
  Response response;
  response.body = "{\"method\":\"" + std::string(request.method.size() < 16 ? request.method : "") +
                  "\",\"bytes\":" + std::to_string(request.body.size()) + "}";
  responder->Send(std::move(response));
}

HttpServer* Server() {
  static HttpServer* const server = [] {
    HttpServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.num_threads = 2;
    options.max_body_bytes = 4096;
    options.max_header_bytes = 2048;
    options.max_requests_per_connection = 16;
    options.idle_timeout = absl::Seconds(2);
    options.request_read_timeout = absl::Seconds(2);
    options.write_timeout = absl::Seconds(2);
    options.max_pipelined_bytes = 1024;
    auto started = HttpServer::Start(options, Answer);
    if (!started.ok()) std::abort();
    return started->release();  // lives for the whole run
  }();
  return server;
}

// Writes `bytes`, half-closes, reads until the server closes (or 5 s pass); returns what came.
std::string Exchange(int port, std::string_view bytes) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) std::abort();
  timeval timeout{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // libFuzzer's timer signal can interrupt any of these calls (EINTR): an interrupted connect
  // goes on in the background, so wait for its outcome; interrupted sends and reads are retried.
  int connected = connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  if (connected != 0 && errno == EINTR) {
    pollfd ready{fd, POLLOUT, 0};
    int polled;
    do {
      polled = poll(&ready, 1, 5000);
    } while (polled < 0 && errno == EINTR);
    int error = polled == 1 ? 0 : ETIMEDOUT;
    socklen_t length = sizeof(error);
    if (polled == 1) getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
    connected = error == 0 ? 0 : -1;
    errno = error;
  }
  if (connected != 0) {
    std::fprintf(stderr, "connect to the server failed: %s\n", std::strerror(errno));
    std::abort();
  }
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // the server may refuse early and close; that is an answer too
    sent += static_cast<size_t>(n);
  }
  shutdown(fd, SHUT_WR);
  std::string answer;
  char buffer[4096];
  while (true) {
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    answer.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return answer;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const int port = Server()->port();
  (void)Exchange(port, std::string_view(reinterpret_cast<const char*>(data), size));
  // The server still serves.
  static int64_t runs = 0;
  if (++runs % 64 == 0) {
    const std::string answer =
        Exchange(port, "GET /ping HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    if (answer.rfind("HTTP/1.1 200", 0) != 0) {
      std::fprintf(stderr, "the server no longer answers a plain GET; it said: '%s'\n",
                   answer.substr(0, 300).c_str());
      std::abort();
    }
  }
  return 0;
}
