#!/usr/bin/python3
"""Push delivery on a three-node cluster (run_with_cluster.sh, nodes
allowed to push to 127.0.0.1): under a steady load of timers whose target
is a receiver here, one node is killed (kill -9) and another stopped
(SIGTERM). Every timer whose set was acknowledged reaches the receiver
(none lost), none before its fire time, every repeat of a timer version
carries the same webhook-id (a set retried after its answer was lost makes
a second version, which is a second event), every request is signed (checked with hmac, not
delayd's code), and repeats stay within what could be in flight at the two
faults.

Usage: cluster_push_test.py LIBRARY_DIR   (DELAYD_ENDPOINT: the nodes)
"""
import base64
import hashlib
import hmac
import http.server
import os
import sys
import threading
import time
import urllib.parse
from datetime import datetime

sys.path.insert(0, sys.argv[1])
import delayd  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cluster_load  # noqa: E402

SECRET = "whsec_" + base64.b64encode(bytes(range(32))).decode()
KEY = bytes(range(32))
IN_FLIGHT = 8
client = delayd.Client(timeout=5.0)
lock = threading.Lock()
ids: dict[tuple[str, str], set[str]] = {}  # (key, version) -> webhook-ids
runs: dict[str, int] = {}
problems: list[str] = []


class Receiver(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers["content-length"]))
        h = self.headers
        signed = f"{h['webhook-id']}.{h['webhook-timestamp']}.".encode() + body
        want = "v1," + base64.b64encode(
            hmac.new(KEY, signed, hashlib.sha256).digest()).decode()
        key = urllib.parse.unquote(h["delayd-key"])
        fire = datetime.fromisoformat(h["delayd-fire-time"].replace("Z", "+00:00"))
        with lock:
            if want not in h["webhook-signature"].split(" "):
                problems.append(f"{key}: bad signature")
            if time.time() < fire.timestamp():
                problems.append(f"{key}: early")
            ids.setdefault((key, h["delayd-version"]), set()).add(
                h["webhook-id"])
            runs[key] = runs.get(key, 0) + 1
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
threading.Thread(target=server.serve_forever, daemon=True).start()
client.set_policy(namespace="hooks", push={
    "url": f"http://127.0.0.1:{server.server_address[1]}/hook",
    "secrets": [SECRET], "max_in_flight": IN_FLIGHT, "timeout": 2.0})

acked = cluster_load.load_through_faults(client, "hooks", b"{}",
                                         delayd.DelaydError)

deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    with lock:
        missing = [k for k in acked if k not in runs]
    if not missing:
        break
    time.sleep(0.05)  # polls the receiver's record, bounded
server.shutdown()

repeats = sum(n - 1 for n in runs.values())
versions = {}
for key, version in ids:
    versions[key] = versions.get(key, 0) + 1
print(f"{len(acked)} timers acknowledged, {len(runs)} delivered, "
      f"{repeats} repeats, {len(missing)} missing; "
      f"{sum(1 for n in versions.values() if n > 1)} delivered at two "
      "versions (a set sent again after its answer was lost)")
assert not missing, f"lost: {sorted(missing)[:10]}"
assert not problems, problems[:10]
twice = {k: sorted(v) for k, v in ids.items() if len(v) > 1}
assert not twice, f"a timer version under two webhook-ids: {twice}"
# At each fault at most the in-flight requests of every node's target.
assert repeats <= 2 * 3 * IN_FLIGHT, repeats
print("cluster push: ok")
