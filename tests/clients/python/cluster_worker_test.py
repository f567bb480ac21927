#!/usr/bin/python3
"""The Python Worker on a three-node cluster (run_with_cluster.sh): under a
steady load, the node serving the worker's stream is killed (kill -9), then
a second node is stopped (SIGTERM). Every timer whose set was acknowledged
reaches the handler (none lost), none early, and the handler runs again for
at most what could be in flight at the two faults.

Usage: cluster_worker_test.py LIBRARY_DIR   (DELAYD_ENDPOINT: the nodes)
"""
import os
import signal
import sys
import threading
import time

sys.path.insert(0, sys.argv[1])
import delayd  # noqa: E402

CONCURRENCY = 8
pids = [int(p) for p in os.environ["DELAYD_TEST_NODE_PIDS"].split(",")]
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

acked: set[str] = set()
stop = threading.Event()


def produce():
    i = 0
    while not stop.is_set():
        key = f"job-{i}"
        i += 1
        try:
            client.set_timer(key, b"x", delay=0.3, namespace="jobs")
            acked.add(key)
        except delayd.DelaydError:
            pass  # Unanswered after its retries: may or may not exist.
        time.sleep(0.01)


producer = threading.Thread(target=produce)
producer.start()
time.sleep(1.5)
os.kill(pids[0], signal.SIGKILL)  # the node the worker's stream is on
time.sleep(2.0)
os.kill(pids[1], signal.SIGTERM)
time.sleep(1.5)
stop.set()
producer.join()

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
assert len(acked) > 200, "the load was too small"
assert not lost, f"lost: {sorted(lost)[:10]}"
assert not early, f"early: {early[:10]}"
assert repeats <= 2 * CONCURRENCY, f"{repeats} repeats"
