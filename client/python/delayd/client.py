"""The blocking client: every call of delayd.v1.Delayd (see _api.Api for
each), with retries across the configured endpoints.

    import delayd
    from datetime import timedelta

    with delayd.Client() as client:          # DELAYD_* from the environment
        client.set_timer("order-42", b'{"order": 42}',
                         delay=timedelta(minutes=15), namespace="shop")
        for timer in client.list_timers(namespace="shop", prefix="order-"):
            print(timer.key, timer.fire_time)

Thread safety: a Client may be shared by threads.
"""

from __future__ import annotations

import threading
import time
from typing import Callable, Iterator, Optional

import grpc
import grpc.experimental

from . import errors, types
from ._api import Api, subscribe_request
from ._retry import Attempts
from .config import Config
from .v1 import delayd_pb2 as pb
from .v1 import delayd_pb2_grpc as pb_grpc

# Keepalive pings notice a connection gone silent (a node frozen or cut
# off) in seconds rather than at the kernel's timeout.
CHANNEL_OPTIONS = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.max_receive_message_length", 64 << 20),
]

# The synchronous client's channels read a server stream (Subscribe) on the
# thread that iterates it, rather than on a thread of gRPC's that hands
# each message over: a Worker's quick events then cost it a third less CPU
# (its threads and gRPC's share one interpreter lock, and each hand-over is
# a wait for it). Unary calls that are waited for run on the calling thread
# either way. (An experimental option of grpcio's; a grpcio without it
# reads on its own thread, as before.)
_SYNC_CHANNEL_OPTIONS = CHANNEL_OPTIONS + [
    (grpc.experimental.ChannelOptions.SingleThreadedUnaryStream, 1)]


class Client(Api):
    def __init__(self, config: Optional[Config] = None, **overrides) -> None:
        """``config`` (default: Config.from_env()); ``overrides`` set
        Config fields (endpoints=..., token=..., timeout=...)."""
        self.config = config if config is not None else \
            Config.from_env(**overrides)
        self._lock = threading.Lock()
        self._channels: dict[int, grpc.Channel] = {}
        self._stubs: dict[int, pb_grpc.DelaydStub] = {}  # one per channel
        self._at = 0  # the endpoint calls go to now
        self._token = self.config.bearer()

    # ---- Connections ----

    def _stub(self, i: int) -> pb_grpc.DelaydStub:
        with self._lock:
            stub = self._stubs.get(i)
            if stub is None:
                endpoint = self.config.endpoints[i]
                creds = self.config.credentials()
                opts = _SYNC_CHANNEL_OPTIONS
                channel = grpc.secure_channel(endpoint, creds, opts) \
                    if creds is not None else \
                    grpc.insecure_channel(endpoint, opts)
                self._channels[i] = channel
                stub = self._stubs[i] = pb_grpc.DelaydStub(channel)
            return stub

    def _endpoint(self) -> int:
        with self._lock:
            return self._at

    def _rotate(self, failed: int) -> None:
        """The next endpoint, if `failed` is still the one in use."""
        with self._lock:
            if self._at == failed:
                self._at = (failed + 1) % len(self.config.endpoints)

    def metadata(self):
        return (("authorization", f"Bearer {self._token}"),) \
            if self._token else ()

    def _reread_token(self) -> bool:
        """After UNAUTHENTICATED: reads DELAYD_TOKEN_FILE again; whether the
        token changed."""
        if not self.config.token_file or self.config.token:
            return False
        fresh = self.config.bearer()
        changed = fresh != self._token
        self._token = fresh
        return changed

    def close(self) -> None:
        with self._lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()
            self._stubs.clear()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- Calls ----

    def _invoke(self, rpc, request, kind, parse, not_found_after_loss=None):
        attempts = Attempts(self.config.retry, kind)
        reread = False
        while True:
            i = self._endpoint()
            try:
                response = getattr(self._stub(i), rpc)(
                    request, timeout=self.config.timeout,
                    metadata=self.metadata())
                return parse(response)
            except grpc.RpcError as rpc_error:
                err = errors.from_rpc_error(rpc_error)
            if err.code == "UNAUTHENTICATED" and not reread:
                reread = True
                if self._reread_token():
                    continue
            if (err.code == "NOT_FOUND" and attempts.lost and
                    not_found_after_loss is not None):
                return not_found_after_loss[0]
            wait = attempts.failed(err)  # (raises what is not retried)
            self._rotate(i)
            time.sleep(wait)

    def _ack_once(self, event_ids: list[int],
                  namespace: str) -> Optional[errors.DelaydError]:
        """Sends one Ack and waits for its answer (one try, no retry):
        None, or the error."""
        try:
            self._stub(self._endpoint()).Ack(
                pb.AckRequest(namespace=namespace, event_ids=event_ids),
                timeout=self.config.timeout, metadata=self.metadata())
            return None
        except grpc.RpcError as rpc_error:
            return errors.from_rpc_error(rpc_error)

    def _ack_nowait(self, event_ids: list[int], namespace: str,
                    on_done: Callable[[Optional[Exception]], None]) -> None:
        """Sends one Ack without waiting for its answer (one try, no
        retry): a worker's thread reads on while it travels. ``on_done``
        runs once it is answered, on gRPC's thread (it must not block),
        with None or the error."""
        future = self._stub(self._endpoint()).Ack.future(
            pb.AckRequest(namespace=namespace, event_ids=event_ids),
            timeout=self.config.timeout, metadata=self.metadata())

        def done(f) -> None:
            try:
                error = f.exception()
            except grpc.FutureCancelledError as e:
                error = e
            if isinstance(error, grpc.RpcError):
                error = errors.from_rpc_error(error)
            on_done(error)

        future.add_done_callback(done)

    def _pages(self, page) -> Iterator:
        token = ""
        while True:
            items, token = page(token)
            yield from items
            if not token:
                return

    def list_timers(self, *, namespace: Optional[str] = None,
                    prefix: str = "", page_size: int = 100,
                    payloads: bool = True) -> Iterator[types.Timer]:
        """Every pending timer of the namespace whose key starts with
        ``prefix``, read a page at a time as the iterator goes."""
        return self._pages(lambda token: self._list_timers_page(
            namespace, prefix, page_size, token, payloads))

    def dead_letters(self, *, namespace: Optional[str] = None,
                     page_size: int = 100) -> Iterator[types.Record]:
        """Every dead letter of the namespace (Records: ``.event``,
        ``.error``), a page at a time."""
        return self._pages(lambda token: self._dead_letters_page(
            namespace, page_size, token))

    def list_schedules(self, *, namespace: Optional[str] = None,
                       prefix: str = "",
                       page_size: int = 100) -> Iterator[types.Record]:
        return self._pages(lambda token: self._schedules_page(
            namespace, prefix, page_size, token))

    def subscribe(self, *, namespace: Optional[str] = None,
                  watcher: bool = False, max_in_flight: int = 0,
                  keep_leases: bool = False,
                  ack_timeout=None,
                  on_registered: Optional[Callable[[], None]] = None
                  ) -> "Subscription":
        """A raw stream of events (one endpoint, no reconnection): for
        watchers and tools. Workers use delayd.Worker, which keeps its
        stream up, extends leases and acknowledges. ``on_registered`` runs
        once the daemon has registered the stream (its first message)."""
        req = subscribe_request(namespace, watcher, max_in_flight,
                                keep_leases, ack_timeout)
        call = self._stub(self._endpoint()).Subscribe(
            req, metadata=self.metadata())
        return Subscription(call, on_registered)


class Subscription:
    """Events of one Subscribe stream, as they come; ``cancel()`` ends it.
    Iterating raises the stream's error (UNAVAILABLE when its node stops)."""

    def __init__(self, call, on_registered=None) -> None:
        self._call = call
        self._on_registered = on_registered

    def __iter__(self) -> Iterator[types.Event]:
        for batch in self.batches():
            yield from batch

    def batches(self) -> Iterator[list[types.Event]]:
        """The events a message at a time (as the daemon sent them)."""
        try:
            for msg in self._call:
                if self._on_registered is not None:
                    self._on_registered()
                    self._on_registered = None
                if msg.events:
                    yield types.events_of(msg.events)
        except grpc.RpcError as rpc_error:
            if rpc_error.code() == grpc.StatusCode.CANCELLED:
                return
            raise errors.from_rpc_error(rpc_error) from None

    def cancel(self) -> None:
        self._call.cancel()
