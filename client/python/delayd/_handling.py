"""What both workers (worker.Worker, aio.AsyncWorker) share: the error a
handler raises to choose its retry, the hooks, the window of handled
event ids, and how nacks are grouped into requests."""

from __future__ import annotations

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
    """Event ids handled recently: a repeat of one is acknowledged, not run
    again. Each id is kept at least ``window`` seconds, unless more than
    ``limit // 2`` are added after it meanwhile (then at least the latest
    ``limit // 2`` are kept); never more than ``limit`` ids.

    Two generations of ids: the newer takes what is added, and once it is
    ``window`` old (or holds ``limit // 2``) it becomes the older and the
    older is dropped whole. Adding is one set insertion and a comparison,
    and forgetting costs nothing per id (pruning ids one at a time would
    add about a tenth to what a quick handler's event costs the worker)."""

    def __init__(self, window: float, limit: int = 100_000) -> None:
        self.window = window
        self._half = max(1, limit // 2)
        self._ids: set[int] = set()  # the newer generation
        self._old: set[int] = set()
        self._turn_at = 0.0  # when the newer becomes the older (monotonic)

    def add(self, event_id: int, now: float) -> None:
        """Adds an id handled at ``now`` (time.monotonic())."""
        self.add_all((event_id,), now)

    def add_all(self, event_ids, now: float) -> None:
        """Adds ids handled by ``now`` (time.monotonic())."""
        ids, half, turn_at = self._ids, self._half, self._turn_at
        if now < turn_at and len(ids) + len(event_ids) < half:
            ids.update(event_ids)  # (no turn: in bulk)
            return
        for event_id in event_ids:
            ids.add(event_id)
            if now >= turn_at or len(ids) >= half:
                self._old, self._ids = ids, set()
                turn_at = self._turn_at = now + self.window
                ids = self._ids

    def generations(self) -> tuple[set[int], set[int]]:
        """The ids as two sets (valid until the next add)."""
        return self._ids, self._old

    def __contains__(self, event_id: int) -> bool:
        return event_id in self._ids or event_id in self._old


def group_nacks(nacks: list[tuple]) -> dict[tuple, list[int]]:
    """Nacks, (event id, error text, retry after) each, as the ids of each
    (error text, retry after): one request a group."""
    groups: dict[tuple, list[int]] = {}
    for event_id, text, after in nacks:
        groups.setdefault((text, after), []).append(event_id)
    return groups


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
