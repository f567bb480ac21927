#include "server/api/tls.h"

#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace delayd {

bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream s;
  s << in.rdbuf();
  *out = s.str();
  return true;
}

namespace {

namespace fs = std::filesystem;

bool WriteFile(const std::string& path, const std::string& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << data;
  out.close();
  return static_cast<bool>(out) && chmod(path.c_str(), 0600) == 0;
}

std::string OpensslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) return "no PEM data";
  char buf[256];
  ERR_error_string_n(e, buf, sizeof buf);
  return buf;
}

// The number of certificates in `pem`.
int CountCertificates(const std::string& pem) {
  BIO* bio = BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size()));
  int n = 0;
  while (X509* x = PEM_read_bio_X509(bio, nullptr, nullptr, nullptr)) {
    X509_free(x);
    ++n;
  }
  ERR_clear_error();  // The end of the data reads as an error.
  BIO_free(bio);
  return n;
}

// Checks that `key_pem` is a private key matching the first certificate of
// `cert_pem`.
Status CheckPair(const std::string& cert_pem, const std::string& key_pem,
                 const std::string& cert_path, const std::string& key_path) {
  BIO* cb = BIO_new_mem_buf(cert_pem.data(), static_cast<int>(cert_pem.size()));
  X509* cert = PEM_read_bio_X509(cb, nullptr, nullptr, nullptr);
  BIO_free(cb);
  if (cert == nullptr) {
    return Status::InvalidArgument("--tls-cert " + cert_path +
                                   ": no PEM certificate (" + OpensslError() +
                                   ")");
  }
  BIO* kb = BIO_new_mem_buf(key_pem.data(), static_cast<int>(key_pem.size()));
  EVP_PKEY* key = PEM_read_bio_PrivateKey(kb, nullptr, nullptr, nullptr);
  BIO_free(kb);
  Status s;
  if (key == nullptr) {
    s = Status::InvalidArgument("--tls-key " + key_path +
                                ": no PEM private key (" + OpensslError() +
                                ")");
  } else if (X509_check_private_key(cert, key) != 1) {
    ERR_clear_error();
    s = Status::InvalidArgument("--tls-key " + key_path +
                                " does not match the certificate in " +
                                cert_path);
  }
  EVP_PKEY_free(key);
  X509_free(cert);
  return s;
}

}  // namespace

Status TlsCertificates::Create(Files files,
                               std::unique_ptr<TlsCertificates>* out) {
  std::unique_ptr<TlsCertificates> t(new TlsCertificates(std::move(files)));
  const char* tmp = getenv("TMPDIR");
  std::string templ =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
      "/delayd-tls-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr) {
    return Status::Internal(
        "cannot create a private directory for TLS "
        "certificates in " +
        fs::path(templ).parent_path().string());
  }
  t->dir_ = templ;
  if (Status s = t->Publish(); !s.ok()) return s;
  const std::string current = t->dir_ + "/current/";
  t->provider_ =
      std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
          current + "key.pem", current + "cert.pem",
          t->mutual() ? current + "ca.pem" : "", /*refresh_interval_sec=*/1);
  grpc::experimental::TlsServerCredentialsOptions options(t->provider_);
  options.watch_identity_key_cert_pairs();
  if (t->mutual()) {
    options.watch_root_certs();
    options.set_cert_request_type(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  t->credentials_ = grpc::experimental::TlsServerCredentials(options);
  if (!t->credentials_) {
    return Status::Internal("gRPC refused the TLS configuration");
  }
  *out = std::move(t);
  return Status::Ok();
}

TlsCertificates::~TlsCertificates() {
  credentials_.reset();
  provider_.reset();
  std::error_code ec;
  if (!dir_.empty()) fs::remove_all(dir_, ec);
}

Status TlsCertificates::Reload() { return Publish(); }

TlsCertificates::Pem TlsCertificates::current() const {
  MutexLock lock(&mutex_);
  return current_;
}

Status TlsCertificates::Publish() {
  std::string cert, key, ca;
  if (!ReadFile(files_.cert, &cert)) {
    return Status::InvalidArgument("--tls-cert: cannot read " + files_.cert);
  }
  if (!ReadFile(files_.key, &key)) {
    return Status::InvalidArgument("--tls-key: cannot read " + files_.key);
  }
  if (Status s = CheckPair(cert, key, files_.cert, files_.key); !s.ok()) {
    return s;
  }
  if (mutual()) {
    if (!ReadFile(files_.client_ca, &ca)) {
      return Status::InvalidArgument("--tls-client-ca: cannot read " +
                                     files_.client_ca);
    }
    if (CountCertificates(ca) == 0) {
      return Status::InvalidArgument("--tls-client-ca " + files_.client_ca +
                                     ": no PEM certificate");
    }
  }
  const std::string gen = "gen-" + std::to_string(++generation_);
  const std::string gen_dir = dir_ + "/" + gen;
  std::error_code ec;
  fs::create_directory(gen_dir, ec);
  if (ec || !WriteFile(gen_dir + "/cert.pem", cert) ||
      !WriteFile(gen_dir + "/key.pem", key) ||
      (mutual() && !WriteFile(gen_dir + "/ca.pem", ca))) {
    return Status::Internal("cannot write TLS certificates to " + gen_dir);
  }
  // One rename switches the whole set.
  const std::string link_tmp = dir_ + "/current.tmp";
  fs::remove(link_tmp, ec);
  if (symlink(gen.c_str(), link_tmp.c_str()) != 0 ||
      rename(link_tmp.c_str(), (dir_ + "/current").c_str()) != 0) {
    return Status::Internal("cannot switch TLS certificates in " + dir_);
  }
  {
    MutexLock lock(&mutex_);
    current_ = Pem{std::move(cert), std::move(key), std::move(ca)};
  }
  // The set before the previous one is no longer read by anyone.
  if (generation_ > 2) {
    fs::remove_all(dir_ + "/gen-" + std::to_string(generation_ - 2), ec);
  }
  return Status::Ok();
}

}  // namespace delayd
