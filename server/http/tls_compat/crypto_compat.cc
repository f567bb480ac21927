// Loaded by the HTTP door under the name "libcrypto.so" (its SONAME), before
// civetweb loads OpenSSL by that name (http_tls.cc says why). It defines
// nothing: it needs libcrypto.so.3, whose functions civetweb finds through
// it.
