"""A Worker's acknowledgements and leases (worker.py): the part of the
Worker that sends what its handlers decided, on its Work stream or, while
there is none, as calls."""

from __future__ import annotations

import time
from typing import Optional

from . import errors, types
from ._work import WorkStream
from .v1 import delayd_pb2 as pb


class Sending:
    """Mixed into Worker, whose state (and lock) it uses."""

    def _send_loop(self) -> None:
        """Sends the acks and nacks handler threads leave: while events are
        in hand it records, every 10 ms, the outcomes pool threads left
        (a thread running a quick burst records them itself once the queue
        is empty, and usually sends them first: waking this thread for
        each would cost more than the send), and sends them; and sends
        what failed once."""
        while True:
            recorded = []
            with self._mu:
                while not self._finished.is_set():
                    if self._in_hand():
                        self._out.wait(0.01)
                        for results in self._results:
                            if results:
                                recorded += self._record(results)
                        self._wake_one()  # (see "The pool")
                    elif not (self._acks or self._nacks):
                        self._out.wait(0.2)
                        continue
                    if self._acks or self._nacks:
                        break
                if self._finished.is_set():
                    return
            if recorded:
                self._call_hooks(recorded)
            self._flush(deadline=None)

    def _send_now(self) -> None:
        """Sends the acks waiting from this handler thread, without
        waiting for the answer: no hand-over to another thread between a
        handler's end and its ack, and the thread reads the stream on while
        the ack travels (the daemon sends the next events once it has it).
        One try; what fails, and nacks, are left to the send loop, which
        retries, so a handler thread never waits out a fail-over here."""
        with self._lock:
            acks = self._acks
            if not acks:
                return
            self._acks = []
            if self._nacks:
                self._out.notify()
            self._acking += 1
            stream = self._work_stream()
        try:
            if stream is not None:
                stream.send("ack", pb.AckRequest(
                    namespace=self.namespace, event_ids=acks),
                    lambda error, _: self._acked(acks, [], error))
            else:
                self.client._ack_nowait(
                    acks, self.namespace,
                    lambda error: self._acked(acks, [], error))
        except Exception as e:  # noqa: BLE001 (e.g. the client closed)
            self._acked(acks, [], e)

    def _work_stream(self) -> Optional[WorkStream]:
        """Under _mu: the Work stream acks go on (None: by calls, to any
        node, while there is none registered)."""
        stream = self._stream
        if isinstance(stream, WorkStream) and stream.registered:
            return stream
        return None

    def _acked(self, acks: list[int], nacks: list[tuple],
               error: Optional[Exception]) -> None:
        """A request sent without waiting (of `acks` and `nacks`) was
        answered (error None) or failed (they are to be sent again)."""
        with self._lock:
            self._acking -= 1
            if error is not None:
                self._acks = acks + self._acks
                self._nacks = nacks + self._nacks
                self._out.notify()
            if not self._acking:
                self._mu.notify_all()  # (stop() waits for none in flight)

    def _flush(self, deadline: Optional[float]) -> None:
        """Sends the acks and nacks waiting: acks in one request, nacks
        grouped; a send that fails is kept and tried again (until
        `deadline`). One flush at a time: stop()'s waits for the send
        loop's."""
        with self._sending:
            self._flush_once(deadline)

    def _flush_once(self, deadline: Optional[float]) -> None:
        with self._mu:
            acks, nacks = self._acks, self._nacks
            self._acks, self._nacks = [], []
        acks, nacks = self._send(acks, nacks)
        if (acks or nacks) and \
                (deadline is None or time.monotonic() < deadline):
            with self._mu:
                self._acks = acks + self._acks
                self._nacks = nacks + self._nacks
                if self._stopped_now:
                    return
                self._mu.wait(0.2)  # (before the next try)
            if deadline is not None:
                self._flush_once(deadline)

    def _send(self, acks: list[int],
              nacks: list[tuple]) -> tuple[list[int], list[tuple]]:
        """Sends acks in one request, nacks grouped by error and retry;
        returns the acks and nacks that failed. On a Work stream nothing
        waits for its answer (which only comes once a thread reads the
        stream): an error puts them back."""
        grouped: dict[tuple, list[int]] = {}
        for event_id, text, after in nacks:
            grouped.setdefault((text, after), []).append(event_id)
        with self._mu:
            stream = self._work_stream()
        if stream is not None:
            for i in range(0, len(acks), 1000):
                part = acks[i:i + 1000]
                self._send_on(stream, "ack", pb.AckRequest(
                    namespace=self.namespace, event_ids=part), part, [])
            for (text, after), ids in grouped.items():
                req = pb.NackRequest(namespace=self.namespace, event_ids=ids,
                                     error=text[:1024])
                if after is not None:
                    req.retry_after.CopyFrom(types.duration(after))
                self._send_on(stream, "nack", req, [],
                              [(i, text, after) for i in ids])
            return [], []
        failed_acks: list[int] = []
        failed_nacks: list[tuple] = []
        try:
            for i in range(0, len(acks), 1000):
                self.client.ack(acks[i:i + 1000], namespace=self.namespace)
        except errors.DelaydError:
            failed_acks = acks
        for (text, after), ids in grouped.items():
            try:
                self.client.nack(ids, namespace=self.namespace, error=text,
                                 retry_after=after)
            except errors.DelaydError:
                failed_nacks += [(i, text, after) for i in ids]
        return failed_acks, failed_nacks

    def _send_on(self, stream: WorkStream, kind: str, request,
                 acks: list[int], nacks: list[tuple]) -> None:
        with self._mu:
            self._acking += 1
        stream.send(kind, request,
                    lambda error, _: self._acked(acks, nacks, error))

    def _lease_loop(self) -> None:
        period = self.ack_timeout / 3
        while not self._finished.wait(period):
            with self._mu:
                if self._stopped_now:
                    return
                held = list(self._held)
                stream = self._work_stream()
            if not held:
                continue
            try:
                if stream is not None:
                    # (Not waiting for the answer: it comes once a thread
                    # reads, and all may be running long handlers.)
                    req = pb.ExtendLeaseRequest(namespace=self.namespace,
                                                event_ids=held)
                    req.extension.CopyFrom(types.duration(self.ack_timeout))
                    stream.send("extend_lease", req, lambda *_: None)
                else:
                    self.client.extend_lease(held, self.ack_timeout,
                                             namespace=self.namespace)
            except errors.DelaydError:
                pass  # Tried again at the next period.

