// libFuzzer target: HTTP requests as the door reads them. The input is
// `METHOD PATH[?QUERY]`, a newline, then the body. Routing and building the
// request message must never crash or hang; a request that builds must
// print back as JSON that parses into the same message. Where the fast
// reader (fast_json.h) takes a body, protobuf's parser must take it too, to
// the same message; where the fast writer writes an answer (the body read as
// a BatchResponse or SetTimerResponse), it must be protobuf's JSON.
#include <google/protobuf/message.h>
#include <google/protobuf/util/json_util.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "delayd/v1/delayd.pb.h"
#include "server/http/fast_json.h"
#include "server/http/routes.h"
#include "server/http/transcode.h"

namespace {

namespace pb = google::protobuf;

void Check(bool ok) {
  if (!ok) std::abort();
}

std::string Var(const delayd::http::Match& m, std::string_view name) {
  for (const auto& [field, value] : m.bindings) {
    if (field == name) return value;
  }
  return "";
}

// The fast writer's answer, where it writes one, is protobuf's.
template <typename Response>
void CheckAnswer(const std::string& wire) {
  Response response;
  if (!response.ParseFromString(wire)) return;
  if (const auto fast = delayd::http::fast::ResponseJson(response)) {
    Check(*fast == delayd::http::ToJson(response));
  }
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
  std::string allow;
  const auto m = delayd::http::MatchRoute(method, target, &allow);
  if (!m) return 0;
  Check(allow.empty() && m->rpc != nullptr);
  if (!m->bad_encoding.empty()) return 0;  // Refused.
  const pb::Descriptor* type = m->route->kind == delayd::http::Route::kPull
                                   ? delayd::v1::PullRequest::descriptor()
                                   : m->rpc->input_type();
  std::unique_ptr<pb::Message> req(
      pb::MessageFactory::generated_factory()->GetPrototype(type)->New());
  if (m->route->kind == delayd::http::Route::kWatch) return 0;
  const std::string body_copy(body);
  std::optional<std::string> fast;
  if (query.empty() && m->rpc->name() == "Batch") {
    fast = delayd::http::fast::BatchRequestWire(body_copy);
  } else if (query.empty() && m->rpc->name() == "SetTimer") {
    fast = delayd::http::fast::SetTimerRequestWire(
        body_copy, Var(*m, "namespace"), Var(*m, "key"));
  }
  const bool built =
      delayd::http::BuildRequest(*m, query, body, req.get()).ok();
  if (fast) {
    Check(built);
    std::unique_ptr<pb::Message> from_wire(req->New());
    Check(from_wire->ParseFromString(*fast));
    Check(from_wire->SerializeAsString() == req->SerializeAsString());
  }
  CheckAnswer<delayd::v1::BatchResponse>(body_copy);
  CheckAnswer<delayd::v1::SetTimerResponse>(body_copy);
  if (!built) return 0;
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
