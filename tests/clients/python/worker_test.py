#!/usr/bin/python3
"""The Python library's Worker against a real delayd that
run_with_delayd.sh started: each event handled once and acknowledged, acks
sent again when their answers are lost, retries and dead letters, leases
kept, concurrency, stop and SIGTERM, bad input.

Usage: worker_test.py PROTO_ROOT LIBRARY_DIR   (DELAYD_* name the daemon)
"""
import asyncio
import datetime as dt
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import unittest

from library_common import (LIBRARY, Fixture, eventually, readme_example,
                            until)

# (After library_common, which puts the library on the path.)
import delayd
from delayd import _sending


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


if __name__ == "__main__":
    unittest.main(verbosity=2)
