// What a binary is: its release (CMake's project VERSION, semantic
// versioning) and the commit it was built from. Shared by the daemon,
// delayctl and their tests.
#ifndef DELAYD_TEXT_BUILD_INFO_H_
#define DELAYD_TEXT_BUILD_INFO_H_

#include <string>
#include <string_view>

namespace delayd {

// "0.2.0".
std::string_view BuildVersion();
// The commit's short hash, "+" after it if the tree had changes not
// committed, or "unknown" (a build from outside a git checkout that was not
// told it: cmake -DDELAYD_COMMIT=...).
std::string_view BuildCommit();
// "0.2.0 (commit 1a2b3c4d5e6f)": Stats' version.
std::string VersionAndCommit();
// "<program> 0.2.0 (commit 1a2b3c4d5e6f)": what --version prints.
std::string VersionLine(std::string_view program);

}  // namespace delayd

#endif  // DELAYD_TEXT_BUILD_INFO_H_
