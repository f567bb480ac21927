// A strand over InlineFirst (server/core/inline_first.h): dispatch() from a
// thread outside the pool runs a free strand's turn on that thread, and
// what the turn defers with Later() runs there after it; post() never runs
// inline, turns never nest, and what the strand is handed during an inline
// turn runs on the pool after it. The pool's threads are held busy in each
// test, so what runs without them ran on the test's thread.
#include "server/core/inline_first.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

namespace delayd {
namespace {

using namespace std::chrono_literals;

class InlineFirstTest : public ::testing::Test {
 protected:
  InlineFirstTest() {
    for (int t = 0; t < 2; ++t) threads_.emplace_back([this] { io_.run(); });
  }
  ~InlineFirstTest() override {
    Release();
    work_.reset();
    io_.stop();
    for (auto& t : threads_) t.join();
  }
  // Holds every pool thread until Release().
  void HoldPool() {
    std::atomic<int> held{0};
    for (std::size_t t = 0; t < threads_.size(); ++t) {
      asio::post(io_, [&held, released = released_] {
        ++held;
        released.wait();
      });
    }
    while (held.load() < static_cast<int>(threads_.size())) {
      std::this_thread::yield();
    }
  }
  void Release() {
    if (!released_set_) release_.set_value();
    released_set_ = true;
  }
  // Waits (bounded) until `ran` is set by the pool.
  static bool WaitFor(const std::atomic<bool>& ran) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!ran.load()) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::yield();
    }
    return true;
  }

  asio::io_context io_;
  asio::executor_work_guard<asio::io_context::executor_type> work_{
      io_.get_executor()};
  std::promise<void> release_;
  std::shared_future<void> released_ = release_.get_future().share();
  bool released_set_ = false;
  std::vector<std::thread> threads_;
  asio::strand<InlineFirst> strand_{
      InlineFirst(LoopExecutor(io_.get_executor(), nullptr))};
  asio::strand<InlineFirst> other_{
      InlineFirst(LoopExecutor(io_.get_executor(), nullptr))};
};

TEST_F(InlineFirstTest, DispatchRunsAFreeStrandsTurnOnTheCallersThread) {
  HoldPool();
  const std::thread::id me = std::this_thread::get_id();
  std::thread::id ran_on;
  bool in_strand = false;
  asio::dispatch(strand_, [&] {
    ran_on = std::this_thread::get_id();
    in_strand = strand_.running_in_this_thread();
  });
  EXPECT_EQ(ran_on, me) << "did not run before dispatch() returned";
  EXPECT_TRUE(in_strand);
}

TEST_F(InlineFirstTest, LaterRunsOnTheCallersThreadOnceTheTurnIsOver) {
  HoldPool();
  std::string order;
  asio::dispatch(strand_, [&] {
    strand_.get_inner_executor().Later([&] {
      order += strand_.running_in_this_thread() ? "later-in-turn" : "later";
    });
    order += "turn,";
  });
  EXPECT_EQ(order, "turn,later");
}

TEST_F(InlineFirstTest, PostNeverRunsInline) {
  HoldPool();
  std::atomic<bool> ran{false};
  asio::post(strand_, [&] { ran = true; });
  EXPECT_FALSE(ran.load());
  Release();
  EXPECT_TRUE(WaitFor(ran));
}

TEST_F(InlineFirstTest, TurnsDoNotNestAndTheRestOfTheQueueGoesToThePool) {
  HoldPool();
  const std::thread::id me = std::this_thread::get_id();
  std::atomic<bool> nested_ran{false}, queued_ran{false};
  std::atomic<bool> nested_here{false}, queued_here{false};
  asio::dispatch(strand_, [&] {
    // Another strand's turn, asked for inside this one: posted.
    asio::dispatch(other_, [&] {
      nested_here = std::this_thread::get_id() == me;
      nested_ran = true;
    });
    // Work queued on this strand during its turn: after it, on the pool,
    // not on this thread. (A dispatch() to the strand from its own turn
    // runs at once, as asio's strands do.)
    asio::post(strand_, [&] {
      queued_here = std::this_thread::get_id() == me;
      queued_ran = true;
    });
  });
  EXPECT_FALSE(nested_ran.load()) << "a turn ran inside another";
  Release();
  ASSERT_TRUE(WaitFor(nested_ran));
  ASSERT_TRUE(WaitFor(queued_ran));
  EXPECT_FALSE(nested_here.load());
  EXPECT_FALSE(queued_here.load());
}

TEST_F(InlineFirstTest, ABusyStrandsWorkWaitsForItsTurn) {
  std::promise<void> in_turn, finish;
  std::shared_future<void> finished = finish.get_future().share();
  asio::post(strand_, [&, finished] {
    in_turn.set_value();
    finished.wait();
  });
  in_turn.get_future().wait();
  std::atomic<bool> ran{false};
  asio::dispatch(strand_, [&] { ran = true; });
  EXPECT_FALSE(ran.load()) << "ran beside the strand's turn under way";
  finish.set_value();
  EXPECT_TRUE(WaitFor(ran));
}

TEST_F(InlineFirstTest, TimersOnTheStrandCompleteInIt) {
  asio::steady_timer timer(strand_);
  timer.expires_after(1ms);
  std::atomic<bool> ran{false}, in_strand{false};
  timer.async_wait([&](const asio::error_code&) {
    in_strand = strand_.running_in_this_thread();
    ran = true;
  });
  ASSERT_TRUE(WaitFor(ran));
  EXPECT_TRUE(in_strand.load());
}

}  // namespace
}  // namespace delayd
