"""What both workers (worker.Worker, aio.AsyncWorker) share: the error a
handler raises to choose its retry, the hooks, and the window of handled
event ids."""

from __future__ import annotations

import collections
import dataclasses
import time
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
        self._ids: collections.OrderedDict[int, float] = \
            collections.OrderedDict()
        self._pruned = 0.0  # when prune() last ran

    def add(self, event_id: int) -> None:
        now = time.monotonic()
        self._ids[event_id] = now
        self._ids.move_to_end(event_id)
        if len(self._ids) > self.limit or \
                now - self._pruned >= self.window / 100:
            self._pruned = now
            self.prune()

    def prune(self) -> None:
        horizon = time.monotonic() - self.window
        while self._ids and (len(self._ids) > self.limit or
                             next(iter(self._ids.values())) < horizon):
            self._ids.popitem(last=False)

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
