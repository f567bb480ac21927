#!/usr/bin/python3
"""Makes a small RocksDB store with a release's delayd, for the upgrade test
(upgrade_test.py): every kind of item a store keeps, then SIGTERM.

  make_store.py DELAYD_BINARY OUT_DIR [NAME]

(NAME: what made it, for a release whose delayd has no --version.)

OUT_DIR gets data/ (the store, without RocksDB's LOG and LOCK files) and
expected.json (what upgrade_test.py checks). The store of a release is made
from that release's tag and kept under tests/e2e/upgrade/<version>/:

  git worktree add /tmp/delayd-0.1.0 <tag> && cd /tmp/delayd-0.1.0 &&
  cmake -S . -B build -G Ninja -DDELAYD_BUILD_TESTS=OFF &&
  cmake --build build --target delayd && cd - &&
  tests/e2e/upgrade/make_store.py /tmp/delayd-0.1.0/build/server/delayd \\
      tests/e2e/upgrade/0.1.0

It drives the daemon with this tree's Python library: the wire format of
delayd.v1 only ever gains fields, so it speaks to every release.
"""
import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "client", "python"))
import delayd  # noqa: E402

binary, out = sys.argv[1], sys.argv[2]
work = tempfile.mkdtemp()
data = os.path.join(work, "data")
log = open(os.path.join(work, "delayd.log"), "w+")
daemon = subprocess.Popen([binary, "--listen", "127.0.0.1:0", "--data-dir",
                           data], stdout=log, stderr=subprocess.STDOUT)


def port():
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        log.seek(0)
        m = re.search(r" port (\d+) ", log.read())
        if m:
            return m.group(1)
        time.sleep(0.05)  # polls the log, bounded
    raise SystemExit("delayd did not start")


client = delayd.Client(endpoints=[f"127.0.0.1:{port()}"])
version = subprocess.run([binary, "--version"], capture_output=True,
                         text=True).stdout.strip() or sys.argv[3]
year = dt.timedelta(days=365)
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def us(t):
    """An instant in microseconds (the library's datetimes hold no more)."""
    return (t - EPOCH) // dt.timedelta(microseconds=1)


expected = {"made_by": version, "timers": {}, "events": {}}


def timer(ns, key, payload, delay):
    r = client.set_timer(key, payload, delay=delay, namespace=ns)
    expected["timers"][f"{ns}/{key}"] = {
        "payload": payload.hex(), "version": r.version,
        "fire_time_us": us(r.fire_time)}
    return r


def take_one(ns, then):
    """A worker's stream takes one event; `then(event)` with it."""
    got = threading.Event()
    sub = client.subscribe(namespace=ns, max_in_flight=1,
                           ack_timeout=dt.timedelta(hours=1))

    def read():
        for e in sub:
            then(e)
            got.set()
            return

    threading.Thread(target=read, daemon=True).start()
    if not got.wait(20):
        raise SystemExit(f"{ns}: no event")
    return sub


# Pending timers, one with a larger payload; a moved one; one due while
# the daemon is down (fires at the next start).
timer("shop", "order-1", b"one", year)
timer("shop", "order-2", os.urandom(1024), year)
timer("shop", "moved", b"moved", year)
r = client.move_timer("moved", delay=2 * year, namespace="shop")
expected["timers"]["shop/moved"].update(version=r.version,
                                       fire_time_us=us(r.fire_time))
due = timer("shop", "due-while-down", b"late", dt.timedelta(seconds=30))

# An unacknowledged event: a worker took it and never answered.
timer("work", "unacked", b"in flight", dt.timedelta(0))
del expected["timers"]["work/unacked"]
held = take_one("work", lambda e: expected["events"].update(
    unacked={"id": e.id, "namespace": "work", "key": e.key,
             "version": e.version}))

# A nacked event waiting for its retry, an hour away.
timer("retry", "nacked", b"again", dt.timedelta(0))
del expected["timers"]["retry/nacked"]
take_one("retry", lambda e: (
    client.nack([e.id], namespace="retry", error="boom",
                retry_after=dt.timedelta(hours=1)),
    expected["events"].update(nacked={"id": e.id, "namespace": "retry",
                                      "key": e.key})))

# A dead letter: one attempt allowed, nacked.
client.set_policy(namespace="dead", max_attempts=1)
timer("dead", "letter", b"dead", dt.timedelta(0))
del expected["timers"]["dead/letter"]
take_one("dead", lambda e: (
    client.nack([e.id], namespace="dead", error="gave up"),
    expected["events"].update(dead={"id": e.id, "namespace": "dead",
                                    "key": e.key})))

# A policy; a paused namespace holding a due timer.
client.set_policy(namespace="policy", max_attempts=7,
                  ack_timeout=dt.timedelta(seconds=45))
client.set_policy(namespace="paused", paused=True)
timer("paused", "held", b"held", dt.timedelta(0))
del expected["timers"]["paused/held"]

# A recurring schedule.
s = client.set_schedule("hourly", b"tick", cron="0 * * * *",
                        time_zone="Europe/Berlin", namespace="sched")
expected["schedule"] = {"namespace": "sched", "key": "hourly",
                        "version": s.version}

expected["max_version"] = max(t["version"] for t in expected["timers"].values())
# Until dead letters are listed, the daemon has written the nack.
deadline = time.monotonic() + 10
while not list(client.dead_letters(namespace="dead")):
    if time.monotonic() > deadline:
        raise SystemExit("no dead letter")
    time.sleep(0.02)  # polls, bounded
daemon.send_signal(signal.SIGTERM)
if daemon.wait(30) != 0:
    raise SystemExit(f"delayd exited {daemon.returncode}")
held.cancel()
client.close()

shutil.rmtree(os.path.join(out, "data"), ignore_errors=True)
os.makedirs(out, exist_ok=True)
shutil.copytree(data, os.path.join(out, "data"),
                ignore=shutil.ignore_patterns("LOG", "LOG.old.*", "LOCK"))
with open(os.path.join(out, "expected.json"), "w") as f:
    json.dump(expected, f, indent=1, sort_keys=True)
shutil.rmtree(work)
print(f"{out}: made by {version}")
