// Loaded by the HTTP door under the name "libssl.so" (its SONAME), before
// civetweb loads OpenSSL by that name (http_tls.cc says why). It needs
// libssl.so.3 and so brings all of OpenSSL 3's functions, and adds the one
// name civetweb 1.15 asks for that OpenSSL 3 keeps only as a macro.
#include <openssl/ssl.h>

#undef SSL_get_peer_certificate

extern "C" __attribute__((visibility("default"))) X509*
SSL_get_peer_certificate(const SSL* ssl) {
  // OpenSSL 1.1's function took a reference, as its successor does.
  return SSL_get1_peer_certificate(ssl);
}
