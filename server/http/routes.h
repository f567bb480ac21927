// The HTTP/JSON door's routes: each (HTTP method, path template) names one
// unary RPC of delayd.v1.Delayd, and which path variables fill which fields
// of its request.
//
// Templates are literal segments and variables. `{namespace}` matches one or
// more segments (namespaces may contain `/`), the fewest that let the rest
// match; `{key}` is always last and takes the rest of the path. A template
// may end in `:verb` (AIP-136 custom methods), matched against the end of
// the path first, so a key or namespace may itself contain `:`. Paths are
// matched as sent, and each variable's value is then percent-decoded (so a
// key may hold "%2F", a slash, or any byte).
#ifndef DELAYD_SERVER_HTTP_ROUTES_H_
#define DELAYD_SERVER_HTTP_ROUTES_H_

#include <google/protobuf/descriptor.h>

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace delayd::http {

struct Route {
  // A unary RPC; or, over Subscribe, a pull (PullRequest) or a watch
  // (Server-Sent Events).
  enum Kind { kUnary, kPull, kWatch };
  const char* method;  // GET, PUT, POST or DELETE
  std::string path;    // the template
  const char* rpc;     // a method of delayd.v1.Delayd
  // Whether the request body (a JSON object) fills the request message;
  // otherwise the query string does.
  bool body;
  const char* summary;  // one line, for the OpenAPI document
  Kind kind = kUnary;
};

// Every route, in the order they are documented.
std::span<const Route> Routes();

// delayd.v1.Delayd, whose methods the routes name.
const google::protobuf::ServiceDescriptor* DelaydService();

struct Match {
  const Route* route = nullptr;
  const google::protobuf::MethodDescriptor* rpc = nullptr;
  // Path variables: (field name, percent-decoded value).
  std::vector<std::pair<std::string, std::string>> bindings;
  // The variable whose value is not valid percent-encoding of UTF-8 (empty:
  // none): the request is refused.
  std::string bad_encoding;
};

// The route for `method` and `path` (without the query string). If none
// matches, nullopt; *allow then lists the methods of the templates the path
// matched ("GET, PUT, DELETE": a 405 names them), or is empty (a 404).
std::optional<Match> MatchRoute(std::string_view method, std::string_view path,
                                std::string* allow);

}  // namespace delayd::http

#endif  // DELAYD_SERVER_HTTP_ROUTES_H_
