// A Subscriber (dispatcher.h) that records what it is given, for tests of
// the core without gRPC: optionally stalled (it writes nothing until
// Unstall), with bounded waits for what it got.
#ifndef DELAYD_TESTS_SERVER_FAKE_SUBSCRIBER_H_
#define DELAYD_TESTS_SERVER_FAKE_SUBSCRIBER_H_

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "server/core/dispatcher.h"

namespace delayd::testing {

class FakeSubscriber : public Subscriber {
 public:
  struct Got {
    std::uint64_t id;
    std::string key;
    WallNanos fire_time;
    WallNanos received;
    std::string payload;
    std::uint32_t attempt;
  };
  // A stalled subscriber writes nothing: what it is given stays unwritten
  // until Unstall().
  explicit FakeSubscriber(bool stalled = false) : stalled_(stalled) {}

  Backlog Deliver(std::string_view,
                  std::span<const Event* const> events) override {
    std::lock_guard lock(mu_);
    for (const Event* e : events) {
      got_.push_back({e->id, std::string(e->blob.key()), e->fire_time,
                      WallNow(), std::string(e->blob.payload()), e->attempt});
      if (stalled_) {
        unwritten_ids_.push_back(e->id);
        ++unwritten_.events;
        unwritten_.bytes += e->blob.key().size() + e->blob.payload().size();
      }
    }
    cv_.notify_all();
    return unwritten_;
  }
  Backlog Unwritten() const override {
    std::lock_guard lock(mu_);
    return unwritten_;
  }
  std::vector<std::uint64_t> TakeUnwritten() override {
    std::lock_guard lock(mu_);
    unwritten_ = {};
    return std::exchange(unwritten_ids_, {});
  }
  // Everything unwritten is written now.
  void Unstall() {
    {
      std::lock_guard lock(mu_);
      stalled_ = false;
      unwritten_ = {};
      unwritten_ids_.clear();
    }
    on_drained();
  }
  void End(const Status& status) override {
    std::lock_guard lock(mu_);
    ended_ = true;
    end_code_ = status.code();
    cv_.notify_all();
  }
  // Waits (up to `timeout`) until at least `n` events came; returns all.
  std::vector<Got> WaitFor(std::size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return got_.size() >= n; });
    return got_;
  }
  std::vector<Got> got() const {
    std::lock_guard lock(mu_);
    return got_;
  }
  bool WaitEnded(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return ended_; });
  }
  Code end_code() {
    std::lock_guard lock(mu_);
    return end_code_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Got> got_;
  bool stalled_ = false;
  Backlog unwritten_;
  std::vector<std::uint64_t> unwritten_ids_;
  bool ended_ = false;
  Code end_code_ = Code::kOk;
};

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_SERVER_FAKE_SUBSCRIBER_H_
