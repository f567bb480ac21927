// A PostgreSQL server a test starts for itself: initdb into a temporary
// directory (copied from a template made once per machine and PostgreSQL
// version, so a test does not pay initdb), `postgres` on 127.0.0.1 with a
// port the OS picked, stopped by its PID. Never the system's service. Run as
// root (as CI is), the server runs as the `postgres` user, which PostgreSQL
// requires. A streaming standby can be made of it (synchronous, for the
// fail-over tests).
//
// Thread safety: none; one test's thread drives it.
#ifndef DELAYD_TESTS_COMMON_POSTGRES_SERVER_H_
#define DELAYD_TESTS_COMMON_POSTGRES_SERVER_H_

#include <fcntl.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace delayd::testing {

class PostgresServer {
 public:
  // Where PostgreSQL's programs are: $DELAYD_PG_BINDIR, else Debian's.
  static std::string BinDir() {
    const char* env = getenv("DELAYD_PG_BINDIR");
    return env && *env ? env : "/usr/lib/postgresql/15/bin";
  }
  static bool Available() {
    return std::filesystem::exists(BinDir() + "/postgres");
  }

  // A new server; `error` says why not if null is returned. `settings` go
  // to postgres as -c NAME=VALUE.
  static std::unique_ptr<PostgresServer> Start(
      std::string* error, std::vector<std::string> settings = {}) {
    std::unique_ptr<PostgresServer> s(new PostgresServer());
    s->settings_ = std::move(settings);
    if (!s->MakeDir(error)) return nullptr;
    const std::string tmpl = Template(error);
    if (tmpl.empty()) return nullptr;
    if (!s->Run({"/bin/cp", "-a", tmpl, s->data_}, error)) return nullptr;
    if (!s->Launch(error)) return nullptr;
    return s;
  }

  ~PostgresServer() {
    Stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  PostgresServer(const PostgresServer&) = delete;
  PostgresServer& operator=(const PostgresServer&) = delete;

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  const std::string& data_dir() const { return data_; }

  // A libpq URL for database `db` on this server.
  std::string Url(const std::string& db) const {
    return "postgresql://delayd@127.0.0.1:" + std::to_string(port_) + "/" + db;
  }
  // A new, empty database: its name.
  std::string NewDatabase() {
    const std::string name = "d" + std::to_string(++databases_);
    Exec("postgres", "CREATE DATABASE " + name);
    return name;
  }
  // Runs `sql` in database `db`; the first value of its result ("" if
  // none, or on error: then `error` holds the error if given).
  std::string Exec(const std::string& db, const std::string& sql,
                   std::string* error = nullptr) const {
    PGconn* c = PQconnectdb(Url(db).c_str());
    std::string value;
    if (PQstatus(c) == CONNECTION_OK) {
      PGresult* r = PQexec(c, sql.c_str());
      const ExecStatusType st = PQresultStatus(r);
      if (st == PGRES_TUPLES_OK && PQntuples(r) > 0) {
        value = PQgetvalue(r, 0, 0);
      } else if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK && error) {
        *error = PQresultErrorMessage(r);
      }
      PQclear(r);
    } else if (error) {
      *error = PQerrorMessage(c);
    }
    PQfinish(c);
    return value;
  }

  // Stops the server: `signal` SIGINT (fast shutdown), SIGKILL (a crash);
  // SIGKILL anyway if it has not stopped within 30 s. Idempotent.
  void Stop(int signal = SIGINT) {
    if (pid_ <= 0) return;
    kill(pid_, signal);
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (waitpid(pid_, nullptr, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
  }
  // Starts it again on the same data and port (after Stop). After a
  // SIGKILL the dead postmaster's backends may hold its shared memory for a
  // moment (they notice it is gone): tried again for up to 30 s.
  bool Restart(std::string* error) {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!Launch(error, port_)) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return true;
  }

  // A synchronous streaming standby of this server, named `name` (its
  // application_name); this server then waits for it to flush every commit
  // (synchronous_standby_names = name).
  std::unique_ptr<PostgresServer> StartStandby(const std::string& name,
                                               std::string* error) {
    std::unique_ptr<PostgresServer> s(new PostgresServer());
    if (!s->MakeDir(error)) return nullptr;
    if (!Run({BinDir() + "/pg_basebackup", "-D", s->data_, "-h", "127.0.0.1",
              "-p", std::to_string(port_), "-U", "delayd", "-X", "stream", "-R",
              "--checkpoint=fast", "--no-sync", "-d",
              "application_name=" + name},
             error)) {
      return nullptr;
    }
    s->settings_ = settings_;
    if (!s->Launch(error)) return nullptr;
    Exec("postgres",
         "ALTER SYSTEM SET synchronous_standby_names = '" + name + "'");
    Exec("postgres", "SELECT pg_reload_conf()");
    // Until the standby streams, commits would wait: wait for it here.
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (Exec("postgres",
                "SELECT count(*) FROM pg_stat_replication WHERE "
                "sync_state = 'sync'") != "1") {
      if (std::chrono::steady_clock::now() > deadline) {
        *error = "the standby did not become synchronous";
        return nullptr;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return s;
  }
  // Promotes this standby to primary; waits until it takes writes.
  bool Promote() {
    Exec("postgres", "SELECT pg_promote(true, 30)");
    return Exec("postgres", "SELECT pg_is_in_recovery()") == "f";
  }

 private:
  PostgresServer() = default;

  static bool Root() { return geteuid() == 0; }

  // Runs `argv` (as postgres when root) and waits; false (and `error`) if
  // it fails. Its output goes to run.log in `log_dir`.
  bool Run(const std::vector<std::string>& argv, std::string* error) const {
    return RunIn(dir_, argv, error);
  }
  static bool RunIn(const std::string& log_dir,
                    const std::vector<std::string>& argv, std::string* error) {
    const pid_t pid = Spawn(argv, log_dir + "/run.log");
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0) {
      std::ifstream log(log_dir + "/run.log");
      *error = argv[0] + " failed: " +
               std::string(std::istreambuf_iterator<char>(log), {});
      return false;
    }
    return true;
  }

  // Starts `argv` (as postgres when root), output to `log`.
  static pid_t Spawn(const std::vector<std::string>& argv,
                     const std::string& log) {
    std::vector<std::string> args = argv;
    std::vector<char*> ptrs;
    for (auto& a : args) ptrs.push_back(a.data());
    ptrs.push_back(nullptr);
    const passwd* pw = Root() ? getpwnam("postgres") : nullptr;
    const uid_t uid = pw ? pw->pw_uid : 0;
    const gid_t gid = pw ? pw->pw_gid : 0;
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid == 0) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd >= 0) {
        dup2(fd, STDOUT_FILENO);
        dup2(fd, STDERR_FILENO);
      }
      if (Root() && (setgid(gid) != 0 || setuid(uid) != 0)) _exit(126);
      // A test that ends without Stop (a sanitizer's abort, a crash) takes
      // its server with it: the thread that started it going sends
      // SIGQUIT, PostgreSQL's immediate shutdown. (Set after setuid, which
      // clears it; the test's threads that start servers outlive them.)
      if (prctl(PR_SET_PDEATHSIG, SIGQUIT) != 0 || getppid() != parent) {
        _exit(125);
      }
      execv(ptrs[0], ptrs.data());
      _exit(127);
    }
    return pid;
  }

  bool MakeDir(std::string* error) {
    const char* base = getenv("TMPDIR");
    std::string pattern =
        std::string(base && *base ? base : "/tmp") + "/delayd-pg-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      *error = "mkdtemp failed";
      return false;
    }
    dir_ = pattern;
    data_ = dir_ + "/data";
    return Own(dir_, error);
  }

  static bool Own(const std::string& path, std::string* error) {
    if (!Root()) return true;
    const passwd* pw = getpwnam("postgres");
    if (pw == nullptr || chown(path.c_str(), pw->pw_uid, pw->pw_gid) != 0) {
      *error = "no postgres user to run PostgreSQL as (root cannot)";
      return false;
    }
    return true;
  }

  // A freshly initialized data directory, made once (by whichever test
  // comes first, under a lock) and copied by every server.
  static std::string Template(std::string* error) {
    const char* base = getenv("TMPDIR");
    const std::string root = std::string(base && *base ? base : "/tmp") +
                             "/delayd-pg-template-" + std::to_string(geteuid());
    const std::string done = root + "/data/PG_VERSION";
    if (std::filesystem::exists(done)) return root + "/data";
    std::filesystem::create_directories(root);
    const int lock = open((root + ".lock").c_str(), O_CREAT | O_RDWR, 0644);
    flock(lock, LOCK_EX);
    std::string result = root + "/data";
    if (!std::filesystem::exists(done)) {
      if (!Own(root, error)) {
        result.clear();
      } else {
        const std::string building = root + "/building";
        std::error_code ec;
        std::filesystem::remove_all(building, ec);
        if (!RunIn(root,
                   {BinDir() + "/initdb", "-D", building, "-U", "delayd",
                    "--auth=trust", "-E", "UTF8", "--no-sync",
                    "--no-instructions"},
                   error)) {
          result.clear();
        } else {
          // Replication for standbys, from loopback.
          std::ofstream hba(building + "/pg_hba.conf", std::ios::app);
          hba << "host replication delayd 127.0.0.1/32 trust\n";
          hba.close();
          std::filesystem::rename(building, root + "/data", ec);
          if (ec) result.clear();
        }
      }
    }
    flock(lock, LOCK_UN);
    close(lock);
    return result;
  }

  static int FreePort() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof addr;
    int port = 0;
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port = ntohs(addr.sin_port);
    }
    close(fd);
    return port;
  }

  // Starts postgres on the data directory and waits until it answers. A
  // port taken between FreePort and the start is tried again, up to five
  // times (unless `fixed`).
  bool Launch(std::string* error, int fixed = 0) {
    for (int attempt = 0; attempt < 5; ++attempt) {
      port_ = fixed != 0 ? fixed : FreePort();
      std::vector<std::string> argv = {BinDir() + "/postgres",
                                       "-D",
                                       data_,
                                       "-p",
                                       std::to_string(port_),
                                       "-k",
                                       dir_,
                                       "-c",
                                       "listen_addresses=127.0.0.1",
                                       "-c",
                                       "max_connections=60",
                                       "-c",
                                       "shared_buffers=16MB",
                                       "-c",
                                       "max_wal_senders=4",
                                       "-c",
                                       "wal_level=replica"};
      for (const auto& s : settings_) {
        argv.push_back("-c");
        argv.push_back(s);
      }
      pid_ = Spawn(argv, dir_ + "/postgres.log");
      const std::string url =
          "postgresql://delayd@127.0.0.1:" + std::to_string(port_) +
          "/postgres?connect_timeout=2";
      const auto deadline =
          std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (std::chrono::steady_clock::now() < deadline) {
        if (PQping(url.c_str()) == PQPING_OK) return true;
        if (waitpid(pid_, nullptr, WNOHANG) == pid_) {  // It exited.
          pid_ = -1;
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      Stop(SIGKILL);
      if (fixed != 0) break;
    }
    std::ifstream log(dir_ + "/postgres.log");
    *error = "postgres did not start: " +
             std::string(std::istreambuf_iterator<char>(log), {});
    return false;
  }

  std::string dir_;
  std::string data_;
  std::vector<std::string> settings_;
  int port_ = 0;
  pid_t pid_ = -1;
  int databases_ = 0;
};

}  // namespace delayd::testing

#endif  // DELAYD_TESTS_COMMON_POSTGRES_SERVER_H_
