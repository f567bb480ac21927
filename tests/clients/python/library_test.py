#!/usr/bin/python3
"""The Python library (client/python) against a real delayd that
run_with_delayd.sh started (TLS, a bearer token): every call and every
error class, configuration shared with delayctl, retries, the Worker's and
the AsyncWorker's promises, and the stubs checked in against the .proto.

Usage: library_test.py PROTO_ROOT LIBRARY_DIR   (DELAYD_* name the daemon)
"""
import asyncio
import datetime as dt
import inspect
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

PROTO_ROOT, LIBRARY = sys.argv[1], sys.argv[2]
sys.path.insert(0, LIBRARY)
del sys.argv[1:3]

import delayd  # noqa: E402
import delayd._awork  # noqa: E402
from delayd import _retry, _sending  # noqa: E402


def eventually(cond, timeout=10.0, what="a condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.01)  # (polls a condition, bounded)
    raise AssertionError(f"timed out waiting for {what}")


async def until(cond, timeout=10.0, what="a condition"):
    """eventually() for a test on an event loop: polls without blocking it.
    `cond` may return an awaitable (a call to the daemon), awaited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        met = cond()
        if inspect.isawaitable(met):
            met = await met
        if met:
            return
        await asyncio.sleep(0.01)  # (polls a condition, bounded)
    raise AssertionError(f"timed out waiting for {what}")


async def set_due(c, ns, keys):
    """Sets a timer due now on each key, in one Batch."""
    b = c.batch(namespace=ns)
    for key in keys:
        b.set(key, b"", delay=0)
    await b.commit()


class Fixture(unittest.TestCase):
    counter = 0

    def setUp(self):
        Fixture.counter += 1
        self.ns = f"py-{os.getpid()}-{Fixture.counter}"
        self.client = delayd.Client(timeout=10.0)
        # A far timer keeps the namespace (and its figures) when nothing
        # else does.
        self.client.set_timer("~anchor", delay=3600, namespace=self.ns)

    def tearDown(self):
        self.client.close()


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


class Workers(Fixture):
    def test_each_event_handled_once_and_acknowledged(self):
        c, ns = self.client, self.ns
        got, late = [], []
        hooks = delayd.Hooks(on_event=lambda e, l: late.append(l))
        w = delayd.Worker(ns, lambda e: got.append(e.key), concurrency=4,
                          client=c, hooks=hooks)
        w.start()
        for i in range(50):
            c.set_timer(f"k{i}", delay=0, namespace=ns)
        eventually(lambda: len(got) == 50, what="50 events")
        w.stop()
        self.assertEqual(sorted(got), sorted(f"k{i}" for i in range(50)))
        s = c.stats(namespace=ns).namespaces[0]
        self.assertEqual((s.events_acked, s.in_flight_events), (50, 0))
        self.assertEqual(len(late), 50)
        # A handler reads every field of what the daemon sent.
        seen = []
        w = delayd.Worker(ns, seen.append, client=c)
        w.start()
        r = c.set_timer("fields", b"\x00payload", delay=0.05, namespace=ns)
        eventually(lambda: seen, what="the event")
        w.stop()
        e = seen[0]
        self.assertEqual((e.namespace, e.key, e.payload, e.version, e.attempt,
                          e.reason, e.schedule_run),
                         (ns, "fields", b"\x00payload", r.version, 1,
                          "expired", 0))
        self.assertEqual(e.fire_time, r.fire_time)
        self.assertGreaterEqual(e.fired_at, e.fire_time)

    def test_acks_whose_answers_are_lost_are_sent_again(self):
        # The next answers to a handler thread's ack are lost (after the
        # ack was applied): the worker must send them again.
        c, ns = self.client, self.ns
        lost = [5]
        real_once = c._ack_once

        def once(ids, namespace):
            error = real_once(ids, namespace)
            if error is None and lost[0] > 0:
                lost[0] -= 1
                error = delayd.Unavailable("the answer was lost")
            return error

        c._ack_once = once
        try:
            got = []
            w = delayd.Worker(ns, lambda e: got.append(e.key),
                              concurrency=2, client=c)
            w.start()
            for i in range(20):
                c.set_timer(f"k{i}", delay=0, namespace=ns)
            eventually(lambda: len(got) == 20, what="20 events")
            w.stop()
        finally:
            c._ack_once = real_once
        self.assertEqual(lost, [0])
        self.assertEqual(sorted(got), sorted(f"k{i}" for i in range(20)))
        s = c.stats(namespace=ns).namespaces[0]
        self.assertEqual((s.events_acked, s.in_flight_events), (20, 0))

    def test_the_stream_is_read_on_the_workers_own_threads(self):
        # (Its channel's option: no thread of gRPC's reads the stream and
        # hands each message over; see client.py.)
        import grpc._channel
        c, ns = delayd.Client(), self.ns
        got = []
        w = delayd.Worker(ns, lambda e: got.append(e.key), client=c)
        w.start()
        self.client.set_timer("k", delay=0, namespace=ns)
        eventually(lambda: got, what="the event")
        self.assertIsInstance(w._stream._call,
                              grpc._channel._SingleThreadedRendezvous)
        w.stop()
        c.close()

    def handle_with_acks(self, n, once):
        """Runs a Worker over `n` events with its client's waited ack call
        replaced by `once(ids, namespace, real_once, real_nowait)`; checks
        every event handled and acknowledged; returns the sizes of the acks
        sent without waiting."""
        c, ns = delayd.Client(), self.ns
        nowait = []
        real_once, real_nowait = c._ack_once, c._ack_nowait
        c._ack_once = lambda ids, namespace: once(ids, namespace, real_once,
                                                  real_nowait)
        c._ack_nowait = lambda ids, *a: (nowait.append(len(ids)),
                                         real_nowait(ids, *a))
        got = []
        w = delayd.Worker(ns, lambda e: got.append(e.key), client=c)
        w.start()
        for i in range(n):
            self.client.set_timer(f"k{i}", delay=0, namespace=ns)
        eventually(lambda: len(got) == n, what=f"{n} events")
        w.stop()
        self.assertEqual(sorted(got), sorted(f"k{i}" for i in range(n)))

        def all_acked():
            s = self.client.stats(namespace=ns).namespaces[0]
            return (s.events_acked, s.in_flight_events) == (n, 0)

        # (`once` may pass an ack on without waiting for its answer: the
        # channel stays open until the daemon has them all.)
        eventually(all_acked, what=f"{n} events acknowledged")
        c.close()
        return nowait

    def test_slow_acks_are_sent_without_waiting_and_some_still_waited(self):
        # Acks that take long (a store that syncs each write) go without
        # waiting for their answers, so that they overlap; every sixteenth
        # waits, to see whether acks are quick again.
        waited = []

        def once(ids, namespace, real_once, real_nowait):
            time.sleep(0.002)  # (a slow answer)
            waited.append(len(ids))
            return real_once(ids, namespace)

        nowait = self.handle_with_acks(100, once)
        self.assertGreater(len(waited), 1)
        self.assertGreater(len(nowait), len(waited))

    def test_one_slow_answer_among_quick_ones_leaves_acks_waited(self):
        # A single late answer (a preemption, a collection) is not a slow
        # store: the acks after it are still waited for, which against a
        # quick daemon costs less than sending them without waiting. (The
        # test's daemon syncs each write: the acks the worker waits for are
        # answered at once here, and sent on without waiting.) The bound
        # of a slow ack is raised to 10 ms for this test: on a machine busy
        # with other tests, a quick answer's round trip in this process
        # (the GIL changes hands every 5 ms) may pass the usual 0.5 ms, and
        # eight in a row would then be slow acks indeed. The late answer,
        # 0.2 s, would take an average of eight past the bound.
        waited = []

        def once(ids, namespace, real_once, real_nowait):
            if len(waited) == 2:
                time.sleep(0.2)  # (one late answer)
            waited.append(len(ids))
            real_nowait(ids, namespace, lambda error: None)
            return None

        bound = _sending._SLOW_ACK
        _sending._SLOW_ACK = 0.01
        try:
            nowait = self.handle_with_acks(40, once)
        finally:
            _sending._SLOW_ACK = bound
        self.assertGreater(len(waited), 3)
        self.assertEqual(nowait, [], "one late answer made acks slow")

    def test_a_daemon_without_work_is_served_by_subscribe_and_calls(self):
        # A daemon without the Work method (an older node during a rolling
        # upgrade) answers UNIMPLEMENTED: the AsyncWorker subscribes
        # instead and acknowledges with calls (the Worker always does).
        c, ns = self.client, self.ns

        class NoWork:
            """A Work stream the daemon does not know (it opens no call)."""

            def __init__(self, *_, **__):
                pass

            async def batches(self, *_):
                raise delayd.Unimplemented("unknown method Work")
                yield  # (an async generator, as the real one)

            def cancel(self):
                pass

        real = delayd.aio.AsyncWorkStream
        delayd.aio.AsyncWorkStream = NoWork
        got = []
        try:
            async def run_async():
                async with delayd.AsyncClient() as ac:
                    w = delayd.AsyncWorker(ns, lambda e: got.append(e.key),
                                           concurrency=2, client=ac)
                    task = asyncio.create_task(
                        w.run(install_signal_handlers=False))
                    for i in range(10):
                        await ac.set_timer(f"k{i}", delay=0, namespace=ns)
                    await until(lambda: len(got) >= 10, what="10 events")
                    await w.stop()
                    await task

            asyncio.run(run_async())
        finally:
            delayd.aio.AsyncWorkStream = real
        self.assertEqual(sorted(got), sorted(f"k{i}" for i in range(10)))
        s = c.stats(namespace=ns).namespaces[0]
        self.assertEqual((s.events_acked, s.in_flight_events), (10, 0))

    def test_a_raising_handler_is_retried_then_dead_lettered(self):
        c, ns = self.client, self.ns
        c.set_policy(namespace=ns, max_attempts=3,
                     initial_backoff=dt.timedelta(milliseconds=200))
        attempts = []

        def handler(e):
            attempts.append((e.attempt, time.monotonic()))
            if e.attempt == 1:
                raise delayd.Retry("try again soon", after=0.05)
            raise RuntimeError(f"attempt {e.attempt} failed")

        w = delayd.Worker(ns, handler, client=c)
        w.start()
        c.set_timer("flaky", delay=0, namespace=ns)
        letters = eventually(lambda: list(c.dead_letters(namespace=ns)),
                             what="a dead letter")
        w.stop()
        self.assertEqual([a for a, _ in attempts], [1, 2, 3])
        # Attempt 2 after Retry's 50 ms; attempt 3 after the backoff of
        # attempt 2 (400 ms).
        self.assertGreaterEqual(attempts[2][1] - attempts[1][1], 0.35)
        self.assertEqual(letters[0].error, "attempt 3 failed")

    def test_a_handler_longer_than_its_ack_timeout_keeps_its_lease(self):
        c, ns = self.client, self.ns
        seen = []
        lock = threading.Lock()

        def slow(e):
            with lock:
                seen.append(e.id)
            time.sleep(1.5)  # three ack timeouts

        w1 = delayd.Worker(ns, slow, client=c, ack_timeout=0.5)
        w2 = delayd.Worker(ns, slow, client=c, ack_timeout=0.5)
        w1.start()
        w2.start()
        c.set_timer("long", delay=0, namespace=ns)
        eventually(lambda: c.stats(namespace=ns).namespaces[0]
                   .events_acked == 1, what="the ack")
        w1.stop()
        w2.stop()
        self.assertEqual(len(seen), 1, "handed to a second worker")
        self.assertEqual(c.stats(namespace=ns).namespaces[0]
                         .events_redelivered, 0)

    def test_concurrency_is_never_exceeded_and_one_stuck_handler_slows_none(
            self):
        c, ns = self.client, self.ns
        running, peak, done = 0, 0, []
        lock = threading.Lock()
        stuck = threading.Event()

        def handler(e):
            nonlocal running, peak
            with lock:
                running += 1
                peak = max(peak, running)
            try:
                if e.key == "stuck":
                    stuck.wait(10)
                else:
                    time.sleep(0.005)
                    done.append(e.key)
            finally:
                with lock:
                    running -= 1

        w = delayd.Worker(ns, handler, concurrency=4, client=c)
        w.start()
        c.set_timer("stuck", delay=0, namespace=ns)
        for i in range(100):
            c.set_timer(f"k{i}", delay=0, namespace=ns)
        eventually(lambda: len(done) == 100, what="the others")
        stuck.set()
        w.stop()
        self.assertEqual(peak, 4)

    def test_stop_finishes_and_acknowledges_what_runs(self):
        c, ns = self.client, self.ns
        started = threading.Event()

        def handler(e):
            started.set()
            time.sleep(0.5)

        w = delayd.Worker(ns, handler, client=c)
        w.start()
        c.set_timer("mid", delay=0, namespace=ns)
        started.wait(10)
        w.stop()
        s = c.stats(namespace=ns).namespaces[0]
        self.assertEqual((s.events_acked, s.events_redelivered), (1, 0))

    def test_sigterm_to_the_workers_process_finishes_its_handler(self):
        # The README's worker, run as written in a process of its own.
        ns = self.ns
        work = tempfile.mkdtemp()
        try:
            script = os.path.join(work, "worker.py")
            with open(script, "w") as f:
                f.write(readme_example().replace(
                    '"shop"', repr(ns)).replace(
                    "    print(event.key, event.payload)",
                    "    open(" + repr(os.path.join(work, "started")) +
                    ", 'w').close()\n    import time; time.sleep(1)"))
            env = dict(os.environ, PYTHONPATH=LIBRARY)
            child = subprocess.Popen([sys.executable, script], env=env)
            self.client.set_timer("job", delay=0, namespace=ns)
            eventually(lambda: os.path.exists(os.path.join(work, "started")),
                       what="the handler to start")
            child.terminate()
            self.assertEqual(child.wait(20), 0)
            s = self.client.stats(namespace=ns).namespaces[0]
            self.assertEqual((s.events_acked, s.in_flight_events,
                              s.events_redelivered), (1, 0, 0))
        finally:
            shutil.rmtree(work)

    def test_bad_input_raises_and_the_worker_keeps_running(self):
        c, ns = self.client, self.ns
        got = []
        w = delayd.Worker(ns, lambda e: got.append(e.key), client=c)
        w.start()
        with self.assertRaises(delayd.InvalidArgument):
            c.set_timer("k\x00", delay=0, namespace=ns)
        c.set_timer("fine", delay=0, namespace=ns)
        eventually(lambda: got == ["fine"], what="the event")
        w.stop()


class Async(Fixture):
    def test_the_async_client_and_worker(self):
        ns = self.ns

        async def main():
            async with delayd.AsyncClient() as c:
                r = await c.set_timer("a", b"x", delay=60, namespace=ns)
                self.assertEqual((await c.get_timer("a", namespace=ns))
                                 .version, r.version)
                with self.assertRaises(delayd.NotFound):
                    await c.get_timer("b", namespace=ns)
                keys = [t.key async for t in c.list_timers(namespace=ns)]
                self.assertEqual(sorted(keys), ["a", "~anchor"])
                got = []

                async def handle(e):
                    await asyncio.sleep(0.01)
                    got.append(e.key)

                # Its acks go on the Work stream, not as calls.
                ack_calls, real_ack = [], c.ack
                c.ack = lambda *a, **kw: (ack_calls.append(a),
                                          real_ack(*a, **kw))[1]
                seen, handled = [], []
                hooks = delayd.Hooks(
                    on_event=lambda e, late: seen.append(late),
                    on_handled=lambda e, took: handled.append(took))
                w = delayd.AsyncWorker(ns, handle, concurrency=8, client=c,
                                       hooks=hooks)
                task = asyncio.create_task(w.run(install_signal_handlers=False))
                for i in range(30):
                    await c.set_timer(f"k{i}", delay=0, namespace=ns)
                await c.drain(namespace=ns)
                await until(lambda: len(got) >= 32, what="32 events")
                # The namespace's figures last while something keeps it:
                # the worker's stream until stop(), then this timer.
                await c.set_timer("~anchor", delay=3600, namespace=ns)
                await w.stop()
                await task
                self.assertEqual(len(got), 32)  # (the anchor drained too)
                self.assertEqual(ack_calls, [])
                # The hooks saw each event arrive, and each handled (the
                # handler sleeps 10 ms).
                self.assertEqual(len(seen), 32)
                self.assertTrue(all(late >= 0 for late in seen))
                self.assertEqual(len(handled), 32)
                self.assertTrue(all(took >= 0.009 for took in handled))
                s = (await c.stats(namespace=ns)).namespaces[0]
                self.assertEqual(s.events_acked, 32)

        asyncio.run(main())

    def test_async_lanes_never_exceed_concurrency_nor_wait_on_a_stuck_one(
            self):
        # Handlers that finish without suspending, that suspend, and one
        # stuck: never more than 4 at once, 4 reached, the stuck one holds
        # up no other; stop_now() cancels it and leaves its event
        # unacknowledged.
        ns = self.ns

        async def main():
            async with delayd.AsyncClient() as c:
                running, peak, done = 0, 0, []
                stuck, cancelled = asyncio.Event(), []

                async def handle(e):
                    nonlocal running, peak
                    running += 1
                    peak = max(peak, running)
                    try:
                        if e.key == "stuck":
                            try:
                                await stuck.wait()
                            except asyncio.CancelledError:
                                cancelled.append(e.key)
                                raise
                        elif int(e.key[1:]) % 3 == 1:
                            await asyncio.sleep(0)
                        elif int(e.key[1:]) % 3 == 2:
                            await asyncio.sleep(0.005)
                        done.append(e.key)
                    finally:
                        running -= 1

                w = delayd.AsyncWorker(ns, handle, concurrency=4, client=c)
                task = asyncio.create_task(w.run(install_signal_handlers=False))
                await c.set_timer("stuck", delay=0, namespace=ns)
                await until(lambda: w.running() >= 1, what="the stuck one")
                await set_due(c, ns, [f"k{i}" for i in range(100)])
                await until(lambda: len(done) >= 100, what="100 events")
                self.assertEqual(sorted(done),
                                 sorted(f"k{i}" for i in range(100)))
                self.assertEqual((peak, w.running()), (4, 1))
                async def acked():
                    s = (await c.stats(namespace=ns)).namespaces[0]
                    return s.events_acked >= 100

                await until(acked, what="100 acks")
                w.stop_now()
                await task
                self.assertEqual(cancelled, ["stuck"])
                s = (await c.stats(namespace=ns)).namespaces[0]
                self.assertEqual((s.events_acked, s.in_flight_events),
                                 (100, 1))

        asyncio.run(main())

    def test_async_quick_handlers_run_on_the_reading_task(self):
        # Handlers that finish without suspending run on the task reading
        # the stream, and no lane is started for them; handlers that then
        # suspend on their first step are finished by lanes, and the events
        # after them still run, within the concurrency.
        ns = self.ns

        async def main():
            async with delayd.AsyncClient() as c:
                await c.set_policy(namespace=ns, paused=True)
                await set_due(c, ns, [f"q{i}" for i in range(64)])
                tasks, running, peak, done = [], 0, 0, []
                gate, resumed_on = asyncio.Event(), []

                async def handle(e):
                    nonlocal running, peak
                    tasks.append(asyncio.current_task())
                    running += 1
                    peak = max(peak, running)
                    try:
                        if e.key.startswith("s"):
                            await gate.wait()
                            resumed_on.append(asyncio.current_task())
                    finally:
                        running -= 1
                    done.append(e.key)

                w = delayd.AsyncWorker(ns, handle, concurrency=4, client=c)
                task = asyncio.create_task(w.run(install_signal_handlers=False))
                await c.set_policy(namespace=ns, paused=False)
                await until(lambda: len(done) >= 64, what="64 events")
                self.assertEqual(set(tasks), {w._reader})
                self.assertEqual(len(w._lanes), 0)
                await set_due(c, ns, [f"s{i}" for i in range(3)])
                await until(lambda: w.running() >= 3, what="3 stuck")
                await set_due(c, ns, [f"t{i}" for i in range(20)])
                await until(lambda: len(done) >= 84, what="84 events")
                self.assertEqual((w.running(), len(done)), (3, 84))
                self.assertEqual(peak, 4)
                lanes = set(w._lanes)
                gate.set()
                await until(lambda: len(done) >= 87, what="87 events")
                self.assertEqual(len(resumed_on), 3)
                self.assertLessEqual(set(resumed_on), lanes)
                await w.stop()
                await task
                self.assertEqual(len(done), 87)
                s = (await c.stats(namespace=ns)).namespaces[0]
                self.assertEqual((s.events_acked, s.in_flight_events), (87, 0))

        asyncio.run(main())

    def test_an_async_raising_handler_is_retried_then_dead_lettered(self):
        # Its first attempt fails without suspending, the later ones after
        # suspending: each is nacked with its error and its retry time.
        ns = self.ns

        async def main():
            async with delayd.AsyncClient() as c:
                await c.set_policy(namespace=ns, max_attempts=3,
                                   initial_backoff=dt.timedelta(
                                       milliseconds=200))
                attempts = []

                async def handle(e):
                    attempts.append((e.attempt, time.monotonic()))
                    if e.attempt == 1:
                        raise delayd.Retry("try again soon", after=0.05)
                    await asyncio.sleep(0)
                    raise RuntimeError(f"attempt {e.attempt} failed")

                w = delayd.AsyncWorker(ns, handle, client=c)
                task = asyncio.create_task(w.run(install_signal_handlers=False))
                await c.set_timer("flaky", delay=0, namespace=ns)
                letters = []

                async def buried():
                    letters[:] = [r async for r in c.dead_letters(namespace=ns)]
                    return bool(letters)

                await until(buried, what="a dead letter")
                await w.stop()
                await task
                self.assertEqual([a for a, _ in attempts], [1, 2, 3])
                self.assertGreaterEqual(attempts[2][1] - attempts[1][1], 0.35)
                self.assertEqual(letters[0].error, "attempt 3 failed")

        asyncio.run(main())

    def test_async_acks_arriving_during_a_flush_do_not_wait(self):
        # Quick handlers finish while a flush awaits its answer: the next
        # flush goes at once. Only a failed send waits before the next (a
        # worker that waited whenever acks arrived during a flush made 5
        # batches a second). Every wait of the send loop is recorded.
        ns = self.ns
        waits = []
        real_sleep = asyncio.sleep

        def sleep(delay, *args, **kwargs):
            if sys._getframe(1).f_code.co_name in ("_send_loop", "_flush"):
                waits.append(delay)
            return real_sleep(delay, *args, **kwargs)

        async def main():
            async with delayd.AsyncClient() as c:
                await c.set_policy(namespace=ns, paused=True)
                for start in range(0, 1000, 500):
                    b = c.batch(namespace=ns)
                    for i in range(start, start + 500):
                        b.set(f"k{i}", b"", delay=0)
                    await b.commit()
                got = []

                async def handle(e):
                    got.append(e.key)

                w = delayd.AsyncWorker(ns, handle, concurrency=4, client=c)
                task = asyncio.create_task(w.run(install_signal_handlers=False))
                await c.set_policy(namespace=ns, paused=False)
                deadline = time.monotonic() + 10
                while len(got) < 1000 and time.monotonic() < deadline:
                    await real_sleep(0.01)  # (polls a condition, bounded)
                await w.stop()
                await task
                self.assertEqual(len(got), 1000)

        asyncio.sleep = sleep
        try:
            asyncio.run(main())
        finally:
            asyncio.sleep = real_sleep
        self.assertEqual(waits, [])

    def test_an_async_worker_asks_for_work_again_when_its_stream_ends(self):
        # As the Worker does (Workers' test of the same name): refused Work
        # once, it subscribes; that stream ends at once (its node stopped);
        # it asks for Work again, and its events come on that.
        ns = self.ns

        class NoWorkOnce:
            refused = 0
            registered = False

            def __new__(cls, *args, **kwargs):
                if cls.refused:
                    return real_work(*args, **kwargs)
                cls.refused += 1
                return super().__new__(cls)

            async def batches(self, *_):
                raise delayd.Unimplemented("unknown method Work")
                yield  # (an async generator, as the real one)

        async def main():
            async with delayd.AsyncClient() as c:
                async def subscribe_ending(**_):
                    raise delayd.Unavailable("the node stopped")
                    yield  # (an async generator, as the real one)

                c.subscribe = subscribe_ending
                got = []

                async def handle(e):
                    got.append(e.key)

                w = delayd.AsyncWorker(ns, handle, concurrency=2, client=c)
                task = asyncio.create_task(w.run(install_signal_handlers=False))
                for i in range(5):
                    await c.set_timer(f"k{i}", delay=0, namespace=ns)
                await until(lambda: len(got) >= 5 and w._stream is not None
                            and w._stream.registered,
                            what="5 events on a registered stream")
                self.assertFalse(w._legacy)
                self.assertTrue(w._stream is not None and w._stream.registered)
                await w.stop()
                await task
                self.assertEqual(sorted(got), [f"k{i}" for i in range(5)])
                s = (await c.stats(namespace=ns)).namespaces[0]
                self.assertEqual((s.events_acked, s.in_flight_events), (5, 0))

        real_work = delayd.aio.AsyncWorkStream
        delayd.aio.AsyncWorkStream = NoWorkOnce
        try:
            asyncio.run(main())
        finally:
            delayd.aio.AsyncWorkStream = real_work

    def test_async_stop_sends_the_acks_of_finished_handlers_despite_failures(
            self):
        ns = self.ns

        async def main():
            async with delayd.AsyncClient() as c:
                gate = asyncio.Event()

                async def handle(e):
                    await gate.wait()

                w = delayd.AsyncWorker(ns, handle, concurrency=4, client=c)
                task = asyncio.create_task(w.run(install_signal_handlers=False))
                for i in range(4):
                    await c.set_timer(f"k{i}", delay=0, namespace=ns)
                await until(lambda: w.running() >= 4, what="4 running")
                self.assertEqual(w.running(), 4)
                # The daemon's next three answers to an ack on the Work
                # stream are lost (as when the node serving it stops, after
                # the ack was applied): stop() must send again.
                stream_class = delayd._awork.AsyncWorkStream
                real_send, failures = stream_class.send, [3]

                async def send(stream, kind, request):
                    done = await real_send(stream, kind, request)
                    if kind == "ack" and failures[0] > 0:
                        failures[0] -= 1
                        raise delayd.Unavailable("the answer was lost")
                    return done

                stream_class.send = send
                try:
                    gate.set()
                    await w.stop()
                    await task
                finally:
                    stream_class.send = real_send
                self.assertEqual(failures[0], 0)
                s = (await c.stats(namespace=ns)).namespaces[0]
                self.assertEqual((s.events_acked, s.in_flight_events), (4, 0))

        asyncio.run(main())


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


def readme_example() -> str:
    """The worker example of the library's README, as written."""
    with open(os.path.join(LIBRARY, "README.md")) as f:
        text = f.read()
    start = text.index("```python\n", text.index("## A worker")) + 10
    return text[start:text.index("```", start)]


if __name__ == "__main__":
    unittest.main(verbosity=2)
