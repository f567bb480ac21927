#include "server/push/pusher.h"

#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include <mutex>
#include <set>

#include "server/common/limit_log.h"
#include "server/common/thread_name.h"

namespace delayd::push {

// A namespace's subscription. Its config is swapped on the pusher's thread
// only; Deliver (dispatcher strands) reads nothing but its name.
class Pusher::Sink : public Subscriber {
 public:
  Sink(Pusher* pusher, std::string name, std::uint64_t id,
       std::shared_ptr<const PushConfig> config, PushMetrics::Target metrics)
      : pusher_(pusher),
        name_(std::move(name)),
        id_(id),
        config_(std::move(config)),
        metrics_(metrics) {}

  Backlog Deliver(std::string_view,
                  std::span<const Event* const> events) override;
  Backlog Unwritten() const override { return {queued_.load(), 0}; }
  // Ended by its dispatcher closing: nothing to write out.
  void End(const Status&) override {}

  const std::string& name() const { return name_; }
  std::uint64_t id() const { return id_; }
  std::atomic<std::size_t>& queued() { return queued_; }
  const std::shared_ptr<const PushConfig>& config() const { return config_; }
  void set_config(std::shared_ptr<const PushConfig> c) {
    config_ = std::move(c);
  }
  const PushMetrics::Target& metrics() const { return metrics_; }

 private:
  Pusher* const pusher_;
  const std::string name_;
  const std::uint64_t id_;
  std::shared_ptr<const PushConfig> config_;
  const PushMetrics::Target metrics_;
  std::atomic<std::size_t> queued_{0};
};

namespace {
std::once_flag g_curl_init;
}  // namespace

Pusher::Sink::Backlog Pusher::Sink::Deliver(
    std::string_view, std::span<const Event* const> events) {
  auto self = std::static_pointer_cast<Sink>(shared_from_this());
  std::vector<Queued> jobs;
  jobs.reserve(events.size());
  for (const Event* e : events) {
    auto job = std::make_unique<PushJob>(
        name_, CopyWithPayload(*e, e->blob.payload()));
    job->webhook_id = std::to_string(e->id);
    jobs.push_back({self, std::move(job)});
  }
  queued_.fetch_add(jobs.size());
  {
    MutexLock lock(&pusher_->mu_);
    for (auto& q : jobs) pusher_->inbox_.push_back(std::move(q));
  }
  pusher_->Wake();
  return Unwritten();
}

Pusher::Pusher(Scheduler& scheduler, PushOptions options)
    : scheduler_(scheduler),
      options_(std::move(options)),
      metrics_(scheduler.metrics().registry()) {
  std::call_once(g_curl_init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  multi_ = curl_multi_init();
}

Pusher::~Pusher() {
  Stop();
  curl_multi_cleanup(static_cast<CURLM*>(multi_));
}

void Pusher::Wake() { curl_multi_wakeup(static_cast<CURLM*>(multi_)); }

void Pusher::Start() {
  {
    MutexLock lock(&mu_);
    if (started_) return;
    started_ = true;
  }
  // Notices first, then every name with a policy: a change in between is
  // acted on twice, reading the same policy.
  scheduler_.SetPolicyObserver([this](const std::string& name) {
    {
      MutexLock lock(&mu_);
      changed_.push_back(name);
    }
    Wake();
  });
  {
    MutexLock lock(&mu_);
    for (std::string& name : scheduler_.PolicyNames()) {
      changed_.push_back(std::move(name));
    }
  }
  thread_ = std::thread([this] { Run(); });
  NameThread(thread_, "delayd-push");
}

void Pusher::Stop() {
  {
    MutexLock lock(&mu_);
    if (!started_ || stopping_) return;
    stopping_ = true;
  }
  scheduler_.SetPolicyObserver(nullptr);
  Wake();
  thread_.join();
}

void Pusher::Test(std::string ns, PushTarget target, std::string key,
                  std::string payload, TestDone done) {
  if (target.empty()) target = scheduler_.PolicyOf(ns).push;
  if (target.empty()) {
    done(
        Status::FailedPrecondition("namespace '" + ns + "' has no push target"),
        Verdict(), {});
    return;
  }
  const std::uint64_t n = next_test_.fetch_add(1);
  auto job = std::make_unique<PushJob>(
      std::move(ns),
      Event{0, 0, Blob(key, payload), 0, 0, 0, 1, Reason::kExpired});
  job->webhook_id = "test-" + std::to_string(n);
  job->config =
      MakeConfig(target, scheduler_.PolicyOf(job->ns_name).retry.max_backoff);
  job->test_done = [done](Verdict v, std::chrono::nanoseconds took) {
    done(Status::Ok(), v, took);
  };
  {
    MutexLock lock(&mu_);
    if (started_ && !stopping_) {
      inbox_.push_back({nullptr, std::move(job)});
    }
  }
  if (job) {
    done(Status::Unavailable("push delivery is stopping"), Verdict(), {});
    return;
  }
  Wake();
}

void Pusher::Run() {
  CURLM* multi = static_cast<CURLM*>(multi_);
  for (;;) {
    std::deque<Queued> jobs;
    std::vector<std::string> changed;
    {
      MutexLock lock(&mu_);
      if (stopping_) break;
      jobs.swap(inbox_);
      changed.swap(changed_);
    }
    for (const std::string& name : changed) Reconfigure(name);
    std::set<std::shared_ptr<Sink>> took;
    for (Queued& q : jobs) {
      if (q.sink) {
        q.sink->queued().fetch_sub(1);
        took.insert(q.sink);
      }
      StartJob(std::move(q));
    }
    for (const auto& sink : took) {
      if (sink->on_drained && sink->queued().load() == 0) sink->on_drained();
    }
    int still = 0;
    curl_multi_perform(multi, &still);
    int left = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi, &left)) {
      if (msg->msg != CURLMSG_DONE) continue;
      PushJob* job = nullptr;
      curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &job);
      Finish(job, msg->data.result);
    }
    // curl's own timers (a request's timeout, a connection's) shorten the
    // wait (curl_multi_poll(3)); nothing else here is timed, so with no
    // request in flight the thread sleeps until Wake(): an idle daemon's
    // pusher does not wake.
    curl_multi_poll(multi, nullptr, 0, kIdleWaitMs, nullptr);
  }
  LeaveAll();
}

void Pusher::Reconfigure(const std::string& name) {
  const Policy policy = scheduler_.PolicyOf(name);
  auto it = sinks_.find(name);
  std::shared_ptr<Sink> current = it == sinks_.end() ? nullptr : it->second;
  if (current && current->config()->target == policy.push) {
    if (current->config()->max_backoff != policy.retry.max_backoff) {
      current->set_config(MakeConfig(policy.push, policy.retry.max_backoff));
    }
    return;
  }
  if (current) {
    Leave(current);
    sinks_.erase(it);
    spdlog::info("namespace '{}': push target {}", name,
                 policy.push.empty() ? "removed" : "replaced");
  }
  if (policy.push.empty()) return;
  auto sink = std::make_shared<Sink>(
      this, name, scheduler_.NewSubscriberId(),
      MakeConfig(policy.push, policy.retry.max_backoff), metrics_.For(name));
  SubscribeOptions options;
  options.max_in_flight = policy.push.max_in_flight;
  // The lease outlasts the request's own timeout: the answer settles it.
  options.ack_timeout = policy.push.timeout + std::chrono::seconds(10);
  sinks_[name] = sink;
  scheduler_.Subscribe(name, sink->id(), sink, options, [] {});
  spdlog::info("namespace '{}': pushing to {} ({} at once)", name,
               policy.push.url, policy.push.max_in_flight);
}

void Pusher::Leave(const std::shared_ptr<Sink>& sink) {
  CURLM* multi = static_cast<CURLM*>(multi_);
  for (auto it = jobs_.begin(); it != jobs_.end();) {
    if (it->second != sink) {
      ++it;
      continue;
    }
    PushJob* job = it->first;
    it = jobs_.erase(it);
    curl_multi_remove_handle(multi, job->easy);
    sink->metrics().in_flight->Decrement();
    FreeJob(job);
  }
  // Its events in flight are ready again, for whoever delivers next.
  scheduler_.Unsubscribe(sink->name(), sink->id());
  MutexLock lock(&health_mu_);
  health_.erase(sink->name());
}

void Pusher::LeaveAll() {
  while (!sinks_.empty()) {
    Leave(sinks_.begin()->second);
    sinks_.erase(sinks_.begin());
  }
  // Tests in flight or queued end unanswered.
  CURLM* multi = static_cast<CURLM*>(multi_);
  for (auto& [job, sink] : jobs_) {
    curl_multi_remove_handle(multi, job->easy);
    if (job->test_done)
      job->test_done(
          Verdict{Verdict::kRetry, false, 0, "delayd is stopping", {}}, {});
    FreeJob(job);
  }
  jobs_.clear();
  MutexLock lock(&mu_);
  for (Queued& q : inbox_) {
    if (q.job->test_done) {
      q.job->test_done(
          Verdict{Verdict::kRetry, false, 0, "delayd is stopping", {}}, {});
    }
  }
  inbox_.clear();
}

void Pusher::StartJob(Queued q) {
  if (q.sink) {
    auto it = sinks_.find(q.sink->name());
    // A sink that left: its events were taken back when it did.
    if (it == sinks_.end() || it->second != q.sink) return;
    q.job->config = q.sink->config();
    q.sink->metrics().in_flight->Increment();
  }
  PushJob* job = q.job.release();
  job->rules = &options_.rules;
  PrepareRequest(*job, options_.allow_http);
  jobs_.emplace(job, std::move(q.sink));
  curl_multi_add_handle(static_cast<CURLM*>(multi_), job->easy);
}

void Pusher::Finish(PushJob* job, int curl_code) {
  const Verdict v = Judge(*job, curl_code);
  const auto took = std::chrono::steady_clock::now() - job->started;
  auto it = jobs_.find(job);
  const std::shared_ptr<Sink> sink = std::move(it->second);
  jobs_.erase(it);
  curl_multi_remove_handle(static_cast<CURLM*>(multi_), job->easy);
  if (job->test_done) {
    job->test_done(v, took);
  } else if (sink) {
    sink->metrics().in_flight->Decrement();
    sink->metrics().duration->Observe(
        std::chrono::duration<double>(took).count());
    Answer(sink, *job, v);
  }
  FreeJob(job);
}

Pusher::Health Pusher::HealthOf(const std::string& ns) const {
  MutexLock lock(&health_mu_);
  auto it = health_.find(ns);
  return it == health_.end() ? Health() : it->second;
}

void Pusher::Count(const std::string& ns, const PushTarget& target,
                   const Verdict& v) {
  std::uint64_t in_a_row = 0;
  {
    MutexLock lock(&health_mu_);
    Health& h = health_[ns];
    if (v.kind == Verdict::kOk) {
      h.failures_in_a_row = 0;
      return;
    }
    in_a_row = ++h.failures_in_a_row;
    h.last_error = v.error;
  }
  if (target.pause_after_failures == 0 ||
      in_a_row != target.pause_after_failures) {
    return;
  }
  spdlog::warn(
      "namespace '{}': pausing: {} requests in a row to its push target "
      "failed (last: {}); its events wait until it is resumed",
      ns, in_a_row, v.error);
  scheduler_.SetPolicy(
      ns,
      [](const Policy& current, Policy* next) {
        *next = current;
        next->paused = true;
        return Status::Ok();
      },
      [ns](Status s, const Policy&) {
        if (!s.ok()) {
          spdlog::error("namespace '{}': could not pause: {}", ns, s.message());
        }
      });
}

void Pusher::Answer(const std::shared_ptr<Sink>& sink, const PushJob& job,
                    const Verdict& v) {
  Count(sink->name(), job.config->target, v);
  const PushMetrics::Target& m = sink->metrics();
  Dispatcher& d = scheduler_.dispatcher(job.event.ns);
  std::vector<std::uint64_t> ids = {job.event.id};
  auto ignore = [](auto) {};
  switch (v.kind) {
    case Verdict::kOk:
      m.ok->Increment();
      d.Ack(std::move(ids), ignore);
      return;
    case Verdict::kRetry:
      (v.answered ? m.failed : m.unreachable)->Increment();
      d.Nack(std::move(ids), v.retry_after, v.error, ignore);
      break;
    case Verdict::kReject:
      m.rejected->Increment();
      d.Reject(std::move(ids), v.error, ignore);
      break;
  }
  LogRepeated("push-failed", "namespace '" + sink->name() + "': push to " +
                                 job.config->target.url +
                                 " failed: " + v.error);
}

}  // namespace delayd::push
