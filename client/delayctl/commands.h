// delayctl's subcommands, one file per group (timer_commands.cc,
// worker_commands.cc, dead_letter_commands.cc, policy_commands.cc,
// target_commands.cc, admin_commands.cc, schedule_commands.cc). A group
// adds its subcommands to the app and says, for each, how to run it once
// the flags are parsed.
#ifndef DELAYD_CLIENT_DELAYCTL_COMMANDS_H_
#define DELAYD_CLIENT_DELAYCTL_COMMANDS_H_

#include <CLI/CLI.hpp>
#include <functional>
#include <vector>

#include "client/delayctl/connection.h"

namespace delayctl {

struct Command {
  CLI::App* sub = nullptr;
  // Checks made before connecting, so a usage error never waits for the
  // daemon; throws Exit. May be empty.
  std::function<void()> check;
  // Whether it runs until a stop signal (SIGINT, SIGTERM), given the parsed
  // flags: the signals are then blocked before the first thread starts (see
  // signals.h). Empty: it does not.
  std::function<bool()> until_signal;
  // Returns the exit code; throws Exit on failure.
  std::function<int(Client&)> run;
};

using Commands = std::vector<Command>;

// A payload from an argument, "@file", or "-" for stdin (timer_commands.cc).
std::string ReadPayload(const std::string& arg);

// set, move, rm, get, ls, drain, batch.
void AddTimerCommands(CLI::App& app, const Global& g, Commands& out);
// watch, work, ack, nack, extend.
void AddWorkerCommands(CLI::App& app, const Global& g, Commands& out);
// dlq ls|requeue|purge.
void AddDeadLetterCommands(CLI::App& app, const Global& g, Commands& out);
// The namespace's (-n) policy in force (policy_commands.cc).
v1::Policy GetPolicy(Client& c, const Global& g);

// policy get|set, pause, resume.
void AddPolicyCommands(CLI::App& app, const Global& g, Commands& out);
// target get|set|rm|test.
void AddTargetCommands(CLI::App& app, const Global& g, Commands& out);
// stats, backup, health.
void AddAdminCommands(CLI::App& app, const Global& g, Commands& out);
// schedule set|get|ls|rm|pause|resume|trigger|next.
void AddScheduleCommands(CLI::App& app, const Global& g, Commands& out);

}  // namespace delayctl

#endif  // DELAYD_CLIENT_DELAYCTL_COMMANDS_H_
