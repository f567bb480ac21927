#include "server/api/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/impl/server_builder_option.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace delayd {
namespace {

// The longest wait between the store watch's checks while the store is
// idle (WatchStore): a quarter of the default stall limit, on the grid of
// the other periodic checks (core/clock.h's NextTick).
constexpr std::chrono::milliseconds kIdleStoreWatch{2500};

// Leaves gRPC's reflection plugin out of a server. Its library registers
// the plugin for every server when it loads; a loop serves reflection
// itself (loop_reflection.h), and the health port serves health alone.
class WithoutReflectionPlugin final : public grpc::ServerBuilderOption {
 public:
  void UpdateArguments(grpc::ChannelArguments*) override {}
  void UpdatePlugins(std::vector<std::unique_ptr<grpc::ServerBuilderPlugin>>*
                         plugins) override {
    std::erase_if(*plugins, [](const auto& p) {
      return p->name().find("reflection") != std::string::npos;
    });
  }
};

}  // namespace

bool IsLoopback(std::string_view listen) {
  const std::size_t colon = listen.rfind(':');
  std::string_view host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  return host.starts_with("127.") || host == "localhost" || host == "::1";
}

DelaydServer::DelaydServer(Options options) : options_(std::move(options)) {}

DelaydServer::~DelaydServer() { Shutdown(std::chrono::milliseconds(0)); }

Status DelaydServer::StartForwarder() {
  if (options_.peer_token.empty()) return Status::Ok();
  auth_.SetPeerToken(options_.peer_token);
  Forwarder::Options f;
  f.node = options_.node;
  f.token = options_.peer_token;
  f.credentials = grpc::InsecureChannelCredentials();
  if (tls_ != nullptr) {
    // The other nodes serve TLS as this one does; with mutual TLS this
    // node presents its own certificate to them.
    const TlsCertificates::Pem pem = tls_->current();
    grpc::SslCredentialsOptions ssl;
    if (!options_.peer_ca.empty()) {
      if (!ReadFile(options_.peer_ca, &ssl.pem_root_certs)) {
        return Status::InvalidArgument("--peer-ca: cannot read " +
                                       options_.peer_ca);
      }
    } else {
      ssl.pem_root_certs = pem.client_ca;
    }
    if (tls_->mutual()) {
      ssl.pem_private_key = pem.key;
      ssl.pem_cert_chain = pem.cert;
    }
    f.credentials = grpc::SslCredentials(ssl);
  }
  forwarder_ = std::make_unique<Forwarder>(std::move(f));
  return Status::Ok();
}

Status DelaydServer::Start() {
  // Credentials first: a file that does not load stops the start before the
  // store is opened.
  if (!options_.auth_tokens.empty()) {
    TokenTable table;
    if (Status s = TokenTable::Load(options_.auth_tokens, &table); !s.ok()) {
      return s;
    }
    auth_.Enable(std::move(table));
  }
  if (!options_.tls.cert.empty() || !options_.tls.key.empty()) {
    if (options_.tls.cert.empty() || options_.tls.key.empty()) {
      return Status::InvalidArgument("--tls-cert and --tls-key go together");
    }
    if (Status s = TlsCertificates::Create(options_.tls, &tls_); !s.ok()) {
      return s;
    }
  } else if (!options_.tls.client_ca.empty()) {
    return Status::InvalidArgument(
        "--tls-client-ca needs --tls-cert and --tls-key");
  }
  if (Status s = StartForwarder(); !s.ok()) return s;
  if (options_.scheduler.store) {
    Scheduler::Options& o = options_.scheduler;
    o.on_store_error = [this,
                        also = std::move(o.on_store_error)](const Status& s) {
      {
        MutexLock lock(&health_mu_);
        if (store_whole_) {
          store_whole_ = false;
          spdlog::error(
              "the store failed ({}): health NOT_SERVING (the server's and "
              "'{}') until delayd restarts; stop delayd and run delayd "
              "check on its data directory",
              s.message(), kStoreHealthService);
          SetHealth();
        }
      }
      if (also) also(s);
    };
    o.on_store_write_failure =
        [this, also = std::move(o.on_store_write_failure)](const Status& why) {
          spdlog::error("the store cannot write ({}): health NOT_SERVING",
                        why.message());
          {
            MutexLock lock(&health_mu_);
            store_writable_ = false;
            SetHealth();
          }
          if (also) also(why);
        };
  }
  if (options_.loop) {
    options_.scheduler.loop = true;
    loop_ = std::make_unique<LoopServer>(options_.loop_max_wait,
                                         options_.loop_queues);
  }
  scheduler_ = std::make_unique<Scheduler>(options_.scheduler);
  if (loop_) scheduler_->SetLoopWake([loop = loop_.get()] { loop->Wake(); });
  if (Status s = scheduler_->Start(&recovery_); !s.ok()) {
    scheduler_.reset();
    return s;
  }
  pusher_ = std::make_unique<push::Pusher>(*scheduler_, options_.push);
  pusher_->Start();
  service_ = std::make_unique<DelaydService>(
      *scheduler_, auth_, options_.backup_dir, forwarder_.get());
  service_->SetPusher(pusher_.get());
  // (gRPC's health service and reflection are callback and sync services:
  // under a loop, which serves both itself, neither runs beside it. The
  // call to gRPC's reflection library also keeps it in the binary: the
  // loop's reflection reads the message types it brings.)
  grpc::EnableDefaultHealthCheckService(!loop_);
  if (!loop_) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  std::shared_ptr<grpc::ServerCredentials> credentials =
      grpc::InsecureServerCredentials();
  if (tls_) credentials = tls_->credentials();
  builder.AddListeningPort(options_.listen, credentials, &port_);
  if (loop_) {
    builder.SetOption(std::make_unique<WithoutReflectionPlugin>());
    loop_->Register(builder, service_.get(), scheduler_.get());
  } else {
    builder.RegisterService(service_.get());
  }
  // Keep idle streams alive behind proxies and notice dead peers.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             static_cast<int>(options_.keepalive_time.count()));
  builder.AddChannelArgument(
      GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
      static_cast<int>(options_.keepalive_timeout.count()));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(
      GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // gRPC has one receive limit per server, not per method. It is what the
  // largest request needs: a Batch up to --max-batch-bytes, or one
  // full-size timer. Every method then holds its request to its own limit
  // before parsing it (RequestLimits in service.h).
  const Limits& l = options_.scheduler.limits;
  const std::size_t unary_message =
      l.max_payload_bytes + l.max_key_bytes + l.max_namespace_bytes + 4096;
  builder.SetMaxReceiveMessageSize(static_cast<int>(std::min<std::size_t>(
      std::max(options_.max_batch_bytes, unary_message), 1u << 30)));
  // All of gRPC's memory for connections and calls, bounded.
  grpc::ResourceQuota quota("delayd");
  quota.Resize(options_.grpc_memory_bytes);
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                             options_.max_streams_per_connection);
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    server_.reset();
    return Status::Unavailable("cannot listen on " + options_.listen);
  }
  // A plaintext port with only the health service: for probes that speak
  // neither TLS nor tokens (Kubernetes' gRPC probe, the image's
  // HEALTHCHECK). It tells the serving status and nothing else.
  if (!options_.health_listen.empty()) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder health;
    health.SetOption(std::make_unique<WithoutReflectionPlugin>());
    health.RegisterCallbackGenericService(&health_unknown_);
    health.AddListeningPort(options_.health_listen,
                            grpc::InsecureServerCredentials(), &health_port_);
    health_server_ = health.BuildAndStart();
    if (!health_server_ || health_port_ == 0) {
      server_->Shutdown();
      if (loop_) loop_->Stop();
      server_.reset();
      health_server_.reset();
      return Status::Unavailable("cannot listen on " + options_.health_listen +
                                 " (--health-listen)");
    }
  }
  if (!options_.metrics_listen.empty()) {
    if (Status s = MetricsEndpoint::Start(options_.metrics_listen,
                                          options_.metrics_namespace_labels,
                                          *scheduler_, &metrics_);
        !s.ok()) {
      server_->Shutdown();
      if (loop_) loop_->Stop();
      server_.reset();
      health_server_.reset();
      return s;
    }
  }
  if (loop_) loop_->Start();
  report_timer_ =
      std::make_unique<asio::steady_timer>(scheduler_->housekeeping());
  ReportRedeliveries(scheduler_->counters().redelivered.load());
  if (scheduler_->durable()) {
    stall_timer_ =
        std::make_unique<asio::steady_timer>(report_timer_->get_executor());
    WatchStore();
  }
  MutexLock lock(&health_mu_);
  started_ = true;
  SetHealth();
  return Status::Ok();
}

Status DelaydServer::Reload() {
  std::string errors;
  if (auth_.enabled()) {
    TokenTable table;
    if (Status s = TokenTable::Load(options_.auth_tokens, &table); s.ok()) {
      auth_.Reload(std::move(table));
    } else {
      errors += s.message();
    }
  }
  if (tls_) {
    if (Status s = tls_->Reload(); !s.ok()) {
      errors += (errors.empty() ? "" : "; ") + s.message();
    }
  }
  if (!errors.empty()) return Status::InvalidArgument(errors);
  return Status::Ok();
}

void DelaydServer::SetHealth() {
  if (!started_) return;
  const bool serving = !stopped_ && store_writable_ && !store_stalled_ &&
                       store_reachable_ && store_whole_ && cluster_serving_;
  if (loop_) {
    loop_->SetServingStatus("", serving);
    loop_->SetServingStatus(v1::Delayd::service_full_name(), serving);
    loop_->SetServingStatus(kStoreHealthService, serving && store_whole_);
  }
  for (grpc::Server* server : {server_.get(), health_server_.get()}) {
    if (server == nullptr || server->GetHealthCheckService() == nullptr) {
      continue;
    }
    auto* health = server->GetHealthCheckService();
    health->SetServingStatus(serving);  // The server as a whole ("").
    health->SetServingStatus(v1::Delayd::service_full_name(), serving);
    health->SetServingStatus(kStoreHealthService, serving && store_whole_);
  }
}

void DelaydServer::SetClusterHealth(bool serving, const std::string& why) {
  MutexLock lock(&health_mu_);
  if (serving == cluster_serving_) return;
  cluster_serving_ = serving;
  if (serving) {
    spdlog::warn(
        "this cluster node reaches the database again: health "
        "SERVING");
  } else {
    spdlog::error("{}: health NOT_SERVING until it can", why);
  }
  SetHealth();
}

void DelaydServer::ReportRedeliveries(std::uint64_t before) {
  report_timer_->expires_at(NextTick(kReportInterval));
  report_timer_->async_wait([this, before](const asio::error_code& ec) {
    if (ec) return;
    const std::uint64_t now = scheduler_->counters().redelivered.load();
    if (now > before) {
      spdlog::info(
          "{} events redelivered in the last {} s (their ack deadline passed "
          "or their worker left)",
          now - before, kReportInterval.count());
    }
    ReportRedeliveries(now);
  });
}

void DelaydServer::WatchStore() {
  const auto limit = options_.store_stall_limit;
  const std::chrono::nanoseconds busy = scheduler_->StoreBusy();
  const bool stalled = limit.count() > 0 && busy > limit;
  std::string why;
  const bool reachable = scheduler_->StoreWritable(&why);
  {
    MutexLock lock(&health_mu_);
    if (reachable != store_reachable_) {
      store_reachable_ = reachable;
      if (!reachable) {
        spdlog::error(
            "the store cannot take writes ({}): health NOT_SERVING "
            "until it can; writes answer UNAVAILABLE",
            why);
      } else {
        spdlog::warn("the store takes writes again: health SERVING");
      }
      SetHealth();
    }
    if (stalled != store_stalled_) {
      store_stalled_ = stalled;
      if (stalled) {
        spdlog::error(
            "the store's disk has not finished an operation in {:.1f} s "
            "(--store-stall-limit {:.1f} s): health NOT_SERVING until it "
            "does",
            std::chrono::duration<double>(busy).count(),
            std::chrono::duration<double>(limit).count());
      } else {
        spdlog::warn("the store's disk is answering again: health SERVING");
      }
      SetHealth();
    }
  }
  // A stall is seen within a quarter of the limit (and 1 s) of passing it.
  // While the store is idle and writable the checks may wait longer (a
  // quarter of the limit, up to kIdleStoreWatch): an operation that starts
  // meanwhile has run less than the limit at the next check, which then
  // goes back to the short period; an idle daemon wakes less for them.
  const bool idle = busy.count() == 0 && reachable && !stalled;
  stall_timer_->expires_at(NextTick(
      limit.count() > 0 ? std::clamp<std::chrono::milliseconds>(
                              limit / 4, std::chrono::milliseconds(10),
                              idle ? kIdleStoreWatch : std::chrono::seconds(1))
                        : std::chrono::milliseconds(250)));
  stall_timer_->async_wait([this](const asio::error_code& ec) {
    if (!ec) WatchStore();
  });
}

void DelaydServer::Shutdown(std::chrono::milliseconds grace) {
  const auto until = std::chrono::steady_clock::now() + grace;
  {
    MutexLock lock(&health_mu_);
    if (stopped_ || !scheduler_) return;
    stopped_ = true;
    SetHealth();
  }
  if (report_timer_) {
    asio::post(report_timer_->get_executor(),
               [t = report_timer_.get(), s = stall_timer_.get()] {
                 t->cancel();
                 if (s) s->cancel();
               });
  }
  // Push requests in flight are cut off; their events wait in the store.
  if (pusher_) pusher_->Stop();
  // The metrics endpoint's HTTP server takes up to 2 s to stop (civetweb
  // polls its listening socket in 2 s quanta): it stops meanwhile.
  std::thread stop_metrics([metrics = std::move(metrics_)] {});
  // End every stream, then let in-flight unary calls finish.
  auto closed = std::make_shared<std::promise<void>>();
  scheduler_->Shutdown([closed] { closed->set_value(); });
  closed->get_future().wait_for(grace + std::chrono::seconds(1));
  spdlog::debug("shutdown: operations answered, streams ended");
  // Calls forwarded to other nodes get their owners' answers, within the
  // grace (forward.h says why).
  if (forwarder_ && !forwarder_->Drain(until)) {
    spdlog::warn(
        "shutdown: calls forwarded to other nodes had no answer within the "
        "grace; their callers get CANCELLED and do not know whether the "
        "owners applied them");
  }
  // Every call has been answered; what remains is sending the answers. gRPC
  // would wait out the whole deadline for idle client connections, so give
  // it only a short one.
  if (server_) {
    server_->Shutdown(std::chrono::system_clock::now() +
                      std::min<std::chrono::milliseconds>(
                          grace, std::chrono::milliseconds(200)));
  }
  if (health_server_) {
    health_server_->Shutdown(std::chrono::system_clock::now() +
                             std::chrono::milliseconds(100));
  }
  // (After the server: calls end with their last completions.)
  if (loop_) loop_->Stop();
  spdlog::debug("shutdown: server stopped");
  // (The forwarded calls cut off end with their callers' calls: their
  // callbacks run before what they touch goes.)
  if (forwarder_) {
    forwarder_->Drain(std::chrono::steady_clock::now() +
                      std::chrono::seconds(1));
  }
  stop_metrics.join();
  scheduler_->Stop();
  server_.reset();
  health_server_.reset();
}

}  // namespace delayd
