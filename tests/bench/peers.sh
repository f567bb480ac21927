#!/usr/bin/env bash
# Peers side by side, in one run on this machine, in alternating rounds
# (medians of ROUNDS, default 3): Redis taking ZADDs (a sorted set is the
# usual home-made delay queue) with its append-only file, and delayd:
#   - one call at a time per connection: Redis `appendfsync always`, 16
#     connections, no pipelining; delayd unary SetTimer, 64 in flight, under
#     `--fsync always`, and in memory;
#   - pipelined: Redis `appendfsync everysec`, 16 connections of 100; delayd
#     Batch (100 sets per call, 16 in flight) under `--fsync always`;
#   - delayd's lateness (delivery to the worker minus fire time): steady 2k
#     timers/s, and 100k timers due within one second, in memory and durable;
#   - moderate load: a steady 2k timers/s, 2 s ahead, one worker: the
#     daemon's CPU against redis-server's under BullMQ (npm, pinned in
#     tests/bench/node) with its append-only file, and both lateness figures;
#     and the least a gRPC server spends on that traffic (grpc_floor).
# Prints each figure and delayd's ratios. Everything listens on 127.0.0.1
# only and is stopped by PID.
#
# Usage: tests/bench/peers.sh [LOAD_GEN]   (default build-bench/tests/bench/load_gen)
set -euo pipefail
cd "$(dirname "$0")/../.."
load_gen=${1:-build-bench/tests/bench/load_gen}
grpc_floor=$(dirname "$load_gen")/grpc_floor

sudo=()
if [ "$(id -u)" -ne 0 ]; then sudo=(sudo); fi
if ! command -v redis-server >/dev/null || ! command -v redis-benchmark >/dev/null; then
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq \
    --no-install-recommends redis-server redis-tools
fi

work=$(mktemp -d)
redis_pid=
cleanup() {
  if [ -n "$redis_pid" ]; then kill "$redis_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# ZADD/s: $1 the appendfsync policy, $2 the pipeline depth; 16 connections.
redis_rate() {
  local port
  port=$(free_port)
  rm -rf "$work/redis" && mkdir -p "$work/redis"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$work/redis" \
    --appendonly yes --appendfsync "$1" --save "" >"$work/redis.log" 2>&1 &
  redis_pid=$!
  local deadline=$((SECONDS + 20))
  until redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; do
    [ $SECONDS -lt $deadline ] || { cat "$work/redis.log" >&2; exit 1; }
    sleep 0.1  # Polls for readiness, bounded by the deadline.
  done
  local n=2000000
  [ "$2" -gt 1 ] || n=200000
  redis-benchmark -h 127.0.0.1 -p "$port" -c 16 -P "$2" -n "$n" -r 1000000 \
    -q ZADD delayed __rand_int__ member:__rand_int__ |
    grep -oE '[0-9.]+ requests per second' | grep -oE '^[0-9.]+'
  kill "$redis_pid"
  wait "$redis_pid" 2>/dev/null || true
  redis_pid=
}

# CPU seconds a process has used (user + system).
cpu_seconds() {
  awk -v hz="$(getconf CLK_TCK)" '{ print ($14 + $15) / hz }' "/proc/$1/stat"
}

# BullMQ at a steady 2k jobs/s, 2 s ahead, one worker, on Redis with its
# append-only file (appendfsync everysec, Redis's default for it). Prints
# redis-server's cores over the run, then bullmq_peer.js's JSON line.
bullmq_steady() {
  local port node_dir=tests/bench/node
  [ -d "$node_dir/node_modules/bullmq" ] || npm ci --prefix "$node_dir" >&2
  port=$(free_port)
  rm -rf "$work/redis" && mkdir -p "$work/redis"
  redis-server --port "$port" --bind 127.0.0.1 --dir "$work/redis" \
    --appendonly yes --save "" >"$work/redis.log" 2>&1 &
  redis_pid=$!
  local deadline=$((SECONDS + 20))
  until redis-cli -h 127.0.0.1 -p "$port" ping 2>/dev/null | grep -q PONG; do
    [ $SECONDS -lt $deadline ] || { cat "$work/redis.log" >&2; exit 1; }
    sleep 0.1  # Polls for readiness, bounded by the deadline.
  done
  local c0 t0 out c1 t1
  c0=$(cpu_seconds "$redis_pid")
  t0=$(date +%s.%N)
  out=$(node "$node_dir/bullmq_peer.js" "$port" 2000 "$steady_seconds" 2000)
  c1=$(cpu_seconds "$redis_pid")
  t1=$(date +%s.%N)
  kill "$redis_pid"
  wait "$redis_pid" 2>/dev/null || true
  redis_pid=
  echo "$(/usr/bin/python3 -c "print(($c1 - $c0) / ($t1 - $t0))") $out"
}
steady_seconds=${STEADY_SECONDS:-10}

# load_gen against a fresh daemon: $1 the section, then the daemon's flags.
delayd_run() {
  local only=$1
  shift
  rm -rf "$work/delayd"
  "$load_gen" --only "$only" --seconds 5 -- "$@"
}
durable=(--fsync always --data-dir "$work/delayd")

rounds=${ROUNDS:-3}
declare -A fig
add() { fig[$1]+="$2 "; }
for ((round = 1; round <= rounds; round++)); do
  add redis_always "$(redis_rate always 1)"
  add unary_always "$(delayd_run unary "${durable[@]}" | grep -oE 'SetTimer [0-9]+' | grep -oE '[0-9]+')"
  add unary_memory "$(delayd_run unary --in-memory | grep -oE 'SetTimer [0-9]+' | grep -oE '[0-9]+')"
  add redis_everysec "$(redis_rate everysec 100)"
  add batch_always "$(delayd_run batch "${durable[@]}" | grep -oE '^batch: [0-9]+ items/s \(100 per call, 16' | grep -oE '[0-9]+' | head -1)"
  for mode in memory always; do
    if [ $mode = memory ]; then args=(--in-memory); else args=("${durable[@]}"); fi
    out=$(delayd_run lateness "${args[@]}")
    add "steady_p50_$mode" "$(grep -oE 'steady 2k/s .* p50 [0-9.]+' <<<"$out" | grep -oE '[0-9.]+$')"
    add "steady_p99_$mode" "$(grep -oE 'steady 2k/s .* p99 [0-9.]+' <<<"$out" | grep -oE '[0-9.]+$')"
    add "burst_p99_$mode" "$(grep -oE 'burst 100k in 1 s: .* p99 [0-9.]+' <<<"$out" | grep -oE '[0-9.]+$')"
  done
  # Moderate load: CPU at a steady 2k timers/s, 2 s ahead, side by side with
  # BullMQ; delayd durable under its default (--fsync always) and under
  # --fsync 1s (what appendfsync everysec promises).
  read -r cores json <<<"$(bullmq_steady)"
  add redis_cores_bullmq "$cores"
  add bullmq_p50 "$(grep -oE '"p50_ms":[0-9.]+' <<<"$json" | grep -oE '[0-9.]+$')"
  add bullmq_p99 "$(grep -oE '"p99_ms":[0-9.]+' <<<"$json" | grep -oE '[0-9.]+$')"
  add bullmq_node_cores "$(grep -oE '"node_cores":[0-9.]+' <<<"$json" | grep -oE '[0-9.]+$')"
  # The least any gRPC server spends on that traffic here (grpc_floor: one
  # completion-queue thread, nothing but the calls, the events and their
  # timing).
  # timer-1+log: the same, each set's record appended and synced first.
  floor=$("$grpc_floor" --timer-only --rounds 1 --seconds "$steady_seconds")
  add grpc_floor_cores "$(grep -oE '[0-9.]+ cores' <<<"$floor" | grep -oE '^[0-9.]+')"
  add grpc_floor_synced_cores "$(grep -oE '[0-9.]+ synced cores' <<<"$floor" | grep -oE '^[0-9.]+')"
  for fsync in always 1s; do
    rm -rf "$work/delayd"
    out=$("$load_gen" --only steady --seconds "$steady_seconds" \
      --steady-delay-ms 2000 -- --fsync "$fsync" --data-dir "$work/delayd")
    add "delayd_cores_$fsync" "$(grep -oE 'daemon CPU [0-9.]+' <<<"$out" | grep -oE '[0-9.]+$')"
    add "steady2s_p50_$fsync" "$(grep -oE 'steady 2k/s .* p50 [0-9.]+' <<<"$out" | grep -oE '[0-9.]+$')"
    add "steady2s_p99_$fsync" "$(grep -oE 'steady 2k/s .* p99 [0-9.]+' <<<"$out" | grep -oE '[0-9.]+$')"
  done
  echo "round $round: ${fig[*]}" >&2
done

# Median and range of each figure, and the ratios of the medians.
{
  for k in "${!fig[@]}"; do echo "$k ${fig[$k]}"; done
} | /usr/bin/python3 -c '
import statistics, sys
f = {}
for line in sys.stdin:
    k, *v = line.split()
    f[k] = [float(x) for x in v]
m = {k: statistics.median(v) for k, v in f.items()}
n = len(next(iter(f.values())))
print("medians of %d alternating rounds (range in brackets):" % n)
rates = ["redis_always", "unary_always", "unary_memory", "redis_everysec",
         "batch_always"]
cores = sorted(k for k in f if "cores" in k)
for k in rates + sorted(k for k in f if "_p" in k) + cores:
    unit = "/s" if k in rates else "cores" if k in cores else "ms"
    print("  %-18s %12.3f %s  [%.3f .. %.3f]" % (k, m[k], unit, min(f[k]), max(f[k])))
def ratio(what, a, b):
    r = [x / y for x, y in zip(f[a], f[b])]
    print("%-40s %.2fx  [%.2f .. %.2f per round]" % (what, m[a] / m[b], min(r), max(r)))
ratio("unary --fsync always / Redis always", "unary_always", "redis_always")
ratio("unary --fsync always / delayd in memory", "unary_always", "unary_memory")
ratio("Batch --fsync always / Redis everysec", "batch_always", "redis_everysec")
ratio("2k/s CPU: delayd always / redis (BullMQ)", "delayd_cores_always", "redis_cores_bullmq")
ratio("2k/s CPU: delayd 1s / redis (BullMQ)", "delayd_cores_1s", "redis_cores_bullmq")
ratio("2k/s CPU: gRPC floor / redis (BullMQ)", "grpc_floor_cores", "redis_cores_bullmq")
ratio("2k/s CPU: delayd always / gRPC floor", "delayd_cores_always", "grpc_floor_cores")
ratio("2k/s CPU: delayd 1s / gRPC floor", "delayd_cores_1s", "grpc_floor_cores")
ratio("2k/s CPU: delayd always / floor, synced", "delayd_cores_always", "grpc_floor_synced_cores")
'
