// Names a thread, as `top -H`, `ps -L`, gdb and /proc show it (Linux keeps
// 15 bytes of it; longer names are cut). Called by the thread's creator, so
// the name is there by the time the creator goes on.
#ifndef DELAYD_SERVER_COMMON_THREAD_NAME_H_
#define DELAYD_SERVER_COMMON_THREAD_NAME_H_

#include <pthread.h>

#include <cstdio>
#include <thread>

namespace delayd {

inline void NameThread(std::thread& thread, const char* name) {
  char cut[16];
  std::snprintf(cut, sizeof cut, "%s", name);
  pthread_setname_np(thread.native_handle(), cut);
}

}  // namespace delayd

#endif  // DELAYD_SERVER_COMMON_THREAD_NAME_H_
