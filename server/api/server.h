// The daemon's gRPC server: the service, TLS and tokens, health checking,
// reflection, and a graceful shutdown.
#ifndef DELAYD_SERVER_API_SERVER_H_
#define DELAYD_SERVER_API_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "server/api/auth.h"
#include "server/api/forward.h"
#include "server/api/loop_server.h"
#include "server/api/metrics_export.h"
#include "server/api/service.h"
#include "server/api/tls.h"
#include "server/common/mutex.h"
#include "server/common/status.h"
#include "server/core/scheduler.h"
#include "server/push/pusher.h"

namespace delayd {

// Whether a listen address ("host:port") is on the loopback interface.
bool IsLoopback(std::string_view listen);

// The health service name whose status is the store's: NOT_SERVING with the
// server's (see SetHealth).
inline constexpr char kStoreHealthService[] = "delayd.store";

// The daemon's gRPC server: the service, health checking and reflection.
class DelaydServer {
 public:
  struct Options {
    std::string listen = "127.0.0.1:7070";
    // If set: a plaintext port with only grpc.health.v1 (for probes).
    std::string health_listen;
    Scheduler::Options scheduler;
    std::chrono::milliseconds keepalive_time = std::chrono::seconds(30);
    std::chrono::milliseconds keepalive_timeout = std::chrono::seconds(10);
    // TLS (empty cert: plaintext); see tls.h.
    TlsCertificates::Files tls;
    // Token file (empty: no authentication); see auth.h.
    std::string auth_tokens;
    // Largest Batch request in bytes; every other request is far smaller.
    std::size_t max_batch_bytes = 4 << 20;
    // Memory gRPC may take for connections and calls in flight (its
    // ResourceQuota); past it, new calls wait or are refused.
    std::size_t grpc_memory_bytes = 1u << 30;
    // Concurrent calls (streams) per client connection.
    int max_streams_per_connection = 1000;
    // Where Backup writes copies of the store (empty: Backup is refused).
    std::string backup_dir;
    // If set: the Prometheus metrics endpoint (metrics_export.h), plain
    // HTTP, on this address; with a label per namespace unless turned off.
    std::string metrics_listen;
    bool metrics_namespace_labels = true;
    // Health is NOT_SERVING while a disk operation of the store (a write, a
    // sync, a payload read) has run longer than this: a disk that hangs
    // rather than fails. Zero: not watched.
    std::chrono::milliseconds store_stall_limit = std::chrono::seconds(10);
    // A cluster node (with a shared PostgreSQL store): its name, the token
    // the nodes present to each other (set: calls are forwarded to the
    // owner of their key's partition, see forward.h), and with TLS the CA
    // that signed the other nodes' certificates (empty: --tls-client-ca's).
    std::string node;
    std::string peer_token;
    std::string peer_ca;
    // Push delivery to namespaces' HTTP targets (server/push/).
    push::PushOptions push;
    // Every call, and the scheduler's work, on one thread (loop_server.h)
    // rather than gRPC's callback threads and a pool.
    bool loop = false;
    // The longest the loop waits without polling the scheduler's work
    // (LoopServer::kMaxWait, a net; tests raise it to show that nothing
    // waits for it).
    std::chrono::milliseconds loop_max_wait = LoopServer::kMaxWait;
    // Under `loop`: how many loops, each polling a completion queue of its
    // own (LoopServer).
    int loop_queues = 1;
  };

  explicit DelaydServer(Options options);
  ~DelaydServer();

  // Starts the scheduler (recovering the store, if any) and the server.
  // Fails if the store cannot be opened or read, or the address bound.
  Status Start();
  const Scheduler::RecoveryReport& recovery() const { return recovery_; }
  // The bound port (useful with port 0).
  int port() const { return port_; }
  int health_port() const { return health_port_; }
  // The metrics endpoint's port (0: none).
  int metrics_port() const { return metrics_ ? metrics_->port() : 0; }
  // Graceful stop: health NOT_SERVING, new operations UNAVAILABLE, streams
  // ended with UNAVAILABLE, in-flight calls given until `grace` to finish,
  // then the scheduler stops. Idempotent.
  void Shutdown(std::chrono::milliseconds grace);
  Scheduler& scheduler() { return *scheduler_; }
  const Scheduler& scheduler() const { return *scheduler_; }
  // Under Options::loop, the loops' server (after Start()); else null.
  const LoopServer* loop() const { return loop_.get(); }
  // A channel to the service in this process (after Start()): calls on it
  // pass the same checks as a client's, tokens included.
  std::shared_ptr<grpc::Channel> InProcessChannel() {
    return server_->InProcessChannel(grpc::ChannelArguments());
  }
  // Reads the token file and the TLS certificates again (SIGHUP). What fails
  // to load is not applied and is said in the result; the rest is.
  Status Reload();
  // The port's certificates, or null without TLS.
  const TlsCertificates* tls() const { return tls_.get(); }
  // A cluster node: whether it can serve (see cluster_node.h), and if not
  // why. Health is NOT_SERVING while it cannot.
  void SetClusterHealth(bool serving, const std::string& why);
  // A cluster node's view of its cluster, for ClusterStatus (outliving the
  // server).
  void SetClusterView(ClusterView* view) { service_->SetClusterView(view); }
  // A cluster node's forwarder (peer_token set; else null), to be told
  // who owns what.
  Forwarder* forwarder() { return forwarder_.get(); }
  // Whether anything guards the port: TLS or tokens.
  bool secured() const { return tls_ != nullptr || auth_.enabled(); }

 private:
  // Sets up forwarder_ from the cluster options (after TLS).
  Status StartForwarder();

  Options options_;
  Authorizer auth_;
  std::unique_ptr<TlsCertificates> tls_;
  std::unique_ptr<Forwarder> forwarder_;
  std::unique_ptr<Scheduler> scheduler_;
  // Delivers to push targets; stopped before the scheduler.
  std::unique_ptr<push::Pusher> pusher_;
  std::unique_ptr<DelaydService> service_;
  // Under Options::loop; stopped after the server, before the scheduler.
  std::unique_ptr<LoopServer> loop_;
  std::unique_ptr<grpc::Server> server_;
  // The health port's answer to every other method (UNIMPLEMENTED): a
  // callback service, which the health service needs beside it to be
  // polled. Declared before health_server_, so destroyed after it.
  grpc::CallbackGenericService health_unknown_;
  std::unique_ptr<grpc::Server> health_server_;
  // Reads the scheduler: declared after it, so destroyed before it.
  std::unique_ptr<MetricsEndpoint> metrics_;
  // Logs, every kReportInterval, how many events were redelivered (one line
  // per interval, not one per event). On a strand of the scheduler's pool.
  void ReportRedeliveries(std::uint64_t before);
  static constexpr std::chrono::seconds kReportInterval{10};
  std::unique_ptr<asio::steady_timer> report_timer_;
  // Compares Scheduler::StoreBusy with store_stall_limit a few times per
  // limit, and asks whether the store takes writes, and sets store_stalled_
  // and store_reachable_ (logged when they change). On the same strand as
  // report_timer_.
  void WatchStore();
  std::unique_ptr<asio::steady_timer> stall_timer_;
  int port_ = 0;
  int health_port_ = 0;
  // Health (the server's, delayd.v1.Delayd's and kStoreHealthService's):
  // SERVING once started, while not stopping, until a store write fails or
  // the store is found damaged (a failed read; until a restart), while no
  // store operation has run past store_stall_limit, and while the store
  // takes writes (a database may be unreachable for a while). Each change
  // is logged with its reason. Under health_mu_ (the store reports from its
  // own threads).
  void SetHealth() REQUIRES(health_mu_);
  Mutex health_mu_;
  bool started_ GUARDED_BY(health_mu_) = false;
  bool stopped_ GUARDED_BY(health_mu_) = false;
  bool cluster_serving_ GUARDED_BY(health_mu_) = true;
  bool store_writable_ GUARDED_BY(health_mu_) = true;
  bool store_stalled_ GUARDED_BY(health_mu_) = false;
  bool store_whole_ GUARDED_BY(health_mu_) = true;
  bool store_reachable_ GUARDED_BY(health_mu_) = true;
  Scheduler::RecoveryReport recovery_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_API_SERVER_H_
