#include "server/http/http_server.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <ctime>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "server/common/mutex.h"
#include "server/http/fast_json.h"
#include "server/http/http_tls.h"
#include "server/http/transcode.h"

namespace delayd::http {
namespace {

namespace beast = boost::beast;
namespace net = boost::asio;
namespace bhttp = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxHeaderBytes = 16 << 10;

// RFC 9110's Date, remade once a second per thread.
const std::string& DateHeader() {
  thread_local std::time_t second = 0;
  thread_local std::string value;
  const std::time_t now = std::time(nullptr);
  if (now != second) {
    second = now;
    std::tm tm;
    gmtime_r(&now, &tm);
    char buf[64];
    value.assign(
        buf, std::strftime(buf, sizeof buf, "%a, %d %b %Y %H:%M:%S GMT", &tm));
  }
  return value;
}

// What the connection table knows of a connection, and how it closes one.
class Connection {
 public:
  enum class State { kReading, kIdle, kBusy };
  virtual ~Connection() = default;
  // Closes the connection (from any thread): what it was doing ends.
  virtual void Close() = 0;
  // Enters `s`, since `since` (now if 0).
  void Enter(State s, Clock::rep since = 0) {
    since_.store(since != 0 ? since : Clock::now().time_since_epoch().count(),
                 std::memory_order_relaxed);
    state_.store(s, std::memory_order_release);
  }
  State state() const { return state_.load(std::memory_order_acquire); }
  Clock::rep since() const { return since_.load(std::memory_order_relaxed); }
  // Chosen to close for a new connection (by the table, under its lock):
  // passed over from then on, though in the table until its close has run.
  void MarkEvicted() { evicted_.store(true, std::memory_order_relaxed); }
  bool evicted() const { return evicted_.load(std::memory_order_relaxed); }

 private:
  std::atomic<State> state_{State::kReading};
  std::atomic<bool> evicted_{false};
  std::atomic<Clock::rep> since_{Clock::now().time_since_epoch().count()};
};

// Every open connection. Locking: mu_ guards all_, held for lookups only.
class Table {
 public:
  void Add(Connection* c, std::weak_ptr<Connection> weak) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    all_.emplace(c, std::move(weak));
  }
  void Remove(Connection* c) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    if (all_.erase(c) != 0 && c->evicted()) --evicted_;
    if (all_.empty()) empty_.SignalAll();
  }
  // Waits until no connection is open, or `deadline`.
  void WaitEmpty(Clock::time_point deadline) EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    while (!all_.empty() && empty_.WaitUntil(&mu_, deadline)) {
    }
  }
  std::size_t size() const EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    return all_.size();
  }
  // Which connection to close for a new one once `max` are open: the
  // oldest idle, else the one whose request has been arriving longest;
  // null if every one has a request in hand (then the new one is refused).
  // Null too, with *full false, if there is room. A connection already
  // chosen counts as gone (its close runs on its own strand, later): each
  // admission closes a connection of its own.
  std::shared_ptr<Connection> Victim(std::size_t max, bool* full)
      EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    *full = all_.size() - evicted_ >= max;
    if (!*full) return nullptr;
    std::shared_ptr<Connection> idle, reading;
    Clock::rep idle_since = 0, reading_since = 0;
    for (const auto& [c, weak] : all_) {
      const Connection::State s = c->state();
      if (s == Connection::State::kBusy || c->evicted()) continue;
      auto& best = s == Connection::State::kIdle ? idle : reading;
      auto& since = s == Connection::State::kIdle ? idle_since : reading_since;
      if (best && c->since() >= since) continue;
      if (auto locked = weak.lock()) {
        best = std::move(locked);
        since = c->since();
      }
    }
    std::shared_ptr<Connection> victim = idle ? idle : reading;
    if (victim) {
      victim->MarkEvicted();
      ++evicted_;
    }
    return victim;
  }
  std::vector<std::shared_ptr<Connection>> All() EXCLUDES(mu_) {
    MutexLock lock(&mu_);
    std::vector<std::shared_ptr<Connection>> out;
    for (const auto& [c, weak] : all_) {
      if (auto locked = weak.lock()) out.push_back(std::move(locked));
    }
    return out;
  }

 private:
  mutable Mutex mu_;
  CondVar empty_;
  std::unordered_map<Connection*, std::weak_ptr<Connection>> all_
      GUARDED_BY(mu_);
  std::size_t evicted_ GUARDED_BY(mu_) = 0;  // of all_, chosen to close
};

}  // namespace

struct HttpServer::Impl {
  Options options;
  HttpTls* tls = nullptr;
  Handler handler;
  net::io_context io;
  tcp::acceptor acceptor{io};
  std::vector<std::thread> threads;
  Table table;
  int port = 0;

  void Accept();
  void Admit(tcp::socket socket);
};

namespace {

// One connection: reads a request, hands it over, writes its answer, and
// again. Runs on its strand (the stream's executor).
template <class Stream>
class Session final : public Exchange,
                      public Connection,
                      public std::enable_shared_from_this<Session<Stream>> {
 public:
  Session(HttpServer::Impl& server, Stream stream)
      : server_(server), stream_(std::move(stream)) {}
  ~Session() override { server_.table.Remove(this); }

  void Run() {
    server_.table.Add(this, this->weak_from_this());
    if constexpr (kTls) {
      Lowest().expires_after(server_.options.request_timeout);
      stream_.async_handshake(
          net::ssl::stream_base::server,
          [self = this->shared_from_this()](beast::error_code ec) {
            if (ec) return self->Shut();
            self->Idle();
          });
    } else {
      Idle();
    }
  }

  // --- Exchange ---
  std::string_view method() const override {
    const beast::string_view m = req_.method_string();
    return {m.data(), m.size()};
  }
  std::string_view path() const override { return path_; }
  std::string_view query() const override { return query_; }
  std::optional<std::string_view> header(std::string_view name) const override {
    auto it = req_.find(beast::string_view(name.data(), name.size()));
    if (it == req_.end()) return std::nullopt;
    return std::string_view(it->value().data(), it->value().size());
  }
  const std::string& body() const override { return req_.body(); }
  bool secure() const override { return kTls; }

  void Reply(int status, std::string head, std::string body, bool with_body,
             bool close) override {
    net::post(stream_.get_executor(),
              [self = this->shared_from_this(), status, head = std::move(head),
               body = std::move(body), with_body, close]() mutable {
                self->Answer(status, head, body, with_body, close);
              });
  }
  void StartStream(std::string head,
                   std::function<void(bool)> written) override {
    std::string out = "HTTP/1.1 200 OK\r\n" + head + "Date: " + DateHeader() +
                      "\r\nConnection: close\r\n\r\n";
    net::post(stream_.get_executor(),
              [self = this->shared_from_this(), out = std::move(out),
               written = std::move(written)]() mutable {
                self->Send(std::move(out), std::move(written));
              });
  }
  void Write(std::string text, std::function<void(bool)> written) override {
    net::post(stream_.get_executor(),
              [self = this->shared_from_this(), text = std::move(text),
               written = std::move(written)]() mutable {
                self->Send(std::move(text), std::move(written));
              });
  }
  void Finish() override {
    net::post(stream_.get_executor(),
              [self = this->shared_from_this()] { self->Shut(); });
  }

  // --- Connection ---
  void Close() override { Finish(); }

 private:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;

  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  // Waits for the first bytes of the next request (or uses what came).
  // Idle since its last answer started out (not since that write ended):
  // a client that reads one connection's answer, then uses another,
  // finds the first the older, whichever write completion ran first.
  void Idle() {
    Enter(State::kIdle, answered_at_);
    if (buffer_.size() > 0) return ReadRequest();
    Lowest().expires_after(server_.options.idle_timeout);
    stream_.async_read_some(
        buffer_.prepare(4096),
        [self = this->shared_from_this()](beast::error_code ec, std::size_t n) {
          if (ec) return self->Shut();
          self->buffer_.commit(n);
          self->ReadRequest();
        });
  }

  // From its first byte, the whole request within request_timeout.
  void ReadRequest() {
    Enter(State::kReading);
    parser_.emplace();
    parser_->header_limit(kMaxHeaderBytes);
    parser_->body_limit(server_.options.max_body_bytes);
    Lowest().expires_after(server_.options.request_timeout);
    bhttp::async_read_header(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
          self->OnHeader(ec);
        });
  }

  void OnHeader(beast::error_code ec) {
    if (ec) return Refuse(ec);
    auto& req = parser_->get();
    if (const auto length = parser_->content_length()) {
      // Room past the end for fast_json.h's reader to parse it in place.
      req.body().reserve(*length + fast::kPadding);
    }
    if (bhttp::token_list(req[bhttp::field::expect]).exists("100-continue")) {
      // The client waits for this before it sends the body.
      out_ = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(
          stream_, net::buffer(out_),
          [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
            if (ec) return self->Shut();
            self->ReadBody();
          });
      return;
    }
    ReadBody();
  }

  void ReadBody() {
    bhttp::async_read(
        stream_, buffer_, *parser_,
        [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
          if (ec) return self->Refuse(ec);
          self->Handle();
        });
  }

  // A request that could not be read: answered if it is the client's
  // fault and it can be told, and the connection closed either way.
  void Refuse(beast::error_code ec) {
    if (ec == bhttp::error::body_limit) {
      return Answer(
          413, ErrorHead(),
          ErrorBody(grpc::Status(
              grpc::StatusCode::RESOURCE_EXHAUSTED,
              "the body is larger than " +
                  std::to_string(server_.options.max_body_bytes) + " bytes")),
          true, true);
    }
    if (ec == bhttp::error::header_limit) {
      return Answer(431, ErrorHead(),
                    ErrorBody(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                           "the headers are larger than " +
                                               std::to_string(kMaxHeaderBytes) +
                                               " bytes")),
                    true, true);
    }
    if (ec.category() ==
            bhttp::make_error_code(bhttp::error::bad_method).category() &&
        ec != bhttp::error::end_of_stream &&
        ec != bhttp::error::partial_message) {
      return Answer(
          400, ErrorHead(),
          ErrorBody(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "not an HTTP/1.1 request: " + ec.message())),
          true, true);
    }
    Shut();  // Timed out, or the client went away.
  }
  static std::string ErrorHead() {
    return "Content-Type: application/json\r\nCache-Control: no-store\r\n";
  }

  // The request is whole: the door answers it, now or later.
  void Handle() {
    Enter(State::kBusy);
    Lowest().expires_never();
    req_ = parser_->release();
    parser_.reset();
    keep_alive_ = req_.keep_alive();
    const std::string_view target(req_.target().data(), req_.target().size());
    const auto q = target.find('?');
    path_ = target.substr(0, q);
    query_ =
        q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
    server_.handler(this->shared_from_this());
  }

  void Answer(int status, const std::string& head, const std::string& body,
              bool with_body, bool close) {
    Enter(State::kBusy);
    answered_at_ = Clock::now().time_since_epoch().count();
    const bool keep = keep_alive_ && !close;
    out_.clear();
    out_.reserve(head.size() + body.size() + 192);
    out_ += "HTTP/1.1 ";
    out_ += std::to_string(status);
    out_ += ' ';
    const beast::string_view reason =
        bhttp::obsolete_reason(static_cast<bhttp::status>(status));
    out_.append(reason.data(), reason.size());
    out_ += "\r\n";
    out_ += head;
    out_ += "Date: ";
    out_ += DateHeader();
    out_ += keep ? "\r\n" : "\r\nConnection: close\r\n";
    out_ += "Content-Length: ";
    out_ += std::to_string(body.size());
    out_ += "\r\n\r\n";
    if (with_body) out_ += body;
    Lowest().expires_after(server_.options.write_timeout);
    net::async_write(stream_, net::buffer(out_),
                     [self = this->shared_from_this(), keep](
                         beast::error_code ec, std::size_t) {
                       if (ec || !keep) return self->Shut();
                       self->Idle();
                     });
  }

  // A part of a stream (its head, or a Write's text).
  void Send(std::string text, std::function<void(bool)> written) {
    Enter(State::kBusy);
    if (closed_) {
      if (written) written(false);
      return;
    }
    out_ = std::move(text);
    Lowest().expires_after(server_.options.write_timeout);
    net::async_write(
        stream_, net::buffer(out_),
        [self = this->shared_from_this(), written = std::move(written)](
            beast::error_code ec, std::size_t) {
          if (ec) self->Shut();
          if (written) written(!ec);
        });
  }

  // Closes the connection: pending reads and writes end (their handlers
  // see the error), and the session goes once nothing holds it.
  void Shut() {
    if (std::exchange(closed_, true)) return;
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    Lowest().close();
  }

  HttpServer::Impl& server_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  bhttp::request<bhttp::string_body> req_;
  std::string_view path_, query_;
  std::string out_;  // being written
  bool keep_alive_ = false;
  bool closed_ = false;
  Clock::rep answered_at_ = 0;  // when the last answer began; 0 before one
};

}  // namespace

void HttpServer::Impl::Accept() {
  acceptor.async_accept(net::make_strand(io),
                        [this](beast::error_code ec, tcp::socket socket) {
                          if (ec == net::error::operation_aborted)
                            return;  // Stopping.
                          if (!ec) Admit(std::move(socket));
                          Accept();
                        });
}

void HttpServer::Impl::Admit(tcp::socket socket) {
  bool full = false;
  if (auto victim = table.Victim(options.max_connections, &full)) {
    victim->Close();
  } else if (full) {
    beast::error_code ignored;
    socket.close(ignored);  // Every connection has a request in hand.
    return;
  }
  beast::error_code ignored;
  socket.set_option(tcp::no_delay(true), ignored);
  beast::tcp_stream stream(std::move(socket));
  if (tls != nullptr) {
    using Tls = beast::ssl_stream<beast::tcp_stream>;
    std::make_shared<Session<Tls>>(*this,
                                   Tls(std::move(stream), tls->context()))
        ->Run();
  } else {
    std::make_shared<Session<beast::tcp_stream>>(*this, std::move(stream))
        ->Run();
  }
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

grpc::Status HttpServer::Start(const Options& options, HttpTls* tls,
                               Handler handler,
                               std::unique_ptr<HttpServer>* out) {
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  impl->tls = tls;
  impl->handler = std::move(handler);
  const auto colon = options.listen.rfind(':');
  beast::error_code ec;
  const auto address = net::ip::make_address(
      colon == std::string::npos ? "" : options.listen.substr(0, colon), ec);
  int port = -1;
  if (!ec && colon != std::string::npos) {
    try {
      port = std::stoi(options.listen.substr(colon + 1));
    } catch (const std::exception&) {
    }
  }
  if (ec || port < 0 || port > 65535) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        "--http-listen: not an IPv4 host:port: " + options.listen);
  }
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(port));
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE,
                        "cannot listen on " + options.listen +
                            " (--http-listen): " + ec.message());
  }
  impl->port = impl->acceptor.local_endpoint().port();
  impl->Accept();
  for (int i = 0; i < std::max(1, options.threads); ++i) {
    impl->threads.emplace_back([io = &impl->io] { io->run(); });
  }
  out->reset(new HttpServer(std::move(impl)));
  return grpc::Status::OK;
}

HttpServer::~HttpServer() {
  net::post(impl_->io, [impl = impl_.get()] {
    beast::error_code ignored;
    impl->acceptor.close(ignored);
  });
  for (const auto& c : impl_->table.All()) c->Close();
  // Once every connection is gone (an exchange the door still holds keeps
  // its session until answered; the door answers or cancels its calls
  // before it lets the server go), the loop runs out of work.
  impl_->table.WaitEmpty(Clock::now() + std::chrono::seconds(5));
  impl_->io.stop();
  for (auto& t : impl_->threads) t.join();
}

int HttpServer::port() const { return impl_->port; }

std::size_t HttpServer::connections() const { return impl_->table.size(); }

}  // namespace delayd::http
