// Events over HTTP, both over the service's Subscribe through the door's
// channel, without a thread waiting on either:
//   - a pull (POST .../events:pull, PullRequest): a worker stream that keeps
//     its leases and takes at most max_events, read until its first events
//     arrive or the wait ends, then cancelled and read to its end: the
//     answer holds every event the stream got, and those its server had not
//     yet written are taken back by the dispatcher (ready again, no attempt
//     counted). The events answered stay leased until acknowledged, nacked,
//     extended or past their ack deadline.
//   - a watch (GET .../events?watch=1): a watcher stream relayed as
//     Server-Sent Events, each event as `id: ID`, `event: expired|drained|
//     dead_lettered` and `data: <the Event as JSON>`, with a comment line
//     every 5 s so that a client gone away is noticed. A watcher gets live
//     copies, never a replay, so Last-Event-ID has nothing to resume.
// One message at a time is read from the stream, and the next only after
// the previous one is written to the HTTP client: a slow HTTP client slows
// its own stream, which the daemon bounds as it does any watcher's.
#ifndef DELAYD_SERVER_HTTP_HTTP_EVENTS_H_
#define DELAYD_SERVER_HTTP_HTTP_EVENTS_H_

#include <functional>
#include <string_view>

#include "delayd/v1/delayd.grpc.pb.h"
#include "server/http/respond.h"
#include "server/http/routes.h"

namespace delayd::http {

struct EventCall {
  v1::Delayd::Stub* stub;
  std::string authorization;  // empty: none
  // Told how to end the call early (the door stopping).
  std::function<void(std::function<void()> cancel)> set_cancel;
  // Runs once the exchange is answered (or its stream ended): the door's
  // count of calls under way.
  std::function<void()> done;
};

void ServePull(const Call& call, const Match& m, std::string_view body,
               EventCall events);
// Whether a GET .../events asks for a watch (workers pull instead).
bool IsWatch(std::string_view query);
// A watch; or 400 if `query` does not ask for one.
void ServeWatch(const Call& call, const Match& m, std::string_view query,
                EventCall events);

}  // namespace delayd::http

#endif  // DELAYD_SERVER_HTTP_HTTP_EVENTS_H_
