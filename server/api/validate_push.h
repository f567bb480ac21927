// A policy's push target from and to the API (the proto's PushTarget
// gives the rules each field is held to).
#ifndef DELAYD_SERVER_API_VALIDATE_PUSH_H_
#define DELAYD_SERVER_API_VALIDATE_PUSH_H_

#include "delayd/v1/delayd.pb.h"
#include "server/common/push_target.h"
#include "server/common/status.h"
#include "server/push/push_options.h"

namespace delayd {

// Checks `in` and sets `out` (an empty url: no target, every other field
// must then be unset). Literal addresses are checked against the rules;
// names are not resolved here (see PushHost). `options` null: push
// delivery is not running, and a target is refused. What a read leaves
// out is kept from `current` when `in` names it instead: secrets by their
// secret_ids (beside any new secrets), the client key by has_client_key
// (when `in` has no key), so that a target read and written back keeps
// them.
Status PushTargetFields(const v1::PushTarget& in,
                        const push::PushOptions* options,
                        const PushTarget& current, PushTarget* out);

// The host of `url` if it is a name the address rules need resolved
// (empty: none, or a literal address, or a URL PushTargetFields refuses).
std::string PushHost(const std::string& url);

// The target as reads show it: secrets and the client key left out,
// secret_ids and has_client_key set.
void PushTargetToProto(const PushTarget& t, v1::PushTarget* out);

}  // namespace delayd

#endif  // DELAYD_SERVER_API_VALIDATE_PUSH_H_
