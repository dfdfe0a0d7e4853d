// Boost.Beast implementation of HttpServer. The only translation unit that includes Boost, and
// the only one of the server built with exceptions (Beast uses them internally); none escape it:
// every Asio/Beast call here uses the error_code overloads (the one timer's expires_after, which
// has none, cannot fail).
#include "server/http/http_server.h"

#include <poll.h>
#include <sys/socket.h>

#include <atomic>
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
  // Send or End was called: anything later would land in the connection's next response.
  bool finished();

  std::weak_ptr<Session> session_;
  std::mutex mu_;
  std::function<void()> cancel_;
  bool finished_ = false;  // Send or End called
  std::atomic<bool> cancelled_{false};
};

// One connection. Everything below runs on the connection's strand, except Post.
//
// A request is read (header first, then, after any `100 Continue`, its body) and handed to the
// handler; until its response has been written the session keeps reading ahead into `buffer_`,
// up to max_pipelined_bytes, so that a client that goes away (EOF or error) is noticed at once
// while pipelined bytes are kept, not mistaken for a disconnect. Beyond that bound reading stops
// (TCP pushes back) and the socket is polled for the peer's shutdown instead. Once the response
// is written, the next request is parsed from `buffer_` first: pipelined requests are answered
// one at a time, in order.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, const HttpServerOptions& options, const Handler& handler)
      : stream_(std::move(socket)),
        peer_check_(stream_.get_executor()),
        options_(options),
        handler_(handler) {}

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
  // ---- Reading a request.

  void ReadRequest() {
    parser_.emplace();
    parser_->body_limit(static_cast<uint64_t>(options_.max_body_bytes));
    parser_->header_limit(static_cast<uint32_t>(options_.max_header_bytes));
    // The whole request (header, any 100 Continue, body) must arrive within this time.
    stream_.expires_after(ToChrono(num_requests_ == 0 ? options_.request_read_timeout
                                                      : options_.idle_timeout));
    bhttp::async_read_header(stream_, buffer_, *parser_,
                             [self = shared_from_this()](beast::error_code ec, size_t) {
                               self->OnHeader(ec);
                             });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) return OnReadError(ec);
    const auto& msg = parser_->get();
    const std::string_view expect = AsView(msg[bhttp::field::expect]);
    // RFC 9110 §10.1.1: an HTTP/1.0 client's Expect is ignored; an unknown expectation is a 417.
    if (msg.version() >= 11 && !expect.empty()) {
      if (!beast::iequals(msg[bhttp::field::expect], "100-continue")) {
        return Reject(417, StrCat("unsupported expectation '", expect, "'"));
      }
      // The header was accepted (a Content-Length over the limit was already a 413): ask for
      // the body, unless there is none or some of it is here already.
      if (!parser_->is_done() && buffer_.size() == 0) {
        return asio::async_write(stream_, asio::buffer(kContinue.data(), kContinue.size()),
                                 [self = shared_from_this()](beast::error_code ec, size_t) {
                                   if (ec) return self->Shutdown();
                                   self->ReadBody();
                                 });
      }
    }
    ReadBody();
  }

  void ReadBody() {
    if (parser_->is_done()) return Dispatch();
    bhttp::async_read(stream_, buffer_, *parser_,
                      [self = shared_from_this()](beast::error_code ec, size_t) {
                        if (ec) return self->OnReadError(ec);
                        self->Dispatch();
                      });
  }

  void OnReadError(beast::error_code ec) {
    if (ec == bhttp::error::end_of_stream || ec == asio::error::eof) return Shutdown();
    // A slow sender or an idle keep-alive connection: Beast has already closed the socket.
    if (ec == beast::error::timeout) return Shutdown();
    if (ec == bhttp::error::body_limit) {
      return Reject(413, StrCat("the request body exceeds ", options_.max_body_bytes, " bytes"));
    }
    if (ec == bhttp::error::header_limit) {
      return Reject(431, StrCat("the request headers exceed ", options_.max_header_bytes, " bytes"));
    }
    // Beast parses a header only once it is complete; bytes of a partial one sit in buffer_.
    if (parser_->got_some() || buffer_.size() > 0) {
      return Reject(400, StrCat("malformed HTTP request: ", ec.message()));
    }
    Shutdown();
  }

  // Hands the parsed request to the handler and reads ahead while it is answered.
  void Dispatch() {
    ++num_requests_;
    const auto& msg = parser_->get();
    keep_alive_ = msg.keep_alive() && num_requests_ < options_.max_requests_per_connection;
    head_ = msg.method() == bhttp::verb::head;
    http10_ = msg.version() < 11;
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
    parser_.reset();
    beast::error_code ignored;
    const tcp::endpoint peer = stream_.socket().remote_endpoint(ignored);
    req.remote = ignored ? "" : StrCat(peer.address().to_string(), ":", peer.port());
    responder_ = std::make_shared<ResponderImpl>(shared_from_this());
    response_done_ = false;
    stream_.expires_never();
    ReadAhead();
    handler_(req, responder_);
  }

  // ---- While a response is pending.

  void ReadAhead() {
    if (closed_) return;
    const size_t limit = static_cast<size_t>(std::max<int64_t>(options_.max_pipelined_bytes, 1));
    if (buffer_.size() >= limit) return WatchPausedPeer(++peer_check_id_);
    reading_ahead_ = true;
    stream_.async_read_some(buffer_.prepare(std::min<size_t>(limit - buffer_.size(), 16384)),
                            [self = shared_from_this()](beast::error_code ec, size_t n) {
                              self->OnReadAhead(ec, n);
                            });
  }

  void OnReadAhead(beast::error_code ec, size_t n) {
    reading_ahead_ = false;
    buffer_.commit(n);
    if (closed_) return;
    if (response_done_) return AfterResponse();  // this read was cancelled, or raced the end
    if (ec) {
      // EOF with a whole response already queued or being written: the client may only have
      // shut its sending side (a half-close) and still read, so that finished response goes
      // out, then the connection closes. Otherwise (nothing ready yet, or a stream) EOF or an
      // error while the response is pending means the client is gone.
      if (ec == asio::error::eof && WholeResponseReady()) {
        keep_alive_ = false;
        return;
      }
      return Shutdown();
    }
    ReadAhead();
  }

  bool WholeResponseReady() {
    if (writing_) return writing_kind_ == Outgoing::Kind::kWhole;
    std::lock_guard<std::mutex> lock(mu_);
    return !queue_.empty() && queue_.front().kind == Outgoing::Kind::kWhole;
  }

  // Reading has stopped at the pipelining bound; poll for the peer's shutdown (what a read
  // would show as EOF behind the buffered bytes) or a reset.
  void WatchPausedPeer(uint64_t id) {
    peer_check_.expires_after(kPausedPeerCheck);
    peer_check_.async_wait([self = shared_from_this(), id](beast::error_code ec) {
      if (ec || self->closed_ || self->response_done_ || id != self->peer_check_id_) return;
      pollfd p{self->stream_.socket().native_handle(), POLLRDHUP, 0};
      if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
        return self->Shutdown();
      }
      self->WatchPausedPeer(id);
    });
  }

  // ---- Writing the response.

  void Reject(int status, std::string message) {
    keep_alive_ = false;
    head_ = false;
    http10_ = false;
    response_done_ = false;
    LOOM_LOG(kDebug, "http: ", status, " ", message);
    Response r = ErrorResponse(status, message, "invalid_request_error");
    Post(Outgoing{Outgoing::Kind::kWhole, std::move(r), {}});
  }

  void Flush() {
    if (writing_ || closed_) return;
    Outgoing out;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // A HEAD response has no body: its chunks are dropped.
      while (!queue_.empty() && head_ && queue_.front().kind == Outgoing::Kind::kChunk) {
        queue_.pop_front();
      }
      if (queue_.empty()) return;
      out = std::move(queue_.front());
      queue_.pop_front();
    }
    writing_ = true;
    writing_kind_ = out.kind;
    stream_.expires_after(ToChrono(options_.write_timeout));
    auto done = [self = shared_from_this(), kind = out.kind](beast::error_code ec, size_t) {
      self->OnWritten(ec, kind);
    };
    switch (out.kind) {
      case Outgoing::Kind::kWhole: {
        auto res = std::make_shared<bhttp::response<bhttp::string_body>>(
            static_cast<bhttp::status>(out.response.status), 11);
        res->body() = std::move(out.response.body);
        res->prepare_payload();  // Content-Length: for HEAD, what GET would send
        FillHeaders(*res, out.response);
        auto sr = std::make_shared<bhttp::response_serializer<bhttp::string_body>>(*res);
        if (head_) {
          bhttp::async_write_header(stream_, *sr, [res, sr, done](beast::error_code ec, size_t n) {
            done(ec, n);
          });
        } else {
          bhttp::async_write(stream_, *sr, [res, sr, done](beast::error_code ec, size_t n) {
            done(ec, n);
          });
        }
        break;
      }
      case Outgoing::Kind::kHeader: {
        auto res = std::make_shared<bhttp::response<bhttp::empty_body>>(
            static_cast<bhttp::status>(out.response.status), 11);
        // HTTP/1.0 has no chunked coding: the body then ends when the connection closes.
        if (http10_) {
          keep_alive_ = false;
        } else {
          res->chunked(true);
        }
        FillHeaders(*res, out.response);
        auto sr = std::make_shared<bhttp::response_serializer<bhttp::empty_body>>(*res);
        bhttp::async_write_header(stream_, *sr, [res, sr, done](beast::error_code ec, size_t n) {
          done(ec, n);
        });
        break;
      }
      case Outgoing::Kind::kChunk: {
        auto data = std::make_shared<std::string>(std::move(out.data));
        if (http10_) {
          asio::async_write(stream_, asio::buffer(*data),
                            [data, done](beast::error_code ec, size_t n) { done(ec, n); });
        } else {
          asio::async_write(stream_, bhttp::make_chunk(asio::buffer(*data)),
                            [data, done](beast::error_code ec, size_t n) { done(ec, n); });
        }
        break;
      }
      case Outgoing::Kind::kLast:
        if (http10_ || head_) {
          asio::post(stream_.get_executor(), [done] { done({}, 0); });  // nothing to write
        } else {
          asio::async_write(stream_, bhttp::make_chunk_last(), done);
        }
        break;
    }
  }

  // Server, content type, the handler's headers, then the connection's fate.
  template <typename Message>
  void FillHeaders(Message& res, const Response& r) const {
    res.set(bhttp::field::server, "loom");
    res.set(bhttp::field::content_type, r.content_type);
    for (const auto& [k, v] : r.headers) res.set(k, v);
    res.keep_alive(keep_alive_);
    // An HTTP/1.0 client keeps the connection only when told so (RFC 9112 §9.3).
    if (http10_ && keep_alive_) res.set(bhttp::field::connection, "keep-alive");
  }

  void OnWritten(beast::error_code ec, Outgoing::Kind kind) {
    writing_ = false;
    stream_.expires_never();  // the write timer only, when a read is pending
    if (ec) return Shutdown();
    if (kind == Outgoing::Kind::kWhole || kind == Outgoing::Kind::kLast) {
      responder_.reset();
      response_done_ = true;
      ++peer_check_id_;  // a peer check still waiting ends at its next tick
      // A pending read-ahead is stopped first; its handler then carries on.
      beast::error_code ignored;
      if (reading_ahead_) return stream_.socket().cancel(ignored);
      return AfterResponse();
    }
    Flush();
  }

  // The response was written and no read is pending: the next request, or a close.
  void AfterResponse() {
    if (keep_alive_) return ReadRequest();
    Linger();
  }

  // Closes after a final response without resetting it away: the send side is shut first, then
  // whatever the client still sends (a refused body, pipelined requests) is read and dropped
  // until it closes too, for a bounded time and number of bytes. Closing a socket with unread
  // bytes would send RST, and the client could lose the response it has not read yet.
  void Linger() {
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    stream_.expires_after(kLingerTime);
    buffer_.clear();
    DrainUntilClosed(0);
  }

  void DrainUntilClosed(size_t num_drained) {
    if (closed_) return;
    if (num_drained > kMaxLingerBytes) return Shutdown();
    stream_.async_read_some(buffer_.prepare(16384), [self = shared_from_this(), num_drained](
                                                        beast::error_code ec, size_t n) {
      self->buffer_.clear();
      if (ec) return self->Shutdown();
      self->DrainUntilClosed(num_drained + n);
    });
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

  static std::string_view AsView(beast::string_view s) { return {s.data(), s.size()}; }

  static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
  static constexpr std::chrono::milliseconds kPausedPeerCheck{200};
  static constexpr std::chrono::seconds kLingerTime{2};
  static constexpr size_t kMaxLingerBytes = size_t{1} << 20;

  beast::tcp_stream stream_;
  asio::steady_timer peer_check_;
  const HttpServerOptions& options_;
  const Handler& handler_;
  beast::flat_buffer buffer_;  // received, not yet parsed (pipelined bytes included)
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  std::shared_ptr<ResponderImpl> responder_;  // of the request being answered
  int32_t num_requests_ = 0;
  // Of the request being answered.
  bool keep_alive_ = true;
  bool head_ = false;    // HEAD: headers only
  bool http10_ = false;  // HTTP/1.0: no chunked coding; a stream is close-delimited
  bool response_done_ = true;
  bool reading_ahead_ = false;
  uint64_t peer_check_id_ = 0;  // invalidates older peer checks
  bool writing_ = false;
  Outgoing::Kind writing_kind_ = Outgoing::Kind::kWhole;  // of the write in flight
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
  if (finished()) return;
  Response head;
  head.status = status;
  head.content_type = std::move(content_type);
  head.headers = std::move(headers);
  Enqueue(Outgoing{Outgoing::Kind::kHeader, std::move(head), {}});
}

void ResponderImpl::Write(std::string chunk) {
  if (chunk.empty() || finished()) return;  // an empty chunk would end the body
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

bool ResponderImpl::finished() {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
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
