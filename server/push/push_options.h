// What the operator allows push targets (--push-allow, --push-allow-http).
#ifndef DELAYD_SERVER_PUSH_PUSH_OPTIONS_H_
#define DELAYD_SERVER_PUSH_PUSH_OPTIONS_H_

#include "server/push/address_rules.h"

namespace delayd::push {

struct PushOptions {
  AddressRules rules;
  // Plain http:// targets are accepted (else https:// only).
  bool allow_http = false;
};

}  // namespace delayd::push

#endif  // DELAYD_SERVER_PUSH_PUSH_OPTIONS_H_
