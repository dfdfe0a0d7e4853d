#include "server/http/http_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace loom::http {
namespace {

// A blocking loopback client: sends raw bytes, reads until the server closes or `until` shows.
class RawClient {
 public:
  explicit RawClient(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~RawClient() { Close(); }
  bool connected() const { return connected_; }
  void Send(const std::string& data) {
    size_t off = 0;
    while (off < data.size()) {
      const ssize_t n = ::send(fd_, data.data() + off, data.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return;
      off += static_cast<size_t>(n);
    }
  }
  // Reads until `until` appears in what was read (or EOF / timeout).
  std::string ReadUntil(const std::string& until) {
    char buf[4096];
    while (received_.find(until) == std::string::npos) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) break;
      received_.append(buf, static_cast<size_t>(n));
    }
    std::string out = received_;
    received_.clear();
    return out;
  }
  bool ClosedByPeer() {
    char c;
    return ::recv(fd_, &c, 1, 0) == 0;
  }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
  std::string received_;
};

std::string Get(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + extra + "\r\n";
}

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpServerOptions options, Handler handler) {
    options.host = "127.0.0.1";
    options.port = 0;
    auto server = HttpServer::Start(options, std::move(handler));
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
  }
  std::unique_ptr<HttpServer> server_;
};

Handler Echo() {
  return [](const Request& req, std::shared_ptr<Responder> r) {
    Response res;
    res.content_type = "text/plain";
    res.body = req.method + " " + req.path + " ?" + req.query + " " + std::string(req.Header("x-k")) +
               " " + req.body;
    r->Send(std::move(res));
  };
}

TEST_F(HttpServerTest, AnswersAndKeepsTheConnectionAlive) {
  StartServer({}, Echo());
  RawClient c(server_->port());
  ASSERT_TRUE(c.connected());
  c.Send(Get("/a?b=1", "X-K: v\r\n"));
  std::string first = c.ReadUntil("v ");
  EXPECT_NE(first.find("HTTP/1.1 200 OK"), std::string::npos);
  EXPECT_NE(first.find("GET /a ?b=1 v "), std::string::npos);
  c.Send("POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_NE(c.ReadUntil("hello").find("POST /p ?  hello"), std::string::npos);
}

TEST_F(HttpServerTest, OversizedBodyIs413WithTheErrorEnvelope) {
  HttpServerOptions options;
  options.max_body_bytes = 10;
  StartServer(options, Echo());
  RawClient c(server_->port());
  c.Send("POST /p HTTP/1.1\r\nHost: x\r\nContent-Length: 11\r\n\r\nhello world");
  const std::string out = c.ReadUntil("}}");
  EXPECT_NE(out.find("HTTP/1.1 413"), std::string::npos);
  EXPECT_NE(out.find(R"("error":{"message":"the request body exceeds 10 bytes")"),
            std::string::npos);
  EXPECT_NE(out.find(R"("code":413)"), std::string::npos);
  // The server keeps serving others.
  RawClient d(server_->port());
  d.Send(Get("/ok"));
  EXPECT_NE(d.ReadUntil("GET /ok").find("200 OK"), std::string::npos);
}

TEST_F(HttpServerTest, OversizedHeadersAre431AndGarbageIs400) {
  HttpServerOptions options;
  options.max_header_bytes = 256;
  StartServer(options, Echo());
  RawClient c(server_->port());
  c.Send(Get("/", "X-Big: " + std::string(1000, 'a') + "\r\n"));
  EXPECT_NE(c.ReadUntil("}}").find("HTTP/1.1 431"), std::string::npos);
  RawClient d(server_->port());
  d.Send("NOT HTTP AT ALL\r\n\r\n");
  EXPECT_NE(d.ReadUntil("}}").find("HTTP/1.1 400"), std::string::npos);
}

TEST_F(HttpServerTest, ClosesAfterTheRequestLimit) {
  HttpServerOptions options;
  options.max_requests_per_connection = 2;
  StartServer(options, Echo());
  RawClient c(server_->port());
  c.Send(Get("/1"));
  EXPECT_EQ(c.ReadUntil("GET /1").find("Connection: close"), std::string::npos);
  c.Send(Get("/2"));
  const std::string second = c.ReadUntil("GET /2");
  EXPECT_NE(second.find("Connection: close"), std::string::npos);
  EXPECT_TRUE(c.ClosedByPeer());
}

TEST_F(HttpServerTest, IdleConnectionsAreClosed) {
  HttpServerOptions options;
  options.request_read_timeout = absl::Milliseconds(200);
  StartServer(options, Echo());
  RawClient c(server_->port());
  c.Send("GET / HTTP/1.1\r\nHost");  // never finished
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(c.ClosedByPeer());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

TEST_F(HttpServerTest, StreamsChunksFromAnotherThread) {
  StartServer({}, [](const Request&, std::shared_ptr<Responder> r) {
    std::thread([r] {
      r->StartStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
      for (int i = 0; i < 3; ++i) {
        r->Write("data: " + std::to_string(i) + "\n\n");
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      r->Write("data: [DONE]\n\n");
      r->End();
    }).detach();
  });
  RawClient c(server_->port());
  c.Send(Get("/s"));
  const std::string out = c.ReadUntil("0\r\n\r\n");
  EXPECT_NE(out.find("Transfer-Encoding: chunked"), std::string::npos);
  EXPECT_NE(out.find("text/event-stream"), std::string::npos);
  EXPECT_NE(out.find("data: 2\n\n"), std::string::npos);
  EXPECT_NE(out.find("data: [DONE]\n\n"), std::string::npos);
  // Keep-alive after a streamed response.
  c.Send(Get("/s"));
  EXPECT_NE(c.ReadUntil("0\r\n\r\n").find("data: [DONE]"), std::string::npos);
}

TEST_F(HttpServerTest, ADisconnectWhileWaitingCancelsTheResponse) {
  std::atomic<bool> cancelled{false};
  std::shared_ptr<Responder> held;
  std::atomic<bool> have{false};
  StartServer({}, [&](const Request&, std::shared_ptr<Responder> r) {
    r->OnCancel([&] { cancelled = true; });
    held = r;
    have = true;
  });
  {
    RawClient c(server_->port());
    c.Send(Get("/slow"));
    for (int i = 0; i < 200 && !have; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }  // the client goes away without an answer
  for (int i = 0; i < 400 && !cancelled; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(cancelled.load());
  EXPECT_TRUE(held->cancelled());
  held->Send(Response{});  // ignored, no crash
}

TEST_F(HttpServerTest, ADisconnectMidStreamCancels) {
  std::atomic<bool> cancelled{false};
  std::atomic<bool> stop{false};
  std::thread producer;
  StartServer({}, [&](const Request&, std::shared_ptr<Responder> r) {
    r->OnCancel([&] { cancelled = true; });
    r->StartStream(200, "text/event-stream", {});
    producer = std::thread([r, &stop] {
      while (!stop && !r->cancelled()) {
        r->Write(std::string(1024, 'x'));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  });
  {
    RawClient c(server_->port());
    c.Send(Get("/s"));
    c.ReadUntil("xxxx");
  }
  for (int i = 0; i < 1000 && !cancelled; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(cancelled.load());
  stop = true;
  producer.join();
}

TEST(HttpServerStartTest, ABusyPortIsAClearError) {
  HttpServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  auto first = HttpServer::Start(options, Echo());
  ASSERT_TRUE(first.ok());
  options.port = (*first)->port();
  auto second = HttpServer::Start(options, Echo());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  options.host = "not an address";
  EXPECT_EQ(HttpServer::Start(options, Echo()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom::http
