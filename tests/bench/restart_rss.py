#!/usr/bin/python3
"""A restart with 1 M pending timers: how long from exec to serving, and
the daemon's RSS after it against its RSS before it.

Usage: /usr/bin/python3 tests/bench/restart_rss.py DELAYD
           [--rounds 3] [--timers 1000000] [--fsync always]

Each round, on a new RocksDB store: starts DELAYD and reads its RSS once it
listens (empty); sets the timers (due in one to two hours, 16 B payloads,
batches of 1,000), waits until the daemon has settled (its CPU over 5 s
below 1 % of a core) and reads its RSS (before); stops it with SIGTERM,
starts it again on the store and times exec to the first Stats answer that
counts every timer (restart); waits until it has settled and reads its RSS
(after). Prints per round the restart time and the RSS per timer (RSS less
the empty daemon's, over the timers) before and after, and after/before.
Loopback only; every daemon it starts is stopped.
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [here, os.path.join(here, "..", "..", "client", "python")]
import delayd  # noqa: E402
from idle_cpu import Daemon, fill, settle  # noqa: E402


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS")


def serving(port, timers, deadline):
    """Polls Stats until it counts every timer; the instant it did."""
    client = delayd.Client(endpoints=[f"127.0.0.1:{port}"], timeout=1.0)
    try:
        while time.monotonic() < deadline:
            try:
                if client.stats(namespace="idle").namespaces[0] \
                        .pending_timers == timers:
                    return time.monotonic()
            except (delayd.DelaydError, IndexError):
                pass
            time.sleep(0.005)  # (Polls the daemon's answer, bounded.)
        raise RuntimeError("the restarted daemon did not serve in time")
    finally:
        client.close()


def one_round(binary, scratch, timers, fsync, log):
    data = os.path.join(scratch, "data")
    shutil.rmtree(data, ignore_errors=True)
    d = Daemon(binary, data, log, fsync=fsync)
    try:
        empty = rss_bytes(d.proc.pid)
        fill(d.port, timers)
        settle(d.proc.pid)
        before = rss_bytes(d.proc.pid)
    finally:
        d.stop()
    start = time.monotonic()
    d = Daemon(binary, data, log, fsync=fsync)
    try:
        took = serving(d.port, timers, start + 120) - start
        settle(d.proc.pid)
        after = rss_bytes(d.proc.pid)
    finally:
        d.stop()
    return took, empty, before, after


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("delayd")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timers", type=int, default=1_000_000)
    ap.add_argument("--fsync", default="always")
    args = ap.parse_args()
    scratch = tempfile.mkdtemp(prefix="delayd-restart-")
    log = open(os.path.join(scratch, "daemon.log"), "w")
    try:
        for r in range(1, args.rounds + 1):
            took, empty, before, after = one_round(
                args.delayd, scratch, args.timers, args.fsync, log)
            per = lambda rss: (rss - empty) / args.timers  # noqa: E731
            print(f"round {r}: restart {took:.2f} s (exec to serving every "
                  f"timer); RSS empty {empty / 2**20:.0f} MiB, before "
                  f"{before / 2**20:.0f} MiB ({per(before):.1f} B/timer), "
                  f"after {after / 2**20:.0f} MiB ({per(after):.1f} B/timer)"
                  f"; after/before {per(after) / per(before):.2f}x",
                  flush=True)
    finally:
        log.close()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
