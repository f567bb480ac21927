// gRPC status codes by name ("NOT_FOUND"), as delayctl prints them, the
// daemon labels its metrics and the HTTP door writes its error bodies.
#ifndef DELAYD_PROTO_DELAYD_TEXT_CODE_NAME_H_
#define DELAYD_PROTO_DELAYD_TEXT_CODE_NAME_H_

namespace delayd {

// The name of gRPC status code `code` (0 to 16); "UNKNOWN" for any other.
const char* GrpcCodeName(int code);

}  // namespace delayd

#endif  // DELAYD_PROTO_DELAYD_TEXT_CODE_NAME_H_
