#include "server/http/openapi.h"

#include <map>
#include <set>

#include "delayd/v1/delayd.pb.h"
#include "server/http/json_text.h"
#include "server/http/routes.h"

namespace delayd::http {
namespace {

namespace pb = google::protobuf;
using FD = pb::FieldDescriptor;
using json::Array;
using json::Members;
using json::Object;
using json::Quote;

std::string Ref(const std::string& name) {
  return Object({{"$ref", Quote("#/components/schemas/" + name)}});
}

std::string Typed(const char* type, const char* format = nullptr) {
  Members m{{"type", Quote(type)}};
  if (format != nullptr) m.emplace_back("format", Quote(format));
  return Object(m);
}

// The schemas of messages, each once, by name (so in name order).
class Schemas {
 public:
  void Add(const pb::Descriptor* d) {
    if (!seen_.insert(d).second) return;
    Members props;
    for (int i = 0; i < d->field_count(); ++i) {
      const FD* f = d->field(i);
      std::string type = TypeOf(f);
      if (f->is_repeated()) {
        type = Object({{"type", Quote("array")}, {"items", type}});
      }
      props.emplace_back(f->json_name(), std::move(type));
    }
    out_[d->name()] =
        Object({{"type", Quote("object")}, {"properties", Object(props)}});
  }
  void AddRaw(const std::string& name, std::string schema) {
    out_[name] = std::move(schema);
  }
  std::string Json() const {
    Members m(out_.begin(), out_.end());
    return Object(m);
  }

 private:
  std::string TypeOf(const FD* f) {
    switch (f->cpp_type()) {
      case FD::CPPTYPE_BOOL:
        return Typed("boolean");
      case FD::CPPTYPE_INT32:
      case FD::CPPTYPE_UINT32:
        return Typed("integer");
      case FD::CPPTYPE_INT64:  // proto3 JSON: a string of digits
        return Typed("string", "int64");
      case FD::CPPTYPE_UINT64:
        return Typed("string", "uint64");
      case FD::CPPTYPE_DOUBLE:
      case FD::CPPTYPE_FLOAT:
        return Typed("number");
      case FD::CPPTYPE_ENUM: {
        std::vector<std::string> values;
        for (int i = 0; i < f->enum_type()->value_count(); ++i) {
          values.push_back(Quote(f->enum_type()->value(i)->name()));
        }
        return Object({{"type", Quote("string")}, {"enum", Array(values)}});
      }
      case FD::CPPTYPE_STRING:
        return f->type() == FD::TYPE_BYTES ? Typed("string", "byte")
                                           : Typed("string");
      case FD::CPPTYPE_MESSAGE:
        break;
    }
    const pb::Descriptor* d = f->message_type();
    if (d->full_name() == "google.protobuf.Timestamp") {
      return Typed("string", "date-time");
    }
    if (d->full_name() == "google.protobuf.Duration") {
      return Object({{"type", Quote("string")}, {"example", Quote("1.5s")}});
    }
    if (d->full_name() == "google.protobuf.FieldMask") {  // Comma-separated.
      return Object({{"type", Quote("string")},
                     {"example", Quote("paused,maxAttempts")}});
    }
    Add(d);
    return Ref(d->name());
  }

  std::set<const pb::Descriptor*> seen_;
  std::map<std::string, std::string> out_;
};

std::string Parameter(const std::string& name, const char* in,
                      const char* type) {
  Members m{{"name", Quote(name)}, {"in", Quote(in)}};
  if (std::string_view(in) == "path") m.emplace_back("required", "true");
  m.emplace_back("schema", Typed(type));
  return Object(m);
}

std::string JsonContent(const std::string& schema) {
  return Object({{"application/json", Object({{"schema", schema}})}});
}

const pb::MethodDescriptor* Rpc(const Route& r) {
  return DelaydService()->FindMethodByName(r.rpc);
}

// A route's operation: parameters, body and answers.
std::string Operation(const Route& r, Schemas& schemas, const std::string& id) {
  const bool pull = r.kind == Route::kPull;
  const pb::Descriptor* in =
      pull ? v1::PullRequest::descriptor() : Rpc(r)->input_type();
  const pb::Descriptor* out =
      pull ? v1::PullResponse::descriptor() : Rpc(r)->output_type();
  std::vector<std::string> params;
  std::set<std::string> bound;
  for (const char* var : {"namespace", "key"}) {
    if (r.path.find(std::string("{") + var + "}") != std::string::npos) {
      params.push_back(Parameter(var, "path", "string"));
      bound.insert(var);
    }
  }
  Members op{{"operationId", Quote(id)}, {"summary", Quote(r.summary)}};
  if (r.kind == Route::kWatch) {
    params.push_back(Parameter("watch", "query", "integer"));
    op.emplace_back("parameters", Array(params));
    op.emplace_back(
        "responses",
        Object({{"200", Object({{"description",
                                 Quote("text/event-stream: one event per "
                                       "fired timer")}})}}));
    return Object(op);
  }
  if (r.body) {
    schemas.Add(in);
    op.emplace_back("requestBody",
                    Object({{"content", JsonContent(Ref(in->name()))}}));
  } else {
    for (int i = 0; i < in->field_count(); ++i) {
      const FD* f = in->field(i);
      if (bound.count(f->name()) || f->cpp_type() == FD::CPPTYPE_MESSAGE) {
        continue;
      }
      const bool integer = f->cpp_type() == FD::CPPTYPE_INT32 ||
                           f->cpp_type() == FD::CPPTYPE_UINT32;
      params.push_back(Parameter(f->json_name(), "query",
                                 f->cpp_type() == FD::CPPTYPE_BOOL
                                     ? "boolean"
                                     : (integer ? "integer" : "string")));
    }
  }
  op.emplace_back("parameters", Array(params));
  schemas.Add(out);
  op.emplace_back(
      "responses",
      Object({{"200", Object({{"description", Quote("OK")},
                              {"content", JsonContent(Ref(out->name()))}})},
              {"default",
               Object({{"description",
                        Quote("An error: the gRPC code's name and message")},
                       {"content", JsonContent(Ref("Error"))}})}}));
  return Object(op);
}

std::string ErrorSchema() {
  const std::string inner =
      Object({{"type", Quote("object")},
              {"properties", Object({{"code", Typed("integer")},
                                     {"status", Typed("string")},
                                     {"message", Typed("string")}})}});
  return Object(
      {{"type", Quote("object")}, {"properties", Object({{"error", inner}})}});
}

}  // namespace

std::string OpenApiDocument() {
  Schemas schemas;
  schemas.AddRaw("Error", ErrorSchema());
  // Paths in the table's order, each with its methods.
  std::vector<std::pair<std::string, Members>> paths;
  std::map<std::string, int> ids;
  for (const Route& r : Routes()) {
    std::string id = r.rpc;
    if (r.kind == Route::kPull) id = "Pull";
    if (r.kind == Route::kWatch) id = "Watch";
    if (const int n = ids[id]++; n > 0) id += std::to_string(n + 1);
    std::string method = r.method;
    for (char& c : method) c = static_cast<char>(std::tolower(c));
    auto it = std::find_if(paths.begin(), paths.end(),
                           [&](const auto& p) { return p.first == r.path; });
    if (it == paths.end()) {
      paths.emplace_back(r.path, Members{});
      it = paths.end() - 1;
    }
    it->second.emplace_back(method, Operation(r, schemas, id));
  }
  Members path_members;
  for (const auto& [path, methods] : paths) {
    path_members.emplace_back(path, Object(methods));
  }
  const std::string bearer =
      Object({{"type", Quote("http")}, {"scheme", Quote("bearer")}});
  return Object({{"openapi", Quote("3.0.3")},
                 {"info", Object({{"title", Quote("delayd HTTP/JSON API")},
                                  {"version", Quote("v1")}})},
                 {"paths", Object(path_members)},
                 {"components",
                  Object({{"schemas", schemas.Json()},
                          {"securitySchemes", Object({{"bearer", bearer}})}})},
                 {"security", Array({Object({{"bearer", Array({})}})})}});
}

}  // namespace delayd::http
