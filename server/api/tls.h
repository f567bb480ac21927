// TLS for the daemon's port, with certificates that rotate without a restart.
//
// gRPC's FileWatcherCertificateProvider re-reads its files every second but
// reads the key and the certificate one after the other, so an operator who
// replaces both in place can be served a key of one pair and a certificate of
// the other. So delayd never points it at the operator's files: Create() and
// Reload() (on SIGHUP) read them, check that the key matches the certificate
// and that every PEM parses, and only then publish a copy of the set in a
// private directory, switched in one rename of a symbolic link. A set that
// does not load is refused with a message and the one in use stays; existing
// connections keep their session either way, new handshakes use the new set
// within a second.
//
// Thread safety: Reload() may be called from any thread, one at a time;
// current() from any thread.
#ifndef DELAYD_SERVER_API_TLS_H_
#define DELAYD_SERVER_API_TLS_H_

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/security/tls_certificate_provider.h>

#include <memory>
#include <string>

#include "server/common/mutex.h"
#include "server/common/status.h"

namespace delayd {

// Reads the whole file at `path` into `out`; false if it cannot be read.
bool ReadFile(const std::string& path, std::string* out);

class TlsCertificates {
 public:
  struct Files {
    std::string cert;       // PEM certificate chain, the server's first.
    std::string key;        // PEM private key of that certificate.
    std::string client_ca;  // If set: clients must present a certificate
                            // signed by one of these CAs (mutual TLS).
  };

  static Status Create(Files files, std::unique_ptr<TlsCertificates>* out);
  ~TlsCertificates();  // Removes the private copies.

  std::shared_ptr<grpc::ServerCredentials> credentials() const {
    return credentials_;
  }
  bool mutual() const { return !files_.client_ca.empty(); }

  // Reads the files again; publishes them if they load, else says why and
  // keeps the set in use.
  Status Reload();

  // The set in use, as validated PEM text (for the HTTP door's own TLS).
  struct Pem {
    std::string cert, key, client_ca;
  };
  Pem current() const;

 private:
  explicit TlsCertificates(Files files) : files_(std::move(files)) {}
  // Validates the files and publishes a copy as the current set.
  Status Publish();

  const Files files_;
  mutable Mutex mutex_;
  Pem current_ GUARDED_BY(mutex_);
  std::string dir_;  // Private: <dir>/current -> <dir>/gen-N.
  unsigned generation_ = 0;
  std::shared_ptr<grpc::experimental::CertificateProviderInterface> provider_;
  std::shared_ptr<grpc::ServerCredentials> credentials_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_API_TLS_H_
