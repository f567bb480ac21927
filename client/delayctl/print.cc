#include "client/delayctl/print.h"

#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/time_util.h>

#include <algorithm>
#include <cstdio>

namespace delayctl {

std::string Json(const google::protobuf::Message& m) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(m, &out, options);
  return out;
}

std::string JsonString(const std::string& text) {
  std::string out = "\"";
  for (unsigned char ch : text) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "\"";
}

std::string Time(const google::protobuf::Timestamp& t) {
  return google::protobuf::util::TimeUtil::ToString(t);
}

void PrintTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> width;
  for (const auto& r : rows) {
    width.resize(std::max(width.size(), r.size()));
    for (std::size_t c = 0; c < r.size(); ++c) {
      width[c] = std::max(width[c], r[c].size());
    }
  }
  for (const auto& r : rows) {
    std::string line;
    for (std::size_t c = 0; c < r.size(); ++c) {
      line += r[c];
      if (c + 1 < r.size()) {
        line += std::string(width[c] - r[c].size() + 2, ' ');
      }
    }
    std::printf("%s\n", line.c_str());
  }
}

std::string Shown(const std::string& payload) {
  for (unsigned char c : payload) {
    if (c < 0x20 || c == 0x7f) {
      // (Appended: GCC 12 at -O3 warns, falsely, under -Wrestrict about a
      // literal + std::string.)
      return std::string("<")
          .append(std::to_string(payload.size()))
          .append(" bytes>");
    }
  }
  return payload;
}

std::string ReasonName(delayd::v1::Reason r) {
  return r == delayd::v1::REASON_DRAINED ? "DRAINED" : "EXPIRED";
}

void PrintEvent(bool json, const delayd::v1::Event& e) {
  if (json) {
    std::printf("%s\n", Json(e).c_str());
  } else {
    std::printf("%llu %s %s v%llu attempt=%u %s fire=%s fired=%s %s\n",
                static_cast<unsigned long long>(e.id()), e.namespace_().c_str(),
                e.key().c_str(), static_cast<unsigned long long>(e.version()),
                e.attempt(), ReasonName(e.reason()).c_str(),
                Time(e.fire_time()).c_str(), Time(e.fired_at()).c_str(),
                Shown(e.payload()).c_str());
  }
  std::fflush(stdout);
}

}  // namespace delayctl
