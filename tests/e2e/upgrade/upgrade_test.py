#!/usr/bin/python3
"""Opens a store an earlier release made (make_store.py) with this build's
delayd, and checks every item it held: pending and moved timers (payloads,
versions, fire times), the timer that came due while it was down (fires),
the unacknowledged event (delivered again, same id), the nacked one (kept),
the dead letter, the policy, the paused namespace (holds its event until
resumed), the schedule; that the upgrade is logged, that new versions are
above every old one, and that the next start finds nothing to upgrade.

  upgrade_test.py DELAYD_BINARY STORE_DIR
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
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "client", "python"))
import delayd  # noqa: E402

BINARY, STORE = sys.argv[1], sys.argv[2]
EXPECTED = json.load(open(os.path.join(STORE, "expected.json")))
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def us(t):
    return (t - EPOCH) // dt.timedelta(microseconds=1)


class Daemon:
    def __init__(self, data):
        self.log_path = os.path.join(os.path.dirname(data), "delayd.log")
        self.log = open(self.log_path, "a+")
        self.log.seek(0, os.SEEK_END)
        self.start = self.log.tell()
        self.proc = subprocess.Popen(
            [BINARY, "--listen", "127.0.0.1:0", "--data-dir", data],
            stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while not (m := re.search(r" port (\d+) ", self.text())):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError("delayd did not start: " + self.text())
            time.sleep(0.05)  # polls the log, bounded
        self.client = delayd.Client(endpoints=[f"127.0.0.1:{m.group(1)}"])

    def text(self):
        with open(self.log_path) as f:
            f.seek(self.start)
            return f.read()

    def stop(self):
        self.client.close()
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(30) == 0, self.text()
        self.log.close()


def take(client, ns, n=1, timeout=10):
    """n events of a worker's stream, acknowledged."""
    got = []
    done = threading.Event()
    sub = client.subscribe(namespace=ns, max_in_flight=n)

    def read():
        for e in sub:
            got.append(e)
            client.ack([e.id], namespace=ns)
            if len(got) == n:
                done.set()
                return

    threading.Thread(target=read, daemon=True).start()
    done.wait(timeout)
    sub.cancel()
    return got


class Upgrade(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.work = tempfile.mkdtemp()
        cls.data = os.path.join(cls.work, "data")
        shutil.copytree(os.path.join(STORE, "data"), cls.data)
        cls.d = Daemon(cls.data)
        cls.c = cls.d.client

    @classmethod
    def tearDownClass(cls):
        if cls.d.proc.poll() is None:
            cls.d.proc.kill()
            cls.d.proc.wait()
            cls.d.log.close()
        shutil.rmtree(cls.work)

    def test_1_the_upgrade_is_logged(self):
        self.assertIn("from format 1 to 2", self.d.text())

    def test_2_pending_and_moved_timers_are_kept_exactly(self):
        for name, want in EXPECTED["timers"].items():
            ns, key = name.split("/")
            if key == "due-while-down":
                continue
            t = self.c.get_timer(key, namespace=ns)
            self.assertEqual(t.payload.hex(), want["payload"], name)
            self.assertEqual(t.version, want["version"], name)
            self.assertEqual(us(t.fire_time), want["fire_time_us"], name)

    def test_3_what_came_due_while_down_fires(self):
        want = EXPECTED["timers"]["shop/due-while-down"]
        # (Past its time unless the store was made a moment ago.)
        left = want["fire_time_us"] / 1e6 - time.time()
        got = take(self.c, "shop", timeout=10 + max(0, left))
        self.assertEqual([(e.key, e.version) for e in got],
                         [("due-while-down", want["version"])])

    def test_4_the_unacknowledged_event_comes_back(self):
        want = EXPECTED["events"]["unacked"]
        got = take(self.c, "work")
        self.assertEqual([(e.id, e.key, e.version) for e in got],
                         [(want["id"], want["key"], want["version"])])

    def test_5_the_nacked_event_is_kept(self):
        s = self.c.stats(namespace="retry").namespaces[0]
        self.assertEqual(s.retrying_events + s.ready_events +
                         s.in_flight_events, 1)

    def test_6_the_dead_letter_is_kept(self):
        want = EXPECTED["events"]["dead"]
        letters = list(self.c.dead_letters(namespace="dead"))
        self.assertEqual([(d.event.id, d.event.key) for d in letters],
                         [(want["id"], want["key"])])
        self.assertIn("gave up", letters[0].error)

    def test_7_policies_and_the_pause_are_kept(self):
        p = self.c.get_policy(namespace="policy")
        self.assertEqual(p.max_attempts, 7)
        self.assertEqual(p.ack_timeout, dt.timedelta(seconds=45))
        self.assertTrue(self.c.get_policy(namespace="paused").paused)
        held = self.c.stats(namespace="paused").namespaces[0]
        self.assertEqual((held.ready_events, held.in_flight_events,
                          held.events_delivered), (1, 0, 0))
        self.c.resume(namespace="paused")
        self.assertEqual([e.key for e in take(self.c, "paused")], ["held"])

    def test_8_the_schedule_is_kept(self):
        want = EXPECTED["schedule"]
        s = self.c.get_schedule(want["key"], namespace=want["namespace"])
        self.assertEqual(s.version, want["version"])
        self.assertEqual(s.spec.cron, "0 * * * *")
        self.assertEqual(s.spec.time_zone, "Europe/Berlin")

    def test_9_new_versions_are_above_old_ones_and_a_restart_upgrades_nothing(self):
        r = self.c.set_timer("new", b"new", delay=3600, namespace="shop")
        self.assertGreater(r.version, EXPECTED["max_version"])
        self.d.stop()
        again = Daemon(self.data)
        try:
            self.assertNotIn("from format", again.text())
            self.assertEqual(again.client.get_timer(
                "order-1", namespace="shop").payload, b"one")
            self.assertEqual(again.client.get_timer(
                "new", namespace="shop").version, r.version)
        finally:
            again.stop()


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
