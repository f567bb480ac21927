#include "server/http/transcode.h"

#include <google/protobuf/stubs/common.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>

#include "delayd/text/code_name.h"
#include "server/http/json_text.h"

namespace delayd::http {
namespace {

namespace pb = google::protobuf;
using FD = pb::FieldDescriptor;

grpc::Status Invalid(std::string message) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::move(message));
}

const FD* FieldNamed(const pb::Descriptor* d, std::string_view name) {
  for (int i = 0; i < d->field_count(); ++i) {
    const FD* f = d->field(i);
    if (f->name() == name || f->json_name() == name) return f;
  }
  return nullptr;
}

// A query value as the JSON value its field takes: bools as literals,
// everything else as a string (the JSON parser reads numbers, enums,
// durations and timestamps from strings).
grpc::Status QueryValue(const FD* f, const std::string& text,
                        std::string* json) {
  if (f->cpp_type() == FD::CPPTYPE_BOOL) {
    if (text != "true" && text != "false") {
      return Invalid(f->json_name() + ": true or false, not '" + text + "'");
    }
    *json = text;
    return grpc::Status::OK;
  }
  if (f->cpp_type() == FD::CPPTYPE_MESSAGE &&
      f->message_type()->full_name() != "google.protobuf.Duration" &&
      f->message_type()->full_name() != "google.protobuf.Timestamp") {
    return Invalid(f->json_name() + ": cannot be given in the query string");
  }
  *json = json::Quote(text);
  return grpc::Status::OK;
}

grpc::Status QueryToJson(const pb::Descriptor* d, std::string_view query,
                         std::string* out) {
  // (field, its values as JSON), in the order first given.
  std::vector<std::pair<const FD*, std::vector<std::string>>> fields;
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? "" : query.substr(amp + 1);
    if (pair.empty()) continue;
    const std::size_t eq = pair.find('=');
    const std::string name = DecodeQueryPart(pair.substr(0, eq));
    const std::string value = eq == std::string_view::npos
                                  ? std::string()
                                  : DecodeQueryPart(pair.substr(eq + 1));
    const FD* f = FieldNamed(d, name);
    if (f == nullptr) return Invalid("unknown query parameter '" + name + "'");
    std::string one;
    if (grpc::Status s = QueryValue(f, value, &one); !s.ok()) return s;
    auto it = std::find_if(fields.begin(), fields.end(),
                           [f](const auto& e) { return e.first == f; });
    if (it == fields.end()) {
      fields.emplace_back(f, std::vector<std::string>{});
      it = fields.end() - 1;
    } else if (!f->is_repeated()) {
      return Invalid(f->json_name() + ": given more than once");
    }
    it->second.push_back(std::move(one));
  }
  json::Members members;
  for (auto& [f, values] : fields) {
    members.emplace_back(f->json_name(), f->is_repeated()
                                             ? json::Array(values)
                                             : std::move(values[0]));
  }
  *out = json::Object(members);
  return grpc::Status::OK;
}

}  // namespace

std::string DecodeQueryPart(std::string_view s) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '+') {
      out += ' ';
    } else if (s[i] == '%' && i + 2 < s.size() && hex(s[i + 1]) >= 0 &&
               hex(s[i + 2]) >= 0) {
      out += static_cast<char>(hex(s[i + 1]) * 16 + hex(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

grpc::Status BuildRequest(const Match& m, std::string_view query,
                          std::string_view body, pb::Message* out) {
  const pb::Descriptor* d = out->GetDescriptor();
  std::string json;
  if (m.route->body) {
    if (!query.empty()) return Invalid("this route takes no query string");
    json = body.empty() ? "{}" : std::string(body);
  } else {
    if (!body.empty()) return Invalid("this route takes no body");
    if (grpc::Status s = QueryToJson(d, query, &json); !s.ok()) return s;
  }
  pb::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  if (const auto s = pb::util::JsonStringToMessage(json, out, options);
      !s.ok()) {
    return Invalid(std::string(m.route->body ? "body" : "query string") + ": " +
                   std::string(s.message()));
  }
  const pb::Reflection* r = out->GetReflection();
  for (const auto& [name, value] : m.bindings) {
    const FD* f = d->FindFieldByName(name);
    // (A proto3 string holds UTF-8; the body's and the query's are checked
    // by the JSON parser, the path's here, with protobuf's own check.)
    if (!pb::internal::IsStructurallyValidUTF8(
            value.data(), static_cast<int>(value.size()))) {
      return Invalid(f->json_name() + ": the path's is not valid UTF-8");
    }
    const std::string given = r->GetString(*out, f);
    if (!given.empty() && given != value) {
      return Invalid(f->json_name() + ": the body says '" + given +
                     "', the path '" + value + "'");
    }
    r->SetString(out, f, value);
  }
  return grpc::Status::OK;
}

std::string ToJson(const pb::Message& message) {
  pb::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  std::string out;
  (void)pb::util::MessageToJsonString(message, &out, options);
  return out;
}

int HttpStatusOf(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return 200;
    case grpc::StatusCode::CANCELLED:
      return 499;
    case grpc::StatusCode::INVALID_ARGUMENT:
    case grpc::StatusCode::FAILED_PRECONDITION:
    case grpc::StatusCode::OUT_OF_RANGE:
      return 400;
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return 504;
    case grpc::StatusCode::NOT_FOUND:
      return 404;
    case grpc::StatusCode::ALREADY_EXISTS:
    case grpc::StatusCode::ABORTED:
      return 409;
    case grpc::StatusCode::PERMISSION_DENIED:
      return 403;
    case grpc::StatusCode::UNAUTHENTICATED:
      return 401;
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return 429;
    case grpc::StatusCode::UNIMPLEMENTED:
      return 501;
    case grpc::StatusCode::UNAVAILABLE:
      return 503;
    default:  // UNKNOWN, INTERNAL, DATA_LOSS
      return 500;
  }
}

std::string ErrorBody(const grpc::Status& status) {
  return "{\"error\":{\"code\":" +
         std::to_string(HttpStatusOf(status.error_code())) + ",\"status\":\"" +
         GrpcCodeName(static_cast<int>(status.error_code())) +
         "\",\"message\":" + json::Quote(status.error_message()) + "}}";
}

}  // namespace delayd::http
