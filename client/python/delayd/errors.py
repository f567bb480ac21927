"""Errors: one class per gRPC status code a caller branches on.

Every error raised by a call is a DelaydError carrying the daemon's message
(``message``) and the gRPC code's name (``code``, e.g. "NOT_FOUND"). Catch
the class of the case you handle::

    try:
        client.move_timer("order-42", delay=timedelta(minutes=30),
                          expected_version=v)
    except delayd.Aborted:      # the version moved on: read and decide again
        ...
    except delayd.NotFound:     # it fired or was removed
        ...

OutcomeUnknown (an Unavailable) is raised when a conditional call (an
expected version, if_absent) was sent, its answer was lost, and retrying it
could give a wrong answer: read the timer back to learn what happened.
"""

from __future__ import annotations

import grpc


class DelaydError(Exception):
    """A call failed. ``code`` is the gRPC code's name, ``message`` the
    daemon's (or gRPC's) text, ``details`` gRPC's debug string if any."""

    code = "UNKNOWN"

    def __init__(self, message: str, *, details: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.details = details

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class Cancelled(DelaydError):
    code = "CANCELLED"


class Unknown(DelaydError):
    code = "UNKNOWN"


class InvalidArgument(DelaydError):
    """Bad input: nothing changed. The message names the field."""
    code = "INVALID_ARGUMENT"


class DeadlineExceeded(DelaydError):
    code = "DEADLINE_EXCEEDED"


class NotFound(DelaydError):
    code = "NOT_FOUND"


class AlreadyExists(DelaydError):
    """A create-only call (if_absent) found one under the key."""
    code = "ALREADY_EXISTS"


class PermissionDenied(DelaydError):
    code = "PERMISSION_DENIED"


class ResourceExhausted(DelaydError):
    """A limit of the daemon's (pending timers, subscribers, sizes)."""
    code = "RESOURCE_EXHAUSTED"


class FailedPrecondition(DelaydError):
    code = "FAILED_PRECONDITION"


class Aborted(DelaydError):
    """A compare-and-set's expected version did not match."""
    code = "ABORTED"


class OutOfRange(DelaydError):
    code = "OUT_OF_RANGE"


class Unimplemented(DelaydError):
    code = "UNIMPLEMENTED"


class Internal(DelaydError):
    code = "INTERNAL"


class Unavailable(DelaydError):
    """The daemon cannot answer now (shutting down, a partition moving
    between nodes, its store away): retryable."""
    code = "UNAVAILABLE"


class DataLoss(DelaydError):
    code = "DATA_LOSS"


class Unauthenticated(DelaydError):
    code = "UNAUTHENTICATED"


class OutcomeUnknown(Unavailable):
    """A conditional call was sent and its answer lost: it may or may not
    have been applied, and retrying it could answer wrongly (an if_absent
    set finding the timer it created itself). ``cause`` is the last error."""

    def __init__(self, message: str, cause: DelaydError) -> None:
        super().__init__(message, details=cause.details)
        self.cause = cause


_BY_CODE = {cls.code: cls for cls in (
    Cancelled, Unknown, InvalidArgument, DeadlineExceeded, NotFound,
    AlreadyExists, PermissionDenied, ResourceExhausted, FailedPrecondition,
    Aborted, OutOfRange, Unimplemented, Internal, Unavailable, DataLoss,
    Unauthenticated)}


def from_rpc_error(err: grpc.RpcError) -> DelaydError:
    """The DelaydError for a gRPC error."""
    code = err.code().name if hasattr(err, "code") and err.code() else "UNKNOWN"
    message = err.details() if hasattr(err, "details") else str(err)
    debug = ""
    if hasattr(err, "debug_error_string"):
        try:
            debug = err.debug_error_string() or ""
        except Exception:  # pragma: no cover (not every error has one)
            debug = ""
    return _BY_CODE.get(code, Unknown)(message or code, details=debug)


def from_code(code: int, message: str) -> DelaydError:
    """The DelaydError for a google.rpc.Code number (a Batch result's)."""
    name = next((c.name for c in grpc.StatusCode if c.value[0] == code),
                "UNKNOWN")
    return _BY_CODE.get(name, Unknown)(message or name)
