"""What a key remembered for a dedup window costs in memory: one in-memory
delayd, N keys set and removed in a namespace without a window, then the
same in one with an hour's window; the daemon's RSS growth of each, and the
difference per key. Run from the repository root after the build, with
Debian's Python: /usr/bin/python3 tests/bench/dedup_memory.py [N]"""

import datetime as dt
import os
import re
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.getcwd(), "client", "python"))
import delayd  # noqa: E402


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200_000
    with tempfile.TemporaryDirectory() as work:
        log_path = os.path.join(work, "delayd.log")
        with open(log_path, "w") as log:
            daemon = subprocess.Popen(
                ["build/server/delayd", "--in-memory", "--listen",
                 "127.0.0.1:0"], stdout=log, stderr=subprocess.STDOUT)
        try:
            run(daemon, log_path, n)
        finally:
            daemon.terminate()
            daemon.wait()


def run(daemon, log_path: str, n: int) -> None:
    deadline = time.monotonic() + 20
    port = None
    while port is None:
        m = re.search(r" port (\d+)", open(log_path).read())
        if m:
            port = m.group(1)
        elif time.monotonic() > deadline:
            raise SystemExit("delayd did not start: " + open(log_path).read())
        else:
            time.sleep(0.05)  # Polls the log, bounded by the deadline.

    def rss_mib() -> float:
        status = open(f"/proc/{daemon.pid}/status").read()
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1)) / 1024

    client = delayd.Client(endpoints=[f"127.0.0.1:{port}"])

    def grow(ns: str, window: bool) -> float:
        if window:
            client.set_policy(namespace=ns,
                              dedup_window=dt.timedelta(hours=1))
        before = rss_mib()
        for i in range(0, n, 1000):
            for op in ("set", "remove"):
                batch = client.batch(namespace=ns)
                for j in range(i, min(n, i + 1000)):
                    key = f"order-{j:08d}"
                    if op == "set":
                        batch.set(key, b"", delay=3600)
                    else:
                        batch.remove(key)
                batch.commit()
        return rss_mib() - before

    plain = grow("plain", False)
    windowed = grow("windowed", True)
    per_key = (windowed - plain) * 1024 * 1024 / n
    print(f"keys {n}: RSS growth without a window {plain:.1f} MiB, with "
          f"one {windowed:.1f} MiB: {per_key:.0f} bytes per remembered key")


if __name__ == "__main__":
    main()
