// The statements of one write group's transaction (pg_store.h, "Writes").
#ifndef DELAYD_SERVER_STORE_POSTGRES_PG_GROUP_H_
#define DELAYD_SERVER_STORE_POSTGRES_PG_GROUP_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "server/store/batch.h"
#include "server/store/postgres/pg_wire.h"

namespace delayd::pg {

// The statements of one group's transaction, in order. Consecutive changes
// of one kind become one statement over arrays; within such a run, a later
// change of the same row replaces an earlier one.
class GroupStatements {
 public:
  struct Statement {
    const char* name;
    pg::Params params;
  };

  GroupStatements(
      std::vector<std::string>& names,
      std::function<std::uint32_t(std::string_view, std::string_view)>
          partition_of)
      : names_(names), partition_of_(std::move(partition_of)) {}

  void Add(const Batch& batch) {
    Batch::Reader reader(batch);
    Batch::Change c;
    while (reader.Next(&c)) Add(c);
  }
  std::vector<Statement> Finish() {
    FlushRun();
    return std::move(out_);
  }

 private:
  enum class Run { kNone, kAdd, kMove, kRemove, kFire, kFate, kUnfate };

  const std::string& NameOf(NamespaceId ns) const {
    static const std::string kUnknown;
    return ns < names_.size() ? names_[ns] : kUnknown;
  }

  void Begin(Run run) {
    if (run_ == run) return;
    FlushRun();
    run_ = run;
    // The element types of the run's columns, as its statement casts them.
    switch (run) {
      case Run::kAdd:
        Columns({pg::kInt8, pg::kInt2, pg::kText, pg::kBytea, pg::kInt8,
                 pg::kInt8, pg::kBytea});
        break;
      case Run::kFire:
        Columns({pg::kInt8, pg::kInt8, pg::kInt8, pg::kInt2, pg::kInt8,
                 pg::kInt8, pg::kInt8});
        break;
      default:
        Columns({pg::kInt8, pg::kInt8, pg::kInt8, pg::kInt8, pg::kInt8,
                 pg::kInt8, pg::kInt8});
    }
  }
  void Columns(std::initializer_list<pg::Oid> types) {
    pg::Array* columns[] = {&a_, &b_, &c_, &d_, &e_, &f_, &g_};
    std::size_t i = 0;
    for (pg::Oid t : types) *columns[i++] = pg::Array(t);
  }

  void Add(const Batch::Change& c) {
    switch (c.kind) {
      case Batch::Kind::kAddTimer: {
        Begin(Run::kAdd);
        const std::string& ns = NameOf(c.timer.ns);
        a_.Int64(static_cast<std::int64_t>(c.timer.payload_id));
        b_.Int16(static_cast<std::int16_t>(partition_of_(ns, c.timer.key)));
        c_.Bytes(ns);
        d_.Bytes(c.timer.key);
        e_.Int64(c.timer.fire_time);
        f_.Int64(static_cast<std::int64_t>(c.timer.version));
        g_.Bytes(c.data);
        break;
      }
      case Batch::Kind::kMoveTimer:
        Begin(Run::kMove);
        moves_[c.timer.payload_id] = {
            c.timer.fire_time, static_cast<std::int64_t>(c.timer.version)};
        break;
      case Batch::Kind::kRemoveTimer:
      case Batch::Kind::kRemoveEvent:
        Begin(Run::kRemove);
        a_.Int64(static_cast<std::int64_t>(c.payload_id));
        break;
      case Batch::Kind::kFireTimer:
        Begin(Run::kFire);
        a_.Int64(static_cast<std::int64_t>(c.event.payload_id));
        b_.Int64(static_cast<std::int64_t>(c.event.id));
        c_.Int64(c.event.fired_at);
        d_.Int16(static_cast<std::int16_t>(c.event.reason));
        e_.Int64(c.event.fire_time);
        f_.Int64(static_cast<std::int64_t>(c.event.version));
        break;
      case Batch::Kind::kPutFate:
        Begin(Run::kFate);
        fates_[c.payload_id] = {c.id, c.fate.attempts, c.fate.dead,
                                std::string(c.fate.error), c.fate.retry_at};
        break;
      case Batch::Kind::kRemoveFate:
        Begin(Run::kUnfate);
        a_.Int64(static_cast<std::int64_t>(c.payload_id));
        b_.Int64(static_cast<std::int64_t>(c.id));
        break;
      case Batch::Kind::kReserveIds: {
        FlushRun();
        pg::Params p;
        p.Int32(static_cast<std::int32_t>(c.partition));
        p.Int64(static_cast<std::int64_t>(c.version_limit));
        p.Int64(static_cast<std::int64_t>(c.event_seq_limit));
        out_.push_back({"counters", std::move(p)});
        break;
      }
      case Batch::Kind::kPutNamespace:
        // Rows carry names, not ids: nothing to write, but later changes of
        // the id name this namespace.
        if (names_.size() <= c.id) names_.resize(c.id + 1);
        names_[c.id] = std::string(c.name);
        break;
      case Batch::Kind::kPutPolicy: {
        FlushRun();
        pg::Params p;
        p.Bytes(c.name);
        pg::Params notify;
        notify.Bytes(c.name);
        if (c.data.empty()) {
          out_.push_back({"unpolicy", std::move(p)});
        } else {
          p.Bytes(c.data);
          out_.push_back({"policy", std::move(p)});
        }
        out_.push_back({"notify_policy", std::move(notify)});
        break;
      }
      case Batch::Kind::kPutSchedule:
      case Batch::Kind::kPutDedup: {
        FlushRun();
        const bool schedule = c.kind == Batch::Kind::kPutSchedule;
        const std::string& ns = NameOf(static_cast<NamespaceId>(c.id));
        pg::Params p;
        if (c.data.empty()) {
          p.Bytes(ns);
          p.Bytes(c.name);
          out_.push_back({schedule ? "unschedule" : "undedup", std::move(p)});
        } else {
          p.Int16(static_cast<std::int16_t>(partition_of_(ns, c.name)));
          p.Bytes(ns);
          p.Bytes(c.name);
          p.Bytes(c.data);
          out_.push_back({schedule ? "schedule" : "dedup", std::move(p)});
        }
        break;
      }
    }
  }

  void FlushRun() {
    pg::Params p;
    switch (run_) {
      case Run::kNone:
        return;
      case Run::kAdd:
        for (pg::Array* a : {&a_, &b_, &c_, &d_, &e_, &f_, &g_}) {
          p.Add(a->Encode());
        }
        out_.push_back({"add", std::move(p)});
        break;
      case Run::kMove: {
        pg::Array ids(pg::kInt8), fire(pg::kInt8), version(pg::kInt8);
        for (const auto& [id, m] : moves_) {
          ids.Int64(static_cast<std::int64_t>(id));
          fire.Int64(m.first);
          version.Int64(m.second);
        }
        for (pg::Array* a : {&ids, &fire, &version}) p.Add(a->Encode());
        out_.push_back({"move", std::move(p)});
        break;
      }
      case Run::kRemove:
        p.Add(a_.Encode());
        out_.push_back({"remove", std::move(p)});
        break;
      case Run::kFire:
        for (pg::Array* a : {&a_, &b_, &c_, &d_, &e_, &f_}) p.Add(a->Encode());
        out_.push_back({"fire", std::move(p)});
        break;
      case Run::kFate: {
        pg::Array ids(pg::kInt8), events(pg::kInt8), attempts(pg::kInt4),
            dead(pg::kBool), error(pg::kBytea), retry_at(pg::kInt8);
        for (const auto& [id, f] : fates_) {
          ids.Int64(static_cast<std::int64_t>(id));
          events.Int64(static_cast<std::int64_t>(f.event_id));
          attempts.Int32(static_cast<std::int32_t>(f.attempts));
          dead.Bool(f.dead);
          error.Bytes(f.error);
          if (f.retry_at != 0) {
            retry_at.Int64(f.retry_at);
          } else {
            retry_at.Null();
          }
        }
        for (pg::Array* a :
             {&ids, &events, &attempts, &dead, &error, &retry_at}) {
          p.Add(a->Encode());
        }
        out_.push_back({"fate", std::move(p)});
        break;
      }
      case Run::kUnfate:
        p.Add(a_.Encode());
        p.Add(b_.Encode());
        out_.push_back({"unfate", std::move(p)});
        break;
    }
    run_ = Run::kNone;
    moves_.clear();
    fates_.clear();
  }

  struct Fate {
    std::uint64_t event_id;
    std::uint32_t attempts;
    bool dead;
    std::string error;
    WallNanos retry_at;
  };

  std::vector<std::string>& names_;
  std::function<std::uint32_t(std::string_view, std::string_view)>
      partition_of_;
  std::vector<Statement> out_;
  Run run_ = Run::kNone;
  // The columns of the current run (their element types set by Begin).
  pg::Array a_{pg::kInt8}, b_{pg::kInt8}, c_{pg::kInt8}, d_{pg::kInt8},
      e_{pg::kInt8}, f_{pg::kInt8}, g_{pg::kBytea};
  std::map<std::uint64_t, std::pair<WallNanos, std::int64_t>> moves_;
  std::map<std::uint64_t, Fate> fates_;  // By row (payload id).
};

}  // namespace delayd::pg

#endif  // DELAYD_SERVER_STORE_POSTGRES_PG_GROUP_H_
