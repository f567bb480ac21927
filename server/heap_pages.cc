#include "server/heap_pages.h"

#include <sys/auxv.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace delayd {

void ExecWithHugePageHeap(char** argv) {
#ifdef __GLIBC__
  constexpr const char* kTunable = "glibc.malloc.hugetlb";
  const char* tunables = std::getenv("GLIBC_TUNABLES");
  const std::string now = tunables == nullptr ? "" : tunables;
  if (now.find(kTunable) != std::string::npos) return;
  if (getauxval(AT_SECURE) != 0) return;
  const std::string with =
      (now.empty() ? "" : now + ":") + std::string(kTunable) + "=1";
  if (setenv("GLIBC_TUNABLES", with.c_str(), 1) != 0) return;
  execv("/proc/self/exe", argv);
  // (Not executed: go on as started, with the environment as it was.)
  if (tunables == nullptr) {
    unsetenv("GLIBC_TUNABLES");
  } else {
    setenv("GLIBC_TUNABLES", tunables, 1);
  }
#else
  (void)argv;
#endif
}

}  // namespace delayd
