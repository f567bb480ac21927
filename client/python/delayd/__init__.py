"""delayd from Python: a client for every call of the daemon, and workers
that carry the client's half of at-least-once delivery.

- ``Client`` (blocking) and ``AsyncClient`` (asyncio): every RPC, with
  instants as datetime, durations as timedelta (or seconds), pages as
  iterators, one error class per gRPC code (``errors``), and retries across
  the endpoints of DELAYD_ENDPOINT (``config``).
- ``Worker`` and ``AsyncWorker``: ``Worker(namespace, handler,
  concurrency=N).run()``.

See README.md beside this package for the whole API.
"""

from ._version import __version__
from .aio import AsyncClient, AsyncWorker
from .client import Client, Subscription
from .config import Config, Retry as RetryPolicy
from .errors import (Aborted, AlreadyExists, Cancelled, DataLoss,
                     DeadlineExceeded, DelaydError, FailedPrecondition,
                     Internal, InvalidArgument, NotFound, OutcomeUnknown,
                     OutOfRange, PermissionDenied, ResourceExhausted,
                     Unauthenticated, Unavailable, Unimplemented, Unknown)
from .types import (BatchResult, Event, MoveResult, Record, SetResult,
                    Timer)
from .worker import Hooks, Retry, Worker

__all__ = [
    "__version__", "AsyncClient", "AsyncWorker", "Client", "Subscription",
    "Config", "RetryPolicy", "Aborted", "AlreadyExists", "Cancelled",
    "DataLoss", "DeadlineExceeded", "DelaydError", "FailedPrecondition",
    "Internal", "InvalidArgument", "NotFound", "OutcomeUnknown", "OutOfRange",
    "PermissionDenied", "ResourceExhausted", "Unauthenticated", "Unavailable",
    "Unimplemented", "Unknown", "BatchResult", "Event", "MoveResult",
    "Record", "SetResult", "Timer", "Hooks", "Retry", "Worker",
]
