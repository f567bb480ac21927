#!/usr/bin/python3
"""The Python library's AsyncClient and AsyncWorker against a real delayd
that run_with_delayd.sh started: calls, lanes and concurrency, quick
handlers on the reading task, retries and dead letters, acks during a
flush, a stream that ends, stop.

Usage: async_worker_test.py PROTO_ROOT LIBRARY_DIR   (DELAYD_* name the daemon)
"""
import asyncio
import datetime as dt
import sys
import time
import unittest

from library_common import Fixture, set_due, until

# (After library_common, which puts the library on the path.)
import delayd
import delayd._awork


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


if __name__ == "__main__":
    unittest.main(verbosity=2)
