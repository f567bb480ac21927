// Who may do what: bearer tokens scoped to namespace patterns.
//
// A token file has one token per line, `TOKEN NAMESPACES PERMISSIONS`:
//   TOKEN        the secret itself, or `sha256:HEX` (its SHA-256 digest, 64 hex
//                digits), so that the file need not hold secrets;
//   NAMESPACES   a comma list of names; a trailing `*` makes a prefix (`*`
//                alone: every namespace);
//   PERMISSIONS  a comma list of read (GetTimer, ListTimers, GetPolicy,
//                ListDeadLetters, Stats of the namespace, Subscribe as a
//                watcher), write (SetTimer, MoveTimer, RemoveTimer, Batch,
//                RequeueDeadLetters, PurgeDeadLetters), work (Subscribe as
//                a worker, Ack, Nack, ExtendLease), admin (all of these,
//                and Drain and SetPolicy; Stats of the whole daemon and
//                Backup, which span every namespace, need admin on `*`).
// Blank lines and lines starting with `#` are ignored. A token may appear on
// several lines; its grants add up.
//
// A client sends `authorization: Bearer TOKEN`. The presented token is
// hashed with SHA-256 and compared with every entry's digest in constant
// time (no early exit, CRYPTO_memcmp), so neither the comparison nor the
// file's order tells an attacker how close a guess came.
//
// Thread safety: Authorizer is safe to use from any thread; Reload swaps the
// table atomically (calls in progress finish with the table they started
// with).
#ifndef DELAYD_SERVER_API_AUTH_H_
#define DELAYD_SERVER_API_AUTH_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/common/status.h"

namespace delayd {

enum Permission : std::uint8_t {
  kRead = 1,
  kWrite = 2,
  kWork = 4,
  kAdmin = 8,
};

using Digest = std::array<std::uint8_t, 32>;

Digest Sha256(std::string_view data);

class TokenTable {
 public:
  struct Grant {
    std::string pattern;  // A name, or a prefix when `prefix`.
    bool prefix = false;
    std::uint8_t permissions = 0;
  };
  struct Entry {
    Digest digest;
    std::vector<Grant> grants;
  };

  // Parses a token file's text; errors name the line.
  static Status Parse(std::string_view text, TokenTable* out);
  // Reads and parses the file at `path`.
  static Status Load(const std::string& path, TokenTable* out);

  // The grants of `token`, or null for an unknown token. Takes the same
  // time whichever entry matches, or none.
  const std::vector<Grant>* Find(std::string_view token) const;
  // The same, by the token's SHA-256 digest.
  const std::vector<Grant>* FindDigest(const Digest& digest) const;
  std::size_t size() const { return entries_.size(); }

 private:
  std::vector<Entry> entries_;
};

// Whether `grants` allow `permission` on namespace `ns`. With `ns` empty
// (a daemon-wide call such as Stats), only a grant on `*` counts.
bool Allows(const std::vector<TokenTable::Grant>& grants, std::string_view ns,
            std::uint8_t permission);

// A caller identified by its token: the grants it holds, kept with the
// table they came from (a reload does not change a call in progress).
// Default-constructed: anyone, when checking is off.
class Caller {
 public:
  // OK if the caller may do `permission` (one Permission) on `ns` (empty:
  // on every namespace); PERMISSION_DENIED if not.
  Status May(std::string_view ns, std::uint8_t permission) const;
  // Another node of the cluster (it presented the cluster token).
  bool peer() const { return peer_; }

 private:
  friend class Authorizer;
  bool peer_ = false;
  std::shared_ptr<const TokenTable> table_;
  const std::vector<TokenTable::Grant>* grants_ = nullptr;  // Null: anyone.
};

class Authorizer {
 public:
  // Until Enable(), every call is allowed (no --auth-tokens).
  Authorizer() = default;
  Authorizer(const Authorizer&) = delete;
  Authorizer& operator=(const Authorizer&) = delete;

  // Turns checking on with `table`. Before serving (not thread-safe).
  void Enable(TokenTable table);

  bool enabled() const { return enabled_; }

  // A cluster's nodes present this token to each other (forward.h): its
  // holder may do anything, as a caller the entry node already checked.
  // Before serving (not thread-safe).
  void SetPeerToken(std::string_view token) { peer_ = Sha256(token); }

  // The token from an `authorization` metadata value ("Bearer TOKEN");
  // empty if the value is not of that form.
  static std::string_view BearerToken(std::string_view header);

  // Identifies the holder of `authorization` (the metadata value, empty if
  // absent): UNAUTHENTICATED for a missing or unknown token. A call hashes
  // its token once, here, and checks each namespace with Caller::May.
  Status Identify(std::string_view authorization, Caller* caller) const;

  // OK if the holder of `authorization` may do `permission` on `ns` (empty:
  // on every namespace);
  // UNAUTHENTICATED for a missing or unknown token, PERMISSION_DENIED for a
  // known token without the grant. Permission 0 checks only that the token
  // is known.
  Status Check(std::string_view authorization, std::string_view ns,
               std::uint8_t permission) const;

  // Replaces the table (SIGHUP). Only after Enable().
  void Reload(TokenTable table);

 private:
  std::shared_ptr<const TokenTable> table() const;

  bool enabled_ = false;
  std::optional<Digest> peer_;
  mutable std::mutex mu_;  // Guards table_ (held only to copy the pointer).
  std::shared_ptr<const TokenTable> table_;
};

}  // namespace delayd

#endif  // DELAYD_SERVER_API_AUTH_H_
