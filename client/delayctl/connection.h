// The connection to delayd every subcommand shares: global flags, the
// channel (plain or TLS), a context per call, and call failures turned into
// exit codes.
#ifndef DELAYD_CLIENT_DELAYCTL_CONNECTION_H_
#define DELAYD_CLIENT_DELAYCTL_CONNECTION_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "delayd/v1/delayd.grpc.pb.h"
#include "google/protobuf/duration.pb.h"

namespace delayctl {

namespace v1 = delayd::v1;

// Flags that apply to every subcommand.
struct Global {
  std::string endpoint = "127.0.0.1:7070";
  std::string timeout = "10s";
  std::string output = "table";
  std::string ns;
  // TLS: on with --tls or any of the files; the server is checked against
  // --tls-ca, else the system's roots.
  bool tls = false;
  std::string tls_ca, tls_cert, tls_key;
  std::string token;
  std::string token_file;  // its first line, when `token` is empty
};

class Client {
 public:
  // Connects to the first of --endpoint's addresses that answers, waiting
  // up to --timeout in all (shared among them); throws Exit if none does.
  explicit Client(const Global& g);

  v1::Delayd::Stub& stub() { return *stub_; }
  std::shared_ptr<grpc::Channel> channel() { return channel_; }
  // A context with the --timeout deadline (and the token).
  std::unique_ptr<grpc::ClientContext> Context() const;
  // Adds the bearer token, if any, to a call (streams have no deadline).
  void Authorize(grpc::ClientContext& ctx) const;
  bool json() const { return g_.output == "json"; }

 private:
  const Global& g_;
  std::string token_;
  std::chrono::nanoseconds timeout_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Delayd::Stub> stub_;
};

// A file's whole content; throws a usage Exit naming `flag` if unreadable.
std::string ReadWholeFile(const std::string& path, const char* flag);

const char* CodeName(grpc::StatusCode code);

// A duration flag (90s, 1h30m, 500ms) as a request field; throws a usage
// Exit naming `flag` if it is not one.
google::protobuf::Duration DurationFlag(const std::string& text,
                                        const char* flag);

// Leaves with the right code for a failed call: kNotFound for NOT_FOUND,
// kRpcFailed otherwise.
void Check(const grpc::Status& s);

}  // namespace delayctl

#endif  // DELAYD_CLIENT_DELAYCTL_CONNECTION_H_
