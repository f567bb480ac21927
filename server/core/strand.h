// Strands, and the capability of running on one.
//
// State confined to a strand (a dispatcher's) is GUARDED_BY that strand's
// StrandRole, and each handler posted to the strand begins with
// role.Enter(): debug builds check there that it runs on the strand, and
// clang's analysis (thread_annotations.h) then lets it, and what it calls,
// touch that state. A method that must run on the strand says
// REQUIRES(role).
#ifndef DELAYD_SERVER_CORE_STRAND_H_
#define DELAYD_SERVER_CORE_STRAND_H_

#include <asio.hpp>
#include <cassert>

#include "server/common/thread_annotations.h"
#include "server/core/loop_executor.h"

namespace delayd {

using Strand = asio::strand<LoopExecutor>;

class CAPABILITY("strand") StrandRole {
 public:
  template <typename S>
  explicit StrandRole(const S& strand)
      : strand_(&strand), in_([](const void* s) {
          return static_cast<const S*>(s)->running_in_this_thread();
        }) {}
  StrandRole(const StrandRole&) = delete;
  StrandRole& operator=(const StrandRole&) = delete;

  // Called first by a handler running on the strand.
  void Enter() const ASSERT_CAPABILITY(this) { assert(in_(strand_)); }

 private:
  // (Read by debug builds only.)
  [[maybe_unused]] const void* strand_;
  [[maybe_unused]] bool (*in_)(const void*);
};

}  // namespace delayd

#endif  // DELAYD_SERVER_CORE_STRAND_H_
