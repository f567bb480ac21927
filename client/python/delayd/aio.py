"""The asyncio client and worker: the same calls as Client (each a
coroutine), and AsyncWorker, whose handler may be a coroutine function.

    import asyncio, delayd

    async def main():
        async with delayd.AsyncClient() as client:
            await client.set_timer("order-42", b"...", delay=900,
                                   namespace="shop")

        async def handle(event):
            ...

        await delayd.AsyncWorker("shop", handle, concurrency=32).run()

    asyncio.run(main())

Thread safety: an AsyncClient and an AsyncWorker belong to the event loop
they were first used on.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import signal
import time
import types as _pytypes
from typing import AsyncIterator, Awaitable, Callable, Optional, Union

from . import errors, types
from ._aclient import AsyncClient
from ._api import subscribe_request
from ._awork import AsyncSending, AsyncWorkStream
from ._retry import waits
from .config import Config, Retry as RetryPolicy
from ._handling import Hooks, Retry, _Done, take_settings

__all__ = ["AsyncClient", "AsyncWorker", "Handler"]


Handler = Callable[[types.Event], Union[Awaitable[None], None]]


_LEFT = object()  # a handler's event left unacknowledged


@_pytypes.coroutine
def _rest_of(coro, suspended_on):
    """Awaits the rest of a coroutine whose first step (``coro.send(None)``)
    yielded ``suspended_on``: what the awaiting task sends or throws goes to
    it, as if it had been awaited from its start. (Python 3.12's eager
    tasks do this; Debian 12's Python is 3.11.)"""
    while True:
        try:
            sent = yield suspended_on
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as e:  # noqa: BLE001 (the task's, passed on)
            try:
                suspended_on = coro.throw(e)
            except StopIteration as stop:
                return stop.value
        else:
            try:
                suspended_on = coro.send(sent)
            except StopIteration as stop:
                return stop.value


class AsyncWorker(AsyncSending):
    """The asyncio Worker (see worker.py for what a worker does): each
    event runs ``handler(event)`` (a plain function in the loop's default
    executor), at most ``concurrency`` at once. Acks, nacks and lease
    extensions go on the worker's Work stream; while it reconnects, or
    against a daemon without Work (then Subscribe), as calls.

    Handlers run on the task that reads the stream while they finish
    without suspending, so a burst of quick handlers takes no other task's
    turn. The first that suspends goes to a lane, with the rest of its
    message: lanes are up to ``concurrency`` tasks, each awaiting one
    handler after another while events are queued, and a lane whose
    handler suspends (or runs in the executor) wakes another while events
    wait (one woken at a time), so a slow handler holds up nothing else.
    (A task per event made 0.64-0.84x the rate: tests/bench/README.md,
    "The AsyncWorker in lanes"; the reading task's own runs: "The
    AsyncWorker's reader runs quick handlers".)"""

    def __init__(self, namespace: str, handler: Handler, *,
                 concurrency: int = 1, client: Optional[AsyncClient] = None,
                 config: Optional[Config] = None, ack_timeout: float = 30.0,
                 dedup_window: float = 600.0, grace: float = 30.0,
                 hooks: Optional[Hooks] = None,
                 reconnect: Optional[RetryPolicy] = None) -> None:
        take_settings(self, namespace, handler, concurrency, ack_timeout,
                      grace, hooks, reconnect)
        self._own_client = client is None
        self.client = client or AsyncClient(config)
        self._queued: collections.deque[types.Event] = collections.deque()
        self._queued_ids: set[int] = set()  # the ids of _queued
        # (Looked up once: inspect's check costs about a microsecond.)
        self._is_coroutine = inspect.iscoroutinefunction(handler)
        # The events being handled, by id: the lane running each.
        self._running: dict[int, asyncio.Task] = {}
        self._lanes: set[asyncio.Task] = set()
        # Idle lanes: the future each awaits (its result: None, or an
        # event to finish) and its task.
        self._idle: collections.deque[tuple[asyncio.Future, asyncio.Task]] \
            = collections.deque()
        self._woken = 0  # lanes woken (or started) yet to take their turn
        self._none_running = asyncio.Event()  # set while _running is empty
        self._ending = False  # lanes are being cancelled (and end)
        self._done = _Done(dedup_window)
        self._acks: list[int] = []
        self._nacks: list[tuple] = []
        self._stopping = False
        self._wake = asyncio.Event()
        self._finished = asyncio.Event()
        self._reader: Optional[asyncio.Task] = None
        self._sending = asyncio.Lock()
        self._stream: Optional[AsyncWorkStream] = None  # being read
        self._legacy = False  # the daemon has no Work method: Subscribe

    def _hook(self, name, *args) -> None:
        hook = getattr(self.hooks, name)
        if hook is not None:
            try:
                hook(*args)
            except Exception:  # noqa: BLE001 (a hook's failure is its own)
                pass

    async def run(self, install_signal_handlers: bool = True) -> None:
        """Runs until ``stop()`` (or SIGTERM/SIGINT: the first stops
        gracefully, the second at once)."""
        loop = asyncio.get_running_loop()
        if install_signal_handlers:
            def on_signal():
                if self._stopping:
                    self.stop_now()
                else:
                    asyncio.ensure_future(self.stop())
            for s in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(s, on_signal)
        self._reader = asyncio.create_task(self._read_loop())
        sender = asyncio.create_task(self._send_loop())
        leases = asyncio.create_task(self._lease_loop())
        try:
            await self._finished.wait()
        finally:
            self._ending = True
            for t in (self._reader, sender, leases, *self._lanes):
                t.cancel()
            if install_signal_handlers:
                for s in (signal.SIGTERM, signal.SIGINT):
                    loop.remove_signal_handler(s)

    async def stop(self, grace: Optional[float] = None) -> None:
        grace = self.grace if grace is None else grace
        if self._stopping:
            await self._finished.wait()
            return
        self._stopping = True
        # (The stream stays open until what runs is acknowledged: see
        # Worker.stop.)
        for e in self._queued:
            self._nacks.append((e.id, "the worker stopped", 0))
        self._queued.clear()
        self._queued_ids.clear()
        if self._running:
            self._none_running.clear()
            try:
                await asyncio.wait_for(self._none_running.wait(), grace)
            except asyncio.TimeoutError:
                pass
        await self._flush(deadline=time.monotonic() + 5)
        if self._reader is not None:
            self._reader.cancel()
        await self._finish()

    def stop_now(self) -> None:
        self._stopping = True
        self._ending = True
        for t in set(self._running.values()):
            t.cancel()
        if self._reader is not None:
            self._reader.cancel()
        asyncio.ensure_future(self._finish())

    async def _finish(self) -> None:
        if self._finished.is_set():
            return
        if self._own_client:
            await self.client.close()
        self._finished.set()

    async def _read_loop(self) -> None:
        backoff = waits(self._reconnect)

        def registered():
            nonlocal backoff
            backoff = waits(self._reconnect)
            self._hook("on_stream", "connected", None)

        while not self._stopping:
            error = None
            try:
                async for batch in self._batches(registered):
                    self._received(batch)
                    if self._queued:
                        self._run_here()
            except errors.Unimplemented as e:
                if not self._legacy:
                    # An older daemon, without Work: Subscribe, at once.
                    self._legacy = True
                    continue
                error = e
            except errors.DelaydError as e:
                error = e
            finally:
                self._stream = None
            if self._stopping:
                return
            self._hook("on_stream", "lost", error)
            self.client._rotate(self.client._endpoint())
            self._legacy = False  # (Work asked for again: see Worker._lost)
            await asyncio.sleep(next(backoff))

    def _batches(self, registered) -> AsyncIterator[list[types.Event]]:
        if self._legacy:
            return self._one_by_one(self.client.subscribe(
                namespace=self.namespace, max_in_flight=self.concurrency,
                ack_timeout=self.ack_timeout, keep_leases=True,
                on_registered=registered))
        self._stream = AsyncWorkStream(self.client, subscribe_request(
            self.namespace, False, self.concurrency, True, self.ack_timeout))
        return self._stream.batches(registered)

    @staticmethod
    async def _one_by_one(events: AsyncIterator[types.Event]
                          ) -> AsyncIterator[list[types.Event]]:
        async for event in events:
            yield [event]

    def _work_stream(self) -> Optional[AsyncWorkStream]:
        """The Work stream requests go on (None: by calls, to any node)."""
        stream = self._stream
        return stream if stream is not None and stream.registered else None

    def _received(self, batch: list[types.Event]) -> None:
        # (Hooks are looked up before their arguments are made: reading
        # fire_time_ns decodes the event, which a handler may not need.)
        if self.hooks.on_event is not None:
            now = time.time()
            for event in batch:
                self._hook("on_event", event,
                           max(0.0, now - event.fire_time_ns / 1e9))
        running, queued_ids = self._running, self._queued_ids
        new, old = self._done.generations()  # (`in` on it: a call an id)
        for event in batch:
            i = event.id
            if i in new or i in old:
                self._acks.append(i)
                self._wake.set()  # (for the send loop)
            elif i in running or i in queued_ids:
                pass
            elif self._stopping:
                self._nacks.append((i, "the worker stopped", 0))
                self._wake.set()
            else:
                self._queued.append(event)
                queued_ids.add(i)

    def _run_here(self) -> None:
        """Runs the queued events on the reading task while their handlers
        (coroutines) finish without suspending: a burst of quick handlers
        takes no other task's turn before the send loop's. The first
        handler that suspends is finished by a lane, and the rest of the
        queue goes to lanes; so do the events while a lane is woken, and
        those of a plain function."""
        queued, running = self._queued, self._running
        if not self._is_coroutine or self._stopping or self._woken:
            self._wake_lane()
            return
        handler, monotonic = self.handler, time.monotonic
        on_handled, handled = self.hooks.on_handled, []
        # (No lane runs meanwhile: nothing here awaits. Each event handed
        # to a lane is in `running`, which bounds those started here.)
        while queued and len(running) < self.concurrency:
            event = queued.popleft()
            self._queued_ids.discard(event.id)
            started = monotonic()
            coro = handler(event)
            try:
                suspended_on = coro.send(None)
            except StopIteration:
                handled.append(event.id)
                if on_handled is not None:
                    self._hook("on_handled", event, monotonic() - started)
                continue
            except asyncio.CancelledError:
                continue  # (the handler's own: left unacknowledged)
            except BaseException as e:  # noqa: BLE001 (a handler's failure)
                self._failed(event, e, monotonic() - started)
                continue
            self._hand_off((event, coro, suspended_on, started))
            break
        self._wake_lane()
        if handled:
            self._handled(handled)

    def _hand_off(self, seed: tuple) -> None:
        """Gives a lane (idle, or a new one) an event whose handler
        suspended on its first step, (event, coroutine, what it awaits,
        when it started), to finish."""
        while self._idle:
            wake, lane = self._idle.popleft()
            if not wake.done():  # (not a lane cancelled meanwhile)
                self._running[seed[0].id] = lane
                wake.set_result(seed)
                return
        lane = asyncio.create_task(self._lane(seed))
        self._running[seed[0].id] = lane
        self._lanes.add(lane)
        lane.add_done_callback(self._lanes.discard)

    def _wake_lane(self) -> None:
        """Wakes an idle lane, or starts one while fewer than
        ``concurrency`` exist, unless one woken has yet to take its turn
        (which wakes the next if events still wait)."""
        if self._woken or self._stopping or not self._queued:
            return
        while self._idle:
            wake, _ = self._idle.popleft()
            if not wake.done():  # (not a lane cancelled meanwhile)
                self._woken += 1
                wake.set_result(None)
                return
        if len(self._lanes) < self.concurrency:
            self._woken += 1
            lane = asyncio.create_task(self._lane())
            self._lanes.add(lane)
            lane.add_done_callback(self._lanes.discard)

    async def _lane(self, seed: Optional[tuple] = None) -> None:
        """Handles queued events one after another; idle while none wait.
        Ends when cancelled (stop_now, or the worker finished). The ids of
        events handled are recorded (acks, the window of handled ids)
        before the lane next lets the loop run, not one by one. A lane
        started or woken with a `seed` (_hand_off) finishes that first."""
        loop, me = asyncio.get_running_loop(), asyncio.current_task()
        queued, running, handled = self._queued, self._running, []
        monotonic, on_handled = time.monotonic, self.hooks.on_handled
        if seed is None:
            self._woken -= 1
        while True:
            if seed is not None:
                event, coro, suspended_on, started = seed
                seed = None
            elif not queued or self._stopping:
                handled = self._handled(handled)
                wake = loop.create_future()
                self._idle.append((wake, me))
                try:
                    seed = await wake
                except asyncio.CancelledError:
                    if wake.done() and not wake.cancelled() and wake.result():
                        event, coro = wake.result()[:2]  # (never resumed)
                        coro.close()
                        running.pop(event.id, None)
                    raise
                if seed is None:
                    self._woken -= 1
                continue
            else:
                event, coro = queued.popleft(), None
                self._queued_ids.discard(event.id)
                running[event.id] = me
                started = monotonic()
            outcome: object = _LEFT  # None: handled; or the error raised
            try:
                if coro is not None:
                    handled = self._handled(handled)
                    self._wake_lane()
                    await _rest_of(coro, suspended_on)
                elif self._is_coroutine:
                    # Its first step here: one that ends without
                    # suspending needs no other lane woken.
                    coro = self.handler(event)
                    try:
                        suspended_on = coro.send(None)
                    except StopIteration:
                        pass
                    else:
                        handled = self._handled(handled)
                        self._wake_lane()
                        await _rest_of(coro, suspended_on)
                else:
                    handled = self._handled(handled)
                    self._wake_lane()
                    await loop.run_in_executor(None, self.handler, event)
                outcome = None
            except asyncio.CancelledError:
                if self._ending:
                    raise  # stop_now: left unacknowledged; the lane ends
                # (The handler's own: left unacknowledged.)
            except BaseException as e:  # noqa: BLE001 (a handler's failure)
                outcome = e
            finally:
                running.pop(event.id, None)
                if not running:
                    self._none_running.set()
            if outcome is None:
                handled.append(event.id)
                if on_handled is not None:
                    self._hook("on_handled", event, monotonic() - started)
            elif outcome is not _LEFT:
                self._failed(event, outcome, monotonic() - started)

    def _handled(self, ids: list[int]) -> list[int]:
        """Records handled events: their acks, the window of handled ids.
        Returns a list to fill next."""
        if ids:
            self._done.add_all(ids, time.monotonic())
            self._acks += ids
            self._wake.set()  # (for the send loop)
            return []
        return ids

    def _failed(self, event: types.Event, error: BaseException,
                took: float) -> None:
        after = error.after if isinstance(error, Retry) else None
        self._nacks.append((event.id, str(error) or type(error).__name__,
                            after))
        self._hook("on_failed", event, error, took)
        self._wake.set()

    def running(self) -> int:
        return len(self._running)
