#include "server/api/loop_reflection.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/message.h>

#include <memory>
#include <unordered_set>
#include <utility>

namespace delayd {
namespace {

namespace pb = google::protobuf;

const pb::DescriptorPool& Pool() {
  return *pb::DescriptorPool::generated_pool();
}

// A new message of gRPC's reflection type `name` (see the header), or null
// if the daemon was linked without it.
std::unique_ptr<pb::Message> New(const char* name) {
  const pb::Descriptor* d = Pool().FindMessageTypeByName(
      std::string("grpc.reflection.v1alpha.") + name);
  if (d == nullptr) return nullptr;
  const pb::Message* prototype =
      pb::MessageFactory::generated_factory()->GetPrototype(d);
  return prototype == nullptr ? nullptr
                              : std::unique_ptr<pb::Message>(prototype->New());
}

const pb::FieldDescriptor* Field(const pb::Message& m, const char* name) {
  return m.GetDescriptor()->FindFieldByName(name);
}

// Adds `file`, then every file it imports (each once), to a
// FileDescriptorResponse, as gRPC's reflection service does.
void AddFile(const pb::FileDescriptor* file,
             std::unordered_set<std::string>* seen, pb::Message* files) {
  if (!seen->insert(file->name()).second) return;
  pb::FileDescriptorProto proto;
  file->CopyTo(&proto);
  files->GetReflection()->AddString(
      files, Field(*files, "file_descriptor_proto"), proto.SerializeAsString());
  for (int i = 0; i < file->dependency_count(); ++i) {
    AddFile(file->dependency(i), seen, files);
  }
}

void SetError(pb::Message* resp, grpc::StatusCode code,
              const std::string& message) {
  const pb::Reflection* r = resp->GetReflection();
  pb::Message* e = r->MutableMessage(resp, Field(*resp, "error_response"));
  e->GetReflection()->SetInt32(e, Field(*e, "error_code"), code);
  e->GetReflection()->SetString(e, Field(*e, "error_message"), message);
}

// The file that defines what `req`'s field `asked` names, or null.
const pb::FileDescriptor* FileAsked(const pb::Message& req,
                                    const pb::FieldDescriptor* asked) {
  const pb::Reflection* r = req.GetReflection();
  if (asked->name() == "file_by_filename") {
    return Pool().FindFileByName(r->GetString(req, asked));
  }
  if (asked->name() == "file_containing_symbol") {
    return Pool().FindFileContainingSymbol(r->GetString(req, asked));
  }
  const pb::Message& ext = r->GetMessage(req, asked);
  const pb::Descriptor* type = Pool().FindMessageTypeByName(
      ext.GetReflection()->GetString(ext, Field(ext, "containing_type")));
  if (type == nullptr) return nullptr;
  const pb::FieldDescriptor* found = Pool().FindExtensionByNumber(
      type, ext.GetReflection()->GetInt32(ext, Field(ext, "extension_number")));
  return found == nullptr ? nullptr : found->file();
}

void Answer(const pb::Message& req, const pb::FieldDescriptor* asked,
            const std::vector<std::string>& services, pb::Message* resp) {
  const pb::Reflection* r = resp->GetReflection();
  const std::string& name = asked == nullptr ? "" : asked->name();
  if (name == "list_services") {
    pb::Message* list =
        r->MutableMessage(resp, Field(*resp, "list_services_response"));
    for (const std::string& s : services) {
      pb::Message* one =
          list->GetReflection()->AddMessage(list, Field(*list, "service"));
      one->GetReflection()->SetString(one, Field(*one, "name"), s);
    }
  } else if (name == "all_extension_numbers_of_type") {
    const pb::Descriptor* type = Pool().FindMessageTypeByName(
        req.GetReflection()->GetString(req, asked));
    if (type == nullptr) {
      SetError(resp, grpc::StatusCode::NOT_FOUND, "Type not found.");
      return;
    }
    pb::Message* numbers =
        r->MutableMessage(resp, Field(*resp, "all_extension_numbers_response"));
    const pb::Reflection* nr = numbers->GetReflection();
    nr->SetString(numbers, Field(*numbers, "base_type_name"),
                  type->full_name());
    std::vector<const pb::FieldDescriptor*> extensions;
    Pool().FindAllExtensions(type, &extensions);
    for (const pb::FieldDescriptor* e : extensions) {
      nr->AddInt32(numbers, Field(*numbers, "extension_number"), e->number());
    }
  } else if (!name.empty()) {
    const pb::FileDescriptor* file = FileAsked(req, asked);
    if (file == nullptr) {
      SetError(resp, grpc::StatusCode::NOT_FOUND,
               name == "file_by_filename"         ? "File not found."
               : name == "file_containing_symbol" ? "Symbol not found."
                                                  : "Extension not found.");
      return;
    }
    std::unordered_set<std::string> seen;
    AddFile(file, &seen,
            r->MutableMessage(resp, Field(*resp, "file_descriptor_response")));
  } else {
    SetError(resp, grpc::StatusCode::UNIMPLEMENTED, "");
  }
}

}  // namespace

const std::vector<std::string>& ReflectedServices() {
  static const auto* services =
      new std::vector<std::string>{"delayd.v1.Delayd", "grpc.health.v1.Health",
                                   "grpc.reflection.v1alpha.ServerReflection"};
  return *services;
}

void PrepareReflection() {
  (void)New("ServerReflectionRequest");
  (void)New("ServerReflectionResponse");
  for (const std::string& service : ReflectedServices()) {
    (void)Pool().FindFileContainingSymbol(service);  // (With its imports.)
  }
}

bool ReflectionAnswer(const std::string& request,
                      const std::vector<std::string>& services,
                      std::string* response) {
  std::unique_ptr<pb::Message> req = New("ServerReflectionRequest");
  std::unique_ptr<pb::Message> resp = New("ServerReflectionResponse");
  if (req == nullptr || resp == nullptr || !req->ParseFromString(request)) {
    return false;
  }
  const pb::Reflection* r = resp->GetReflection();
  r->SetString(resp.get(), Field(*resp, "valid_host"),
               req->GetReflection()->GetString(*req, Field(*req, "host")));
  r->MutableMessage(resp.get(), Field(*resp, "original_request"))
      ->CopyFrom(*req);
  const pb::OneofDescriptor* oneof =
      req->GetDescriptor()->FindOneofByName("message_request");
  Answer(*req,
         oneof == nullptr
             ? nullptr
             : req->GetReflection()->GetOneofFieldDescriptor(*req, oneof),
         services, resp.get());
  return resp->SerializeToString(response);
}

ReflectionOnQueue::ReflectionOnQueue(QueueCall* call,
                                     const std::vector<std::string>& services)
    : QueueReactor(call), services_(services) {
  StartRead(&in_);
}

void ReflectionOnQueue::OnReadDone(bool ok) {
  if (!ok) {  // (The client closed its side, or the call is over.)
    FinishOnce(grpc::Status::OK);
    return;
  }
  grpc::Slice slice;
  std::string answer;
  if ((!in_.TrySingleSlice(&slice).ok() &&
       !in_.DumpToSingleSlice(&slice).ok()) ||
      !ReflectionAnswer(
          std::string(reinterpret_cast<const char*>(slice.begin()),
                      slice.size()),
          services_, &answer)) {
    FinishOnce(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                            "not a ServerReflectionRequest"));
    return;
  }
  MutexLock lock(&mu_);
  if (finished_) return;
  grpc::Slice out(answer);
  out_ = grpc::ByteBuffer(&out, 1);
  StartWrite(&out_);
}

void ReflectionOnQueue::OnWriteDone(bool ok) {
  if (!ok) {
    FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "write failed"));
    return;
  }
  MutexLock lock(&mu_);
  if (!finished_) StartRead(&in_);
}

void ReflectionOnQueue::OnCancel() {
  FinishOnce(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled"));
}

void ReflectionOnQueue::FinishOnce(const grpc::Status& status) {
  {
    MutexLock lock(&mu_);
    if (std::exchange(finished_, true)) return;
  }
  Finish(status);
}

}  // namespace delayd
