#include "client/delayctl/connection.h"

#include <google/protobuf/util/time_util.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "client/delayctl/exit_codes.h"
#include "delayd/text/code_name.h"
#include "delayd/text/duration.h"

namespace delayctl {
namespace {

std::shared_ptr<grpc::ChannelCredentials> Credentials(const Global& g) {
  if (!g.tls && g.tls_ca.empty() && g.tls_cert.empty() && g.tls_key.empty()) {
    return grpc::InsecureChannelCredentials();
  }
  if (g.tls_cert.empty() != g.tls_key.empty()) {
    throw Exit{kUsage, "--tls-cert and --tls-key go together"};
  }
  grpc::SslCredentialsOptions o;
  if (!g.tls_ca.empty()) o.pem_root_certs = ReadWholeFile(g.tls_ca, "--tls-ca");
  if (!g.tls_cert.empty()) {
    o.pem_cert_chain = ReadWholeFile(g.tls_cert, "--tls-cert");
    o.pem_private_key = ReadWholeFile(g.tls_key, "--tls-key");
  }
  return grpc::SslCredentials(o);
}

// Stats lists every namespace: up to ~14 MiB at the largest namespace limit
// (65,536 names of 64 bytes and their figures), past gRPC's 4 MiB default.
constexpr int kMaxReceiveBytes = 64 << 20;

// The addresses of a comma-separated list, blanks trimmed.
std::vector<std::string> Endpoints(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string e; std::getline(in, e, ',');) {
    const auto first = e.find_first_not_of(" \t");
    if (first == std::string::npos) continue;
    out.push_back(e.substr(first, e.find_last_not_of(" \t") - first + 1));
  }
  return out;
}

// The token: --token, else the first line of --token-file.
std::string Token(const Global& g) {
  if (!g.token.empty() || g.token_file.empty()) return g.token;
  std::string line = ReadWholeFile(g.token_file, "--token-file");
  line = line.substr(0, line.find('\n'));
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) {
    line.pop_back();
  }
  return line;
}

}  // namespace

Client::Client(const Global& g) : g_(g), token_(Token(g)) {
  auto t = delayd::ParseDuration(g.timeout);
  if (!t) throw Exit{kUsage, "--timeout: not a duration: " + g.timeout};
  timeout_ = *t;
  const std::vector<std::string> endpoints = Endpoints(g.endpoint);
  if (endpoints.empty()) throw Exit{kUsage, "--endpoint: no address"};
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReceiveBytes);
  const auto credentials = Credentials(g);
  const auto share = timeout_ / static_cast<int>(endpoints.size());
  for (const std::string& endpoint : endpoints) {
    channel_ = grpc::CreateCustomChannel(endpoint, credentials, args);
    if (channel_->WaitForConnected(std::chrono::system_clock::now() + share)) {
      stub_ = v1::Delayd::NewStub(channel_);
      return;
    }
  }
  throw Exit{kCannotConnect, "cannot connect to " + g.endpoint};
}

std::unique_ptr<grpc::ClientContext> Client::Context() const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(std::chrono::system_clock::now() + timeout_);
  Authorize(*ctx);
  return ctx;
}

void Client::Authorize(grpc::ClientContext& ctx) const {
  if (!token_.empty()) {
    ctx.AddMetadata("authorization", "Bearer " + token_);
  }
}

std::string ReadWholeFile(const std::string& path, const char* flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Exit{kUsage, std::string(flag) + ": cannot read " + path};
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

google::protobuf::Duration DurationFlag(const std::string& text,
                                        const char* flag) {
  auto d = delayd::ParseDuration(text);
  if (!d) throw Exit{kUsage, std::string(flag) + ": not a duration: " + text};
  return google::protobuf::util::TimeUtil::NanosecondsToDuration(d->count());
}

const char* CodeName(grpc::StatusCode code) {
  return delayd::GrpcCodeName(static_cast<int>(code));
}

void Check(const grpc::Status& s) {
  if (s.ok()) return;
  const std::string text =
      std::string(CodeName(s.error_code())) + ": " + s.error_message();
  if (s.error_code() == grpc::StatusCode::NOT_FOUND) {
    throw Exit{kNotFound, text};
  }
  throw Exit{kRpcFailed, text};
}

}  // namespace delayctl
