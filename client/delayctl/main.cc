// delayctl: the operator's CLI for delayd. Results on stdout, errors on
// stderr, named exit codes (exit_codes.h); never interactive. The
// subcommands are in timer_commands.cc, worker_commands.cc,
// dead_letter_commands.cc, policy_commands.cc, target_commands.cc and
// admin_commands.cc.
#include <openssl/crypto.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "client/delayctl/commands.h"
#include "client/delayctl/connection.h"
#include "client/delayctl/exit_codes.h"
#include "client/delayctl/signals.h"
#include "delayd/text/build_info.h"

namespace delayctl {
namespace {

int Main(int argc, char** argv) {
  CLI::App app{"delayctl: operate a delayd daemon"};
  app.footer(kExitCodesHelp);
  app.require_subcommand(1);
  app.set_version_flag("--version", delayd::VersionLine("delayctl"),
                       "Print delayctl's version and commit, and exit");
  // Global options may also come after the subcommand.
  app.fallthrough();
  Global g;
  app.add_option("--endpoint", g.endpoint,
                 "delayd address, or several separated by commas (a "
                 "cluster's nodes: the first that answers is used)")
      ->envname("DELAYD_ENDPOINT")
      ->capture_default_str();
  app.add_flag("--tls", g.tls,
               "Use TLS, checking the server against the system's CAs")
      ->envname("DELAYD_TLS");
  app.add_option("--tls-ca", g.tls_ca,
                 "Use TLS, checking the server against these PEM CAs")
      ->envname("DELAYD_TLS_CA");
  app.add_option("--tls-cert", g.tls_cert,
                 "Client certificate (PEM) for mutual TLS")
      ->envname("DELAYD_TLS_CLIENT_CERT");
  app.add_option("--tls-key", g.tls_key, "Private key (PEM) of --tls-cert")
      ->envname("DELAYD_TLS_CLIENT_KEY");
  app.add_option("--token", g.token,
                 "Bearer token sent with every call (DELAYD_TOKEN)")
      ->envname("DELAYD_TOKEN");
  app.add_option("--token-file", g.token_file,
                 "File whose first line is the bearer token (when no --token)")
      ->envname("DELAYD_TOKEN_FILE");
  app.add_option("--timeout", g.timeout, "Deadline per call (e.g. 10s)")
      ->capture_default_str();
  app.add_option("-o,--output", g.output, "table or json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  app.add_flag_callback(
      "--json", [&g] { g.output = "json"; }, "Same as -o json");
  app.add_option("-n,--namespace", g.ns, "Namespace (default: default)");

  Commands commands;
  AddTimerCommands(app, g, commands);
  AddWorkerCommands(app, g, commands);
  AddDeadLetterCommands(app, g, commands);
  AddPolicyCommands(app, g, commands);
  AddTargetCommands(app, g, commands);
  AddAdminCommands(app, g, commands);
  AddScheduleCommands(app, g, commands);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? kOk : kUsage;
  }
  try {
    for (const Command& cmd : commands) {
      if (!cmd.sub->parsed()) continue;
      // Usage errors come before any connection attempt.
      if (cmd.check) cmd.check();
      if (cmd.until_signal && cmd.until_signal()) BlockStopSignals();
      Client c(g);
      return cmd.run(c);
    }
  } catch (const Exit& e) {
    std::fprintf(stderr, "delayctl: %s\n", e.message.c_str());
    return e.code;
  }
  return kUsage;
}

}  // namespace
}  // namespace delayctl

int main(int argc, char** argv) {
  // OpenSSL's clean-up at exit deletes the key of its per-thread state; a
  // gRPC thread that ends after that leaves its error queue (904 bytes)
  // unfreed, which LeakSanitizer reports (grpc/grpc#38539). Without that
  // clean-up each thread frees its own state as it ends. Called first, before
  // gRPC sets OpenSSL up.
  OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, nullptr);
  return delayctl::Main(argc, argv);
}
