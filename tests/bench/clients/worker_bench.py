#!/usr/bin/python3
"""The Python library's Worker against a loop written by hand over the raw
stubs, on the same daemon (DELAYD_ENDPOINT), with a handler that does
nothing. Prints one JSON line.

  throughput: N timers due at once in a paused namespace; the worker starts,
      the namespace resumes, and the clock runs until every event is
      acknowledged (the daemon's count): events per second.
  lateness: a producer process sets RATE timers a second for SECONDS, each
      due DELAY_MS after it is set; each event's lateness is when the
      handler gets it minus its fire time (p50, p99, in ms).

The hand-written loop is the one the raw API invites: read the stream,
call the handler for each event of a message, acknowledge the message's
events in one Ack, read on ("raw": Subscribe and an Ack call; "rawst": the
same on a channel that reads the stream on the loop's thread; "rawwork":
the same over a Work stream, the Ack a message on it; "rawaio": that over
grpc.aio on an asyncio loop; "rawaiopool": the same loop handing each
message's events to a pool thread). "rawlib" is not over the raw stubs:
the Subscribe loop over the library's Client (its stream and its Ack call,
as the Worker sends them), which tells the Worker's own cost from its
transport's. "library" is the Worker, "async" the AsyncWorker with a
coroutine handler.

Usage: worker_bench.py LIBRARY_DIR MODE throughput N CONCURRENCY
       worker_bench.py LIBRARY_DIR MODE lateness RATE SECONDS DELAY_MS CONCURRENCY
"""
import datetime as dt
import itertools
import json
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, sys.argv[1])
import delayd  # noqa: E402
from delayd.v1 import delayd_pb2 as pb  # noqa: E402
from delayd.v1 import delayd_pb2_grpc as pb_grpc  # noqa: E402

MODE, KIND = sys.argv[2], sys.argv[3]
ARGS = [int(a) for a in sys.argv[4:]]
NS = f"bench-{MODE}-{os.getpid()}"
client = delayd.Client()


class Raw:
    """The hand-written loop, on a thread of its own."""

    def __init__(self, handler, concurrency):
        import grpc
        self.handler = handler
        self.stub = pb_grpc.DelaydStub(
            grpc.insecure_channel(os.environ["DELAYD_ENDPOINT"]))
        self.concurrency = concurrency
        self.call = None
        self.registered = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def start(self):
        self.thread.start()

    def loop(self):
        self.call = self.stub.Subscribe(pb.SubscribeRequest(
            namespace=NS, mode=pb.SubscribeRequest.WORKER,
            max_in_flight=self.concurrency))
        try:
            for msg in self.call:
                self.registered.set()  # (the first message registers)
                for e in msg.events:
                    self.handler(e.fire_time.seconds * 10**9 + e.fire_time.nanos)
                if msg.events:
                    self.stub.Ack(pb.AckRequest(
                        namespace=NS, event_ids=[e.id for e in msg.events]))
        except Exception:  # noqa: BLE001 (the stream cancelled at stop)
            pass

    def stop(self):
        self.call.cancel()


class RawSt(Raw):
    """The Subscribe loop on a channel with grpcio's single-threaded
    unary-stream option, as the library's Worker reads: the reading thread
    takes the stream's messages itself (no gRPC thread hands them over)."""

    def __init__(self, handler, concurrency):
        import grpc
        import grpc.experimental
        super().__init__(handler, concurrency)
        self.stub = pb_grpc.DelaydStub(grpc.insecure_channel(
            os.environ["DELAYD_ENDPOINT"], options=[(
                grpc.experimental.ChannelOptions.SingleThreadedUnaryStream,
                1)]))


class RawLib(Raw):
    """The Subscribe loop over the library's Client: its stream (read on
    the loop's thread) and the Ack call the Worker sends while acks are
    quick, without the Worker."""

    def loop(self):
        c = delayd.Client()
        self.call = c.subscribe(namespace=NS, max_in_flight=self.concurrency,
                                on_registered=self.registered.set)
        try:
            for batch in self.call.batches():
                for e in batch:
                    self.handler(e.fire_time_ns)
                c._ack_once([e.id for e in batch], NS)
        except Exception:  # noqa: BLE001 (the stream cancelled at stop)
            pass


class RawWork(Raw):
    """The same loop over a Work stream: its acks are messages on it,
    handed to grpcio's request iterator (a queue)."""

    def loop(self):
        import queue
        requests = queue.SimpleQueue()
        requests.put(pb.WorkRequest(subscribe=pb.SubscribeRequest(
            namespace=NS, mode=pb.SubscribeRequest.WORKER,
            max_in_flight=self.concurrency)))
        self.call = self.stub.Work(iter(requests.get, None))
        try:
            for msg in self.call:
                self.registered.set()  # (the first message registers)
                for e in msg.events:
                    self.handler(e.fire_time.seconds * 10**9 + e.fire_time.nanos)
                if msg.events:
                    requests.put(pb.WorkRequest(ack=pb.AckRequest(
                        namespace=NS, event_ids=[e.id for e in msg.events])))
        except Exception:  # noqa: BLE001 (the stream cancelled at stop)
            pass
        requests.put(None)


class RawAio(Raw):
    """The same loop over a Work stream with grpc.aio, on an asyncio loop
    of its own thread: the handler runs on the loop, and the Ack is
    written from it (no thread between a message and its ack)."""

    def loop(self):
        import asyncio
        self.aloop = asyncio.new_event_loop()
        try:
            self.aloop.run_until_complete(self.run())
        except BaseException:  # noqa: BLE001 (the stream cancelled at stop)
            pass

    async def open(self):
        """Opens the Work stream (self.call) and subscribes."""
        import grpc
        stub = pb_grpc.DelaydStub(grpc.aio.insecure_channel(
            os.environ["DELAYD_ENDPOINT"]))
        self.call = stub.Work()
        await self.call.write(pb.WorkRequest(subscribe=pb.SubscribeRequest(
            namespace=NS, mode=pb.SubscribeRequest.WORKER,
            max_in_flight=self.concurrency)))

    async def run(self):
        await self.open()
        async for msg in self.call:
            self.registered.set()  # (the first message registers)
            for e in msg.events:
                self.handler(e.fire_time.seconds * 10**9 + e.fire_time.nanos)
            if msg.events:
                await self.call.write(pb.WorkRequest(ack=pb.AckRequest(
                    namespace=NS, event_ids=[e.id for e in msg.events])))

    def stop(self):
        self.aloop.call_soon_threadsafe(self.call.cancel)


class RawAioPool(RawAio):
    """The aio loop reads and writes the stream; each message's events run
    on a pool thread (the shape a threaded worker on grpc.aio would have:
    a hand-over to the pool and back per message)."""

    async def run(self):
        import asyncio
        import concurrent.futures
        pool = concurrent.futures.ThreadPoolExecutor(self.concurrency)

        def run_batch(events):
            for e in events:
                self.handler(e.fire_time.seconds * 10**9 + e.fire_time.nanos)

        await self.open()
        loop, writing = asyncio.get_running_loop(), asyncio.Lock()

        async def handle(events):
            await loop.run_in_executor(pool, run_batch, events)
            async with writing:  # (one write at a time)
                await self.call.write(pb.WorkRequest(ack=pb.AckRequest(
                    namespace=NS, event_ids=[e.id for e in events])))
        async for msg in self.call:
            self.registered.set()
            if msg.events:
                loop.create_task(handle(list(msg.events)))


class Async:
    """The library's AsyncWorker, on an asyncio loop of its own thread,
    with a coroutine handler."""

    def __init__(self, handler, concurrency):
        import asyncio
        self.registered = threading.Event()
        self.aloop = asyncio.new_event_loop()

        async def handle(e):
            handler(e.fire_time_ns)

        async def make():
            return delayd.AsyncWorker(
                NS, handle, concurrency=concurrency, hooks=delayd.Hooks(
                    on_stream=lambda state, _: state == "connected"
                    and self.registered.set()))
        self.worker = self.aloop.run_until_complete(make())
        self.thread = threading.Thread(target=lambda: self.aloop
                                       .run_until_complete(self.worker.run(
                                           install_signal_handlers=False)),
                                       daemon=True)

    def start(self):
        self.thread.start()

    def stop(self):
        import asyncio
        asyncio.run_coroutine_threadsafe(self.worker.stop(),
                                         self.aloop).result(30)


def worker(handler, concurrency):
    """A started worker whose stream is registered."""
    shapes = {"raw": Raw, "rawst": RawSt, "rawlib": RawLib,
              "rawwork": RawWork, "rawaio": RawAio,
              "rawaiopool": RawAioPool, "async": Async}
    if MODE in shapes:
        w = shapes[MODE](handler, concurrency)
        registered = w.registered
    else:
        # (A client of its own, as each raw loop has its own channel: the
        # bench's own calls do not share the worker's.)
        registered = threading.Event()
        w = delayd.Worker(
            NS, lambda e: handler(e.fire_time_ns), concurrency=concurrency,
            hooks=delayd.Hooks(
                on_stream=lambda state, _: state == "connected"
                and registered.set()))
    w.start()
    if not registered.wait(10):
        raise SystemExit(f"{MODE}: the stream did not register")
    return w


def tasks():
    """Per thread of this process: (name, CPU seconds, voluntary and
    involuntary context switches), read from /proc (Python's threads by
    their names, gRPC's by the kernel's)."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                stat = f.read()
            with open(f"/proc/self/task/{tid}/status") as f:
                status = dict(line.split(":\t", 1) for line in f
                              if ":\t" in line)
        except OSError:
            continue  # (ended meanwhile)
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(tid)] = (names.get(int(tid), comm),
                         (int(fields[11]) + int(fields[12])) / tick,
                         int(status["voluntary_ctxt_switches"]),
                         int(status["nonvoluntary_ctxt_switches"]))
    return out


def task_report(before, after, n):
    """THREADS=1: each thread's share of the run, per event (CPU in µs,
    context switches), on stderr."""
    for tid, (name, cpu, vol, invol) in sorted(after.items()):
        _, cpu0, vol0, invol0 = before.get(tid, (name, 0, 0, 0))
        if cpu - cpu0 or vol - vol0 or invol - invol0:
            print(f"  {name:28} cpu {(cpu - cpu0) / n * 1e6:6.2f} us/event"
                  f"  switches {(vol - vol0) / n:6.3f} voluntary"
                  f" {(invol - invol0) / n:6.3f} involuntary /event",
                  file=sys.stderr)


def acked():
    return client.stats(namespace=NS).namespaces[0].events_acked


def wait_acked(n, timeout):
    deadline = time.monotonic() + timeout
    while acked() < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"{MODE}: {acked()} of {n} acknowledged")
        time.sleep(0.002)  # (polls the daemon's count, bounded)


def throughput(n, concurrency):
    client.set_policy(namespace=NS, paused=True)
    for start in range(0, n, 1000):
        b = client.batch(namespace=NS)
        for i in range(start, min(n, start + 1000)):
            b.set(f"k{i}", b"", delay=0)
        b.commit()
    # Every handler has run once the count reaches n (no call meanwhile:
    # Stats polled through the whole run take the interpreter from the
    # worker); then Stats says when all are acknowledged. (next() on a
    # count is one step under the interpreter's lock.)
    count, ran = itertools.count(1), threading.Event()

    def handler(_fire_ns):
        if next(count) == n:
            ran.set()

    w = worker(handler, concurrency)
    report = os.environ.get("THREADS") == "1"
    before = tasks() if report else None
    t0, cpu0 = time.monotonic(), time.process_time()
    client.set_policy(namespace=NS, paused=False)
    if not ran.wait(120):
        raise SystemExit(f"{MODE}: not every event was handled")
    if report:
        task_report(before, tasks(), n)
    # (The process's CPU, all threads, until the last handler ran: a shared
    # machine's load moves it less than the rate.)
    cpu = time.process_time() - cpu0
    wait_acked(n, 120)
    seconds = time.monotonic() - t0
    w.stop()
    return {"events": n, "seconds": seconds, "per_second": n / seconds,
            "cpu_us_per_event": cpu / n * 1e6}


def lateness(rate, seconds, delay_ms, concurrency):
    late = []

    def handler(fire_ns):
        late.append((time.time_ns() - fire_ns) / 1e6)

    w = worker(handler, concurrency)
    n = rate * seconds
    subprocess.check_call([sys.executable, __file__, sys.argv[1], "produce",
                           NS, str(rate), str(seconds), str(delay_ms)])
    wait_acked(n, 60)
    w.stop()
    late.sort()
    pick = lambda q: late[min(len(late) - 1, int(q * len(late)))]  # noqa: E731
    return {"events": len(late), "p50_ms": pick(0.5), "p99_ms": pick(0.99)}


def produce(ns, rate, seconds, delay_ms):
    """Sets `rate` timers a second in batches every 10 ms, each due
    `delay_ms` after the instant it stands for."""
    per_tick = rate // 100
    t0 = time.time_ns()
    for tick in range(seconds * 100):
        due = t0 + tick * 10_000_000
        wait = (due - time.time_ns()) / 1e9
        if wait > 0:
            time.sleep(wait)  # the load's pace
        b = client.batch(namespace=ns)
        for i in range(per_tick):
            at = due + delay_ms * 1_000_000 + i * 10_000_000 // per_tick
            b.set(f"t{tick}-{i}", b"", at=dt.datetime.fromtimestamp(
                at / 1e9, dt.timezone.utc))
        b.commit()


if MODE == "produce":
    produce(sys.argv[3], *[int(a) for a in sys.argv[4:]])
    sys.exit(0)
client.set_timer("~anchor", delay=3600, namespace=NS)
result = throughput(*ARGS) if KIND == "throughput" else lateness(*ARGS)
print(json.dumps({"mode": MODE, "kind": KIND, **result}))
client.close()
