#include "server/http/http_tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <boost/asio/ssl/context.hpp>

namespace delayd::http {

struct HttpTls::Identity {
  X509* leaf = nullptr;
  STACK_OF(X509) * chain = nullptr;  // the certificates after the leaf
  EVP_PKEY* key = nullptr;
  X509_STORE* client_ca = nullptr;  // null unless mutual

  ~Identity() {
    X509_free(leaf);
    sk_X509_pop_free(chain, X509_free);
    EVP_PKEY_free(key);
    X509_STORE_free(client_ca);
  }
};

namespace {

grpc::Status Invalid(const std::string& what) {
  ERR_clear_error();
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      "HTTP TLS: " + what + " does not parse");
}

// Every certificate in `pem`, in order.
STACK_OF(X509) * Certificates(const std::string& pem) {
  STACK_OF(X509)* out = sk_X509_new_null();
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  while (X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    sk_X509_push(out, x);
  }
  ERR_clear_error();  // The end of the data reads as an error.
  BIO_free(bio);
  return out;
}

}  // namespace

grpc::Status HttpTls::Create(const TlsPem& pem, std::unique_ptr<HttpTls>* out) {
  std::unique_ptr<HttpTls> tls(new HttpTls(!pem.client_ca.empty()));
  if (grpc::Status s = tls->Set(pem); !s.ok()) return s;
  tls->context_ = std::make_unique<boost::asio::ssl::context>(
      boost::asio::ssl::context::tls_server);
  tls->Install(tls->context_->native_handle());
  *out = std::move(tls);
  return grpc::Status::OK;
}

HttpTls::HttpTls(bool mutual) : mutual_(mutual) {}

HttpTls::~HttpTls() = default;

grpc::Status HttpTls::Set(const TlsPem& pem) {
  auto id = std::make_shared<Identity>();
  id->chain = Certificates(pem.cert);
  if (sk_X509_num(id->chain) == 0) return Invalid("the certificate");
  id->leaf = sk_X509_shift(id->chain);
  BIO* kb = BIO_new_mem_buf(pem.key.data(), static_cast<int>(pem.key.size()));
  id->key = PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr);
  BIO_free(kb);
  if (id->key == nullptr) return Invalid("the key");
  if (mutual_) {
    STACK_OF(X509)* cas = Certificates(pem.client_ca);
    id->client_ca = X509_STORE_new();
    const int n = sk_X509_num(cas);
    for (int i = 0; i < n; ++i)
      X509_STORE_add_cert(id->client_ca, sk_X509_value(cas, i));
    sk_X509_pop_free(cas, X509_free);
    if (n == 0) return Invalid("the client CA");
  }
  MutexLock lock(&mutex_);
  identity_ = std::move(id);
  return grpc::Status::OK;
}

void HttpTls::Install(SSL_CTX* ctx) {
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_cert_cb(ctx, &HttpTls::OnHandshake, this);
  if (mutual_) {
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
                       nullptr);
  }
}

int HttpTls::OnHandshake(SSL* ssl, void* self) {
  auto* tls = static_cast<HttpTls*>(self);
  std::shared_ptr<const Identity> id;
  {
    MutexLock lock(&tls->mutex_);
    id = tls->identity_;
  }
  // Each call takes its own reference: the identity may be replaced while
  // this handshake goes on.
  if (SSL_use_certificate(ssl, id->leaf) != 1 ||
      SSL_use_PrivateKey(ssl, id->key) != 1 ||
      SSL_set1_chain(ssl, id->chain) != 1) {
    return 0;
  }
  if (id->client_ca != nullptr &&
      SSL_set1_verify_cert_store(ssl, id->client_ca) != 1) {
    return 0;
  }
  return 1;
}

}  // namespace delayd::http
