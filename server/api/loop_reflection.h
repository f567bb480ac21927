// gRPC's server reflection (grpc.reflection.v1alpha.ServerReflection,
// https://github.com/grpc/grpc/blob/master/doc/server-reflection.md) served
// on the loop (loop_server.h), so that tools such as grpcurl work under
// either --threading. Under `pool` gRPC's reflection plugin serves it; that
// is a synchronous service, whose threads would poll gRPC's network beside
// the loop and hand it every call they read. The answers are the plugin's:
// each file comes with every file it imports, and a name not found gets
// an error response with NOT_FOUND.
//
// The messages are gRPC's own, taken from the descriptors its reflection
// library links into the daemon (they come with no C++ headers), and read
// and written through protobuf's reflection.
#ifndef DELAYD_SERVER_API_LOOP_REFLECTION_H_
#define DELAYD_SERVER_API_LOOP_REFLECTION_H_

#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "server/api/queue_call.h"
#include "server/common/mutex.h"

namespace delayd {

// The method this serves.
inline constexpr char kReflectionMethod[] =
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";

// The services a loop's server lists: what gRPC's plugin lists under
// `pool`.
const std::vector<std::string>& ReflectedServices();

// Builds the descriptors the answers read (gRPC's reflection messages, and
// the files of ReflectedServices() with their imports). Protobuf builds a
// file lazily, under a mutex of its own, on whichever thread first asks;
// called before the loop starts, the loop only reads them.
void PrepareReflection();

// The answer to one request (a ServerReflectionRequest's bytes), listing
// `services` when asked; false if the bytes are not a request.
bool ReflectionAnswer(const std::string& request,
                      const std::vector<std::string>& services,
                      std::string* response);

// One ServerReflectionInfo stream: one answer per request, in order, until
// the client closes its side. Locking: mu_ guards whether it finished (a
// cancel may come on another thread while a read or write completes).
class ReflectionOnQueue final : public QueueReactor {
 public:
  ReflectionOnQueue(QueueCall* call, const std::vector<std::string>& services);
  void OnReadDone(bool ok) override EXCLUDES(mu_);
  void OnWriteDone(bool ok) override EXCLUDES(mu_);
  void OnCancel() override EXCLUDES(mu_);
  void OnDone() override { delete this; }

 private:
  void FinishOnce(const grpc::Status& status) EXCLUDES(mu_);

  const std::vector<std::string>& services_;
  grpc::ByteBuffer in_, out_;
  Mutex mu_;
  bool finished_ GUARDED_BY(mu_) = false;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_API_LOOP_REFLECTION_H_
