"""A worker's Work stream: its events in, and on the same stream its acks,
nacks and lease extensions, each answered by the daemon under the ``ref``
it was sent with (a message each rather than a call)."""

from __future__ import annotations

import itertools
import queue
import threading
from typing import Callable, Iterator, Optional

import grpc

from . import errors, types
from .v1 import delayd_pb2 as pb

_END = object()  # the request iterator's end

# Given None and the count done, or the error and None.
OnAnswer = Callable[[Optional[Exception], Optional[int]], None]


class WorkStream:
    """One Work stream on the client's current endpoint, without
    reconnection. Requests may be sent from any thread; their callbacks run
    on the thread reading the stream (they must not block)."""

    def __init__(self, client, subscribe: pb.SubscribeRequest,
                 on_registered: Optional[Callable[[], None]] = None) -> None:
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._requests.put(pb.WorkRequest(subscribe=subscribe))
        self._refs = itertools.count(1)
        self._lock = threading.Lock()
        self._awaiting: dict[int, OnAnswer] = {}  # guarded by _lock
        self._ended: Optional[Exception] = None  # guarded by _lock
        self._on_registered = on_registered
        self.registered = False
        self._call = client._stub(client._endpoint()).Work(
            iter(self._requests.get, _END), metadata=client.metadata())

    def batches(self) -> Iterator[list[types.Event]]:
        """The events a message at a time; raises how the stream ended."""
        error: Exception = errors.Unavailable("the stream ended")
        try:
            for msg in self._call:
                if not self.registered:
                    self.registered = True
                    if self._on_registered is not None:
                        self._on_registered()
                for answer in msg.answers:
                    self._answered(answer)
                if msg.events:
                    yield types.events_of(msg.events)
        except grpc.RpcError as rpc_error:
            if rpc_error.code() == grpc.StatusCode.CANCELLED:
                return
            error = errors.from_rpc_error(rpc_error)
            raise error from None
        finally:
            self._end(error)

    def send(self, kind: str, request, on_answer: OnAnswer) -> None:
        """Sends an ``ack``, ``nack`` or ``extend_lease`` request;
        ``on_answer`` gets its outcome (UNAVAILABLE if the stream ends
        first)."""
        with self._lock:
            ended = self._ended
            if ended is None:
                ref = next(self._refs)
                self._awaiting[ref] = on_answer
                self._requests.put(pb.WorkRequest(ref=ref, **{kind: request}))
        if ended is not None:
            on_answer(ended, None)

    def cancel(self) -> None:
        self._requests.put(_END)
        self._call.cancel()
        self._end(errors.Unavailable("the stream was cancelled"))

    def _answered(self, answer: pb.WorkAnswer) -> None:
        with self._lock:
            on_answer = self._awaiting.pop(answer.ref, None)
        if on_answer is None:
            return
        if answer.code == 0:
            on_answer(None, answer.done)
        else:
            on_answer(errors.from_code(answer.code, answer.message), None)

    def _end(self, error: Exception) -> None:
        with self._lock:
            if self._ended is None:
                self._ended = error
            awaiting, self._awaiting = self._awaiting, {}
        self._requests.put(_END)
        for on_answer in awaiting.values():
            on_answer(error, None)
