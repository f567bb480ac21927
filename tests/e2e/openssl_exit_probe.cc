// Loaded into delayd or delayctl by openssl_exit_test.sh (LD_PRELOAD): at
// the very end of the process's exit, writes to $DELAYD_OPENSSL_PROBE
// whether OpenSSL's exit-time clean-up ran. Both set OpenSSL up without it
// (see delayctl's main.cc): a thread that ends after that clean-up cannot
// free its OpenSSL state.
#include <openssl/crypto.h>

#include <cstdio>
#include <cstdlib>

namespace {

void Report() {
  const char* path = std::getenv("DELAYD_OPENSSL_PROBE");
  if (path == nullptr) return;
  // OpenSSL answers 0 once its clean-up has run (it cannot be set up
  // again), else 1 (the process set it up already: nothing more is done).
  const bool cleaned = OPENSSL_init_crypto(0, nullptr) == 0;
  if (FILE* f = std::fopen(path, "w")) {
    std::fputs(cleaned ? "cleaned up\n" : "kept\n", f);
    std::fclose(f);
  }
}

// Registered before main runs, so it runs after every exit handler that
// the process registers later, OpenSSL's among them.
__attribute__((constructor)) void Register() { std::atexit(Report); }

}  // namespace
