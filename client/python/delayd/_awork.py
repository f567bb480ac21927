"""An AsyncWorker's Work stream (grpc.aio): its events in, and on the same
stream its acks, nacks and lease extensions, each answered by the daemon
under the ``ref`` it was sent with."""

from __future__ import annotations

import asyncio
import itertools
from typing import AsyncIterator, Callable, Optional

import grpc

from . import errors, types
from .v1 import delayd_pb2 as pb


class AsyncWorkStream:
    """One Work stream on the client's current endpoint, without
    reconnection. ``events()`` reads it (one task); ``send()`` may be
    awaited from other tasks of the same loop: writes go one at a time,
    and each answer is read by the task reading ``events()``."""

    def __init__(self, client, subscribe: pb.SubscribeRequest) -> None:
        self._call = client._stub(client._endpoint()).Work(
            metadata=client.metadata())
        self._subscribe = pb.WorkRequest(subscribe=subscribe)
        self._refs = itertools.count(1)
        self._writing = asyncio.Lock()  # one write at a time (gRPC's rule)
        self._awaiting: dict[int, asyncio.Future] = {}
        self._ended: Optional[Exception] = None
        self.registered = False

    async def events(self, on_registered: Optional[Callable[[], None]] = None
                     ) -> AsyncIterator[types.Event]:
        """The events as they come; raises how the stream ended (returns
        if it was cancelled)."""
        error: Exception = errors.Unavailable("the stream ended")
        try:
            async with self._writing:
                await self._call.write(self._subscribe)
            async for msg in self._call:
                if not self.registered:
                    self.registered = True
                    if on_registered is not None:
                        on_registered()
                for answer in msg.answers:
                    self._answered(answer)
                for e in msg.events:
                    yield types.Event.from_pb(e)
        except grpc.RpcError as rpc_error:
            if rpc_error.code() == grpc.StatusCode.CANCELLED:
                return
            error = errors.from_rpc_error(rpc_error)
            raise error from None
        finally:
            self._end(error)
            self._call.cancel()

    async def send(self, kind: str, request) -> int:
        """Sends an ``ack``, ``nack`` or ``extend_lease`` request and
        returns the count its answer gives; raises the answer's error
        (UNAVAILABLE if the stream ends before it)."""
        if self._ended is not None:
            raise errors.Unavailable(f"the stream ended: {self._ended}")
        ref = next(self._refs)
        answer = asyncio.get_running_loop().create_future()
        self._awaiting[ref] = answer
        try:
            async with self._writing:
                await self._call.write(pb.WorkRequest(ref=ref,
                                                      **{kind: request}))
        except (grpc.RpcError, asyncio.InvalidStateError) as e:
            # The call ended (its reader gets how).
            self._awaiting.pop(ref, None)
            raise errors.Unavailable(f"the stream ended: {e}") from None
        return await answer

    def _answered(self, answer: pb.WorkAnswer) -> None:
        future = self._awaiting.pop(answer.ref, None)
        if future is None or future.done():
            return
        if answer.code == 0:
            future.set_result(answer.done)
        else:
            future.set_exception(errors.from_code(answer.code,
                                                  answer.message))

    def _end(self, error: Exception) -> None:
        if self._ended is None:
            self._ended = error
        awaiting, self._awaiting = self._awaiting, {}
        for future in awaiting.values():
            if not future.done():
                future.set_exception(error)
