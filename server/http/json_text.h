// JSON text built in order, for the door's own documents (the OpenAPI
// document, query strings turned into JSON). google.protobuf.Struct would
// do it, but its map is code inlined from protobuf's headers working on
// maps the library built: under ThreadSanitizer, which changes how those
// headers compile, the two disagree and the process crashes. These few
// functions need no map.
#ifndef DELAYD_SERVER_HTTP_JSON_TEXT_H_
#define DELAYD_SERVER_HTTP_JSON_TEXT_H_

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace delayd::http::json {

// `s` as a JSON string, quoted and escaped as protobuf's JSON printer
// escapes ASCII: `"`, `\`, control characters (\b \f \n \r \t by name),
// `<`, `>` and DEL as \u00XX. Valid UTF-8 passes through; a byte that
// starts no valid sequence becomes U+FFFD (\ufffd), so the text is valid
// JSON whatever `s` holds (an error may quote what a client sent).
std::string Quote(std::string_view s);

// An object from (name, JSON value) pairs, in their order.
using Members = std::vector<std::pair<std::string, std::string>>;
std::string Object(const Members& members);

// An array of JSON values.
std::string Array(const std::vector<std::string>& values);

}  // namespace delayd::http::json

#endif  // DELAYD_SERVER_HTTP_JSON_TEXT_H_
