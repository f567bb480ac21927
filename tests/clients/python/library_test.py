#!/usr/bin/python3
"""The Python library (client/python) against a real delayd that
run_with_delayd.sh started (TLS, a bearer token): every call and every
error class, configuration shared with delayctl, retries, events and the
window of handled ids, and the stubs checked in against the .proto. The
workers' promises: worker_test.py and async_worker_test.py.

Usage: library_test.py PROTO_ROOT LIBRARY_DIR   (DELAYD_* name the daemon)
"""
import datetime as dt
import os
import shutil
import subprocess
import tempfile
import threading
import unittest

from library_common import (LIBRARY, PROTO_ROOT, Fixture, eventually,
                            readme_example)

# (After library_common, which puts the library on the path.)
import delayd
from delayd import _retry, _sending


class Calls(Fixture):
    def test_timers_set_moved_got_listed_removed(self):
        c, ns = self.client, self.ns
        at = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
        r = c.set_timer("order-42", b'{"order":42}', at=at, namespace=ns)
        self.assertFalse(r.replaced)
        self.assertEqual(r.fire_time, at)
        t = c.get_timer("order-42", namespace=ns)
        self.assertEqual((t.payload, t.version), (b'{"order":42}', r.version))
        m = c.move_timer("order-42", delay=dt.timedelta(minutes=5),
                         namespace=ns, expected_version=r.version)
        self.assertGreater(m.version, r.version)
        self.assertLess(m.fire_time, at)
        r2 = c.set_timer("order-42", "text is encoded", delay=60,
                         namespace=ns)
        self.assertTrue(r2.replaced)
        for i in range(7):
            c.set_timer(f"other-{i}", delay=3600, namespace=ns)
        keys = [t.key for t in c.list_timers(namespace=ns, prefix="other-",
                                             page_size=2)]
        self.assertEqual(sorted(keys), [f"other-{i}" for i in range(7)])
        self.assertEqual(c.remove_timer("order-42", namespace=ns), r2.version)
        with self.assertRaises(delayd.NotFound) as e:
            c.get_timer("order-42", namespace=ns)
        self.assertIn("order-42", e.exception.message)
        self.assertEqual(c.drain(namespace=ns), 8)  # (and the anchor)

    def test_each_error_class_carries_the_daemons_message(self):
        c, ns = self.client, self.ns
        with self.assertRaises(delayd.InvalidArgument) as e:
            c.set_timer("", delay=1, namespace=ns)
        self.assertIn("key", e.exception.message)
        with self.assertRaises(delayd.InvalidArgument) as e:
            c.set_timer("k", b"x" * (64 * 1024 + 1), delay=1, namespace=ns)
        self.assertIn("payload", e.exception.message)
        with self.assertRaises(delayd.InvalidArgument) as e:
            c.set_timer("k", delay=-5, namespace=ns)
        self.assertIn("negative", e.exception.message)
        with self.assertRaises(delayd.InvalidArgument):
            c.set_timer("k", namespace=ns)  # neither delay nor at
        r = c.set_timer("k", delay=60, namespace=ns)
        with self.assertRaises(delayd.AlreadyExists):
            c.set_timer("k", delay=60, namespace=ns, if_absent=True)
        with self.assertRaises(delayd.Aborted):
            c.remove_timer("k", namespace=ns, expected_version=r.version + 1)
        with self.assertRaises(delayd.NotFound):
            c.move_timer("absent", delay=1, namespace=ns)
        with self.assertRaises(delayd.FailedPrecondition):
            c.cluster_status()  # not a cluster node
        with self.assertRaises(delayd.InvalidArgument):
            c.get_timer("k", namespace="bad name")
        # Every error is a DelaydError with its code's name.
        try:
            c.get_timer("absent", namespace=ns)
        except delayd.DelaydError as err:
            self.assertEqual(err.code, "NOT_FOUND")

    def test_a_batch_answers_each_operation(self):
        c, ns = self.client, self.ns
        results = (c.batch(namespace=ns)
                   .set("a", b"1", delay=60)
                   .set("a", b"2", delay=60, if_absent=True)
                   .move("a", delay=120)
                   .remove("missing")
                   .commit())
        self.assertEqual([r.ok for r in results], [True, False, True, False])
        self.assertIsInstance(results[1].error, delayd.AlreadyExists)
        self.assertIsInstance(results[3].error, delayd.NotFound)
        self.assertGreater(results[2].version, results[0].version)

    def test_policies_dead_letters_schedules_and_figures(self):
        c, ns = self.client, self.ns
        p = c.set_policy(namespace=ns, max_attempts=1,
                         initial_backoff=dt.timedelta(milliseconds=100))
        self.assertEqual(p.max_attempts, 1)
        self.assertEqual(p.initial_backoff, dt.timedelta(milliseconds=100))
        self.assertTrue(c.pause(namespace=ns).paused)
        self.assertEqual(c.get_policy(namespace=ns).max_attempts, 1)
        self.assertFalse(c.resume(namespace=ns).paused)
        # The dedup window: a removed key refuses a create-only set.
        p = c.set_policy(namespace=ns, dedup_window=dt.timedelta(minutes=5))
        self.assertEqual(p.dedup_window, dt.timedelta(minutes=5))
        c.set_timer("once", b"p", delay=3600, namespace=ns)
        c.remove_timer("once", namespace=ns)
        with self.assertRaises(delayd.AlreadyExists) as refused:
            c.set_timer("once", b"p", delay=60, namespace=ns, if_absent=True)
        self.assertIn("was removed", str(refused.exception))
        # A dead letter: one attempt, nacked.
        c.set_timer("dies", b"p", delay=0, namespace=ns)
        sub = c.subscribe(namespace=ns)
        event = next(iter(sub))
        c.nack([event.id], namespace=ns, error="card declined")
        sub.cancel()
        letters = eventually(lambda: list(c.dead_letters(namespace=ns)),
                             what="the dead letter")
        self.assertEqual(letters[0].event.key, "dies")
        self.assertEqual(letters[0].error, "card declined")
        self.assertEqual(c.requeue_dead_letters([event.id], namespace=ns), 1)
        s = c.stats(namespace=ns)
        self.assertIsNone(s.durable)  # daemon-wide: left out
        self.assertEqual(s.namespaces[0].namespace, ns)
        self.assertIsNotNone(c.stats().durable)
        # Schedules.
        sched = c.set_schedule("nightly", b"r", cron="0 3 * * *",
                               time_zone="Europe/Berlin", namespace=ns)
        self.assertEqual(sched.spec.time_zone, "Europe/Berlin")
        # 03:00 in Berlin: 02:00 UTC in winter, 01:00 in summer.
        self.assertIn(sched.next_instant.hour, (1, 2))
        self.assertEqual(sched.next_instant.minute, 0)
        self.assertTrue(c.pause_schedule("nightly", namespace=ns).paused)
        self.assertFalse(c.resume_schedule("nightly", namespace=ns).paused)
        self.assertEqual([s.key for s in c.list_schedules(namespace=ns)],
                         ["nightly"])
        instants = c.preview_schedule(every=dt.timedelta(minutes=30),
                                      count=3, after=dt.datetime(
                                          2030, 1, 1, tzinfo=dt.timezone.utc))
        self.assertEqual(len(instants), 3)
        self.assertEqual(c.delete_schedule("nightly", namespace=ns),
                         sched.version)


class Configuration(unittest.TestCase):
    def test_the_environment_means_what_it_means_to_delayctl(self):
        env = {"DELAYD_ENDPOINT": "a:1, b:2", "DELAYD_TLS": "1",
               "DELAYD_TLS_CA": "/ca.pem", "DELAYD_TOKEN": "t"}
        c = delayd.Config.from_env(env)
        self.assertEqual(list(c.endpoints), ["a:1", "b:2"])
        self.assertTrue(c.secure)
        self.assertEqual(c.bearer(), "t")

    def test_a_token_file_and_a_dead_endpoint_first(self):
        with tempfile.NamedTemporaryFile("w", suffix=".token") as f:
            f.write(os.environ["DELAYD_TOKEN"] + "\n")
            f.flush()
            env = dict(os.environ)
            del env["DELAYD_TOKEN"]
            env["DELAYD_TOKEN_FILE"] = f.name
            # A port nothing listens on, then the daemon: calls rotate.
            env["DELAYD_ENDPOINT"] = "127.0.0.1:1," + os.environ[
                "DELAYD_ENDPOINT"]
            with delayd.Client(delayd.Config.from_env(env)) as c:
                self.assertIsNotNone(c.stats().durable)

    def test_a_conditional_call_whose_answer_was_lost_is_not_retried(self):
        lost = delayd.Unavailable("Socket closed")
        never = delayd.Unavailable("failed to connect to all addresses")
        attempts = _retry.Attempts(delayd.RetryPolicy(), "conditional")
        self.assertGreater(attempts.failed(never), 0)  # not sent: retried
        with self.assertRaises(delayd.OutcomeUnknown) as e:
            attempts.failed(lost)
        self.assertIs(e.exception.cause, lost)
        safe = _retry.Attempts(delayd.RetryPolicy(attempts=2), "safe")
        self.assertGreater(safe.failed(lost), 0)
        with self.assertRaises(delayd.Unavailable):
            safe.failed(lost)  # out of attempts
        with self.assertRaises(delayd.NotFound):
            safe.failed(delayd.NotFound("x"))  # never retried
        # A stopping node's gRPC ends the calls it had not answered: an
        # answer lost, not the caller's own cancellation.
        ended = delayd.Cancelled("CANCELLED")
        self.assertGreater(_retry.Attempts(delayd.RetryPolicy(), "safe")
                           .failed(ended), 0)
        with self.assertRaises(delayd.OutcomeUnknown):
            _retry.Attempts(delayd.RetryPolicy(), "conditional").failed(ended)


class Events(unittest.TestCase):
    """An Event reads each field from its message when it is read."""

    def message(self):
        from delayd.v1 import delayd_pb2 as pb
        e = pb.Event(id=7 << 10, namespace="ns", key="k", payload=b"p",
                     version=3 << 10, attempt=2, reason=pb.REASON_DRAINED,
                     schedule_run=4)
        e.fire_time.seconds, e.fire_time.nanos = 1_700_000_000, 123_456_789
        e.fired_at.seconds, e.fired_at.nanos = 1_700_000_001, 5_000
        return e

    def test_every_field_as_the_message_has_it(self):
        e = delayd.Event.from_pb(self.message())
        self.assertEqual(
            (e.id, e.namespace, e.key, e.payload, e.version, e.attempt,
             e.reason, e.schedule_run, e.fire_time_ns, e.fired_at_ns),
            (7 << 10, "ns", "k", b"p", 3 << 10, 2, "drained", 4,
             1_700_000_000_123_456_789, 1_700_000_001_000_005_000))
        self.assertEqual(e.fire_time, dt.datetime(
            2023, 11, 14, 22, 13, 20, 123456, tzinfo=dt.timezone.utc))
        self.assertEqual(e.fired_at.microsecond, 5)

    def test_made_by_fields_equal_to_one_read_and_immutable(self):
        import pickle
        read = delayd.Event.from_pb(self.message())
        made = delayd.Event(7 << 10, "ns", "k", b"p", 3 << 10, 2, "drained",
                            4, 1_700_000_000_123_456_789,
                            1_700_000_001_000_005_000)
        self.assertEqual(made, read)
        self.assertEqual(hash(made), hash(read))
        self.assertEqual(pickle.loads(pickle.dumps(read)), made)
        self.assertEqual(read._asdict()["reason"], "drained")
        self.assertIn("key='k'", repr(read))
        self.assertNotEqual(made, delayd.Event.from_pb(
            type(self.message())(id=7 << 10)))
        for name in ("id", "key", "anything"):
            with self.assertRaises(AttributeError):
                setattr(read, name, 1)
        self.assertEqual(read.key, "k")


class HandledIds(unittest.TestCase):
    """A worker's window of handled event ids (a repeat is acknowledged,
    not run again): each kept its window, the whole bounded."""

    def test_each_id_is_kept_its_window_then_forgotten(self):
        import random
        from delayd._handling import _Done
        done, rng, added, now = _Done(10.0, limit=10_000), \
            random.Random(7), [], 0.0
        for i in range(3000):
            now += rng.choice((0.001, 0.01, 0.3, 2.0, 7.0))
            done.add(i, now)
            added.append((now, i))
            recent = [j for t, j in added[-400:] if now - t < 10.0]
            self.assertTrue(all(j in done for j in recent), i)
        self.assertNotIn(0, done)
        # Added long after: what was older than two windows is gone.
        done.add(10_000, now + 10.0)
        done.add(10_001, now + 20.0)
        self.assertFalse(any(j in done for _, j in added))
        self.assertIn(10_001, done)

    def test_ids_added_together_keep_the_windows_promise(self):
        # (A worker records a run of handled events at once: add_all.)
        # Each id is kept its window unless half the limit came after it;
        # never more than the limit.
        import random
        from delayd._handling import _Done
        rng = random.Random(11)
        done, now, added = _Done(10.0, limit=200), 0.0, []
        for _ in range(400):
            now += rng.choice((0.001, 0.5, 3.0, 9.0))
            ids = list(range(len(added), len(added) + rng.randint(1, 40)))
            done.add_all(ids, now)
            added += [(now, j) for j in ids]
            for k, (t, j) in enumerate(added):
                if now - t < 10.0 and len(added) - k <= 100:
                    self.assertIn(j, done, (j, len(added)))
            new, old = done.generations()
            self.assertLessEqual(len(new) + len(old), 200)

    def test_a_burst_keeps_the_latest_half_of_its_limit_at_least(self):
        from delayd._handling import _Done
        done = _Done(600.0, limit=100)
        for i in range(1000):
            done.add(i, 5.0)
        kept = [i for i in range(1000) if i in done]
        self.assertLessEqual(len(kept), 100)
        self.assertEqual(kept[-50:], list(range(950, 1000)))


class AckPaces(unittest.TestCase):
    def test_slow_after_a_run_of_slow_answers_quick_at_the_first_quick(self):
        pace = _sending.AckPace()
        for _ in range(20):
            pace.record(0.0002)
        pace.record(0.05)  # one late answer
        self.assertFalse(pace.slow)
        pace.record(0.0002)
        for _ in range(_sending._SLOW_RUN - 1):
            pace.record(0.0008)
        self.assertFalse(pace.slow)
        pace.record(0.0008)
        self.assertTrue(pace.slow)
        pace.record(0.0009)  # a slow probe: still slow
        self.assertTrue(pace.slow)
        pace.record(0.0002)  # a quick probe: quick again
        self.assertFalse(pace.slow)


class ScriptedStream:
    """A client whose Subscribe stream gives the messages of `script`
    (lists of event ids), then stays open until cancelled; it records the
    acks it is sent."""

    def __init__(self, script):
        from delayd import types
        from delayd.v1 import delayd_pb2 as pb
        self.messages = []
        for ids in script:
            m = pb.SubscribeResponse()
            for i in ids:
                m.events.add(id=i, key=f"k{i}")
            self.messages.append(types.events_of(m.events))
        self.acked, self.ended = [], threading.Event()

    def subscribe(self, **kw):
        kw["on_registered"]()
        return self

    def batches(self):
        yield from self.messages
        self.ended.wait(10)

    def cancel(self):
        self.ended.set()

    def _ack_once(self, ids, namespace):
        self.acked += ids

    def ack(self, ids, namespace=None):
        self.acked += ids

    def extend_lease(self, *args, **kw):
        pass

    def _endpoint(self):
        return 0

    def _rotate(self, i):
        pass


class Receiving(unittest.TestCase):
    """What a Worker does with a message's events (a scripted stream, no
    daemon)."""

    def test_an_id_repeated_in_a_message_or_after_it_runs_once(self):
        # Ids repeated within a message, and ids of an earlier message
        # (handled, or still in hand), are each run once and acknowledged.
        stream = ScriptedStream([[1, 2, 2, 3], [4, 1, 5], [6], [2, 6, 7]])
        ran, done = [], threading.Event()

        def handler(event):
            ran.append(event.id)
            if len(set(ran)) == 7:
                done.set()
        w = delayd.Worker("ns", handler, concurrency=4, client=stream)
        w.start()
        self.assertTrue(done.wait(10))
        w.stop()
        self.assertEqual(sorted(ran), [1, 2, 3, 4, 5, 6, 7])
        self.assertEqual(set(stream.acked), {1, 2, 3, 4, 5, 6, 7})


class Stubs(unittest.TestCase):
    def test_the_checked_in_stubs_are_the_protos(self):
        out = tempfile.mkdtemp()
        try:
            subprocess.check_call([
                "protoc", f"-I{PROTO_ROOT}", f"--python_out={out}",
                f"--grpc_out={out}",
                "--plugin=protoc-gen-grpc=" + shutil.which("grpc_python_plugin"),
                "delayd/v1/delayd.proto"])
            for name in ("delayd_pb2.py", "delayd_pb2_grpc.py"):
                with open(os.path.join(out, "delayd/v1", name)) as a, \
                        open(os.path.join(LIBRARY, "delayd/v1", name)) as b:
                    self.assertEqual(a.read(), b.read(),
                                     f"{name} is stale: run "
                                     "client/python/generate.sh")
        finally:
            shutil.rmtree(out)


class Docs(unittest.TestCase):
    def test_the_projects_readme_shows_the_worker_as_written(self):
        with open(os.path.join(LIBRARY, "..", "..", "README.md")) as f:
            self.assertIn("```python\n" + readme_example() + "```", f.read())


if __name__ == "__main__":
    unittest.main(verbosity=2)
