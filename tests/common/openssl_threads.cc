// Linked into every test binary (tests/CMakeLists.txt): OpenSSL is set up
// without its clean-up at exit, as delayd and delayctl set it up (see
// delayctl's main.cc), so that a gRPC thread of a test's own channels that
// ends after main returns frees its own OpenSSL state rather than leaving
// it to LeakSanitizer. Set during static initialization, before any test
// (or gRPC) sets OpenSSL up.
#include <openssl/crypto.h>

namespace {

[[maybe_unused]] const int kOpenSslSetUp =
    OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);

}  // namespace
