// libFuzzer target: the Batch wire reader. Whatever it accepts, protobuf
// must read the same; it must stop at the operation limit; the operation
// counter must agree with protobuf's count; a request without its unknown
// fields must parse exactly when the request does, to the same message.
#include <google/protobuf/stubs/logging.h>
#include <google/protobuf/util/message_differencer.h>

#include <cstdint>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "server/api/batch_wire.h"

namespace {
constexpr std::size_t kMaxOps = 64;

void Check(bool ok) {
  if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data,
                                      std::size_t size) {
  // Protobuf's UTF-8 complaints are expected.
  static google::protobuf::LogSilencer quiet;
  const std::string_view wire(reinterpret_cast<const char*>(data), size);
  std::vector<delayd::OpFields> fast;
  const delayd::WireRead read = delayd::ReadBatchRequest(wire, kMaxOps, &fast);
  delayd::v1::BatchRequest msg;
  const bool parsed = msg.ParseFromArray(data, static_cast<int>(size));
  const auto count = delayd::CountBatchOperations(wire, kMaxOps);
  if (parsed) {
    // Protobuf's operations, counted up to the limit + 1.
    Check(count.has_value());
    Check(*count == std::min<std::size_t>(msg.operations_size(), kMaxOps + 1));
  }
  const auto known =
      delayd::KnownFieldsOnly(wire, delayd::v1::BatchRequest::descriptor());
  delayd::v1::BatchRequest stripped;
  Check(parsed == (known && stripped.ParseFromString(*known)));
  if (parsed) {
    Check(known->size() <= size);
    delayd::v1::BatchRequest without = msg;
    without.DiscardUnknownFields();
    Check(
        google::protobuf::util::MessageDifferencer::Equals(without, stripped));
  }
  switch (read) {
    case delayd::WireRead::kOk: {
      Check(parsed);
      Check(fast.size() == static_cast<std::size_t>(msg.operations_size()));
      Check(fast.size() <= kMaxOps);
      for (int i = 0; i < msg.operations_size(); ++i) {
        Check(fast[i] == delayd::FieldsOf(msg.operations(i)));
      }
      break;
    }
    case delayd::WireRead::kTooMany:
      Check(fast.size() == kMaxOps);
      Check(!count || *count > kMaxOps);
      break;
    case delayd::WireRead::kNotPlain:
      break;
  }
  return 0;
}
