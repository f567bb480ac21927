#!/usr/bin/env bash
# Push delivery against a gRPC worker that acknowledges at once, in rounds
# (ROUNDS, default 3), each pair back to back on one daemon so that the
# ratios hold on a noisy machine (push_bench.mjs says what each run does):
#   - throughput of 20,000 events due at once, 32 in flight;
#   - lateness at 2,000 events/s for LATENESS_SECONDS (default 5), 50 ms
#     ahead, 32 in flight;
#   - push lateness, and a gRPC worker's, with and without a black-hole
#     target holding 100,000 events due on another namespace, and the
#     daemon's RSS meanwhile.
# Prints every run's JSON line, then per figure the ratio in each round and
# their range.
#
# Usage: tests/bench/clients/push_run.sh   (from the repository root, after
#        the build; builds the TypeScript library if it is not built)
set -euo pipefail
cd "$(dirname "$0")/../../.."
rounds=${ROUNDS:-3}
secs=${LATENESS_SECONDS:-5}
work=$(mktemp -d)
daemon_pid=
cleanup() {
  [ -z "$daemon_pid" ] || kill "$daemon_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
[ -f client/typescript/dist/esm/index.js ] ||
  (cd client/typescript && npm ci --ignore-scripts && npm run build) >&2

build/server/delayd --in-memory --listen 127.0.0.1:0 --push-allow 127.0.0.1 \
  --push-allow-http >"$work/delayd.log" 2>&1 &
daemon_pid=$!
deadline=$((SECONDS + 20))
until grep -qE ' port [0-9]+' "$work/delayd.log"; do
  [ $SECONDS -lt $deadline ] || { cat "$work/delayd.log" >&2; exit 1; }
  sleep 0.05  # Polls the log, bounded by the deadline.
done
export DELAYD_ENDPOINT=127.0.0.1:$(grep -oE ' port [0-9]+' "$work/delayd.log" | head -1 | grep -oE '[0-9]+')
export DELAYD_TS_LIB=$PWD/client/typescript DELAYD_PID=$daemon_pid

run() { node --expose-gc tests/bench/clients/push_bench.mjs "$@" | tee -a "$work/results"; }
for round in $(seq "$rounds"); do
  run worker throughput 20000 32
  run push throughput 20000 32
  run worker lateness 2000 "$secs" 50 32
  run push lateness 2000 "$secs" 50 32
  run push blackhole 100000 2000 "$secs" 50 32
  run worker blackhole 100000 2000 "$secs" 50 32
done

/usr/bin/python3 - "$work/results" "$rounds" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
rounds = int(sys.argv[2])
per = len(rows) // rounds
def ratio(name, a, b, field):
    r = []
    for k in range(rounds):
        got = rows[k * per:(k + 1) * per]
        x = next(g for g in got if (g["mode"], g["kind"]) == a)[field]
        y = next(g for g in got if (g["mode"], g["kind"]) == b)[field]
        r.append(x / y)
    print(f"{name}: " + ", ".join(f"{v:.2f}" for v in r) +
          f"  (range {min(r):.2f}-{max(r):.2f})")
ratio("push / worker throughput", ("push", "throughput"), ("worker", "throughput"), "per_second")
ratio("push / worker lateness p50", ("push", "lateness"), ("worker", "lateness"), "p50_ms")
ratio("push / worker lateness p99", ("push", "lateness"), ("worker", "lateness"), "p99_ms")
ratio("push lateness p99, black hole / none", ("push", "blackhole"), ("push", "lateness"), "p99_ms")
ratio("worker lateness p99, black hole / none", ("worker", "blackhole"), ("worker", "lateness"), "p99_ms")
holes = [r for r in rows if r["kind"] == "blackhole"]
print("black hole RSS start/peak/end MiB: " + ", ".join(
    f'{h["rss_start_mib"]:.0f}/{h["rss_peak_mib"]:.0f}/{h["rss_end_mib"]:.0f}' for h in holes))
PY
