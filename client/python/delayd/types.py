"""What calls take and give, in Python's own types: datetime (aware, UTC)
for instants, timedelta for durations, bytes for payloads.

Events and timers are dataclasses; the answers with many fields (policies,
schedules, figures, the cluster) are Records: the message's fields by
their names, converted the same way (an unset instant is None).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from typing import Any, Optional, Union

from google.protobuf import descriptor as _descriptor
from google.protobuf import duration_pb2, message as _message, timestamp_pb2

UTC = _dt.timezone.utc
Delay = Union[_dt.timedelta, int, float]


def duration(d: Delay) -> duration_pb2.Duration:
    """A Duration from a timedelta or a number of seconds."""
    if isinstance(d, _dt.timedelta):
        total_us = (d.days * 86400 + d.seconds) * 1_000_000 + d.microseconds
        nanos = total_us * 1000
    elif isinstance(d, (int, float)):
        nanos = round(d * 1_000_000_000)
    else:
        raise TypeError(f"a duration is a timedelta or seconds, not {d!r}")
    return duration_pb2.Duration(seconds=nanos // 1_000_000_000,
                                 nanos=nanos % 1_000_000_000) if nanos >= 0 \
        else duration_pb2.Duration(seconds=-((-nanos) // 1_000_000_000),
                                   nanos=-((-nanos) % 1_000_000_000))


def timestamp(t: _dt.datetime) -> timestamp_pb2.Timestamp:
    """A Timestamp from a datetime (a naive one is taken as UTC)."""
    if not isinstance(t, _dt.datetime):
        raise TypeError(f"an instant is a datetime, not {t!r}")
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    ts = timestamp_pb2.Timestamp()
    ts.FromDatetime(t.astimezone(UTC))
    return ts


def to_datetime(ts: timestamp_pb2.Timestamp) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(ts.seconds, tz=UTC) + \
        _dt.timedelta(microseconds=ts.nanos // 1000)


def to_timedelta(d: duration_pb2.Duration) -> _dt.timedelta:
    return _dt.timedelta(seconds=d.seconds, microseconds=d.nanos // 1000)


def nanos(ts: timestamp_pb2.Timestamp) -> int:
    return ts.seconds * 1_000_000_000 + ts.nanos


@dataclasses.dataclass(frozen=True)
class Timer:
    """A pending timer."""
    namespace: str
    key: str
    payload: bytes
    fire_time: _dt.datetime
    version: int

    @classmethod
    def from_pb(cls, t) -> "Timer":
        return cls(t.namespace, t.key, t.payload, to_datetime(t.fire_time),
                   t.version)


def _from_ns(ns: int) -> _dt.datetime:
    return _dt.datetime.fromtimestamp(ns // 1_000_000_000, tz=UTC) + \
        _dt.timedelta(microseconds=ns % 1_000_000_000 // 1000)


_REASONS: dict[int, str] = {}


_EVENT_FIELDS = ("id", "namespace", "key", "payload", "version", "attempt",
                 "reason", "schedule_run", "fire_time_ns", "fired_at_ns")


def _ns(t) -> int:
    """A Timestamp message in nanoseconds since the Unix epoch."""
    return t.seconds * 1_000_000_000 + t.nanos


def _reason_of(e) -> str:
    """An Event message's reason by name: "expired", "drained", ..."""
    reason = _REASONS.get(e.reason)
    if reason is None:
        reason = e.DESCRIPTOR.fields_by_name["reason"].enum_type \
            .values_by_number[e.reason].name.removeprefix("REASON_").lower()
        _REASONS[e.reason] = reason
    return reason


class Event:
    """A fired timer (or schedule run), as delivered; immutable, compared
    by its fields. ``Event(id, namespace, key, payload, version, attempt,
    reason, schedule_run, fire_time_ns, fired_at_ns)`` makes one (a
    handler's own tests); a worker's read each field from the message they
    came in when it is read, so that a worker pays for no field its handler
    does not read (decoding every field would add a third to what a quick
    handler's event costs the worker). ``fire_time`` and ``fired_at`` are
    aware datetimes (UTC) made from the nanoseconds when read."""

    # (Slots set through their descriptors: __setattr__ refuses.) Either
    # _pb (a worker's event: its message) or _fields (the rest, in
    # _EVENT_FIELDS' order) is None.
    __slots__ = ("id", "_pb", "_fields")

    def __init__(self, id: int, namespace: str, key: str, payload: bytes,
                 version: int, attempt: int, reason: str, schedule_run: int,
                 fire_time_ns: int, fired_at_ns: int) -> None:
        _set_id(self, id)
        _set_pb(self, None)
        _set_fields(self, (namespace, key, payload, version, attempt, reason,
                           schedule_run, fire_time_ns, fired_at_ns))

    @classmethod
    def from_pb(cls, e) -> "Event":
        event = object.__new__(cls)
        _set_id(event, e.id)
        _set_pb(event, e)
        _set_fields(event, None)
        return event

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"an Event is immutable (set {name!r})")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"an Event is immutable (delete {name!r})")

    def _read(self) -> tuple:
        """The fields after ``id``."""
        e = self._pb
        if e is None:
            return self._fields
        return (e.namespace, e.key, e.payload, e.version, e.attempt,
                _reason_of(e), e.schedule_run, _ns(e.fire_time),
                _ns(e.fired_at))

    # Each read from the message, or from the fields given.
    namespace = property(lambda self: self._fields[0] if self._pb is None
                         else self._pb.namespace)
    key = property(lambda self: self._fields[1] if self._pb is None
                   else self._pb.key)
    payload = property(lambda self: self._fields[2] if self._pb is None
                       else self._pb.payload)
    version = property(lambda self: self._fields[3] if self._pb is None
                       else self._pb.version)
    # 1 on first delivery, + 1 on each redelivery; 0 for a watcher's copy.
    attempt = property(lambda self: self._fields[4] if self._pb is None
                       else self._pb.attempt)
    # "expired", "drained" or "dead_lettered" (watchers only).
    reason = property(lambda self: self._fields[5] if self._pb is None
                      else _reason_of(self._pb))
    # A schedule's run number (0 for a timer).
    schedule_run = property(lambda self: self._fields[6] if self._pb is None
                            else self._pb.schedule_run)
    # The instants in nanoseconds since the Unix epoch.
    fire_time_ns = property(lambda self: self._fields[7] if self._pb is None
                            else _ns(self._pb.fire_time))
    fired_at_ns = property(lambda self: self._fields[8] if self._pb is None
                           else _ns(self._pb.fired_at))

    @property
    def fire_time(self) -> _dt.datetime:
        return _from_ns(self.fire_time_ns)

    @property
    def fired_at(self) -> _dt.datetime:
        return _from_ns(self.fired_at_ns)

    def _astuple(self) -> tuple:
        return (self.id,) + self._read()

    def _asdict(self) -> dict[str, Any]:
        return dict(zip(_EVENT_FIELDS, self._astuple()))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Event):
            return NotImplemented
        return self._astuple() == other._astuple()

    def __hash__(self) -> int:
        return hash(self._astuple())

    def __repr__(self) -> str:
        return "Event(" + ", ".join(
            f"{k}={v!r}" for k, v in self._asdict().items()) + ")"

    def __reduce__(self):
        return (Event, self._astuple())


_set_id = Event.id.__set__
_set_pb = Event._pb.__set__
_set_fields = Event._fields.__set__


def events_of(messages) -> list[Event]:
    """Events (as Event.from_pb) of a repeated field of Event messages.
    (A loop with its names bound, and no _fields set: a message's event
    reads none. It takes three quarters of the time from_pb would.)"""
    new, set_id, set_pb, out = object.__new__, _set_id, _set_pb, []
    for e in messages:
        event = new(Event)
        set_id(event, e.id)
        set_pb(event, e)
        out.append(event)
    return out


@dataclasses.dataclass(frozen=True)
class SetResult:
    version: int
    fire_time: _dt.datetime
    replaced: bool


@dataclasses.dataclass(frozen=True)
class MoveResult:
    version: int
    fire_time: _dt.datetime


@dataclasses.dataclass(frozen=True)
class BatchResult:
    """One operation's result: ``error`` None on success, else the
    DelaydError it would have raised alone."""
    version: int
    fire_time: Optional[_dt.datetime]
    error: Optional[Exception]

    @property
    def ok(self) -> bool:
        return self.error is None


class Record:
    """A message's fields as attributes, in Python's types: instants as
    datetime (None if unset), durations as timedelta, enums by name, nested
    messages as Records, repeated fields as lists."""

    __slots__ = ("_fields",)

    def __init__(self, fields: dict[str, Any]) -> None:
        object.__setattr__(self, "_fields", fields)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name, value):
        raise AttributeError("a Record is read-only")

    def __eq__(self, other) -> bool:
        return isinstance(other, Record) and self._fields == other._fields

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={v!r}" for k, v in self._fields.items())
        return f"Record({inner})"

    def to_dict(self) -> dict[str, Any]:
        def plain(v):
            if isinstance(v, Record):
                return v.to_dict()
            if isinstance(v, list):
                return [plain(x) for x in v]
            return v
        return {k: plain(v) for k, v in self._fields.items()}

    @classmethod
    def from_pb(cls, msg: _message.Message) -> "Record":
        fields = {}
        for f in msg.DESCRIPTOR.fields:
            value = getattr(msg, f.name)
            if f.label == _descriptor.FieldDescriptor.LABEL_REPEATED:
                fields[f.name] = [_value(f, v, True) for v in value]
            elif f.message_type is not None and not msg.HasField(f.name):
                fields[f.name] = None
            elif f.has_presence and not msg.HasField(f.name):
                fields[f.name] = None
            else:
                fields[f.name] = _value(f, value, True)
        return cls(fields)


def _value(f, value, _present):
    if f.message_type is not None:
        name = f.message_type.full_name
        if name == "google.protobuf.Timestamp":
            return to_datetime(value)
        if name == "google.protobuf.Duration":
            return to_timedelta(value)
        if name == "delayd.v1.Event":
            return Event.from_pb(value)
        return Record.from_pb(value)
    if f.enum_type is not None:
        return f.enum_type.values_by_number[value].name
    return value
