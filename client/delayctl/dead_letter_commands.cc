// Dead letters: dlq ls|requeue|purge.
#include <cstdio>
#include <memory>

#include "client/delayctl/commands.h"
#include "client/delayctl/exit_codes.h"
#include "client/delayctl/print.h"

namespace delayctl {
namespace {

int List(Client& c, const Global& g, std::size_t limit) {
  std::vector<std::vector<std::string>> rows = {
      {"ID", "KEY", "ATTEMPTS", "FIRE TIME", "ERROR", "PAYLOAD"}};
  std::string token;
  std::size_t shown = 0;
  do {
    v1::ListDeadLettersRequest req;
    req.set_namespace_(g.ns);
    req.set_page_size(1000);
    req.set_page_token(token);
    v1::ListDeadLettersResponse resp;
    Check(c.stub().ListDeadLetters(c.Context().get(), req, &resp));
    for (const auto& d : resp.dead_letters()) {
      if (limit != 0 && shown == limit) break;
      ++shown;
      if (c.json()) {
        std::printf("%s\n", Json(d).c_str());
      } else {
        const v1::Event& e = d.event();
        rows.push_back({std::to_string(e.id()), e.key(),
                        std::to_string(e.attempt()), Time(e.fire_time()),
                        Shown(d.error()), Shown(e.payload())});
      }
    }
    token = resp.next_page_token();
  } while (!token.empty() && (limit == 0 || shown < limit));
  if (!c.json()) PrintTable(rows);
  return kOk;
}

struct IdsArgs {
  std::vector<std::uint64_t> ids;
  bool all = false;
};

// Requeue or purge: prints "VERB N" and each unknown id.
int Apply(Client& c, const Global& g, const IdsArgs& a, bool purge) {
  v1::DeadLettersRequest req;
  req.set_namespace_(g.ns);
  for (auto id : a.ids) req.add_event_ids(id);
  req.set_all(a.all);
  v1::DeadLettersResponse resp;
  Check(purge ? c.stub().PurgeDeadLetters(c.Context().get(), req, &resp)
              : c.stub().RequeueDeadLetters(c.Context().get(), req, &resp));
  if (c.json()) {
    std::printf("%s\n", Json(resp).c_str());
  } else {
    std::printf("%s %u\n", purge ? "purged" : "requeued", resp.count());
    for (auto id : resp.unknown_ids()) {
      std::printf("unknown %llu\n", static_cast<unsigned long long>(id));
    }
  }
  return resp.unknown_ids_size() == 0 ? kOk : kNotFound;
}

void CheckIds(const IdsArgs& a) {
  if (a.all == !a.ids.empty()) {
    throw Exit{kUsage, "give event ids or --all, not both"};
  }
}

}  // namespace

void AddDeadLetterCommands(CLI::App& app, const Global& g, Commands& out) {
  auto* dlq = app.add_subcommand(
      "dlq",
      "A namespace's dead letters (-n): events whose last attempt failed");
  dlq->require_subcommand(1);
  auto limit = std::make_shared<std::size_t>(0);
  auto* ls = dlq->add_subcommand("ls", "List them, oldest first");
  ls->add_option("--limit", *limit, "At most this many (0: all)");
  out.push_back(
      {ls, {}, {}, [&g, limit](Client& c) { return List(c, g, *limit); }});
  for (const bool purge : {false, true}) {
    auto a = std::make_shared<IdsArgs>();
    auto* sub =
        dlq->add_subcommand(purge ? "purge" : "requeue",
                            purge ? "Delete them for good"
                                  : "Deliver them again, attempts from zero");
    sub->add_option("ids", a->ids, "Event ids");
    sub->add_flag("--all", a->all, "Every one");
    out.push_back(
        {sub,
         [a] { CheckIds(*a); },
         {},
         [&g, a, purge](Client& c) { return Apply(c, g, *a, purge); }});
  }
}

}  // namespace delayctl
