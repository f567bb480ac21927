"""Workers: the client's half of at-least-once delivery.

    import delayd

    def cancel_order(event: delayd.Event) -> None:
        ...  # returns: acknowledged; raises: retried later

    delayd.Worker("shop", cancel_order, concurrency=8).run()

A Worker subscribes to a namespace and runs ``handler(event)`` for each
event, at most ``concurrency`` at once (the stream's flow control is set to
it, so the daemon hands it no more):

- the handler returns: the event is acknowledged; it raises: the event is
  nacked with the error's text, and comes back after the policy's backoff
  (or after ``Retry(after=...)``); after the policy's last attempt it is a
  dead letter. The worker reads a Subscribe stream; acks, nacks and lease
  extensions are calls (to any node: see "Acknowledgements" in
  _sending.py for how they are sent);
- while a handler runs, its event's lease is extended every third of the
  ack timeout, so a long job is never handed to another worker;
- the stream ending (a node stopped or killed, a hand-over, a database
  fail-over) is met by reconnecting, with jittered backoff, to the next
  endpoint; handlers already running finish and their acknowledgements
  still go out (to any node); an event delivered again that this worker
  already handled (within ``dedup_window``) is acknowledged without
  running the handler again, and one still running is not started twice;
- ``stop()`` (or SIGTERM/SIGINT under ``run()``) takes nothing new, gives
  back what was received but not started, lets running handlers finish
  within ``grace`` and acknowledges them, then closes the stream (so none
  of them goes back to the queue meanwhile); a second signal stops at
  once (what was not acknowledged comes back to other workers once its
  ack timeout passes).

The stream asks the daemon to keep its events leased when it ends (its
``keep_leases``): a handler still running when its stream broke keeps its
event, whose lease it goes on extending, rather than the event going
straight to another worker.

Thread safety: the worker runs on threads of its own; ``stop`` may be
called from any thread. Hooks run on the worker's threads.
"""

from __future__ import annotations

import collections
import signal
import threading
import time
from typing import Callable, Optional

from . import errors, types
from ._handling import Hooks, Retry, _Done, take_settings
from ._retry import waits
from ._sending import AckPace, Sending
from .client import Client
from .config import Config, Retry as RetryPolicy


_EXIT = object()  # a pool thread's last task


# Handlers this long on average (seconds) get a thread woken for each
# event that waits (see "The pool").
_SLOW = 0.0005


class Worker(Sending):
    def __init__(self, namespace: str, handler: Callable[[types.Event], None],
                 *, concurrency: int = 1, client: Optional[Client] = None,
                 config: Optional[Config] = None, ack_timeout: float = 30.0,
                 dedup_window: float = 600.0, grace: float = 30.0,
                 hooks: Optional[Hooks] = None,
                 reconnect: Optional[RetryPolicy] = None) -> None:
        take_settings(self, namespace, handler, concurrency, ack_timeout,
                      grace, hooks, reconnect)
        self._own_client = client is None
        self.client = client or Client(config)
        # One lock; three conditions on it, so that a wake-up reaches only
        # who it concerns: _work the handler threads (an event queued),
        # _out the sender (something to send), _mu the rest (stop() waiting
        # for handlers, the reconnection's backoff).
        self._lock = threading.Lock()
        self._mu = threading.Condition(self._lock)
        self._work = threading.Condition(self._lock)
        self._out = threading.Condition(self._lock)
        # The events received and not yet taken by a pool thread: appended
        # under _lock, taken by a pool thread's popleft() with or without
        # it (a deque's append and popleft are atomic, so each event is
        # taken once).
        self._queued: collections.deque[types.Event] = collections.deque()
        # Each pool thread's outcomes not yet recorded, (event, error,
        # started, ended): appended by that thread alone, without _lock;
        # taken and recorded under _lock, by it or the send loop.
        self._results: list[collections.deque] = []
        # Guarded by _lock:
        # Pool threads waiting on _work, and those woken not yet awake
        # (see _wake_one); whether one reads the stream; the stream.
        self._waiting = 0
        self._woken = 0
        self._avg_seconds = 0.0  # handlers' time, a moving average
        self._reading = False
        self._stream = None  # the Subscription being read
        self._batches = None  # its messages' events, as they come
        self._backoff = waits(self._reconnect)
        self._retry_at = 0.0  # no reconnection before (monotonic)
        # The events queued, running or run but not yet recorded, by id
        # (those past the queue are "in hand": _in_hand()).
        self._held: dict[int, types.Event] = {}
        self._done = _Done(dedup_window)
        self._acks: list[int] = []  # event ids to acknowledge
        self._nacks: list[tuple] = []  # (event id, error text, retry after)
        self._stopping = False
        self._stopped_now = False
        self._threads: list[threading.Thread] = []
        self._finished = threading.Event()
        self._sending = threading.Lock()  # held by a flush
        self._acking = 0  # acks of _send_now awaiting their answer
        self._acks_sent = 0  # by _send_now
        self._probed_at = 0  # _acks_sent at its last probe
        self._ack_pace = AckPace()  # whether they are slow

    # ---- Life ----

    def start(self) -> None:
        """Starts the worker's threads and returns."""
        self._results = [collections.deque()
                         for _ in range(self.concurrency)]
        targets = [(self._send_loop, ()), (self._lease_loop, ())]
        targets += [(self._run_loop, (r,)) for r in self._results]
        for target, args in targets:
            t = threading.Thread(target=target, args=args, daemon=True,
                                 name=f"delayd-{target.__name__.strip('_')}")
            t.start()
            self._threads.append(t)

    def run(self, install_signal_handlers: bool = True) -> None:
        """Starts and blocks until stopped: by ``stop()``, or (from the
        main thread) by SIGTERM or SIGINT; a second signal stops at once."""
        if install_signal_handlers and \
                threading.current_thread() is threading.main_thread():
            def on_signal(signo, frame):
                if self._stopping:
                    self.stop_now()
                else:
                    threading.Thread(target=self.stop, daemon=True).start()
            for s in (signal.SIGTERM, signal.SIGINT):
                signal.signal(s, on_signal)
        self.start()
        while not self._finished.wait(0.2):
            pass

    def stop(self, grace: Optional[float] = None) -> None:
        """Takes nothing new, gives back what was not started, lets running
        handlers finish within ``grace`` seconds (default: the worker's) and
        acknowledges them; returns once done."""
        grace = self.grace if grace is None else grace
        with self._mu:
            already = self._stopping
            self._stopping = True
        if already:
            self._finished.wait(grace + 5)
            return
        # The stream stays open until what runs is acknowledged: an event
        # of a stream that ended would go back to the queue (and perhaps to
        # another worker) while its handler still ran here. Events that
        # arrive meanwhile are given back at once (_received).
        with self._mu:
            while True:  # (each taken once: pool threads take without _mu)
                try:
                    e = self._queued.popleft()
                except IndexError:
                    break
                del self._held[e.id]
                self._nacks.append((e.id, "the worker stopped", 0))
            self._work.notify_all()
            self._out.notify()
        self._wait_while(self._in_hand, time.monotonic() + grace)
        # What is left to send, and sends under way, get 5 s more (an ack
        # sent without waiting that fails is to be sent again).
        deadline = time.monotonic() + 5
        while True:
            self._wait_while(lambda: self._acking, deadline)
            self._flush(deadline=deadline)
            self._wait_while(lambda: self._acking, deadline)
            with self._mu:
                if not (self._acks or self._nacks or self._acking) or \
                        self._stopped_now or time.monotonic() >= deadline:
                    break
        with self._mu:
            stream = self._stream
        if stream is not None:
            stream.cancel()
        self._finish()

    def _wait_while(self, busy: Callable[[], object],
                    deadline: float) -> None:
        """Waits (on _mu) while busy() holds, until `deadline` or a stop
        at once."""
        with self._mu:
            while busy() and not self._stopped_now:
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                self._mu.wait(left)

    def stop_now(self) -> None:
        """Stops at once: running handlers are not waited for, and what
        they did not acknowledge comes back to other workers."""
        with self._mu:
            self._stopping = True
            self._stopped_now = True
            stream = self._stream
            self._mu.notify_all()
            self._work.notify_all()
            self._out.notify()
        if stream is not None:
            stream.cancel()
        self._finish()

    def _finish(self) -> None:
        if self._finished.is_set():
            return
        if self._own_client:
            self.client.close()
        self._finished.set()

    # ---- The pool: leader and followers ----
    #
    # The worker's `concurrency` threads take turns at reading the stream:
    # a thread with nothing to run, when no thread reads, reads one message
    # and queues its events, then runs them itself. Others are woken one at
    # a time while events wait (or nobody reads): at once while handlers
    # take long (_SLOW on average), else by the send loop when a handler
    # still runs on its next tick (10 ms) — waking a thread costs more than
    # a quick handler, so a burst of quick ones is read, run and
    # acknowledged by one thread with no hand-over, while a slow one holds
    # up the events behind it for one tick at most. The stream asks for no
    # more events than there are threads, so nothing waits for a reader
    # while every thread runs a handler.
    #
    # While handlers are quick a thread runs the queued events one after
    # another without taking _lock: it takes each from the queue, which
    # another thread woken meanwhile may take from too, and leaves each
    # outcome in its results, recorded (the ack queued, the window of
    # handled ids) once the queue is empty, or by the send loop on its
    # tick while a handler still runs. Taking _lock per event cost a
    # quick handler's worker more than all else it does per event.

    def _run_loop(self, results: collections.deque) -> None:
        # (The handler's run is inline, and the hooks are looked up only
        # when set: each call saved here is a tenth of a quick handler's
        # cost per event.)
        handler, hooks, monotonic = self.handler, self.hooks, time.monotonic
        queued, put = self._queued, results.append
        hooked = hooks.on_handled is not None or hooks.on_failed is not None
        while True:
            with self._lock:
                recorded = self._record(results) if results else ()
                task = self._next_task()
            if recorded:
                if not queued:
                    self._send_now()
                if hooked:
                    self._call_hooks(recorded)
            if task is _EXIT:
                return
            if task is None:
                self._read_once()
                with self._mu:
                    self._reading = False
                    if self._avg_seconds >= _SLOW:
                        self._wake_one()
                continue
            event, started = task, monotonic()
            while True:
                # (A handler's time starts where the one before it ended:
                # one clock reading an event.)
                try:
                    handler(event)
                    ended = monotonic()
                    put((event, None, started, ended))
                except BaseException as e:  # noqa: BLE001 (its failure)
                    ended = monotonic()
                    put((event, e, started, ended))
                started = ended
                if self._avg_seconds >= _SLOW or self._stopped_now:
                    break  # (one at a time: see above)
                try:
                    event = queued.popleft()
                except IndexError:
                    break

    def _next_task(self):
        """Under _mu: an event to run, None to read the stream, or _EXIT."""
        while True:
            if self._stopped_now:
                return _EXIT
            if self._queued:
                try:
                    event = self._queued.popleft()
                except IndexError:  # (taken meanwhile, without _mu)
                    continue
                if self._avg_seconds >= _SLOW:
                    self._wake_one()
                return event
            if not self._reading and not self._finished.is_set() and \
                    not (self._stopping and self._batches is None):
                self._reading = True
                return None
            if self._stopping:
                return _EXIT  # nothing to run; another thread reads
            self._waiting += 1
            self._work.wait()
            self._waiting -= 1
            self._woken = max(0, self._woken - 1)

    def _wake_one(self) -> None:
        """Under _mu: wakes a waiting thread if events wait or nobody
        reads, unless one woken has yet to take its turn (which wakes the
        next when it does)."""
        if self._waiting > 0 and self._woken == 0 and \
                (self._queued or not self._reading):
            self._woken += 1
            self._work.notify()

    def _read_once(self) -> None:
        """Reads one message of the stream, connecting first if there is
        none. Only the reading thread gets here."""
        if self._batches is None and not self._connect():
            return
        try:
            batch = next(self._batches)
        except StopIteration:
            self._lost(None)
            return
        except errors.DelaydError as e:
            self._lost(e)
            return
        self._received(batch)

    def _connect(self) -> bool:
        """Waits out the reconnection backoff, then subscribes; False if
        the worker stops meanwhile."""
        with self._mu:
            while not self._stopping:
                left = self._retry_at - time.monotonic()
                if left <= 0:
                    break
                self._mu.wait(left)
            if self._stopping:
                return False

        def registered():
            self._backoff = waits(self._reconnect)
            self._hook("on_stream", "connected", None)

        stream = self.client.subscribe(
            namespace=self.namespace, max_in_flight=self.concurrency,
            ack_timeout=self.ack_timeout, keep_leases=True,
            on_registered=registered)
        with self._mu:
            if self._stopping:
                stream.cancel()
                return False
            self._stream = stream
            self._batches = stream.batches()
        return True

    def _lost(self, error: Optional[Exception]) -> None:
        with self._mu:
            self._stream = None
            self._batches = None
            if self._stopping:
                return
            # Another endpoint next time, after a jittered wait.
            self._retry_at = time.monotonic() + next(self._backoff)
        self._hook("on_stream", "lost", error)
        self.client._rotate(self.client._endpoint())

    def _received(self, batch: list[types.Event]) -> None:
        if self.hooks.on_event is not None:
            now = time.time()
            for event in batch:
                self._hook("on_event", event,
                           max(0.0, now - event.fire_time_ns / 1e9))
        held, queued = self._held, self._queued
        with self._mu:
            # (The window's two generations looked up here: `in` on the
            # window would be a call per event.)
            new, old = self._done.generations()
            for event in batch:
                i = event.id
                if i in new or i in old:
                    self._acks.append(i)  # handled already
                elif i in held:
                    pass  # in hand: its lease is kept, its ack will go
                elif self._stopping:
                    self._nacks.append((i, "the worker stopped", 0))
                else:
                    held[i] = event
                    queued.append(event)
            if self._acks or self._nacks:
                self._out.notify()

    def _record(self, results: collections.deque) -> list:
        """Under _mu: records the outcomes a pool thread left in `results`
        (each event's ack or nack, the window of handled ids); returns
        them. A thread that empties the queue sends them (_run_loop); with
        events still queued it runs the next and the send loop sends (a
        burst's acks leave together)."""
        held, acks, avg = self._held, self._acks, self._avg_seconds
        out, handled, ended = [], [], 0.0
        while results:  # (only holders of _mu take from it)
            outcome = results.popleft()
            event, error, started, ended = outcome
            held.pop(event.id, None)
            avg += (ended - started - avg) / 8
            if error is None:
                handled.append(event.id)
            else:
                after = error.after if isinstance(error, Retry) else None
                text = str(error) or type(error).__name__
                self._nacks.append((event.id, text, after))
            out.append(outcome)
        self._avg_seconds = avg
        self._done.add_all(handled, ended)
        acks += handled
        if self._stopping and not self._in_hand():
            self._mu.notify_all()  # (stop() waits for none in hand)
        return out

    def _in_hand(self) -> int:
        """Under _mu: how many events pool threads took and whose outcome
        is not yet recorded (at most one more, while one is being taken)."""
        return len(self._held) - len(self._queued)

    def _call_hooks(self, outcomes: list) -> None:
        hooks = self.hooks
        for event, error, started, ended in outcomes:
            if error is None:
                if hooks.on_handled is not None:
                    self._hook("on_handled", event, ended - started)
            elif hooks.on_failed is not None:
                self._hook("on_failed", event, error, ended - started)

    def _hook(self, name: str, *args) -> None:
        hook = getattr(self.hooks, name)
        if hook is None:
            return
        try:
            hook(*args)
        except Exception:  # noqa: BLE001 (a hook's failure is its own)
            pass

    # ---- For tests and tools ----

    def running(self) -> int:
        """Events taken by handlers and not yet recorded as done."""
        with self._mu:
            return self._in_hand()

