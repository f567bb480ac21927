#include "server/http/json_text.h"

#include <cstdio>

namespace delayd::http::json {

std::string Quote(std::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == '<' || c == '>' ||
            c == 0x7f) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += c;  // (UTF-8 passes through as it is)
        }
    }
  }
  return out + "\"";
}

std::string Object(const Members& members) {
  std::string out = "{";
  for (const auto& [name, value] : members) {
    if (out.size() > 1) out += ',';
    out += Quote(name) + ":" + value;
  }
  return out + "}";
}

std::string Array(const std::vector<std::string>& values) {
  std::string out = "[";
  for (const std::string& v : values) {
    if (out.size() > 1) out += ',';
    out += v;
  }
  return out + "]";
}

}  // namespace delayd::http::json
