#include "server/store/batch.h"

#include <cassert>

#include "server/common/record_codec.h"

namespace delayd {
namespace {

using record::AppendRaw;
using record::ReadRaw;

void AppendString(std::string& out, std::string_view s) {
  AppendRaw(out, static_cast<std::uint32_t>(s.size()));
  out.append(s);
}

std::string_view ReadString(const char*& p) {
  const auto n = ReadRaw<std::uint32_t>(p);
  std::string_view s(p, n);
  p += n;
  return s;
}

void AppendTimer(std::string& out, const StoredTimer& t) {
  AppendRaw(out, t.payload_id);
  AppendRaw(out, t.ns);
  AppendRaw(out, t.fire_time);
  AppendRaw(out, t.version);
  AppendString(out, t.key);
}

StoredTimer ReadTimer(const char*& p) {
  StoredTimer t;
  t.payload_id = ReadRaw<std::uint64_t>(p);
  t.ns = ReadRaw<NamespaceId>(p);
  t.fire_time = ReadRaw<WallNanos>(p);
  t.version = ReadRaw<std::uint64_t>(p);
  t.key = ReadString(p);
  return t;
}

}  // namespace

void Batch::AddTimer(const StoredTimer& timer, std::string_view payload) {
  Begin(Kind::kAddTimer);
  AppendTimer(rep_, timer);
  AppendString(rep_, payload);
}

void Batch::MoveTimer(const StoredTimer& timer) {
  Begin(Kind::kMoveTimer);
  AppendTimer(rep_, timer);
}

void Batch::RemoveTimer(std::uint64_t payload_id) {
  Begin(Kind::kRemoveTimer);
  AppendRaw(rep_, payload_id);
}

void Batch::FireTimer(const StoredEvent& e) {
  Begin(Kind::kFireTimer);
  AppendRaw(rep_, e.id);
  AppendRaw(rep_, e.ns);
  AppendRaw(rep_, e.version);
  AppendRaw(rep_, e.fire_time);
  AppendRaw(rep_, e.fired_at);
  AppendRaw(rep_, static_cast<std::uint8_t>(e.reason));
  AppendRaw(rep_, e.payload_id);
  AppendString(rep_, e.key);
}

void Batch::RemoveEvent(std::uint64_t event_id, std::uint64_t payload_id,
                        bool with_fate) {
  Begin(Kind::kRemoveEvent);
  AppendRaw(rep_, event_id);
  AppendRaw(rep_, payload_id);
  AppendRaw<std::uint8_t>(rep_, with_fate ? 1 : 0);
}

void Batch::PutFate(std::uint64_t event_id, std::uint64_t payload_id,
                    const StoredFate& fate) {
  Begin(Kind::kPutFate);
  AppendRaw(rep_, event_id);
  AppendRaw(rep_, payload_id);
  AppendRaw(rep_, fate.attempts);
  AppendRaw<std::uint8_t>(rep_, fate.dead ? 1 : 0);
  AppendRaw(rep_, fate.retry_at);
  AppendString(rep_, fate.error);
}

void Batch::RemoveFate(std::uint64_t event_id, std::uint64_t payload_id) {
  Begin(Kind::kRemoveFate);
  AppendRaw(rep_, event_id);
  AppendRaw(rep_, payload_id);
}

void Batch::ReserveIds(std::uint32_t partition, std::uint64_t version_limit,
                       std::uint64_t event_seq_limit) {
  Begin(Kind::kReserveIds);
  AppendRaw(rep_, partition);
  AppendRaw(rep_, version_limit);
  AppendRaw(rep_, event_seq_limit);
}

void Batch::PutNamespace(NamespaceId id, std::string_view name) {
  Begin(Kind::kPutNamespace);
  AppendRaw(rep_, id);
  AppendString(rep_, name);
}

void Batch::PutPolicy(std::string_view name, std::string_view encoded) {
  Begin(Kind::kPutPolicy);
  AppendString(rep_, name);
  AppendString(rep_, encoded);
}

void Batch::PutSchedule(NamespaceId ns, std::string_view key,
                        std::string_view encoded) {
  Begin(Kind::kPutSchedule);
  AppendRaw(rep_, ns);
  AppendString(rep_, key);
  AppendString(rep_, encoded);
}

void Batch::PutDedup(NamespaceId ns, std::string_view key,
                     std::string_view encoded) {
  Begin(Kind::kPutDedup);
  AppendRaw(rep_, ns);
  AppendString(rep_, key);
  AppendString(rep_, encoded);
}

bool Batch::Reader::Next(Change* c) {
  if (p_ == end_) return false;
  const char*& p = p_;
  c->kind = static_cast<Kind>(ReadRaw<std::uint8_t>(p));
  switch (c->kind) {
    case Kind::kAddTimer:
      c->timer = ReadTimer(p);
      c->data = ReadString(p);
      break;
    case Kind::kMoveTimer:
      c->timer = ReadTimer(p);
      break;
    case Kind::kRemoveTimer:
      c->payload_id = ReadRaw<std::uint64_t>(p);
      break;
    case Kind::kFireTimer: {
      StoredEvent& e = c->event;
      e.id = ReadRaw<std::uint64_t>(p);
      e.ns = ReadRaw<NamespaceId>(p);
      e.version = ReadRaw<std::uint64_t>(p);
      e.fire_time = ReadRaw<WallNanos>(p);
      e.fired_at = ReadRaw<WallNanos>(p);
      e.reason = static_cast<Reason>(ReadRaw<std::uint8_t>(p));
      e.payload_id = ReadRaw<std::uint64_t>(p);
      e.key = ReadString(p);
      break;
    }
    case Kind::kRemoveEvent:
      c->id = ReadRaw<std::uint64_t>(p);
      c->payload_id = ReadRaw<std::uint64_t>(p);
      c->flag = ReadRaw<std::uint8_t>(p) != 0;
      break;
    case Kind::kPutFate:
      c->id = ReadRaw<std::uint64_t>(p);
      c->payload_id = ReadRaw<std::uint64_t>(p);
      c->fate.attempts = ReadRaw<std::uint32_t>(p);
      c->fate.dead = ReadRaw<std::uint8_t>(p) != 0;
      c->fate.retry_at = ReadRaw<WallNanos>(p);
      c->fate.error = ReadString(p);
      break;
    case Kind::kRemoveFate:
      c->id = ReadRaw<std::uint64_t>(p);
      c->payload_id = ReadRaw<std::uint64_t>(p);
      break;
    case Kind::kReserveIds:
      c->partition = ReadRaw<std::uint32_t>(p);
      c->version_limit = ReadRaw<std::uint64_t>(p);
      c->event_seq_limit = ReadRaw<std::uint64_t>(p);
      break;
    case Kind::kPutNamespace:
      c->id = ReadRaw<NamespaceId>(p);
      c->name = ReadString(p);
      break;
    case Kind::kPutPolicy:
      c->name = ReadString(p);
      c->data = ReadString(p);
      break;
    case Kind::kPutSchedule:
    case Kind::kPutDedup:
      c->id = ReadRaw<NamespaceId>(p);
      c->name = ReadString(p);
      c->data = ReadString(p);
      break;
  }
  assert(p_ <= end_);
  return true;
}

std::map<std::uint64_t, std::optional<std::string>> PayloadsIn(
    std::span<const std::shared_ptr<const Batch>> batches) {
  std::map<std::uint64_t, std::optional<std::string>> payloads;
  for (const auto& batch : batches) {
    Batch::Reader reader(*batch);
    Batch::Change c;
    while (reader.Next(&c)) {
      if (c.kind == Batch::Kind::kAddTimer) {
        payloads[c.timer.payload_id] = std::string(c.data);
      } else if (c.kind == Batch::Kind::kRemoveTimer ||
                 c.kind == Batch::Kind::kRemoveEvent) {
        payloads[c.payload_id] = std::nullopt;
      }
    }
  }
  return payloads;
}

}  // namespace delayd
