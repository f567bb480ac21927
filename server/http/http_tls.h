// TLS for the HTTP door, with the certificates of the gRPC port.
//
// One OpenSSL context for every connection (context()): TLS 1.2 at least, a
// client certificate required when a client CA is given, and a certificate
// callback that hands each new handshake the identity in use. Set() replaces
// that identity (SIGHUP): handshakes after it get the new one, connections
// already open keep their session. The PEM text comes validated from the gRPC
// port's TlsCertificates (a key that matches its certificate), so both ports
// always serve the same set.
//
// Thread safety: Set() and the callbacks may run on any threads at once;
// the identity is swapped under a mutex.
#ifndef DELAYD_SERVER_HTTP_HTTP_TLS_H_
#define DELAYD_SERVER_HTTP_HTTP_TLS_H_

#include <grpcpp/support/status.h>

#include <memory>
#include <string>

#include "server/common/mutex.h"

struct ssl_st;      // OpenSSL's SSL
struct ssl_ctx_st;  // OpenSSL's SSL_CTX

namespace boost::asio::ssl {
class context;
}

namespace delayd::http {

struct TlsPem {
  std::string cert;       // the chain, the server's first
  std::string key;        // its private key
  std::string client_ca;  // empty: no client certificate asked for
};

class HttpTls {
 public:
  // Fails (with why) if the PEM text does not parse.
  static grpc::Status Create(const TlsPem& pem, std::unique_ptr<HttpTls>* out);
  ~HttpTls();

  grpc::Status Set(const TlsPem& pem);
  bool mutual() const { return mutual_; }
  // What every connection's handshake uses.
  boost::asio::ssl::context& context() { return *context_; }

 private:
  struct Identity;
  explicit HttpTls(bool mutual);
  void Install(ssl_ctx_st* ctx);
  static int OnHandshake(ssl_st* ssl, void* self);

  const bool mutual_;
  std::unique_ptr<boost::asio::ssl::context> context_;
  Mutex mutex_;
  std::shared_ptr<const Identity> identity_ GUARDED_BY(mutex_);
};

}  // namespace delayd::http

#endif  // DELAYD_SERVER_HTTP_HTTP_TLS_H_
