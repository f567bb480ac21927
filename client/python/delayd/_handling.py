"""What both workers (worker.Worker, aio.AsyncWorker) share: the error a
handler raises to choose its retry, the hooks, and the window of handled
event ids."""

from __future__ import annotations

import collections
import dataclasses
from typing import Callable, Optional

from . import types
from .config import Retry as RetryPolicy


class Retry(Exception):
    """Raised by a handler: the event failed, deliver it again after
    ``after`` (a timedelta or seconds; None: the policy's backoff)."""

    def __init__(self, message: str = "", after=None) -> None:
        super().__init__(message)
        self.after = after


@dataclasses.dataclass
class Hooks:
    """Callbacks for logs and metrics; each may be None. ``lateness`` and
    ``seconds`` are in seconds."""
    # An event arrived: how late after its fire time.
    on_event: Optional[Callable[[types.Event, float], None]] = None
    on_handled: Optional[Callable[[types.Event, float], None]] = None
    on_failed: Optional[Callable[[types.Event, BaseException, float],
                                 None]] = None
    # The stream: "connected" (error None) or "lost" (with its error).
    on_stream: Optional[Callable[[str, Optional[Exception]], None]] = None


class _Done:
    """Event ids handled recently, for ``window`` seconds (at most
    ``limit`` of them): a repeat of one is acknowledged, not run again."""

    def __init__(self, window: float, limit: int = 100_000) -> None:
        self.window = window
        self.limit = limit
        # Event ids are unique: each is added once, in time order.
        self._ids: set[int] = set()
        self._added: collections.deque[tuple[float, int]] = \
            collections.deque()
        self._prune_at = 0.0  # when prune() runs next

    def add(self, event_id: int, now: float) -> None:
        """Adds an id handled at ``now`` (time.monotonic())."""
        self._ids.add(event_id)
        self._added.append((now, event_id))
        if now >= self._prune_at or len(self._added) > self.limit:
            self._prune_at = now + self.window / 100
            self.prune(now)

    def prune(self, now: float) -> None:
        horizon = now - self.window
        added, ids = self._added, self._ids
        while added and (len(added) > self.limit or added[0][0] < horizon):
            ids.discard(added.popleft()[1])

    def __contains__(self, event_id: int) -> bool:
        return event_id in self._ids


def take_settings(worker, namespace: str, handler, concurrency: int,
                  ack_timeout: float, grace: float, hooks: Optional[Hooks],
                  reconnect: Optional[RetryPolicy]) -> None:
    """Checks and keeps on ``worker`` the settings both workers take."""
    if concurrency < 1:
        raise ValueError("concurrency: at least 1")
    if not 0.1 <= ack_timeout <= 3600:
        raise ValueError("ack_timeout: from 0.1 to 3600 seconds")
    worker.namespace = namespace
    worker.handler = handler
    worker.concurrency = concurrency
    worker.ack_timeout = ack_timeout
    worker.grace = grace
    worker.hooks = hooks or Hooks()
    worker._reconnect = reconnect or RetryPolicy(initial_backoff=0.05,
                                                 max_backoff=2.0)
