"""A Worker's acknowledgements and leases (worker.py): the part of the
Worker that sends what its handlers decided, as calls.

Acknowledgements. The handler thread that empties the queue sends the acks
of what ran, one try, while acks are answered quickly (AckPace) as a call
it waits for: no other thread takes part between a handler's end, its ack
and the next read (the stream is read by the pool's threads too:
client.py's channels), which costs a quick handler's event less than
anything else here. While acks are slow (a store that syncs each write
before it answers), the thread sends them without waiting, so that acks in
flight overlap (the store syncs them together) and it reads on; one in
_PROBE, sent while no other is in flight, waits again and says whether
acks are quick again. (Not always without waiting: gRPC's thread then
answers each ack, and against an in-memory daemon that costs a third of
the rate.) What fails, and nacks, are left to the send loop, which
retries, so a handler thread never waits out a fail-over here; while an
ack is awaited the send loop wakes another thread to read (within 10 ms).
"""

from __future__ import annotations

import time
from typing import Optional

from . import errors
from ._handling import group_nacks

# An ack round trip (seconds) past which an ack is slow: here 0.16-0.29 ms
# on average against an in-memory daemon at full pace, 0.6-0.9 ms against
# one that syncs each write.
_SLOW_ACK = 0.0005
# Acks are slow once this many waited ones in a row were.
_SLOW_RUN = 8
# While acks are slow, one in at least this many waits for its answer.
_PROBE = 16


class AckPace:
    """Whether acks are slow, from the round trips of those waited for:
    slow once the last _SLOW_RUN were each past _SLOW_ACK, quick again at
    the first that is not (while slow, a waited ack is a probe, and says at
    once whether acks are quick again). A run rather than an average: a
    late answer now and then (a preemption or a collection in either
    process) took a moving average of eight past the bound against an
    in-memory daemon in every run of five, and the worker then sent acks
    without waiting, which there costs up to a third of its rate
    (tests/bench/README.md, "The Python Worker's ack mode"). Under the
    Worker's lock."""

    __slots__ = ("_run",)

    def __init__(self) -> None:
        self._run = 0

    def record(self, waited: float) -> None:
        """An ack waited for was answered after `waited` seconds."""
        self._run = self._run + 1 if waited >= _SLOW_ACK else 0

    @property
    def slow(self) -> bool:
        return self._run >= _SLOW_RUN


class Sending:
    """Mixed into Worker, whose state (and lock) it uses."""

    def _send_loop(self) -> None:
        """Sends the acks and nacks handler threads leave: while events are
        in hand (or an ack is awaited) it records, every 10 ms, the
        outcomes pool threads left (a thread running a quick burst records
        them itself once the queue is empty, and usually sends them first:
        waking this thread for each would cost more than the send), wakes a
        thread to read if none does, and sends what it recorded; and sends
        what failed once."""
        while True:
            recorded = []
            with self._mu:
                while not self._finished.is_set():
                    if self._in_hand() or self._acking:
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
        """Sends the acks waiting, from the handler thread that emptied the
        queue (see "Acknowledgements" above)."""
        with self._lock:
            acks = self._acks
            if not acks:
                return
            self._acks = []
            if self._nacks:
                self._out.notify()
            # (A probe goes while no other ack is in flight: those sent
            # without waiting slow every ack down, as gRPC's thread then
            # answers them, and would keep the round trips up.)
            self._acks_sent += 1
            wait = not self._ack_pace.slow
            if not wait and not self._acking and \
                    self._acks_sent - self._probed_at >= _PROBE:
                wait, self._probed_at = True, self._acks_sent
            self._acking += 1
        try:
            if not wait:
                self.client._ack_nowait(
                    acks, self.namespace,
                    lambda error: self._acked(acks, error))
                return
            started = time.monotonic()
            error = self.client._ack_once(acks, self.namespace)
            self._acked(acks, error, time.monotonic() - started)
        except Exception as e:  # noqa: BLE001 (e.g. the client closed)
            self._acked(acks, e)

    def _acked(self, acks: list[int], error: Optional[Exception],
               waited: Optional[float] = None) -> None:
        """An Ack sent by _send_now (of `acks`) was answered (error None)
        or failed (they are to be sent again); `waited`: how long its
        sender waited for it, if it did."""
        with self._lock:
            self._acking -= 1
            if waited is not None and error is None:
                self._ack_pace.record(waited)
            if error is not None:
                self._acks = acks + self._acks
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
        """Sends acks in one call, nacks grouped by error and retry;
        returns the acks and nacks that failed."""
        grouped = group_nacks(nacks)
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

    def _lease_loop(self) -> None:
        period = self.ack_timeout / 3
        while not self._finished.wait(period):
            with self._mu:
                if self._stopped_now:
                    return
                held = list(self._held)
            if not held:
                continue
            try:
                self.client.extend_lease(held, self.ack_timeout,
                                         namespace=self.namespace)
            except errors.DelaydError:
                pass  # Tried again at the next period.
