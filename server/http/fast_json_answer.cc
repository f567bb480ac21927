// The writers of fast_json.h.
#include <google/protobuf/util/time_util.h>

#include <string>

#include "server/http/fast_json.h"
#include "server/http/json_text.h"

namespace delayd::http::fast {
namespace {

// `s` as protobuf's printer quotes it, or false if it holds a byte beyond
// ASCII (whose escapes, e.g. of U+2028, the printer decides).
bool Quote(std::string_view s, std::string* out) {
  for (const char c : s) {
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  }
  *out += json::Quote(s);
  return true;
}

// As protobuf writes a google.protobuf.Timestamp (TimeUtil::ToString: RFC
// 3339 in UTC, 0, 3, 6 or 9 digits of fraction); false outside the range it
// writes (years 1 to 9999), which the daemon's fire times never leave.
bool Timestamp(const google::protobuf::Timestamp& t, std::string* out) {
  using google::protobuf::util::TimeUtil;
  if (t.seconds() < TimeUtil::kTimestampMinSeconds ||
      t.seconds() > TimeUtil::kTimestampMaxSeconds || t.nanos() < 0 ||
      t.nanos() > 999'999'999) {
    return false;
  }
  out->push_back('"');
  *out += TimeUtil::ToString(t);
  out->push_back('"');
  return true;
}

}  // namespace

std::optional<std::string> ResponseJson(const v1::BatchResponse& response) {
  std::string out = "{\"results\":[";
  out.reserve(16 + 80 * static_cast<std::size_t>(response.results_size()));
  for (const v1::BatchResult& r : response.results()) {
    if (out.back() != '[') out.push_back(',');
    out += "{\"code\":";
    out += std::to_string(r.code());
    out += ",\"message\":";
    if (!Quote(r.message(), &out)) return std::nullopt;
    out += ",\"version\":\"";
    out += std::to_string(r.version());
    out.push_back('"');
    if (r.has_fire_time()) {
      out += ",\"fireTime\":";
      if (!Timestamp(r.fire_time(), &out)) return std::nullopt;
    }
    out.push_back('}');
  }
  out += "]}";
  return out;
}

std::optional<std::string> ResponseJson(const v1::SetTimerResponse& response) {
  // (Protobuf's printer puts the message fields after the others.)
  std::string out = "{\"version\":\"" + std::to_string(response.version()) +
                    "\",\"replaced\":";
  out += response.replaced() ? "true" : "false";
  if (response.has_fire_time()) {
    out += ",\"fireTime\":";
    if (!Timestamp(response.fire_time(), &out)) return std::nullopt;
  }
  out.push_back('}');
  return out;
}

}  // namespace delayd::http::fast
