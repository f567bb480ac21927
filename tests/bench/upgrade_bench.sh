#!/usr/bin/env bash
# The upgrade of a 1 M-timer store from the previous format against a plain
# restart of the same store: an older release's delayd (OLD) fills a store
# (4 namespaces x 250,000 timers, 16-byte payloads, 30 days ahead) and
# stops; then, in each round (ROUNDS, default 3), a copy is opened by this
# build (NEW): first start = the upgrade, second start = a plain restart.
# Prints, per start, the recovery time the daemon logs, the time until it
# listens, and its peak RSS (VmHWM) once listening.
#
# Usage: tests/bench/upgrade_bench.sh OLD_DELAYD NEW_DELAYD
#   (OLD: e.g. 0.1.0 built as tests/e2e/upgrade/make_store.py says)
set -euo pipefail
old=$1 new=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
pid=
trap '[ -z "$pid" ] || kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT

# Starts $1 on $2 with the log in $3; sets pid once it listens (bounded).
start() {
  "$1" --listen 127.0.0.1:0 --data-dir "$2" --fsync 1s >"$3" 2>&1 &
  pid=$!
  local deadline=$((SECONDS + 60))
  until grep -q "listening on" "$3"; do
    [ $SECONDS -lt $deadline ] || { cat "$3"; exit 1; }
    sleep 0.01  # Polls the log, bounded by the deadline.
  done
}
stop() { kill -TERM "$pid"; wait "$pid" || true; pid=; }

start "$old" "$work/store" "$work/fill.log"
port=$(grep -oE ' port [0-9]+ ' "$work/fill.log" | grep -oE '[0-9]+')
/usr/bin/python3 - "127.0.0.1:$port" "$root/client/python" <<'EOF'
import sys
sys.path.insert(0, sys.argv[2])
import delayd
c = delayd.Client(endpoints=[sys.argv[1]])
for ns in range(4):
    for start in range(0, 250_000, 1000):
        b = c.batch(namespace=f"ns{ns}")
        for i in range(start, start + 1000):
            b.set(f"key-{i:07d}", b"payload-16-bytes", delay=86400 * 30)
        b.commit()
EOF
stop

one() {  # one start of NEW on $work/copy: prints its figures
  local log=$work/start.log t0 t1 hwm
  t0=$(date +%s.%N)
  start "$new" "$work/copy" "$log"
  t1=$(date +%s.%N)
  hwm=$(grep VmHWM "/proc/$pid/status" | grep -oE '[0-9]+')
  stop
  printf '%-8s %s, recovery %s, listening after %.3f s, peak RSS %d MiB\n' \
    "$1" "$(grep -oE 'recovered [0-9]+ pending' "$log")" \
    "$(grep -oE 'in [0-9.]+ s' "$log" | head -1 | grep -oE '[0-9.]+ s')" \
    "$(echo "$t1 - $t0" | bc)" $((hwm / 1024))
  if [ "$1" = upgrade ]; then grep -q "from format 1 to 2" "$log"
  else ! grep -q "from format" "$log"; fi
}
for ((round = 1; round <= ${ROUNDS:-3}; round++)); do
  rm -rf "$work/copy" && cp -r "$work/store" "$work/copy"
  one upgrade
  one restart
done
