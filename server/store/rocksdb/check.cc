#include "server/store/rocksdb/check.h"

#include <cstdio>
#include <memory>

#include "server/common/json_log.h"
#include "server/store/rocksdb/rocks_store.h"

namespace delayd {
namespace {

std::string Quoted(std::string_view text) {
  std::string out = "\"";
  AppendJsonEscaped(text, out);
  return out + "\"";
}

}  // namespace

int RunCheck(const std::string& dir, bool json) {
  RocksOptions options;
  options.dir = dir;
  options.read_only = true;
  std::unique_ptr<RocksStore> store;
  RocksStore::CheckReport report;
  int code = 0;
  if (Status s = RocksStore::Open(options, StoreHooks(), &store); !s.ok()) {
    report.problems.push_back(s.message());
    code = 2;
  } else {
    store->Check(&report);
    code = report.problems.empty() ? 0 : 1;
  }
  if (json) {
    std::string out = "{\"data_dir\":" + Quoted(dir) +
                      ",\"whole\":" + (code == 0 ? "true" : "false") +
                      ",\"namespaces\":" + std::to_string(report.namespaces) +
                      ",\"timers\":" + std::to_string(report.timers) +
                      ",\"events\":" + std::to_string(report.events) +
                      ",\"problems\":[";
    for (std::size_t i = 0; i < report.problems.size(); ++i) {
      if (i > 0) out += ',';
      out += Quoted(report.problems[i]);
    }
    std::printf("%s]}\n", out.c_str());
  } else {
    std::printf("%s: %s\n", dir.c_str(),
                code == 0   ? "whole"
                : code == 1 ? "DAMAGED"
                            : "cannot be opened");
    std::printf("namespaces %llu, timers %llu, events %llu\n",
                static_cast<unsigned long long>(report.namespaces),
                static_cast<unsigned long long>(report.timers),
                static_cast<unsigned long long>(report.events));
    for (const auto& p : report.problems)
      std::printf("problem: %s\n", p.c_str());
  }
  return code;
}

}  // namespace delayd
