#!/usr/bin/python3
"""A rolling upgrade of a three-node cluster under load: nodes of the
previous release (OLD) on one PostgreSQL the test starts are replaced one by
one by this build's (NEW), each stopped with SIGTERM and started again on
its port, while timers are set and a Worker handles them.

Checked: every timer whose set was acknowledged reaches the handler with
the version the set answered (none lost, none early, none of another
version); timers set before the upgrade and due after it are still there,
unchanged; while an older node is live, a new node refuses a policy that
older nodes could not read (FAILED_PRECONDITION naming them) and
ClusterStatus shows each node's release; once the last older node has
left, the cluster's level is raised (the schema's contract applied), that
policy is taken, and the older release is refused at start.

Usage: rolling_upgrade_test.py OLD_DIR NEW_DELAYD LIBRARY_DIR
(OLD_DIR: what build_release.sh made; exit 77, skipped, if it could not.)
"""
import datetime as dt
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

old_dir, new_delayd, library = sys.argv[1:4]
old_delayd = os.path.join(old_dir, "delayd")
if not os.path.exists(old_delayd):
    with open(os.path.join(old_dir, "unavailable")) as f:
        print("skipped: the previous release could not be built:", f.read())
    sys.exit(77)
sys.path.insert(0, library)
import delayd  # noqa: E402

BINDIR = os.environ.get("DELAYD_PG_BINDIR", "/usr/lib/postgresql/15/bin")
TOKEN = "rolling-upgrade-token-0123456789"
work = tempfile.mkdtemp()
procs: list = []


def wait_for(what, done, timeout):
    """Polls `done` every 20 ms until it is true, for at most `timeout` s."""
    end = time.monotonic() + timeout
    while not done():
        if time.monotonic() > end:
            raise AssertionError(f"not within {timeout} s: {what}")
        time.sleep(0.02)  # (polls a condition, bounded)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_postgres() -> str:
    pg_dir = os.path.join(work, "pg")
    as_pg = []
    if os.getuid() == 0:
        shutil.chown(work, "postgres")
        as_pg = ["runuser", "-u", "postgres", "--"]
    subprocess.run(as_pg + [f"{BINDIR}/initdb", "-D", pg_dir, "-A", "trust",
                            "-U", "delayd"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    port = free_port()
    log = open(os.path.join(work, "pg.log"), "w")
    procs.append(subprocess.Popen(
        as_pg + [f"{BINDIR}/postgres", "-D", pg_dir, "-p", str(port), "-k",
                 work, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"],
        stdout=log, stderr=log))
    wait_for("PostgreSQL ready", lambda: subprocess.run(
        [f"{BINDIR}/pg_isready", "-h", "127.0.0.1", "-p", str(port), "-q"]
    ).returncode == 0, 20)
    subprocess.run([f"{BINDIR}/createdb", "-h", "127.0.0.1", "-p", str(port),
                    "-U", "delayd", "delayd"], check=True)
    return f"postgresql://delayd@127.0.0.1:{port}/delayd"


def sql(url: str, query: str) -> str:
    return subprocess.run([f"{BINDIR}/psql", url, "-tAc", query],
                          capture_output=True, text=True,
                          check=True).stdout.strip()


class Node:
    def __init__(self, name: str, port: int, url: str):
        self.name, self.port, self.url = name, port, url
        self.proc = None
        self.log = os.path.join(work, f"{name}.log")

    def start(self, binary: str):
        out = open(self.log, "a")
        self.proc = subprocess.Popen(
            [binary, "--store", self.url, "--node-id", self.name,
             "--advertise", f"127.0.0.1:{self.port}", "--listen",
             f"127.0.0.1:{self.port}", "--cluster-token-file",
             os.path.join(work, "token"), "--lease-ttl", "1s",
             "--shutdown-grace", "2s"], stdout=out, stderr=out)
        procs.append(self.proc)

    def owns(self) -> int:
        """Partitions it owns now (0 before the schema exists)."""
        out = subprocess.run(
            [f"{BINDIR}/psql", self.url, "-tAc",
             "SELECT count(*) FROM delayd_leases WHERE "
             f"owner = '{self.name}' AND expires_at > now()"],
            capture_output=True, text=True)
        return int(out.stdout) if out.returncode == 0 else 0

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=30)
        assert self.proc.returncode == 0, \
            f"{self.name} exited {self.proc.returncode}"


def main():
    url = start_postgres()
    with open(os.path.join(work, "token"), "w") as f:
        f.write(TOKEN + "\n")
    nodes = [Node(f"n{i}", free_port(), url) for i in range(3)]
    for n in nodes:
        n.start(old_delayd)
    wait_for("every old node owns partitions",
             lambda: all(n.owns() > 0 for n in nodes), 30)
    endpoints = ",".join(f"127.0.0.1:{n.port}" for n in nodes)
    client = delayd.Client(endpoints=endpoints, timeout=5.0)

    # Timers due long after the upgrade: still there after it, unchanged.
    far = {f"far-{i}": client.set_timer(f"far-{i}", b"far", delay=600,
                                        namespace="jobs").version
           for i in range(100)}

    lock = threading.Lock()
    acked: dict = {}  # key -> version its set answered
    handled: dict = {}  # key -> versions handled
    early = []

    def handle(event):
        if time.time_ns() < event.fire_time_ns:
            early.append(event.key)
        with lock:
            handled.setdefault(event.key, []).append(event.version)

    worker = delayd.Worker("jobs", handle, concurrency=8, ack_timeout=2.0,
                           client=delayd.Client(endpoints=endpoints,
                                                timeout=5.0))
    worker.start()
    stop = threading.Event()

    def produce():
        i = 0
        while not stop.is_set():
            key = f"job-{i}"
            i += 1
            try:
                r = client.set_timer(key, b"x", delay=0.4, namespace="jobs")
                with lock:
                    acked[key] = r.version
            except delayd.DelaydError:
                pass  # unanswered after its retries: may or may not exist
            time.sleep(0.005)  # the load's pace

    moves = [0]
    wrong = []  # conditional calls answered wrongly
    died = []  # what stopped the mover

    def version_of(key):
        """The pending timer's version, read until a node answers."""
        end = time.monotonic() + 20
        while True:
            try:
                return client.get_timer(key, namespace="jobs").version
            except (delayd.Unavailable, delayd.DeadlineExceeded):
                if time.monotonic() > end:
                    raise
                time.sleep(0.05)  # (retries a read, bounded)

    def move():
        """Compare-and-set moves of the far timers (this thread is their
        only writer): ABORTED would be a wrong answer. An error no caller
        should see stops it, named."""
        try:
            move_on()
        except Exception as e:  # noqa: BLE001 (reported by the checks)
            died.append(repr(e))

    def move_on():
        while not stop.is_set():
            for key in far:
                try:
                    far[key] = client.move_timer(
                        key, delay=600, namespace="jobs",
                        expected_version=far[key]).version
                    moves[0] += 1
                except delayd.Aborted as e:
                    wrong.append(f"{key}: {e}")
                except (delayd.OutcomeUnknown, delayd.Unavailable,
                        delayd.DeadlineExceeded):
                    far[key] = version_of(key)  # applied or not: read it
                if stop.is_set():
                    break
                time.sleep(0.01)  # the moves' pace

    producer = threading.Thread(target=produce)
    producer.start()
    mover = threading.Thread(target=move)
    mover.start()
    for i, n in enumerate(nodes):
        time.sleep(1.0)  # load before each step
        n.stop()
        n.start(new_delayd)
        wait_for(f"{n.name} (new) owns partitions", lambda: n.owns() > 0, 30)
        if i == 0:
            check_mixed(n, nodes[1:])
    wait_for("the cluster's level raised",
             lambda: sql(url, "SELECT cluster_level FROM delayd_schema")
             == "2", 10)
    time.sleep(1.0)  # load after the last step
    stop.set()
    producer.join()
    mover.join()
    check_upgraded(nodes, url)

    def lost():
        with lock:
            return [k for k, v in acked.items() if v not in handled.get(k, [])]
    wait_for("every acknowledged timer handled", lambda: not lost(), 60)
    worker.stop()
    with lock:
        repeats = sum(len(v) - 1 for v in handled.values())
        # (A lower version is a set whose answer was lost, sent again.)
        other = [k for k, v in handled.items()
                 if k in acked and any(x > acked[k] for x in v)]
    print(f"{len(acked)} timers acknowledged, 0 lost, {repeats} handled "
          f"again, {len(early)} early, {len(other)} at a version never "
          f"answered; {moves[0]} compare-and-set moves, {len(wrong)} "
          "answered wrongly")
    assert len(acked) > 300, "the load was too small"
    assert not died, f"the mover stopped on {died[0]}"
    assert moves[0] > 100, "too few moves"
    assert not wrong, wrong[:10]
    assert not early, f"early: {early[:10]}"
    assert not other, f"handled at a version no set answered: {other[:10]}"
    assert repeats <= 48, f"{repeats} repeats"
    for key, version in far.items():
        t = client.get_timer(key, namespace="jobs")
        assert t.version == version and t.payload == b"far", (key, t)


def check_mixed(new, olds):
    """One node runs the new release, two the old one."""
    only_new = delayd.Client(endpoints=f"127.0.0.1:{new.port}", timeout=5.0)
    status = only_new.cluster_status()
    releases = {n.node: n.release for n in status.nodes if n.live}
    assert releases == {new.name: delayd.__version__,
                        olds[0].name: "", olds[1].name: ""}, releases
    assert status.cluster_level == 1, status.cluster_level
    try:
        only_new.set_policy(namespace="mails",
                            dedup_window=dt.timedelta(minutes=5))
        raise AssertionError("a dedup window was taken beside older nodes")
    except delayd.FailedPrecondition as e:
        assert "still older: n1 (0.1), n2 (0.1)" in str(e), str(e)
        print("beside older nodes, refused:", e)


def check_upgraded(nodes, url):
    """Every node runs the new release: the level is 2, the schema's
    contract applied, and the old release is refused."""
    assert sql(url, "SELECT version FROM delayd_schema") == "4"
    only_new = delayd.Client(endpoints=f"127.0.0.1:{nodes[0].port}",
                             timeout=5.0)
    wait_for("node n0 read the level",
             lambda: only_new.cluster_status().cluster_level == 2, 10)
    p = only_new.set_policy(namespace="mails",
                            dedup_window=dt.timedelta(minutes=5))
    assert p.dedup_window == dt.timedelta(minutes=5), p
    late = Node("n3", free_port(), url)
    late.start(old_delayd)
    late.proc.wait(timeout=30)
    with open(late.log) as f:
        said = f.read()
    assert late.proc.returncode != 0 and "newer than this delayd knows" in \
        said, said
    # A heartbeat written as the old release writes it (a process that
    # passed its start before the level was raised) is refused.
    out = subprocess.run(
        [f"{BINDIR}/psql", url, "-tAc",
         "INSERT INTO delayd_nodes (node, advertise, heartbeat_at, "
         "started_at) VALUES ('n4', '127.0.0.1:1', now(), now())"],
        capture_output=True, text=True)
    assert out.returncode != 0 and "older than this cluster admits" in \
        out.stderr, out.stderr


try:
    main()
    print("rolling upgrade: passed")
finally:
    for p in reversed(procs):
        if p.poll() is None:
            p.send_signal(signal.SIGINT if p is procs[0] else signal.SIGKILL)
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
    if os.environ.get("KEEP_LOGS"):
        print("logs in", work)
    else:
        shutil.rmtree(work, ignore_errors=True)
