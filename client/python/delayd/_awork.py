"""An AsyncWorker's Work stream (grpc.aio): its events in, and on the same
stream its acks, nacks and lease extensions, each answered by the daemon
under the ``ref`` it was sent with; and the part of the AsyncWorker that
sends them (AsyncSending)."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import AsyncIterator, Callable, Optional

import grpc

from . import errors, types
from ._handling import group_nacks
from .v1 import delayd_pb2 as pb


class AsyncWorkStream:
    """One Work stream on the client's current endpoint, without
    reconnection. ``batches()`` reads it (one task); ``send()`` may be
    awaited from other tasks of the same loop: writes go one at a time,
    and each answer is read by the task reading ``batches()``."""

    def __init__(self, client, subscribe: pb.SubscribeRequest) -> None:
        self._call = client._stub(client._endpoint()).Work(
            metadata=client.metadata())
        self._subscribe = pb.WorkRequest(subscribe=subscribe)
        self._refs = itertools.count(1)
        self._writing = asyncio.Lock()  # one write at a time (gRPC's rule)
        self._awaiting: dict[int, asyncio.Future] = {}
        self._ended: Optional[Exception] = None
        self.registered = False

    async def batches(self, on_registered: Optional[Callable[[], None]] = None
                      ) -> AsyncIterator[list[types.Event]]:
        """The events a message at a time, as they come; raises how the
        stream ended (returns if it was cancelled)."""
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
                if msg.events:
                    yield types.events_of(msg.events)
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


class AsyncSending:
    """Mixed into AsyncWorker (aio.py), whose state it uses: its acks,
    nacks and lease extensions, on the Work stream or as calls."""

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
        if not (acks or nacks):
            return False
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
        for (text, after), ids in group_nacks(nacks).items():
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
        for (text, after), ids in group_nacks(nacks).items():
            req = pb.NackRequest(namespace=self.namespace, event_ids=ids,
                                 error=text[:1024])
            if after is not None:
                req.retry_after.CopyFrom(types.duration(after))
            sends.append(stream.send("nack", req))
            kept.append(lambda ids=ids, text=text, after=after:
                        self._nacks.extend((i, text, after) for i in ids))
        if len(sends) == 1:  # (the usual: gather would make it a task)
            try:
                outcomes = [await sends[0]]
            except Exception as e:  # noqa: BLE001 (kept, as gather's)
                outcomes = [e]
        else:
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
