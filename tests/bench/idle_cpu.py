#!/usr/bin/python3
"""An idle daemon's CPU with 1 M pending timers, A/B.

Usage: /usr/bin/python3 tests/bench/idle_cpu.py DELAYD_A DELAYD_B
           [--rounds 3] [--timers 1000000] [--seconds 60]

Fills one RocksDB store (--fsync always) with the timers, due in one to two
hours, through DELAYD_A; then, in each round, runs A and B in turn on that
store: starts it, waits until it has settled (its CPU over 5 s below 1 % of
a core, at most 120 s), and measures its CPU over --seconds, all threads
(schedstat), with each thread's share and wake-ups (voluntary switches).
Prints each run and the B/A ratios per round (CPU, and wake-ups in all:
on this virtual machine an idle daemon's CPU is mostly its wake-ups, each
a hundred microseconds or more, so the count is the steadier figure). Loopback only; every daemon
it starts is stopped.
"""
import argparse
import datetime
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..",
                                "client", "python"))
import delayd  # noqa: E402


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def threads(pid):
    """{tid: (name, cpu ns, voluntary switches)}"""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            base = f"/proc/{pid}/task/{tid}"
            name = open(f"{base}/comm").read().strip()
            cpu = int(open(f"{base}/schedstat").read().split()[0])
            vol = next(int(line.split()[1])
                       for line in open(f"{base}/status")
                       if line.startswith("voluntary_ctxt_switches"))
            out[tid] = (name, cpu, vol)
        except (FileNotFoundError, ProcessLookupError):
            pass
    return out


def cpu_ns(pid):
    return sum(cpu for _, cpu, _ in threads(pid).values())


class Daemon:
    def __init__(self, binary, data_dir, log, fsync="always"):
        self.port = free_port()
        self.proc = subprocess.Popen(
            [binary, "--listen", f"127.0.0.1:{self.port}", "--data-dir",
             data_dir, "--fsync", fsync],
            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), 0.2).close()
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError(f"{binary} exited")
                time.sleep(0.05)  # (Polling for the port, bounded.)
        raise RuntimeError(f"{binary} did not listen within 60 s")

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)


def fill(port, n):
    client = delayd.Client(endpoints=[f"127.0.0.1:{port}"])
    rng = random.Random(1)
    for b in range(n // 1000):
        batch = client.batch(namespace="idle")
        for i in range(1000):
            batch.set(f"k{b * 1000 + i:012d}", b"p" * 16,
                      delay=datetime.timedelta(
                          seconds=3600 + rng.random() * 3600))
        batch.commit()


def settle(pid):
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        before = cpu_ns(pid)
        time.sleep(5)  # The window the settling is judged over.
        if (cpu_ns(pid) - before) / 5e9 < 0.01:
            return True
    return False


def measure(pid, seconds):
    a = threads(pid)
    start = time.monotonic()
    time.sleep(seconds)  # The measurement window itself.
    b = threads(pid)
    wall = time.monotonic() - start
    rows = []
    for tid, (name, cpu, vol) in b.items():
        cpu0, vol0 = a.get(tid, (name, 0, 0))[1:]
        rows.append((cpu - cpu0, (vol - vol0) / wall, name))
    rows.sort(reverse=True)
    return sum(r[0] for r in rows) / 1e9 / wall, rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timers", type=int, default=1_000_000)
    ap.add_argument("--seconds", type=float, default=60)
    args = ap.parse_args()
    scratch = tempfile.mkdtemp(prefix="delayd-idle-")
    data = os.path.join(scratch, "data")
    log = open(os.path.join(scratch, "daemon.log"), "w")
    try:
        d = Daemon(args.a, data, log)
        try:
            fill(d.port, args.timers)
        finally:
            d.stop()
        print(f"{args.timers} timers pending in {data}")
        for r in range(1, args.rounds + 1):
            shares, wakes = {}, {}
            for label, binary in (("A", args.a), ("B", args.b)):
                d = Daemon(binary, data, log)
                try:
                    settled = settle(d.proc.pid)
                    share, rows = measure(d.proc.pid, args.seconds)
                finally:
                    d.stop()
                shares[label] = share
                wakes[label] = sum(r[1] for r in rows)
                busiest = ", ".join(f"{name} {cpu / 1e6:.1f} ms {wake:.1f}/s"
                                    for cpu, wake, name in rows[:4] if cpu)
                print(f"round {r} {label}: {100 * share:.4f} % of a core over "
                      f"{args.seconds:.0f} s{'' if settled else ' (unsettled)'}"
                      f", {wakes[label]:.1f} wake-ups/s in all"
                      f"; busiest threads: {busiest}")
            print(f"round {r} B/A: {shares['B'] / shares['A']:.2f}x CPU, "
                  f"{wakes['B'] / wakes['A']:.2f}x wake-ups")
    finally:
        log.close()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
