#include "server/store/postgres/pg_lease_keeper.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <optional>
#include <utility>

#include "server/common/thread_name.h"

namespace delayd::pg {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<int> PartsOf(const std::vector<Lease>& leases) {
  std::vector<int> out;
  for (const Lease& l : leases) out.push_back(l.part);
  return out;
}

bool Has(const std::vector<int>& parts, int part) {
  return std::find(parts.begin(), parts.end(), part) != parts.end();
}

}  // namespace

LeaseKeeper::LeaseKeeper(Options options, OnChange on_change)
    : options_(std::move(options)),
      on_change_(std::move(on_change)),
      wake_fd_(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {}

LeaseKeeper::~LeaseKeeper() {
  Stop(/*release=*/true);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void LeaseKeeper::Start() {
  thread_ = std::thread([this] { Run(); });
  NameThread(thread_, "pg-leases");
  watchdog_ = std::thread([this] { Watch(); });
  NameThread(watchdog_, "pg-lease-watch");
}

void LeaseKeeper::Stop(bool release) {
  if (!thread_.joinable()) return;
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    release_ = release;
  }
  wake_.SignalAll();
  changed_.SignalAll();
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(wake_fd_, &one, sizeof one);
  watchdog_.join();
  thread_.join();
}

std::vector<Lease> LeaseKeeper::held() const {
  MutexLock lock(&mu_);
  return held_;
}

void LeaseKeeper::Drop(int part) {
  MutexLock lock(&mu_);
  std::erase_if(held_, [part](const Lease& l) { return l.part == part; });
  changed_.SignalAll();
}

void LeaseKeeper::Watch() {
  for (;;) {
    {
      MutexLock lock(&mu_);
      for (;;) {
        if (stopping_) return;
        std::optional<Clock::time_point> earliest;
        for (const Lease& l : held_) {
          if (!earliest || l.valid_until < *earliest) earliest = l.valid_until;
        }
        if (earliest && *earliest <= Clock::now()) break;
        if (earliest) {
          changed_.WaitUntil(&mu_, *earliest);
        } else {
          changed_.Wait(&mu_);
        }
      }
    }
    MutexLock tell(&tell_mu_);
    std::vector<int> expired;
    {
      MutexLock lock(&mu_);
      expired = DropExpired();
    }
    Tell({}, expired);
  }
}

void LeaseKeeper::Tell(const std::vector<Lease>& gained,
                       const std::vector<int>& lost) {
  if (!gained.empty() || !lost.empty()) on_change_(gained, lost);
}

std::vector<int> LeaseKeeper::DropExpired() {
  const Clock::time_point now = Clock::now();
  std::vector<int> lost;
  std::erase_if(held_, [&](const Lease& l) {
    if (l.valid_until > now) return false;
    lost.push_back(l.part);
    return true;
  });
  return lost;
}

void LeaseKeeper::Run() {
  Conn conn;
  for (;;) {
    bool stopping, release;
    {
      MutexLock lock(&mu_);
      stopping = stopping_;
      release = release_;
    }
    if (!conn || PQstatus(conn.get()) != CONNECTION_OK) {
      conn = ConnectTo(options_.conninfo);
      // (Each statement's lock wait is bounded to a sixth of the term: a
      // round held up by another transaction's locks still ends well
      // within the renewals' margin.)
      if (PQstatus(conn.get()) == CONNECTION_OK) {
        if (LimitLockWaits(conn.get(), options_.terms.ttl / 6).ok()) {
          (void)Listen(conn.get());
        } else {
          conn.reset();
        }
      }
    }
    const bool connected = PQstatus(conn.get()) == CONNECTION_OK;
    if (stopping) {
      std::vector<Lease> held;
      {
        MutexLock tell(&tell_mu_);
        {
          MutexLock lock(&mu_);
          held.swap(held_);
        }
        // Told lost before they are given back: the node stops first.
        Tell({}, PartsOf(held));
      }
      if (release && connected) {
        (void)Leave(conn.get(), options_.node, options_.instance);
        if (!held.empty()) (void)Release(conn.get(), options_.node, held);
        (void)Notify(conn.get());
      }
      return;
    }
    const Clock::time_point started = Clock::now();
    const bool taken = connected && Round(conn.get());
    if (options_.on_round) options_.on_round(taken, Clock::now() - started);
    std::map<int, std::string> owners;
    if (taken && options_.on_owners &&
        OwnerAddresses(conn.get(), &owners).ok()) {
      options_.on_owners(std::move(owners));
    }
    if (options_.on_policies &&
        Clock::now() - policies_told_ >= kPolicyRefresh) {
      policies_told_ = Clock::now();
      options_.on_policies();
    }
    // (A third of the term from the round's start, not its end: a round
    // slowed by a lock wait does not push the next renewal back.)
    WaitForRound(connected ? conn.get() : nullptr,
                 started + options_.terms.ttl / 3);
  }
}

void LeaseKeeper::WaitForRound(PGconn* conn, Clock::time_point until) {
  // Notifications read while the round's statements ran wait in libpq.
  if (conn != nullptr && TakeNotifications(conn)) return;
  for (;;) {
    {
      MutexLock lock(&mu_);
      if (stopping_) return;
      if (conn == nullptr) {
        while (!stopping_ && wake_.WaitUntil(&mu_, until)) {
        }
        return;
      }
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        until - Clock::now());
    if (left.count() <= 0) return;
    pollfd fds[2] = {{PQsocket(conn), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (::poll(fds, 2, static_cast<int>(left.count()) + 1) <= 0) continue;
    if (fds[1].revents != 0) return;        // Stop.
    if (PQconsumeInput(conn) != 1) return;  // The next round reconnects.
    if (TakeNotifications(conn)) return;
  }
}

bool LeaseKeeper::TakeNotifications(PGconn* conn) {
  bool leases = false, policies = false;
  while (PGnotify* n = PQnotifies(conn)) {
    leases = leases || std::strcmp(n->relname, kLeaseChannel) == 0;
    policies = policies || std::strcmp(n->relname, kPolicyChannel) == 0;
    PQfreemem(n);
  }
  if (policies && options_.on_policies) {
    policies_told_ = Clock::now();
    options_.on_policies();
  }
  return leases;
}

bool LeaseKeeper::Round(PGconn* conn) {
  const LeaseTerms& terms = options_.terms;
  if (Status s =
          Heartbeat(conn, options_.node, options_.instance, options_.advertise);
      !s.ok()) {
    if (s.code() == Code::kFailedPrecondition && options_.on_evicted &&
        !std::exchange(evicted_, true)) {
      options_.on_evicted(s.message());
    }
    return false;
  }
  // Joined: the others give up their excess at once, not at their rounds.
  if (!std::exchange(joined_, true)) (void)Notify(conn);
  if (level_ < kNodeLevel) {
    ClusterLevel level;
    if (RaiseClusterLevel(conn, terms.ttl, &level).ok()) {
      level_ = level.level;
      if (options_.on_level) options_.on_level(level);
    }
  }
  std::vector<Lease> held = this->held(), kept;
  if (!held.empty() && !Renew(conn, options_.node, held, terms, &kept).ok()) {
    return false;  // (kept until their own-clock validity passes)
  }
  std::vector<int> lost;
  const std::vector<int> renewed = PartsOf(kept);
  for (const Lease& l : held) {
    if (!Has(renewed, l.part)) lost.push_back(l.part);
  }
  std::vector<std::string> live;
  std::map<int, std::string> owners;
  Rebalance plan;
  if (LiveNodes(conn, terms.ttl, &live).ok() && Owners(conn, &owners).ok()) {
    plan = Balance(options_.partitions, live, options_.node, owners);
  }
  std::vector<Lease> giving;
  std::erase_if(kept, [&](const Lease& l) {
    if (!Has(plan.give, l.part)) return false;
    giving.push_back(l);
    lost.push_back(l.part);
    return true;
  });
  {
    MutexLock tell(&tell_mu_);
    std::vector<int> told;
    {
      MutexLock lock(&mu_);
      // Only what is still held: the watchdog may have dropped (and told)
      // some meanwhile, renewed or not; those are left to expire.
      const std::vector<int> still = PartsOf(held_);
      std::erase_if(kept, [&](const Lease& l) { return !Has(still, l.part); });
      for (int part : lost) {
        if (Has(still, part)) told.push_back(part);
      }
      held_ = kept;
      changed_.SignalAll();
    }
    Tell({}, told);
  }
  if (!giving.empty()) {
    (void)Release(conn, options_.node, giving);
    (void)Notify(conn);
  }
  std::vector<Lease> gained;
  if (plan.take.empty() ||
      !Acquire(conn, options_.node, plan.take, terms, &gained).ok() ||
      gained.empty()) {
    return true;
  }
  {
    MutexLock tell(&tell_mu_);
    {
      MutexLock lock(&mu_);
      held_.insert(held_.end(), gained.begin(), gained.end());
      std::sort(held_.begin(), held_.end(),
                [](const Lease& a, const Lease& b) { return a.part < b.part; });
      changed_.SignalAll();
    }
    Tell(gained, {});
  }
  // The other nodes learn the new owner at once (they forward to it).
  (void)Notify(conn);
  return true;
}

}  // namespace delayd::pg
