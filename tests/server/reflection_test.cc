// gRPC's server reflection, as tools such as grpcurl use it: the daemon
// lists its services and describes each with the files it needs. Run under
// both --threading (ctest's "loop." copy): under `pool` gRPC's reflection
// plugin answers, under `loop` the loop itself (loop_reflection.h), and
// both must answer alike. The messages are gRPC's own, from the
// descriptors its reflection library links in.
#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>
#include <google/protobuf/descriptor_database.h>
#include <google/protobuf/message.h>
#include <grpcpp/impl/rpc_method.h>
#include <grpcpp/support/sync_stream.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "delayd/v1/delayd.pb.h"
#include "server/api/loop_reflection.h"
#include "tests/server/test_client.h"

namespace delayd::testing {
namespace {

namespace pb = google::protobuf;

std::unique_ptr<pb::Message> New(const std::string& name) {
  const pb::Descriptor* d =
      pb::DescriptorPool::generated_pool()->FindMessageTypeByName(
          "grpc.reflection.v1alpha." + name);
  EXPECT_NE(d, nullptr) << name;
  return std::unique_ptr<pb::Message>(
      pb::MessageFactory::generated_factory()->GetPrototype(d)->New());
}

const pb::FieldDescriptor* F(const pb::Message& m, const char* name) {
  return m.GetDescriptor()->FindFieldByName(name);
}

// One ServerReflectionInfo stream, read and written as bytes.
class Reflection {
 public:
  explicit Reflection(const std::shared_ptr<grpc::Channel>& channel)
      : method_(kReflectionMethod, grpc::internal::RpcMethod::BIDI_STREAMING,
                channel) {
    ctx_.set_deadline(std::chrono::system_clock::now() + 20s);
    stream_.reset(grpc::internal::ClientReaderWriterFactory<
                  grpc::ByteBuffer, grpc::ByteBuffer>::Create(channel.get(),
                                                              method_, &ctx_));
  }

  // Sends a request with `field` set to `value` (a string field); the
  // answer, or null if none came.
  std::unique_ptr<pb::Message> Ask(const char* field,
                                   const std::string& value) {
    std::unique_ptr<pb::Message> req = New("ServerReflectionRequest");
    req->GetReflection()->SetString(req.get(), F(*req, "host"), "h");
    req->GetReflection()->SetString(req.get(), F(*req, field), value);
    return Send(*req);
  }

  std::unique_ptr<pb::Message> Send(const pb::Message& req) {
    grpc::Slice out(req.SerializeAsString());
    grpc::ByteBuffer buf(&out, 1);
    if (!stream_->Write(buf)) return nullptr;
    grpc::ByteBuffer in;
    if (!stream_->Read(&in)) return nullptr;
    grpc::Slice slice;
    EXPECT_TRUE(in.DumpToSingleSlice(&slice).ok());
    std::unique_ptr<pb::Message> resp = New("ServerReflectionResponse");
    EXPECT_TRUE(resp->ParseFromArray(slice.begin(), slice.size()));
    EXPECT_EQ(resp->GetReflection()->GetString(*resp, F(*resp, "valid_host")),
              "h");
    EXPECT_EQ(resp->GetReflection()
                  ->GetMessage(*resp, F(*resp, "original_request"))
                  .SerializeAsString(),
              req.SerializeAsString());
    return resp;
  }

  grpc::Status Close() {
    stream_->WritesDone();
    grpc::ByteBuffer in;
    EXPECT_FALSE(stream_->Read(&in)) << "an answer to no request";
    return stream_->Finish();
  }

 private:
  grpc::internal::RpcMethod method_;
  grpc::ClientContext ctx_;
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>>
      stream_;
};

// The error code of an answer (0: none).
int ErrorCode(const pb::Message& resp) {
  if (!resp.GetReflection()->HasField(resp, F(resp, "error_response"))) {
    return 0;
  }
  const pb::Message& e =
      resp.GetReflection()->GetMessage(resp, F(resp, "error_response"));
  return e.GetReflection()->GetInt32(e, F(e, "error_code"));
}

// The files of a file_descriptor_response, by name.
std::vector<pb::FileDescriptorProto> Files(const pb::Message& resp) {
  std::vector<pb::FileDescriptorProto> files;
  const pb::FieldDescriptor* f = F(resp, "file_descriptor_response");
  if (!resp.GetReflection()->HasField(resp, f)) return files;
  const pb::Message& list = resp.GetReflection()->GetMessage(resp, f);
  const pb::FieldDescriptor* each = F(list, "file_descriptor_proto");
  for (int i = 0; i < list.GetReflection()->FieldSize(list, each); ++i) {
    pb::FileDescriptorProto file;
    EXPECT_TRUE(file.ParseFromString(
        list.GetReflection()->GetRepeatedString(list, each, i)));
    files.push_back(file);
  }
  return files;
}

TEST(Reflection, ListsTheServices) {
  TestDaemon d;
  ASSERT_TRUE(d.started());
  Reflection r(d.channel());
  auto resp = r.Ask("list_services", "");
  ASSERT_NE(resp, nullptr);
  const pb::Message& list = resp->GetReflection()->GetMessage(
      *resp, F(*resp, "list_services_response"));
  std::vector<std::string> names;
  const pb::FieldDescriptor* each = F(list, "service");
  for (int i = 0; i < list.GetReflection()->FieldSize(list, each); ++i) {
    const pb::Message& s =
        list.GetReflection()->GetRepeatedMessage(list, each, i);
    names.push_back(s.GetReflection()->GetString(s, F(s, "name")));
  }
  for (const char* want : {"delayd.v1.Delayd", "grpc.health.v1.Health",
                           "grpc.reflection.v1alpha.ServerReflection"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
  }
  EXPECT_TRUE(r.Close().ok());
}

// What a client learns is enough to call every method: the service, its
// methods and their messages, built into a pool of its own from the files
// the daemon sent (each with the files it imports).
TEST(Reflection, DescribesTheServiceWhole) {
  TestDaemon d;
  ASSERT_TRUE(d.started());
  Reflection r(d.channel());
  const pb::ServiceDescriptor* want =
      pb::DescriptorPool::generated_pool()->FindServiceByName(
          "delayd.v1.Delayd");
  ASSERT_NE(want, nullptr);
  // By the service's name, by one method's, by the file's: the same file.
  for (const auto& [field, value] :
       std::vector<std::pair<const char*, std::string>>{
           {"file_containing_symbol", "delayd.v1.Delayd"},
           {"file_containing_symbol", "delayd.v1.Delayd.SetTimer"},
           {"file_by_filename", want->file()->name()}}) {
    SCOPED_TRACE(value);
    auto resp = r.Ask(field, value);
    ASSERT_NE(resp, nullptr);
    EXPECT_EQ(ErrorCode(*resp), 0);
    pb::SimpleDescriptorDatabase db;
    // (A file may come twice in one answer, as from gRPC's own service.)
    for (const auto& f : Files(*resp)) {
      pb::FileDescriptorProto had;
      if (db.FindFileByName(f.name(), &had)) {
        EXPECT_EQ(had.SerializeAsString(), f.SerializeAsString());
      } else {
        ASSERT_TRUE(db.Add(f)) << f.name();
      }
    }
    pb::DescriptorPool pool(&db);
    const pb::ServiceDescriptor* got =
        pool.FindServiceByName("delayd.v1.Delayd");
    ASSERT_NE(got, nullptr);
    ASSERT_EQ(got->method_count(), want->method_count());
    for (int i = 0; i < want->method_count(); ++i) {
      const pb::MethodDescriptor* m = got->method(i);
      EXPECT_EQ(m->name(), want->method(i)->name());
      EXPECT_EQ(m->input_type()->DebugString(),
                want->method(i)->input_type()->DebugString());
      EXPECT_EQ(m->server_streaming(), want->method(i)->server_streaming());
    }
  }
  EXPECT_TRUE(r.Close().ok());
}

// A name the daemon does not know is an answer with NOT_FOUND, and the
// stream goes on.
TEST(Reflection, UnknownNamesAreNotFound) {
  TestDaemon d;
  ASSERT_TRUE(d.started());
  Reflection r(d.channel());
  for (const auto& [field, value] :
       std::vector<std::pair<const char*, std::string>>{
           {"file_by_filename", "no/such.proto"},
           {"file_containing_symbol", "no.such.Service"},
           {"all_extension_numbers_of_type", "no.such.Message"}}) {
    auto resp = r.Ask(field, value);
    ASSERT_NE(resp, nullptr) << value;
    EXPECT_EQ(ErrorCode(*resp), grpc::StatusCode::NOT_FOUND) << value;
  }
  auto ext = New("ServerReflectionRequest");
  pb::Message* e = ext->GetReflection()->MutableMessage(
      ext.get(), F(*ext, "file_containing_extension"));
  e->GetReflection()->SetString(e, F(*e, "containing_type"),
                                "delayd.v1.SetTimerRequest");
  e->GetReflection()->SetInt32(e, F(*e, "extension_number"), 1000);
  ext->GetReflection()->SetString(ext.get(), F(*ext, "host"), "h");
  auto resp = r.Send(*ext);
  ASSERT_NE(resp, nullptr);
  EXPECT_EQ(ErrorCode(*resp), grpc::StatusCode::NOT_FOUND);
  // A message type without extensions: its name and no numbers.
  resp = r.Ask("all_extension_numbers_of_type", "delayd.v1.SetTimerRequest");
  ASSERT_NE(resp, nullptr);
  EXPECT_EQ(ErrorCode(*resp), 0);
  const pb::Message& n = resp->GetReflection()->GetMessage(
      *resp, F(*resp, "all_extension_numbers_response"));
  EXPECT_EQ(n.GetReflection()->GetString(n, F(n, "base_type_name")),
            "delayd.v1.SetTimerRequest");
  EXPECT_EQ(n.GetReflection()->FieldSize(n, F(n, "extension_number")), 0);
  EXPECT_TRUE(r.Close().ok());
}

// The plaintext health port (--health-listen) answers probes and nothing
// else: no reflection there, whose answers would describe the daemon's
// whole API to a caller without TLS or token.
TEST(Reflection, NotOnTheHealthPort) {
  DelaydServer::Options options = TestDaemon::DefaultOptions();
  options.health_listen = "127.0.0.1:0";
  TestDaemon d(options);
  ASSERT_TRUE(d.started());
  ASSERT_NE(d.server().health_port(), 0);
  auto health = grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(d.server().health_port()),
      grpc::InsecureChannelCredentials());
  EXPECT_EQ(Health(health, ""), grpc::health::v1::HealthCheckResponse::SERVING);
  Reflection r(health);
  EXPECT_EQ(r.Ask("list_services", ""), nullptr);
  grpc::Status s = r.Close();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::UNIMPLEMENTED)
      << s.error_message();
  // The daemon's own port still has it.
  Reflection own(d.channel());
  EXPECT_NE(own.Ask("list_services", ""), nullptr);
  EXPECT_TRUE(own.Close().ok());
}

}  // namespace
}  // namespace delayd::testing
