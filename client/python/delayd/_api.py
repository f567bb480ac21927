"""The calls of delayd.v1.Delayd, shared by Client and AsyncClient: each
builds its request, says how it may be retried, and how its answer reads.
The two clients differ only in how a call is made (``_invoke``): blocking,
or as a coroutine.

Retries (the README's "Retries" says why):

- SAFE calls are retried on UNAVAILABLE and DEADLINE_EXCEEDED, on the next
  endpoint, with jittered backoff: reads, and writes whose repeat leaves
  the same end state (a set that replaces, a move or remove without an
  expected version, acks, nacks, lease extensions, policy and dead-letter
  changes, Drain).
- CONDITIONAL calls (an expected version, if_absent; a Batch holding one;
  TriggerSchedule; Backup) are retried only when the call cannot have
  reached a daemon (no connection could be made). Once sent, a lost
  answer raises OutcomeUnknown: the caller reads the timer back.
"""

from __future__ import annotations

import datetime as _dt
from typing import Iterable, Optional, Sequence

from google.protobuf import field_mask_pb2

from . import errors, types
from .v1 import delayd_pb2 as pb

SAFE = "safe"
CONDITIONAL = "conditional"


def _when(req, delay, at) -> None:
    if (delay is None) == (at is None):
        raise errors.InvalidArgument("give exactly one of delay and at")
    if delay is not None:
        req.delay.CopyFrom(types.duration(delay))
    else:
        req.fire_time.CopyFrom(types.timestamp(at))


def _set_result(r) -> types.SetResult:
    return types.SetResult(r.version, types.to_datetime(r.fire_time),
                           r.replaced)


def _move_result(r) -> types.MoveResult:
    return types.MoveResult(r.version, types.to_datetime(r.fire_time))


def _spec(cron, every, time_zone, start, end, max_runs) -> pb.ScheduleSpec:
    spec = pb.ScheduleSpec(time_zone=time_zone or "", max_runs=max_runs)
    if (cron is None) == (every is None):
        raise errors.InvalidArgument("give exactly one of cron and every")
    if cron is not None:
        spec.cron = cron
    else:
        spec.every.CopyFrom(types.duration(every))
    if start is not None:
        spec.start_time.CopyFrom(types.timestamp(start))
    if end is not None:
        spec.end_time.CopyFrom(types.timestamp(end))
    return spec


_POLICY_DURATIONS = ("initial_backoff", "max_backoff", "ack_timeout",
                     "dedup_window")


def _push_target(fields: dict) -> "pb.PushTarget":
    """A push target from a dict of its fields (url, method, headers,
    content_type, timeout as a timedelta or seconds, secrets, ...)."""
    t = pb.PushTarget()
    for name, value in fields.items():
        if name not in pb.PushTarget.DESCRIPTOR.fields_by_name:
            raise errors.InvalidArgument(f"no push target field {name!r}")
        if name == "timeout":
            t.timeout.CopyFrom(types.duration(value))
        elif name == "headers":
            pairs = value.items() if isinstance(value, dict) else value
            for n, v in pairs:
                t.headers.add(name=n, value=v)
        elif name in ("secrets", "secret_ids"):
            getattr(t, name).extend(value)
        else:
            setattr(t, name, value)
    return t


class Batch:
    """Operations gathered for one Batch call (``client.batch()``), applied
    in order per key; ``commit()`` sends them and gives a BatchResult each,
    in order (an operation's failure is in its result, not raised)."""

    def __init__(self, api: "Api", namespace: Optional[str]) -> None:
        self._api = api
        self._ns = namespace
        self._req = pb.BatchRequest()
        self._conditional = False

    def set(self, key: str, payload: bytes = b"", *, delay=None, at=None,
            namespace: Optional[str] = None, if_absent: bool = False,
            jitter=None) -> "Batch":
        op = self._req.operations.add().set
        self._api._fill_set(op, key, payload, delay, at,
                            namespace or self._ns, if_absent, jitter)
        self._conditional |= if_absent
        return self

    def move(self, key: str, *, delay=None, at=None,
             namespace: Optional[str] = None,
             expected_version: int = 0) -> "Batch":
        op = self._req.operations.add().move
        op.namespace = namespace or self._ns or ""
        op.key = key
        op.expected_version = expected_version
        _when(op, delay, at)
        self._conditional |= expected_version != 0
        return self

    def remove(self, key: str, *, namespace: Optional[str] = None,
               expected_version: int = 0) -> "Batch":
        op = self._req.operations.add().remove
        op.namespace = namespace or self._ns or ""
        op.key = key
        op.expected_version = expected_version
        self._conditional |= expected_version != 0
        return self

    def __len__(self) -> int:
        return len(self._req.operations)

    def commit(self):
        def parse(r):
            out = []
            for res in r.results:
                out.append(types.BatchResult(
                    res.version,
                    types.to_datetime(res.fire_time)
                    if res.HasField("fire_time") else None,
                    None if res.code == 0 else
                    errors.from_code(res.code, res.message)))
            return out
        return self._api._invoke(
            "Batch", self._req, CONDITIONAL if self._conditional else SAFE,
            parse)


class Api:
    """Every call of the service. ``namespace`` None means "default"."""

    def _invoke(self, rpc, request, kind, parse, not_found_after_loss=None):
        raise NotImplementedError

    # ---- Timers ----

    @staticmethod
    def _fill_set(req, key, payload, delay, at, namespace, if_absent, jitter):
        req.namespace = namespace or ""
        req.key = key
        req.payload = payload.encode() if isinstance(payload, str) else payload
        req.if_absent = if_absent
        _when(req, delay, at)
        if jitter is not None:
            req.jitter.CopyFrom(types.duration(jitter))

    def set_timer(self, key: str, payload: bytes = b"", *, delay=None,
                  at: Optional[_dt.datetime] = None,
                  namespace: Optional[str] = None, if_absent: bool = False,
                  jitter=None):
        """Creates a timer, or replaces the pending one under ``key`` (give
        ``delay``, a timedelta or seconds, or ``at``, a datetime).
        ``if_absent``: create only (AlreadyExists if one is pending).
        Returns a SetResult (version, fire_time, replaced)."""
        req = pb.SetTimerRequest()
        self._fill_set(req, key, payload, delay, at, namespace, if_absent,
                       jitter)
        return self._invoke("SetTimer", req,
                            CONDITIONAL if if_absent else SAFE, _set_result)

    def move_timer(self, key: str, *, delay=None,
                   at: Optional[_dt.datetime] = None,
                   namespace: Optional[str] = None,
                   expected_version: int = 0):
        """Changes a pending timer's fire time. ``expected_version``:
        compare-and-set (Aborted if it moved on). Returns a MoveResult."""
        req = pb.MoveTimerRequest(namespace=namespace or "", key=key,
                                  expected_version=expected_version)
        _when(req, delay, at)
        return self._invoke("MoveTimer", req,
                            CONDITIONAL if expected_version else SAFE,
                            _move_result)

    def _removal(self, rpc, req):
        """A removal answering the version removed: conditional with an
        expected version; without one, a retry that finds nothing after a
        lost answer returns None (removed, its version not known)."""
        conditional = req.expected_version != 0
        return self._invoke(rpc, req, CONDITIONAL if conditional else SAFE,
                            lambda r: r.version,
                            not_found_after_loss=None if conditional
                            else (None,))

    def remove_timer(self, key: str, *, namespace: Optional[str] = None,
                     expected_version: int = 0):
        """Cancels a pending timer; returns the version removed. Without an
        expected version, a retry that finds nothing after a lost answer
        returns None (removed, its version not known)."""
        return self._removal("RemoveTimer", pb.RemoveTimerRequest(
            namespace=namespace or "", key=key,
            expected_version=expected_version))

    def get_timer(self, key: str, *, namespace: Optional[str] = None):
        """The pending timer ``key`` (NotFound if none)."""
        return self._invoke(
            "GetTimer", pb.GetTimerRequest(namespace=namespace or "", key=key),
            SAFE, types.Timer.from_pb)

    def _list_timers_page(self, namespace, prefix, page_size, token,
                          payloads):
        req = pb.ListTimersRequest(namespace=namespace or "", key_prefix=prefix,
                                   page_size=page_size, page_token=token,
                                   without_payloads=not payloads)
        return self._invoke(
            "ListTimers", req, SAFE,
            lambda r: ([types.Timer.from_pb(t) for t in r.timers],
                       r.next_page_token))

    def drain(self, *, namespace: Optional[str] = None):
        """Fires every pending timer of the namespace now; returns how many
        (a retry after a lost answer counts only what was left)."""
        return self._invoke("Drain",
                            pb.DrainRequest(namespace=namespace or ""), SAFE,
                            lambda r: r.drained)

    def batch(self, *, namespace: Optional[str] = None) -> Batch:
        """A Batch builder: ``client.batch().set(...).remove(...).commit()``."""
        return Batch(self, namespace)

    # ---- Work ----

    def ack(self, event_ids: Iterable[int], *,
            namespace: Optional[str] = None):
        """Acknowledges events; returns how many were outstanding."""
        req = pb.AckRequest(namespace=namespace or "",
                            event_ids=list(event_ids))
        return self._invoke("Ack", req, SAFE,
                            lambda r: r.acked)

    def nack(self, event_ids: Iterable[int], *,
             namespace: Optional[str] = None, error: str = "",
             retry_after=None):
        """Says events failed: each comes back after ``retry_after`` (or the
        policy's backoff). Returns how many were in flight."""
        req = pb.NackRequest(namespace=namespace or "",
                             event_ids=list(event_ids), error=error[:1024])
        if retry_after is not None:
            req.retry_after.CopyFrom(types.duration(retry_after))
        return self._invoke("Nack", req, SAFE,
                            lambda r: r.nacked)

    def extend_lease(self, event_ids: Iterable[int], extension, *,
                     namespace: Optional[str] = None):
        """Moves events' ack deadlines to now + ``extension``."""
        req = pb.ExtendLeaseRequest(namespace=namespace or "",
                                    event_ids=list(event_ids))
        req.extension.CopyFrom(types.duration(extension))
        return self._invoke("ExtendLease", req, SAFE, lambda r: r.extended)

    # ---- Policies and dead letters ----

    def get_policy(self, *, namespace: Optional[str] = None):
        """The namespace's delivery policy, a Record."""
        return self._invoke("GetPolicy",
                            pb.GetPolicyRequest(namespace=namespace or ""),
                            SAFE, types.Record.from_pb)

    def set_policy(self, *, namespace: Optional[str] = None, **fields):
        """Sets the policy fields given (max_attempts=3, paused=True,
        ack_timeout=timedelta(seconds=45), ...); the others stay.
        ``push={"url": ..., "secrets": [...]}`` sets the push target whole
        (``push=None`` removes it)."""
        req = pb.SetPolicyRequest(namespace=namespace or "")
        mask = field_mask_pb2.FieldMask()
        for name, value in fields.items():
            if name not in pb.Policy.DESCRIPTOR.fields_by_name:
                raise errors.InvalidArgument(f"no policy field {name!r}")
            if name == "push":
                if value is not None:
                    req.policy.push.CopyFrom(_push_target(value))
            elif name in _POLICY_DURATIONS:
                getattr(req.policy, name).CopyFrom(types.duration(value))
            else:
                setattr(req.policy, name, value)
            mask.paths.append(name)
        req.update_mask.CopyFrom(mask)
        return self._invoke("SetPolicy", req, SAFE, types.Record.from_pb)

    def test_push_target(self, target: Optional[dict] = None, *,
                         key: str = "", payload: bytes = b"",
                         namespace: Optional[str] = None):
        """Sends one test request to the namespace's push target now (or to
        ``target``, a dict as for ``set_policy(push=...)``) and returns what
        came back: a Record with outcome ("ack", "retry", "dead_letter"),
        http_status (0: no answer), error and duration. Retried as a read
        is: it changes nothing (a retry may send a second test request)."""
        req = pb.TestPushTargetRequest(namespace=namespace or "", key=key,
                                       payload=payload)
        if target is not None:
            req.target.CopyFrom(_push_target(target))
        return self._invoke("TestPushTarget", req, SAFE,
                            types.Record.from_pb)

    def pause(self, *, namespace: Optional[str] = None):
        return self.set_policy(namespace=namespace, paused=True)

    def resume(self, *, namespace: Optional[str] = None):
        return self.set_policy(namespace=namespace, paused=False)

    def _dead_letters_page(self, namespace, page_size, token):
        req = pb.ListDeadLettersRequest(namespace=namespace or "",
                                        page_size=page_size, page_token=token)
        return self._invoke(
            "ListDeadLetters", req, SAFE,
            lambda r: ([types.Record.from_pb(d) for d in r.dead_letters],
                       r.next_page_token))

    def requeue_dead_letters(self, event_ids: Sequence[int] = (), *,
                             namespace: Optional[str] = None,
                             all: bool = False):
        """Delivers dead letters again (attempts from zero); returns how
        many."""
        req = pb.DeadLettersRequest(namespace=namespace or "",
                                    event_ids=list(event_ids), all=all)
        return self._invoke("RequeueDeadLetters", req, SAFE,
                            lambda r: r.count)

    def purge_dead_letters(self, event_ids: Sequence[int] = (), *,
                           namespace: Optional[str] = None,
                           all: bool = False):
        """Deletes dead letters for good; returns how many."""
        req = pb.DeadLettersRequest(namespace=namespace or "",
                                    event_ids=list(event_ids), all=all)
        return self._invoke("PurgeDeadLetters", req, SAFE, lambda r: r.count)

    # ---- Schedules ----

    def set_schedule(self, key: str, payload: bytes = b"", *, cron=None,
                     every=None, time_zone: str = "", start=None, end=None,
                     max_runs: int = 0, namespace: Optional[str] = None,
                     if_absent: bool = False, expected_version: int = 0,
                     catch_up: str = "CATCH_UP_LATEST",
                     catch_up_limit: int = 0, jitter=None,
                     overlap: str = "OVERLAP_ALLOW"):
        """Creates or replaces a recurring schedule (``cron`` in
        ``time_zone``, or ``every``); returns it as a Record."""
        req = pb.SetScheduleRequest(
            namespace=namespace or "", key=key,
            payload=payload.encode() if isinstance(payload, str) else payload,
            spec=_spec(cron, every, time_zone, start, end, max_runs),
            if_absent=if_absent, expected_version=expected_version,
            catch_up=pb.CatchUp.Value(catch_up),
            catch_up_limit=catch_up_limit,
            overlap=pb.Overlap.Value(overlap))
        if jitter is not None:
            req.jitter.CopyFrom(types.duration(jitter))
        conditional = if_absent or expected_version != 0
        return self._invoke("SetSchedule", req,
                            CONDITIONAL if conditional else SAFE,
                            types.Record.from_pb)

    def get_schedule(self, key: str, *, namespace: Optional[str] = None):
        return self._invoke(
            "GetSchedule",
            pb.GetScheduleRequest(namespace=namespace or "", key=key), SAFE,
            types.Record.from_pb)

    def _schedules_page(self, namespace, prefix, page_size, token):
        req = pb.ListSchedulesRequest(namespace=namespace or "", prefix=prefix,
                                      page_size=page_size, page_token=token)
        return self._invoke(
            "ListSchedules", req, SAFE,
            lambda r: ([types.Record.from_pb(s) for s in r.schedules],
                       r.next_page_token))

    def delete_schedule(self, key: str, *, namespace: Optional[str] = None,
                        expected_version: int = 0):
        """Deletes a schedule; returns the version deleted (None if a retry
        after a lost answer found it gone)."""
        return self._removal("DeleteSchedule", pb.DeleteScheduleRequest(
            namespace=namespace or "", key=key,
            expected_version=expected_version))

    def _schedule_action(self, rpc, key, namespace, expected_version,
                         kind=SAFE):
        req = pb.ScheduleActionRequest(namespace=namespace or "", key=key,
                                       expected_version=expected_version)
        return self._invoke(rpc, req,
                            CONDITIONAL if expected_version else kind,
                            types.Record.from_pb)

    def pause_schedule(self, key: str, *, namespace: Optional[str] = None,
                       expected_version: int = 0):
        return self._schedule_action("PauseSchedule", key, namespace,
                                     expected_version)

    def resume_schedule(self, key: str, *, namespace: Optional[str] = None,
                        expected_version: int = 0):
        return self._schedule_action("ResumeSchedule", key, namespace,
                                     expected_version)

    def trigger_schedule(self, key: str, *, namespace: Optional[str] = None,
                         expected_version: int = 0):
        """Fires a run now (not retried once sent: a retry would fire
        another)."""
        return self._schedule_action("TriggerSchedule", key, namespace,
                                     expected_version, kind=CONDITIONAL)

    def preview_schedule(self, *, cron=None, every=None, time_zone: str = "",
                         start=None, end=None, max_runs: int = 0,
                         after: Optional[_dt.datetime] = None,
                         count: int = 10, namespace: Optional[str] = None):
        """The next ``count`` instants of a spec (datetimes), without
        creating anything."""
        req = pb.PreviewScheduleRequest(
            namespace=namespace or "",
            spec=_spec(cron, every, time_zone, start, end, max_runs),
            count=count)
        if after is not None:
            req.after.CopyFrom(types.timestamp(after))
        return self._invoke(
            "PreviewSchedule", req, SAFE,
            lambda r: [types.to_datetime(t) for t in r.instants])

    # ---- The daemon ----

    def stats(self, *, namespace: Optional[str] = None):
        """The daemon's figures and each namespace's (admin on *), or with
        ``namespace`` that one's (``.namespaces[0]``): a Record."""
        return self._invoke("Stats", pb.StatsRequest(namespace=namespace or ""),
                            SAFE, types.Record.from_pb)

    def cluster_status(self):
        """A cluster node's view of its cluster: a Record."""
        return self._invoke("ClusterStatus", pb.ClusterStatusRequest(), SAFE,
                            types.Record.from_pb)

    def backup(self, dir: str):
        """A consistent copy of the store under the daemon's --backup-dir;
        returns its path."""
        return self._invoke("Backup", pb.BackupRequest(dir=dir), CONDITIONAL,
                            lambda r: r.dir)


def subscribe_request(namespace, watcher, max_in_flight, keep_leases,
                      ack_timeout) -> pb.SubscribeRequest:
    """What Client.subscribe and AsyncClient.subscribe send."""
    req = pb.SubscribeRequest(
        namespace=namespace or "",
        mode=pb.SubscribeRequest.WATCHER if watcher
        else pb.SubscribeRequest.WORKER,
        max_in_flight=max_in_flight, keep_leases=keep_leases)
    if ack_timeout is not None:
        req.ack_timeout.CopyFrom(types.duration(ack_timeout))
    return req
