"""What the Python library's tests share: the library's path and the
.proto root from the command line (each test script takes PROTO_ROOT
LIBRARY_DIR first; importing this module takes them off sys.argv and puts
the library on the path), bounded waits for a condition, and a fixture with
a client and a namespace of its own. The daemon is the one
run_with_delayd.sh started (DELAYD_* name it).
"""
import asyncio
import inspect
import os
import sys
import time
import unittest

PROTO_ROOT, LIBRARY = sys.argv[1], sys.argv[2]
sys.path.insert(0, LIBRARY)
del sys.argv[1:3]

import delayd  # noqa: E402


def eventually(cond, timeout=10.0, what="a condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.01)  # (polls a condition, bounded)
    raise AssertionError(f"timed out waiting for {what}")


async def until(cond, timeout=10.0, what="a condition"):
    """eventually() for a test on an event loop: polls without blocking it.
    `cond` may return an awaitable (a call to the daemon), awaited."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        met = cond()
        if inspect.isawaitable(met):
            met = await met
        if met:
            return
        await asyncio.sleep(0.01)  # (polls a condition, bounded)
    raise AssertionError(f"timed out waiting for {what}")


async def set_due(c, ns, keys):
    """Sets a timer due now on each key, in one Batch."""
    b = c.batch(namespace=ns)
    for key in keys:
        b.set(key, b"", delay=0)
    await b.commit()


class Fixture(unittest.TestCase):
    counter = 0

    def setUp(self):
        Fixture.counter += 1
        self.ns = f"py-{os.getpid()}-{Fixture.counter}"
        self.client = delayd.Client(timeout=10.0)
        # A far timer keeps the namespace (and its figures) when nothing
        # else does.
        self.client.set_timer("~anchor", delay=3600, namespace=self.ns)

    def tearDown(self):
        self.client.close()


def readme_example() -> str:
    """The worker example of the library's README, as written."""
    with open(os.path.join(LIBRARY, "README.md")) as f:
        text = f.read()
    start = text.index("```python\n", text.index("## A worker")) + 10
    return text[start:text.index("```", start)]
