"""What the clients share about retrying: which failures may be retried,
which prove a call never reached a daemon, and the waits between tries."""

from __future__ import annotations

import random

from . import errors
from .config import Retry

# CANCELLED is never the caller's here (a sync call cannot be cancelled,
# and an asyncio task's cancellation raises CancelledError instead): it is
# a daemon stopping, whose gRPC ends the calls it had not answered, or a
# node that forwarded the call stopping before its owner's answer came.
# The call may have been applied, so it counts as an answer lost.
RETRYABLE = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED")

# gRPC's words for a call that failed before any connection was made: it
# cannot have reached a daemon, so even a conditional call may be retried.
_NOT_SENT = ("failed to connect to all addresses", "Connection refused",
             "DNS resolution failed", "Name resolution failure",
             "connections to all backends failing", "Socket closed before")


def never_sent(err: errors.DelaydError) -> bool:
    return err.code == "UNAVAILABLE" and any(
        w in err.message or w in err.details for w in _NOT_SENT)


def waits(policy: Retry):
    """The wait before each retry, in seconds: exponential, capped, and
    cut at random to between half and all of itself."""
    wait = policy.initial_backoff
    while True:
        yield wait * (0.5 + random.random() / 2)
        wait = min(wait * policy.multiplier, policy.max_backoff)


class Attempts:
    """One call's tries: what failed, and whether a lost answer means the
    call may have been applied."""

    def __init__(self, policy: Retry, kind: str) -> None:
        self.policy = policy
        self.kind = kind
        self.tries = 0
        self.lost = False  # an attempt was sent and its answer lost
        self._waits = waits(policy)

    def failed(self, err: errors.DelaydError) -> float:
        """After a failed try: the wait before the next one, or raises what
        the caller must see."""
        self.tries += 1
        if err.code not in RETRYABLE:
            raise err
        sent = not never_sent(err)
        if sent and self.kind == "conditional":
            raise errors.OutcomeUnknown(
                "the call was sent and its answer lost (" + str(err) + "); "
                "it may or may not have been applied: read it back", err)
        self.lost = self.lost or sent
        if self.tries >= self.policy.attempts:
            raise err
        return next(self._waits)
