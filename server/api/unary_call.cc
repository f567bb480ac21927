#include "server/api/unary_call.h"

#include <grpcpp/impl/codegen/proto_utils.h>

#include <string>

#include "server/common/limit_log.h"

namespace delayd {

grpc::Status ToGrpc(const Status& status) {
  switch (status.code()) {
    case Code::kOk:
      return grpc::Status::OK;
    case Code::kInvalidArgument:
      return {grpc::StatusCode::INVALID_ARGUMENT, status.message()};
    case Code::kNotFound:
      return {grpc::StatusCode::NOT_FOUND, status.message()};
    case Code::kAlreadyExists:
      return {grpc::StatusCode::ALREADY_EXISTS, status.message()};
    case Code::kAborted:
      return {grpc::StatusCode::ABORTED, status.message()};
    case Code::kResourceExhausted:
      return {grpc::StatusCode::RESOURCE_EXHAUSTED, status.message()};
    case Code::kUnavailable:
      return {grpc::StatusCode::UNAVAILABLE, status.message()};
    case Code::kInternal:
      return {grpc::StatusCode::INTERNAL, status.message()};
    case Code::kUnauthenticated:
      return {grpc::StatusCode::UNAUTHENTICATED, status.message()};
    case Code::kPermissionDenied:
      return {grpc::StatusCode::PERMISSION_DENIED, status.message()};
    case Code::kFailedPrecondition:
      return {grpc::StatusCode::FAILED_PRECONDITION, status.message()};
  }
  return {grpc::StatusCode::UNKNOWN, status.message()};
}

Status ReadRequest(const grpc::ByteBuffer& in, std::size_t limit,
                   std::string_view method, std::string_view from,
                   google::protobuf::MessageLite* request) {
  const std::size_t size = in.Length();
  if (size > limit) {
    return Status::ResourceExhausted(
        "request: " + std::to_string(size) + " bytes, over the " +
        std::to_string(limit) + "-byte limit of " + std::string(method) +
        " (it follows " + std::string(from) + ")");
  }
  // (Deserialize takes the buffer's slices and clears it: a copy, which
  // shares them.)
  grpc::ByteBuffer bytes(in);
  if (!grpc::SerializationTraits<google::protobuf::MessageLite>::Deserialize(
           &bytes, request)
           .ok()) {
    return Status::InvalidArgument("request: not a valid " +
                                   request->GetTypeName());
  }
  return Status::Ok();
}

grpc::ServerUnaryReactor* UnaryCall::Reply(
    const Status& status, const google::protobuf::MessageLite* response) {
  if (status.code() == Code::kResourceExhausted) {
    LogLimitHit("resource", status.message());
  }
  grpc::Status answer = ToGrpc(status);
  if (status.ok()) {
    bool own_buffer;
    answer =
        response == nullptr
            ? grpc::Status(grpc::StatusCode::INTERNAL, "no response")
            : grpc::SerializationTraits<
                  google::protobuf::MessageLite>::Serialize(*response, out_,
                                                            &own_buffer);
  }
  metrics_.Observe(answer.error_code(),
                   std::chrono::steady_clock::now() - started_);
  grpc::ServerUnaryReactor* const reactor = reactor_;
  if (answer_) {
    Answer a = std::move(answer_);
    delete this;
    a(std::move(answer));
    return nullptr;
  }
  delete this;
  reactor->Finish(std::move(answer));
  return reactor;
}

void UnaryCall::Relay(grpc::Status status) {
  metrics_.Observe(status.error_code(),
                   std::chrono::steady_clock::now() - started_);
  grpc::ServerUnaryReactor* const reactor = reactor_;
  if (answer_) {
    Answer a = std::move(answer_);
    delete this;
    a(std::move(status));
    return;
  }
  delete this;
  reactor->Finish(std::move(status));
}

}  // namespace delayd
