// The core's one status type. The gRPC service converts it to grpc::Status in
// exactly one place (service.cc: ToGrpc).
#ifndef DELAYD_SERVER_COMMON_STATUS_H_
#define DELAYD_SERVER_COMMON_STATUS_H_

#include <string>
#include <utility>

namespace delayd {

enum class Code {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kAlreadyExists,
  kAborted,  // An expected version did not match.
  kResourceExhausted,
  kUnavailable,  // Shutting down.
  kInternal,
  kUnauthenticated,   // No or unknown credentials.
  kPermissionDenied,  // Known credentials without the needed grant.
  kFailedPrecondition,
};

class Status {
 public:
  Status() = default;
  static Status Ok() { return {}; }
  static Status InvalidArgument(std::string m) {
    return {Code::kInvalidArgument, std::move(m)};
  }
  static Status NotFound(std::string m) {
    return {Code::kNotFound, std::move(m)};
  }
  static Status AlreadyExists(std::string m) {
    return {Code::kAlreadyExists, std::move(m)};
  }
  static Status Aborted(std::string m) {
    return {Code::kAborted, std::move(m)};
  }
  static Status ResourceExhausted(std::string m) {
    return {Code::kResourceExhausted, std::move(m)};
  }
  static Status Unavailable(std::string m) {
    return {Code::kUnavailable, std::move(m)};
  }
  static Status Internal(std::string m) {
    return {Code::kInternal, std::move(m)};
  }
  static Status Unauthenticated(std::string m) {
    return {Code::kUnauthenticated, std::move(m)};
  }
  static Status PermissionDenied(std::string m) {
    return {Code::kPermissionDenied, std::move(m)};
  }
  static Status FailedPrecondition(std::string m) {
    return {Code::kFailedPrecondition, std::move(m)};
  }
  // A read that failed for `cause`: UNAVAILABLE (retryable) if the store is
  // away for now, else INTERNAL (what should be there is not). The message
  // is `m`, then the cause's.
  static Status ReadFailed(const Status& cause, std::string m) {
    m += ": " + cause.message();
    return cause.code() == Code::kUnavailable ? Unavailable(std::move(m))
                                              : Internal(std::move(m));
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

 private:
  Status(Code code, std::string message)
      : code_(code), message_(std::move(message)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_COMMON_STATUS_H_
