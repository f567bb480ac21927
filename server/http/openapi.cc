#include "server/http/openapi.h"

#include <google/protobuf/struct.pb.h>
#include <google/protobuf/util/json_util.h>

#include <map>
#include <set>

#include "delayd/v1/delayd.pb.h"
#include "server/http/routes.h"

namespace delayd::http {
namespace {

namespace pb = google::protobuf;
using FD = pb::FieldDescriptor;

pb::Value Str(const std::string& s) {
  pb::Value v;
  v.set_string_value(s);
  return v;
}

pb::Struct& Obj(pb::Value& v) { return *v.mutable_struct_value(); }
pb::Value& At(pb::Struct& s, const std::string& key) {
  return (*s.mutable_fields())[key];
}
pb::Value Ref(const pb::Descriptor* d) {
  pb::Value v;
  At(Obj(v), "$ref") = Str("#/components/schemas/" + d->name());
  return v;
}

class Schemas {
 public:
  // Adds `d` (and what it refers to) once.
  void Add(const pb::Descriptor* d) {
    if (!seen_.insert(d).second) return;
    pb::Value& schema = At(out_, d->name());
    At(Obj(schema), "type") = Str("object");
    pb::Value& props = At(Obj(schema), "properties");
    Obj(props);
    for (int i = 0; i < d->field_count(); ++i) {
      const FD* f = d->field(i);
      pb::Value type = TypeOf(f);
      if (f->is_repeated()) {
        pb::Value array;
        At(Obj(array), "type") = Str("array");
        At(Obj(array), "items") = std::move(type);
        type = std::move(array);
      }
      At(Obj(props), f->json_name()) = std::move(type);
    }
  }
  pb::Struct& schemas() { return out_; }

 private:
  pb::Value TypeOf(const FD* f) {
    pb::Value v;
    pb::Struct& s = Obj(v);
    switch (f->cpp_type()) {
      case FD::CPPTYPE_BOOL:
        At(s, "type") = Str("boolean");
        break;
      case FD::CPPTYPE_INT32:
      case FD::CPPTYPE_UINT32:
        At(s, "type") = Str("integer");
        break;
      case FD::CPPTYPE_INT64:
      case FD::CPPTYPE_UINT64:  // proto3 JSON: a string of digits
        At(s, "type") = Str("string");
        At(s, "format") =
            Str(f->cpp_type() == FD::CPPTYPE_INT64 ? "int64" : "uint64");
        break;
      case FD::CPPTYPE_DOUBLE:
      case FD::CPPTYPE_FLOAT:
        At(s, "type") = Str("number");
        break;
      case FD::CPPTYPE_ENUM: {
        At(s, "type") = Str("string");
        pb::Value& values = At(s, "enum");
        for (int i = 0; i < f->enum_type()->value_count(); ++i) {
          *values.mutable_list_value()->add_values() =
              Str(f->enum_type()->value(i)->name());
        }
        break;
      }
      case FD::CPPTYPE_STRING:
        At(s, "type") = Str("string");
        if (f->type() == FD::TYPE_BYTES) At(s, "format") = Str("byte");
        break;
      case FD::CPPTYPE_MESSAGE:
        return MessageType(f->message_type());
    }
    return v;
  }
  pb::Value MessageType(const pb::Descriptor* d) {
    pb::Value v;
    if (d->full_name() == "google.protobuf.Timestamp") {
      At(Obj(v), "type") = Str("string");
      At(Obj(v), "format") = Str("date-time");
    } else if (d->full_name() == "google.protobuf.Duration") {
      At(Obj(v), "type") = Str("string");
      At(Obj(v), "example") = Str("1.5s");
    } else {
      Add(d);
      v = Ref(d);
    }
    return v;
  }

  std::set<const pb::Descriptor*> seen_;
  pb::Struct out_;
};

pb::Value Parameter(const std::string& name, const char* in,
                    const std::string& type) {
  pb::Value p;
  At(Obj(p), "name") = Str(name);
  At(Obj(p), "in") = Str(in);
  if (std::string(in) == "path") At(Obj(p), "required").set_bool_value(true);
  At(Obj(At(Obj(p), "schema")), "type") = Str(type);
  return p;
}

pb::Value Content(const char* type, pb::Value schema) {
  pb::Value c;
  At(Obj(At(Obj(c), type)), "schema") = std::move(schema);
  return c;
}

// A route's operation: parameters, body and answers.
pb::Value Operation(const Route& r, Schemas& schemas, const std::string& id) {
  const pb::Descriptor* in = r.kind == Route::kPull
                                 ? v1::PullRequest::descriptor()
                                 : v1::SetTimerRequest::descriptor()
                                       ->file()
                                       ->FindServiceByName("Delayd")
                                       ->FindMethodByName(r.rpc)
                                       ->input_type();
  const pb::Descriptor* out = r.kind == Route::kPull
                                  ? v1::PullResponse::descriptor()
                                  : in->file()
                                        ->FindServiceByName("Delayd")
                                        ->FindMethodByName(r.rpc)
                                        ->output_type();
  pb::Value op;
  pb::Struct& o = Obj(op);
  At(o, "operationId") = Str(id);
  At(o, "summary") = Str(r.summary);
  pb::Value& params = At(o, "parameters");
  params.mutable_list_value();
  std::set<std::string> bound;
  for (const char* var : {"namespace", "key"}) {
    if (r.path.find(std::string("{") + var + "}") != std::string::npos) {
      *params.mutable_list_value()->add_values() =
          Parameter(var, "path", "string");
      bound.insert(var);
    }
  }
  if (r.kind == Route::kWatch) {
    *params.mutable_list_value()->add_values() =
        Parameter("watch", "query", "integer");
    At(Obj(At(Obj(At(o, "responses")), "200")), "description") =
        Str("text/event-stream: one event per fired timer");
    return op;
  }
  if (r.body) {
    schemas.Add(in);
    At(Obj(At(o, "requestBody")), "content") =
        Content("application/json", Ref(in));
  } else {
    for (int i = 0; i < in->field_count(); ++i) {
      const FD* f = in->field(i);
      if (bound.count(f->name()) || f->cpp_type() == FD::CPPTYPE_MESSAGE) {
        continue;
      }
      const bool integer = f->cpp_type() == FD::CPPTYPE_INT32 ||
                           f->cpp_type() == FD::CPPTYPE_UINT32;
      const char* type = f->cpp_type() == FD::CPPTYPE_BOOL
                             ? "boolean"
                             : (integer ? "integer" : "string");
      *params.mutable_list_value()->add_values() =
          Parameter(f->json_name(), "query", type);
    }
  }
  schemas.Add(out);
  pb::Value& answers = At(o, "responses");
  pb::Value& ok = At(Obj(answers), "200");
  At(Obj(ok), "description") = Str("OK");
  At(Obj(ok), "content") = Content("application/json", Ref(out));
  pb::Value& error = At(Obj(answers), "default");
  At(Obj(error), "description") =
      Str("An error: the gRPC code's name and message");
  pb::Value ref;
  At(Obj(ref), "$ref") = Str("#/components/schemas/Error");
  At(Obj(error), "content") = Content("application/json", std::move(ref));
  return op;
}

pb::Value ErrorSchema() {
  pb::Value inner;
  At(Obj(inner), "type") = Str("object");
  pb::Struct& props = Obj(At(Obj(inner), "properties"));
  At(Obj(At(props, "code")), "type") = Str("integer");
  At(Obj(At(props, "status")), "type") = Str("string");
  At(Obj(At(props, "message")), "type") = Str("string");
  pb::Value schema;
  At(Obj(schema), "type") = Str("object");
  At(Obj(At(Obj(schema), "properties")), "error") = std::move(inner);
  return schema;
}

}  // namespace

std::string OpenApiDocument() {
  pb::Struct doc;
  At(doc, "openapi") = Str("3.0.3");
  At(Obj(At(doc, "info")), "title") = Str("delayd HTTP/JSON API");
  At(Obj(At(doc, "info")), "version") = Str("v1");
  Schemas schemas;
  pb::Struct& paths = Obj(At(doc, "paths"));
  std::map<std::string, int> ids;
  for (const Route& r : Routes()) {
    std::string id = r.rpc;
    if (r.kind == Route::kPull) id = "Pull";
    if (r.kind == Route::kWatch) id = "Watch";
    if (const int n = ids[id]++; n > 0) id += std::to_string(n + 1);
    std::string method = r.method;
    for (char& c : method) c = static_cast<char>(std::tolower(c));
    At(Obj(At(paths, r.path)), method) = Operation(r, schemas, id);
  }
  pb::Struct& components = Obj(At(doc, "components"));
  At(schemas.schemas(), "Error") = ErrorSchema();
  *At(components, "schemas").mutable_struct_value() = schemas.schemas();
  pb::Struct& bearer =
      Obj(At(Obj(At(components, "securitySchemes")), "bearer"));
  At(bearer, "type") = Str("http");
  At(bearer, "scheme") = Str("bearer");
  pb::Value requirement;
  At(Obj(requirement), "bearer").mutable_list_value();
  *At(doc, "security").mutable_list_value()->add_values() = requirement;
  std::string out;
  (void)pb::util::MessageToJsonString(doc, &out);
  return out;
}

}  // namespace delayd::http
