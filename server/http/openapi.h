// The HTTP/JSON API described as an OpenAPI 3.0 document (served at
// /v1/openapi.json), built from the route table and the proto's
// descriptors, so it cannot fall out of step with either.
#ifndef DELAYD_SERVER_HTTP_OPENAPI_H_
#define DELAYD_SERVER_HTTP_OPENAPI_H_

#include <string>

namespace delayd::http {

// The document, as JSON.
std::string OpenApiDocument();

}  // namespace delayd::http

#endif  // DELAYD_SERVER_HTTP_OPENAPI_H_
