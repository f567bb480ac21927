// `delayd check --data-dir DIR [-o json]`: verifies a data directory offline
// (delayd must not be running on it) and prints what it found.
#ifndef DELAYD_SERVER_STORE_ROCKSDB_CHECK_H_
#define DELAYD_SERVER_STORE_ROCKSDB_CHECK_H_

#include <string>

namespace delayd {

// Exit codes: 0 the store is whole; 1 damage was found (listed); 2 the store
// cannot be opened at all (the reason is printed).
int RunCheck(const std::string& dir, bool json);

}  // namespace delayd

#endif  // DELAYD_SERVER_STORE_ROCKSDB_CHECK_H_
