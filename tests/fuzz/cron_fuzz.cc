// libFuzzer target: cron expressions and time zones from clients. The input
// is an expression, then optionally a newline and a zone name. Parsing must
// never crash or hang, and a spec that parses must keep its promises: each
// next instant is strictly after the one asked from, in order.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/schedule/spec.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

constexpr delayd::WallNanos kFrom = 1'790'000'000'000'000'000;  // In 2026.

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  if (size > 256) return 0;  // the service bounds a spec's length
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const auto nl = in.find('\n');
  const std::string_view expr = in.substr(0, nl);
  const std::string_view zone =
      nl == std::string_view::npos ? "UTC" : in.substr(nl + 1);
  delayd::schedule::Spec spec;
  if (!delayd::schedule::Spec::Cron(expr, zone, &spec).ok()) return 0;
  delayd::WallNanos after = kFrom;
  for (delayd::WallNanos t : spec.Preview(kFrom, 8)) {
    Check(t > after);
    after = t;
  }
  return 0;
}
