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
from typing import AsyncIterator, Awaitable, Callable, Optional, Union

import grpc

from . import errors, types
from ._api import Api, subscribe_request
from ._awork import AsyncWorkStream
from ._retry import Attempts, waits
from .client import CHANNEL_OPTIONS
from .config import Config, Retry as RetryPolicy
from .v1 import delayd_pb2 as pb, delayd_pb2_grpc as pb_grpc
from ._handling import Hooks, Retry, _Done, take_settings


class AsyncClient(Api):
    def __init__(self, config: Optional[Config] = None, **overrides) -> None:
        self.config = config if config is not None else \
            Config.from_env(**overrides)
        self._channels: dict[int, grpc.aio.Channel] = {}
        self._stubs: dict[int, pb_grpc.DelaydStub] = {}  # one per channel
        self._at = 0
        self._token = self.config.bearer()

    def _stub(self, i: int) -> pb_grpc.DelaydStub:
        stub = self._stubs.get(i)
        if stub is None:
            endpoint = self.config.endpoints[i]
            creds = self.config.credentials()
            channel = grpc.aio.secure_channel(endpoint, creds, CHANNEL_OPTIONS) \
                if creds is not None else \
                grpc.aio.insecure_channel(endpoint, CHANNEL_OPTIONS)
            self._channels[i] = channel
            stub = self._stubs[i] = pb_grpc.DelaydStub(channel)
        return stub

    def _endpoint(self) -> int:
        return self._at

    def _rotate(self, failed: int) -> None:
        if self._at == failed:
            self._at = (failed + 1) % len(self.config.endpoints)

    def metadata(self):
        return (("authorization", f"Bearer {self._token}"),) \
            if self._token else ()

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        self._stubs = {}
        for channel in channels.values():
            await channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.close()

    async def _invoke(self, rpc, request, kind, parse,
                      not_found_after_loss=None):
        attempts = Attempts(self.config.retry, kind)
        reread = False
        while True:
            i = self._endpoint()
            try:
                response = await getattr(self._stub(i), rpc)(
                    request, timeout=self.config.timeout,
                    metadata=self.metadata())
                return parse(response)
            except grpc.RpcError as rpc_error:
                err = errors.from_rpc_error(rpc_error)
            if err.code == "UNAUTHENTICATED" and not reread:
                reread = True
                fresh = self.config.bearer()
                if self.config.token_file and fresh != self._token:
                    self._token = fresh
                    continue
            if (err.code == "NOT_FOUND" and attempts.lost and
                    not_found_after_loss is not None):
                return not_found_after_loss[0]
            wait = attempts.failed(err)
            self._rotate(i)
            await asyncio.sleep(wait)

    async def _pages(self, page) -> AsyncIterator:
        token = ""
        while True:
            items, token = await page(token)
            for item in items:
                yield item
            if not token:
                return

    def list_timers(self, *, namespace: Optional[str] = None,
                    prefix: str = "", page_size: int = 100,
                    payloads: bool = True) -> AsyncIterator[types.Timer]:
        return self._pages(lambda token: self._list_timers_page(
            namespace, prefix, page_size, token, payloads))

    def dead_letters(self, *, namespace: Optional[str] = None,
                     page_size: int = 100) -> AsyncIterator[types.Record]:
        return self._pages(lambda token: self._dead_letters_page(
            namespace, page_size, token))

    def list_schedules(self, *, namespace: Optional[str] = None,
                       prefix: str = "",
                       page_size: int = 100) -> AsyncIterator[types.Record]:
        return self._pages(lambda token: self._schedules_page(
            namespace, prefix, page_size, token))

    async def subscribe(self, *, namespace: Optional[str] = None,
                        watcher: bool = False, max_in_flight: int = 0,
                        keep_leases: bool = False,
                        ack_timeout=None, on_registered=None
                        ) -> AsyncIterator[types.Event]:
        """A raw stream of events (one endpoint, no reconnection), as an
        async iterator; cancel the task reading it to end it."""
        req = subscribe_request(namespace, watcher, max_in_flight,
                                keep_leases, ack_timeout)
        call = self._stub(self._endpoint()).Subscribe(
            req, metadata=self.metadata())
        try:
            async for msg in call:
                if on_registered is not None:
                    on_registered()
                    on_registered = None
                for e in msg.events:
                    yield types.Event.from_pb(e)
        except grpc.RpcError as rpc_error:
            if rpc_error.code() != grpc.StatusCode.CANCELLED:
                raise errors.from_rpc_error(rpc_error) from None
        finally:
            call.cancel()


Handler = Callable[[types.Event], Union[Awaitable[None], None]]


class AsyncWorker:
    """The asyncio Worker (see worker.py for what a worker does): each
    event runs ``handler(event)`` as a task (a plain function runs in the
    loop's default executor), at most ``concurrency`` at once. Acks, nacks
    and lease extensions go on the worker's Work stream; while it
    reconnects, or against a daemon without Work (then Subscribe), as
    calls."""

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
        self._running: dict[int, asyncio.Task] = {}
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
            for t in (self._reader, sender, leases):
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
        running = list(self._running.values())
        if running:
            await asyncio.wait(running, timeout=grace)
        await self._flush(deadline=time.monotonic() + 5)
        if self._reader is not None:
            self._reader.cancel()
        await self._finish()

    def stop_now(self) -> None:
        self._stopping = True
        for t in self._running.values():
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
                async for event in self._events(registered):
                    self._received(event)
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

    def _events(self, registered) -> AsyncIterator[types.Event]:
        if self._legacy:
            return self.client.subscribe(
                namespace=self.namespace, max_in_flight=self.concurrency,
                ack_timeout=self.ack_timeout, keep_leases=True,
                on_registered=registered)
        self._stream = AsyncWorkStream(self.client, subscribe_request(
            self.namespace, False, self.concurrency, True, self.ack_timeout))
        return self._stream.events(registered)

    def _work_stream(self) -> Optional[AsyncWorkStream]:
        """The Work stream requests go on (None: by calls, to any node)."""
        stream = self._stream
        return stream if stream is not None and stream.registered else None

    def _received(self, event: types.Event) -> None:
        # (Hooks are looked up before their arguments are made: reading
        # fire_time_ns decodes the event, which a handler may not need.)
        if self.hooks.on_event is not None:
            self._hook("on_event", event,
                       max(0.0, time.time() - event.fire_time_ns / 1e9))
        if event.id in self._done:
            self._acks.append(event.id)
        elif event.id in self._running or event.id in self._queued_ids:
            pass
        elif self._stopping:
            self._nacks.append((event.id, "the worker stopped", 0))
        else:
            self._queued.append(event)
            self._queued_ids.add(event.id)
            self._start_next()
        self._wake.set()

    def _start_next(self) -> None:
        while self._queued and len(self._running) < self.concurrency:
            event = self._queued.popleft()
            self._queued_ids.discard(event.id)
            self._running[event.id] = asyncio.create_task(self._handle(event))

    async def _handle(self, event: types.Event) -> None:
        started = time.monotonic()
        error: Optional[BaseException] = None
        try:
            if self._is_coroutine:
                await self.handler(event)
            else:
                await asyncio.get_running_loop().run_in_executor(
                    None, self.handler, event)
        except asyncio.CancelledError:
            return  # stop_now: left unacknowledged
        except BaseException as e:  # noqa: BLE001 (a handler's failure)
            error = e
        finally:
            self._running.pop(event.id, None)
        ended = time.monotonic()
        took = ended - started
        if error is None:
            self._done.add(event.id, ended)
            self._acks.append(event.id)
            if self.hooks.on_handled is not None:
                self._hook("on_handled", event, took)
        else:
            after = error.after if isinstance(error, Retry) else None
            self._nacks.append((event.id, str(error) or type(error).__name__,
                                after))
            self._hook("on_failed", event, error, took)
        self._wake.set()
        if not self._stopping:
            self._start_next()

    async def _send_loop(self) -> None:
        # What handlers add while a flush awaits its answers wakes the loop
        # again at once; only a failed send waits before the next try.
        while True:
            await self._wake.wait()
            self._wake.clear()
            async with self._sending:
                failed = await self._flush_once()
            if failed:
                await asyncio.sleep(0.2)  # (before the next try)
                self._wake.set()

    async def _flush(self, deadline: float) -> None:
        """Sends what is held until nothing is left or ``deadline``
        passes (stop). One flush at a time: this waits for the send
        loop's."""
        while True:
            async with self._sending:
                failed = await self._flush_once()
            if not (self._acks or self._nacks) or \
                    time.monotonic() >= deadline:
                return
            if failed:
                await asyncio.sleep(0.2)  # (before the next try)

    async def _flush_once(self) -> bool:
        """Sends what is held: acks in one request, nacks grouped; what
        fails is kept. Returns whether anything failed."""
        acks, self._acks = self._acks, []
        nacks, self._nacks = self._nacks, []
        stream = self._work_stream()
        if stream is not None:
            return await self._send_on(stream, acks, nacks)
        failed = False
        try:
            for i in range(0, len(acks), 1000):
                await self.client.ack(acks[i:i + 1000],
                                      namespace=self.namespace)
        except errors.DelaydError:
            self._acks = acks + self._acks
            failed = True
        groups: dict[tuple, list[int]] = {}
        for event_id, text, after in nacks:
            groups.setdefault((text, after), []).append(event_id)
        for (text, after), ids in groups.items():
            try:
                await self.client.nack(ids, namespace=self.namespace,
                                       error=text, retry_after=after)
            except errors.DelaydError:
                self._nacks += [(i, text, after) for i in ids]
                failed = True
        return failed

    async def _send_on(self, stream: AsyncWorkStream, acks: list[int],
                       nacks: list[tuple]) -> bool:
        """Sends acks and nacks as messages on the Work stream, all before
        any answer is awaited; what fails is kept for the next flush.
        Returns whether anything failed."""
        sends, kept = [], []
        for i in range(0, len(acks), 1000):
            part = acks[i:i + 1000]
            sends.append(stream.send("ack", pb.AckRequest(
                namespace=self.namespace, event_ids=part)))
            kept.append(lambda part=part: self._acks.extend(part))
        groups: dict[tuple, list[int]] = {}
        for event_id, text, after in nacks:
            groups.setdefault((text, after), []).append(event_id)
        for (text, after), ids in groups.items():
            req = pb.NackRequest(namespace=self.namespace, event_ids=ids,
                                 error=text[:1024])
            if after is not None:
                req.retry_after.CopyFrom(types.duration(after))
            sends.append(stream.send("nack", req))
            kept.append(lambda ids=ids, text=text, after=after:
                        self._nacks.extend((i, text, after) for i in ids))
        outcomes = await asyncio.gather(*sends, return_exceptions=True)
        failed = False
        for outcome, keep in zip(outcomes, kept):
            if isinstance(outcome, BaseException):
                keep()
                failed = True
        return failed

    async def _lease_loop(self) -> None:
        while True:
            await asyncio.sleep(self.ack_timeout / 3)
            held = list(self._running) + [e.id for e in self._queued]
            if held:
                try:
                    stream = self._work_stream()
                    if stream is not None:
                        req = pb.ExtendLeaseRequest(namespace=self.namespace,
                                                    event_ids=held)
                        req.extension.CopyFrom(
                            types.duration(self.ack_timeout))
                        await stream.send("extend_lease", req)
                    else:
                        await self.client.extend_lease(
                            held, self.ack_timeout, namespace=self.namespace)
                except errors.DelaydError:
                    pass  # Tried again at the next period.

    def running(self) -> int:
        return len(self._running)
