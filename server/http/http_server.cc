// Boost.Beast implementation of HttpServer. The only translation unit that includes Boost, and
// the only one of the server built with exceptions (Beast uses them internally); none escape it:
// every Asio/Beast call here uses the error_code overloads.
#include "server/http/http_server.h"

#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cctype>
#include <optional>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "engine/common/json_writer.h"
#include "engine/common/logging.h"
#include "engine/common/strings.h"

namespace loom::http {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;

std::string_view Request::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (k == name) return v;
  }
  return {};
}

std::string ErrorBody(std::string_view message, std::string_view type, std::string_view param,
                      int code) {
  JsonWriter w;
  w.BeginObject();
  w.Key("error");
  w.BeginObject();
  w.Key("message");
  w.String(message);
  w.Key("type");
  w.String(type);
  w.Key("param");
  if (param.empty()) {
    w.Null();
  } else {
    w.String(param);
  }
  w.Key("code");
  w.Int(code);
  w.EndObject();
  w.EndObject();
  return std::move(w).Take();
}

Response ErrorResponse(int status, std::string_view message, std::string_view type,
                       std::string_view param) {
  Response r;
  r.status = status;
  r.body = ErrorBody(message, type, param, status);
  return r;
}

namespace {

std::chrono::steady_clock::duration ToChrono(absl::Duration d) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      absl::ToChronoNanoseconds(d));
}

class Session;

// What a handler writes, queued for the session's strand.
struct Outgoing {
  enum class Kind { kWhole, kHeader, kChunk, kLast } kind;
  Response response;  // kWhole, kHeader (status, content type, headers)
  std::string data;   // kChunk
};

class ResponderImpl : public Responder {
 public:
  explicit ResponderImpl(std::shared_ptr<Session> session) : session_(std::move(session)) {}
  void Send(Response response) override;
  void StartStream(int status, std::string content_type,
                   std::vector<std::pair<std::string, std::string>> headers) override;
  void Write(std::string chunk) override;
  void End() override;
  void OnCancel(std::function<void()> cancel) override;
  bool cancelled() const override { return cancelled_.load(); }

  // Session side.
  void Cancel();

 private:
  void Enqueue(Outgoing out);

  std::weak_ptr<Session> session_;
  std::mutex mu_;
  std::function<void()> cancel_;
  bool finished_ = false;  // Send or End called
  std::atomic<bool> cancelled_{false};
};

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const HttpServerOptions& options, const Handler& handler)
      : stream_(std::move(socket)), options_(options), handler_(handler) {}

  void Start() {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->ReadRequest(); });
  }

  // Any thread: queue output and make sure the strand flushes it.
  void Post(Outgoing out) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(out));
    }
    asio::post(stream_.get_executor(), [self = shared_from_this()] { self->Flush(); });
  }

  void Close() {
    asio::post(stream_.get_executor(), [self = shared_from_this()] { self->Shutdown(); });
  }

 private:
  void ReadRequest() {
    parser_.emplace();
    parser_->body_limit(static_cast<uint64_t>(options_.max_body_bytes));
    parser_->header_limit(static_cast<uint32_t>(options_.max_header_bytes));
    stream_.expires_after(ToChrono(num_requests_ == 0 ? options_.request_read_timeout
                                                      : options_.idle_timeout));
    bhttp::async_read(stream_, buffer_, *parser_,
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        self->OnRead(ec);
                      });
  }

  void OnRead(beast::error_code ec) {
    if (ec == bhttp::error::end_of_stream || ec == asio::error::eof) return Shutdown();
    // A slow sender or an idle keep-alive connection: Beast has already closed the socket.
    if (ec == beast::error::timeout) return Shutdown();
    if (ec == bhttp::error::body_limit) {
      return Reject(413, StrCat("the request body exceeds ", options_.max_body_bytes, " bytes"));
    }
    if (ec == bhttp::error::header_limit) {
      return Reject(431, StrCat("the request headers exceed ", options_.max_header_bytes, " bytes"));
    }
    if (ec) {
      // Beast parses a header only once it is complete; bytes of a partial one sit in buffer_.
      if (parser_->got_some() || buffer_.size() > 0) {
        return Reject(400, StrCat("malformed HTTP request: ", ec.message()));
      }
      return Shutdown();
    }
    ++num_requests_;
    const auto& msg = parser_->get();
    keep_alive_ = msg.keep_alive() && num_requests_ < options_.max_requests_per_connection;
    Request req;
    req.method = std::string(msg.method_string());
    const std::string_view target(msg.target().data(), msg.target().size());
    const size_t q = target.find('?');
    req.path = std::string(target.substr(0, q));
    if (q != std::string_view::npos) req.query = std::string(target.substr(q + 1));
    for (const auto& field : msg) {
      std::string name(field.name_string());
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      req.headers.emplace_back(std::move(name), std::string(field.value()));
    }
    req.body = std::move(parser_->get().body());
    beast::error_code ignored;
    const tcp::endpoint peer = stream_.socket().remote_endpoint(ignored);
    req.remote = ignored ? "" : StrCat(peer.address().to_string(), ":", peer.port());
    responder_ = std::make_shared<ResponderImpl>(shared_from_this());
    stream_.expires_never();
    WatchForDisconnect();
    handler_(req, responder_);
  }

  // While a response is pending nothing is read; a readable socket then means either a
  // pipelined request (left in the socket for the next read) or the client closing.
  void WatchForDisconnect() {
    std::weak_ptr<ResponderImpl> watched = responder_;
    stream_.socket().async_wait(
        tcp::socket::wait_read, [self = shared_from_this(), watched](beast::error_code ec) {
          if (ec || self->closed_ || self->responder_ == nullptr ||
              self->responder_ != watched.lock()) {
            return;  // cancelled, or the response it watched is over
          }
          char byte;
          const ssize_t n = ::recv(self->stream_.socket().native_handle(), &byte, 1,
                                   MSG_PEEK | MSG_DONTWAIT);
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            self->Shutdown();
          } else if (n < 0) {
            self->WatchForDisconnect();  // spurious wake-up
          }
          // n > 0: a pipelined request waits in the socket for the next read.
        });
  }

  void Reject(int status, std::string message) {
    keep_alive_ = false;
    LOOM_LOG(kDebug, "http: ", status, " ", message);
    Response r = ErrorResponse(status, message, "invalid_request_error");
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(Outgoing{Outgoing::Kind::kWhole, std::move(r), {}});
    asio::post(stream_.get_executor(), [self = shared_from_this()] { self->Flush(); });
  }

  void Flush() {
    if (writing_ || closed_) return;
    Outgoing out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty()) return;
      out = std::move(queue_.front());
      queue_.pop_front();
    }
    writing_ = true;
    stream_.expires_after(ToChrono(options_.write_timeout));
    auto done = [self = shared_from_this(), kind = out.kind](beast::error_code ec, size_t) {
      self->OnWritten(ec, kind);
    };
    switch (out.kind) {
      case Outgoing::Kind::kWhole: {
        auto res = std::make_shared<bhttp::response<bhttp::string_body>>(
            static_cast<bhttp::status>(out.response.status), 11);
        FillHeaders(*res, out.response);
        res->body() = std::move(out.response.body);
        res->keep_alive(keep_alive_);
        res->prepare_payload();
        bhttp::async_write(stream_, *res, [res, done](beast::error_code ec, size_t n) {
          done(ec, n);
        });
        break;
      }
      case Outgoing::Kind::kHeader: {
        auto res = std::make_shared<bhttp::response<bhttp::empty_body>>(
            static_cast<bhttp::status>(out.response.status), 11);
        FillHeaders(*res, out.response);
        res->chunked(true);
        res->keep_alive(keep_alive_);
        auto sr = std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(*res);
        bhttp::async_write_header(stream_, *sr, [res, sr, done](beast::error_code ec, size_t n) {
          done(ec, n);
        });
        break;
      }
      case Outgoing::Kind::kChunk: {
        auto data = std::make_shared<std::string>(std::move(out.data));
        asio::async_write(stream_, bhttp::make_chunk(asio::buffer(*data)),
                          [data, done](beast::error_code ec, size_t n) { done(ec, n); });
        break;
      }
      case Outgoing::Kind::kLast:
        asio::async_write(stream_, bhttp::make_chunk_last(), done);
        break;
    }
  }

  template <typename Message>
  static void FillHeaders(Message& res, const Response& r) {
    res.set(bhttp::field::server, "loom");
    res.set(bhttp::field::content_type, r.content_type);
    for (const auto& [k, v] : r.headers) res.set(k, v);
  }

  void OnWritten(beast::error_code ec, Outgoing::Kind kind) {
    writing_ = false;
    stream_.expires_never();
    if (ec) return Shutdown();
    if (kind == Outgoing::Kind::kWhole || kind == Outgoing::Kind::kLast) {
      responder_.reset();
      if (!keep_alive_) return Shutdown();
      beast::error_code ignored;
      stream_.socket().cancel(ignored);  // stop watching for a disconnect
      return ReadRequest();
    }
    Flush();
  }

  // Closes the connection; a response still pending is cancelled (the client is gone).
  void Shutdown() {
    if (closed_) return;
    closed_ = true;
    if (responder_ != nullptr) {
      responder_->Cancel();
      responder_.reset();
    }
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
  }

  beast::tcp_stream stream_;
  const HttpServerOptions& options_;
  const Handler& handler_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::shared_ptr<ResponderImpl> responder_;  // of the request being answered
  int32_t num_requests_ = 0;
  bool keep_alive_ = true;
  bool writing_ = false;
  bool closed_ = false;
  std::mutex mu_;
  std::deque<Outgoing> queue_;
};

void ResponderImpl::Enqueue(Outgoing out) {
  if (cancelled_.load()) return;
  if (std::shared_ptr<Session> s = session_.lock()) s->Post(std::move(out));
}

void ResponderImpl::Send(Response response) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
  }
  Enqueue(Outgoing{Outgoing::Kind::kWhole, std::move(response), {}});
}

void ResponderImpl::StartStream(int status, std::string content_type,
                                std::vector<std::pair<std::string, std::string>> headers) {
  Response head;
  head.status = status;
  head.content_type = std::move(content_type);
  head.headers = std::move(headers);
  Enqueue(Outgoing{Outgoing::Kind::kHeader, std::move(head), {}});
}

void ResponderImpl::Write(std::string chunk) {
  if (chunk.empty()) return;  // an empty chunk would end the body
  Enqueue(Outgoing{Outgoing::Kind::kChunk, {}, std::move(chunk)});
}

void ResponderImpl::End() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
  }
  Enqueue(Outgoing{Outgoing::Kind::kLast, {}, {}});
}

void ResponderImpl::OnCancel(std::function<void()> cancel) {
  bool run_now = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_.load()) {
      run_now = true;
    } else {
      cancel_ = std::move(cancel);
    }
  }
  if (run_now && cancel) cancel();
}

void ResponderImpl::Cancel() {
  std::function<void()> cancel;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cancelled_.exchange(true) || finished_) return;
    cancel = std::move(cancel_);
  }
  if (cancel) cancel();
}

}  // namespace

class HttpServer::Impl {
 public:
  Impl(const HttpServerOptions& options, Handler handler)
      : options_(options), handler_(std::move(handler)), acceptor_(io_) {}

  absl::Status Listen() {
    beast::error_code ec;
    const asio::ip::address address = asio::ip::make_address(options_.host, ec);
    if (ec) return absl::InvalidArgumentError(StrCat("bad listen address '", options_.host, "'"));
    const tcp::endpoint endpoint(address, static_cast<uint16_t>(options_.port));
    acceptor_.open(endpoint.protocol(), ec);
    if (!ec) acceptor_.set_option(asio::socket_base::reuse_address(true), ec);
    if (!ec) acceptor_.bind(endpoint, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return absl::UnavailableError(
          StrCat("cannot listen on ", options_.host, ":", options_.port, ": ", ec.message()));
    }
    port_ = acceptor_.local_endpoint().port();
    Accept();
    for (int i = 0; i < std::max(options_.num_threads, 1); ++i) {
      threads_.emplace_back([this] { io_.run(); });
    }
    return absl::OkStatus();
  }

  void Stop() {
    if (stopped_.exchange(true)) return;
    asio::post(io_, [this] {
      beast::error_code ignored;
      acceptor_.close(ignored);
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& weak : sessions_) {
        if (auto s = weak.lock()) s->Close();
      }
    });
    // With the acceptor and every socket closed, the pending operations complete (aborted) and
    // the I/O threads return on their own.
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

  int port() const { return port_; }

 private:
  void Accept() {
    acceptor_.async_accept(asio::make_strand(io_), [this](beast::error_code ec, tcp::socket s) {
      if (!acceptor_.is_open() || ec == asio::error::operation_aborted) return;  // stopping
      if (ec) {
        LOOM_LOG(kWarning, "accept: ", ec.message());
      } else {
        auto session = std::make_shared<Session>(std::move(s), options_, handler_);
        {
          std::lock_guard<std::mutex> lock(mu_);
          std::erase_if(sessions_, [](const std::weak_ptr<Session>& w) { return w.expired(); });
          sessions_.push_back(session);
        }
        session->Start();
      }
      Accept();
    });
  }

  HttpServerOptions options_;
  Handler handler_;
  asio::io_context io_;
  tcp::acceptor acceptor_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::vector<std::weak_ptr<Session>> sessions_;
  std::atomic<bool> stopped_{false};
  int port_ = 0;
};

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const HttpServerOptions& options,
                                                              Handler handler) {
  auto impl = std::make_unique<Impl>(options, std::move(handler));
  absl::Status status = impl->Listen();
  if (!status.ok()) return status;
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpServer::~HttpServer() { Stop(); }
int HttpServer::port() const { return impl_->port(); }
void HttpServer::Stop() { impl_->Stop(); }

}  // namespace loom::http
