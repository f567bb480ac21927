// delayctl's exit codes, and how a subcommand leaves with one.
#ifndef DELAYD_CLIENT_DELAYCTL_EXIT_CODES_H_
#define DELAYD_CLIENT_DELAYCTL_EXIT_CODES_H_

#include <string>

namespace delayctl {

// Exit codes (listed in --help).
enum ExitCode : int {
  kOk = 0,
  kUsage = 1,          // Bad flags or arguments.
  kCannotConnect = 2,  // The daemon could not be reached.
  kRpcFailed = 3,      // The call failed; status and message on stderr.
  kNotFound = 4,       // No such timer; `health`: not serving.
};

inline constexpr const char* kExitCodesHelp =
    "Exit codes: 0 success; 1 usage error; 2 cannot connect; 3 the RPC failed "
    "(gRPC status and message on stderr); 4 not found (health: not serving).";

// Thrown by subcommands to leave with a code and a message on stderr.
struct Exit {
  int code;
  std::string message;
};

}  // namespace delayctl

#endif  // DELAYD_CLIENT_DELAYCTL_EXIT_CODES_H_
