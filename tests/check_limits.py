#!/usr/bin/python3
"""Fails unless every test ctest knows in a build has a time limit (its
TIMEOUT property) of at most 300 s.

A test without one that hangs holds the whole run until CI's own limit,
and CI's watchdog (.ci/run) takes a test still running at 360 s for one
ctest failed to end: a limit above 300 s would be cut short by it.

Usage: check_limits.py CTEST BUILD_DIR
"""
import json
import subprocess
import sys

LIMIT = 300


def main() -> int:
    ctest, build = sys.argv[1], sys.argv[2]
    shown = subprocess.run([ctest, "--test-dir", build, "--show-only=json-v1"],
                           check=True, capture_output=True, text=True)
    tests = json.loads(shown.stdout)["tests"]
    bad = []
    for test in tests:
        limits = [p["value"] for p in test.get("properties", [])
                  if p["name"] == "TIMEOUT"]
        if not limits or not 0 < limits[0] <= LIMIT:
            bad.append(f"{test['name']}: {limits[0] if limits else 'none'}")
    if len(tests) < 100:  # (not vacuous: the build registers hundreds)
        print(f"only {len(tests)} tests found in {build}")
        return 1
    for line in bad:
        print(f"no limit of at most {LIMIT} s: {line}")
    print(f"{len(tests) - len(bad)} of {len(tests)} tests have a limit")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
