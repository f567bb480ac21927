// libFuzzer target: HTTP requests as the door reads them. The input is
// `METHOD PATH[?QUERY]`, a newline, then the body. Routing and building the
// request message must never crash or hang; a request that builds must
// print back as JSON that parses into the same message.
#include <google/protobuf/message.h>
#include <google/protobuf/util/json_util.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "delayd/v1/delayd.pb.h"
#include "server/http/routes.h"
#include "server/http/transcode.h"

namespace {

namespace pb = google::protobuf;

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  if (size > 8192) return 0;
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const std::size_t nl = in.find('\n');
  const std::string_view line = in.substr(0, nl);
  const std::string_view body =
      nl == std::string_view::npos ? "" : in.substr(nl + 1);
  const std::size_t space = line.find(' ');
  if (space == std::string_view::npos) return 0;
  const std::string_view method = line.substr(0, space);
  std::string_view target = line.substr(space + 1);
  const std::size_t q = target.find('?');
  const std::string_view query =
      q == std::string_view::npos ? "" : target.substr(q + 1);
  target = target.substr(0, q);
  bool known = false;
  const auto m = delayd::http::MatchRoute(method, target, &known);
  if (!m) return 0;
  Check(known && m->rpc != nullptr);
  const pb::Descriptor* type = m->route->kind == delayd::http::Route::kPull
                                   ? delayd::v1::PullRequest::descriptor()
                                   : m->rpc->input_type();
  std::unique_ptr<pb::Message> req(
      pb::MessageFactory::generated_factory()->GetPrototype(type)->New());
  if (m->route->kind == delayd::http::Route::kWatch) return 0;
  if (!delayd::http::BuildRequest(*m, query, body, req.get()).ok()) return 0;
  // Path variables landed in their fields.
  for (const auto& [field, value] : m->bindings) {
    const pb::FieldDescriptor* f = type->FindFieldByName(field);
    Check(f != nullptr && req->GetReflection()->GetString(*req, f) == value);
  }
  const std::string json = delayd::http::ToJson(*req);
  std::unique_ptr<pb::Message> back(req->New());
  Check(pb::util::JsonStringToMessage(json, back.get()).ok());
  Check(back->SerializeAsString() == req->SerializeAsString());
  return 0;
}
