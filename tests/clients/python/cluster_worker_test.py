#!/usr/bin/python3
"""The Python Worker on a three-node cluster (run_with_cluster.sh): under a
steady load, the node serving the worker's stream is killed (kill -9), then
a second node is stopped (SIGTERM). Every timer whose set was acknowledged
reaches the handler (none lost), none early, and the handler runs again for
at most what could be in flight at the two faults.

Usage: cluster_worker_test.py LIBRARY_DIR   (DELAYD_ENDPOINT: the nodes)
"""
import os
import sys
import threading
import time

sys.path.insert(0, sys.argv[1])
import delayd  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_load  # noqa: E402

CONCURRENCY = 8
client = delayd.Client(timeout=5.0)
lock = threading.Lock()
runs: dict[str, int] = {}
early = []


def handle(event):
    if time.time_ns() < event.fire_time_ns:
        early.append(event.key)
    with lock:
        runs[event.key] = runs.get(event.key, 0) + 1
    time.sleep(0.002)


worker = delayd.Worker("jobs", handle, concurrency=CONCURRENCY,
                       ack_timeout=2.0)
worker.start()

acked = cluster_load.load_through_faults(client, "jobs", b"x",
                                         delayd.DelaydError)

deadline = time.monotonic() + 60
while time.monotonic() < deadline:
    with lock:
        lost = [k for k in acked if k not in runs]
    if not lost:
        break
    time.sleep(0.05)  # (polls a condition, bounded)
worker.stop()
with lock:
    repeats = sum(n - 1 for n in runs.values())
print(f"{len(acked)} timers acknowledged, {len(lost)} lost, "
      f"{repeats} handled again, {len(early)} early")
assert not lost, f"lost: {sorted(lost)[:10]}"
assert not early, f"early: {early[:10]}"
assert repeats <= 2 * CONCURRENCY, f"{repeats} repeats"
