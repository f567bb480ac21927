// One HTTP request and the answer to it, as the door's routing sees it
// (http_door.h): the connection it came on (http_session.cc) read it whole,
// and answers with what the door gives it, from any thread. Nothing here
// names the HTTP library, so the routing compiles without it.
//
// Thread safety: the request's parts are read on the thread the door was
// handed the exchange on (before any answer); Reply, StartStream, Write and
// Finish may be called from any thread, once each (Write: after the one
// before it was written), and hand their work to the connection's strand.
#ifndef DELAYD_SERVER_HTTP_EXCHANGE_H_
#define DELAYD_SERVER_HTTP_EXCHANGE_H_

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace delayd::http {

class Exchange {
 public:
  virtual ~Exchange() = default;

  virtual std::string_view method() const = 0;
  // The path as sent (percent-encoded), without the query string.
  virtual std::string_view path() const = 0;
  virtual std::string_view query() const = 0;
  // A request header's value (the first, if repeated), or nullopt.
  virtual std::optional<std::string_view> header(
      std::string_view name) const = 0;
  // The whole body, with fast::kPadding bytes of room past its end.
  virtual const std::string& body() const = 0;
  // Whether the connection is TLS (the request's origin is https://).
  virtual bool secure() const = 0;

  // The answer, in one write: `head` is complete header lines ("Name:
  // value\r\n"), to which the connection adds Date, Content-Length and
  // Connection; without `with_body` (HEAD) the body's length is sent but
  // not the body. With `close` (or if the client asked) the connection
  // closes once it is written; else the next request is read.
  virtual void Reply(int status, std::string head, std::string body,
                     bool with_body = true, bool close = false) = 0;
  // A stream of unknown length (Server-Sent Events): the status line and
  // `head`, then each Write's text, until Finish closes the connection.
  // `written(ok)` runs (on the connection's strand) once the text is on
  // its way to the client, or with false if the client is gone; the next
  // Write comes after it.
  virtual void StartStream(std::string head,
                           std::function<void(bool ok)> written) = 0;
  virtual void Write(std::string text,
                     std::function<void(bool ok)> written) = 0;
  virtual void Finish() = 0;
};

}  // namespace delayd::http

#endif  // DELAYD_SERVER_HTTP_EXCHANGE_H_
