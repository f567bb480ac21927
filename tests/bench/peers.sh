#!/usr/bin/env bash
# A peer side by side, in one run on this machine: Redis taking pipelined
# ZADDs (a sorted set is the usual home-made delay queue) with its
# append-only file under `appendfsync everysec` and `always`, and delayd
# taking sets through Batch under `--fsync always` and `never`. Prints each
# rate and delayd's as a ratio of Redis's. Everything listens on 127.0.0.1
# only and is stopped by PID.
#
# Usage: tests/bench/peers.sh [LOAD_GEN]   (default build-bench/tests/bench/load_gen)
set -euo pipefail
cd "$(dirname "$0")/../.."
load_gen=${1:-build-bench/tests/bench/load_gen}

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

# ZADD/s with the given appendfsync policy: 16 connections, 100 pipelined.
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
  redis-benchmark -h 127.0.0.1 -p "$port" -c 16 -P 100 -n 2000000 -r 1000000 \
    -q ZADD delayed __rand_int__ member:__rand_int__ |
    grep -oE '[0-9.]+ requests per second' | grep -oE '^[0-9.]+'
  kill "$redis_pid"
  wait "$redis_pid" 2>/dev/null || true
  redis_pid=
}

delayd_rate() {
  rm -rf "$work/delayd"
  "$load_gen" --only batch --seconds 3 -- --fsync "$1" --data-dir "$work/delayd" |
    grep -oE 'batch: [0-9]+' | grep -oE '[0-9]+'
}

redis_everysec=$(redis_rate everysec)
redis_always=$(redis_rate always)
delayd_always=$(delayd_rate always)
delayd_never=$(delayd_rate never)
ratio() { /usr/bin/python3 -c "print(f'{$1 / $2:.2f}')"; }
printf 'redis ZADD, appendfsync everysec:  %10.0f/s\n' "$redis_everysec"
printf 'redis ZADD, appendfsync always:    %10.0f/s\n' "$redis_always"
printf 'delayd Batch sets, --fsync always: %10.0f/s  (%sx redis everysec, %sx redis always)\n' \
  "$delayd_always" "$(ratio "$delayd_always" "$redis_everysec")" \
  "$(ratio "$delayd_always" "$redis_always")"
printf 'delayd Batch sets, --fsync never:  %10.0f/s  (%sx redis everysec)\n' \
  "$delayd_never" "$(ratio "$delayd_never" "$redis_everysec")"
