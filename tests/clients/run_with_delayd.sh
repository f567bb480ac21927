#!/usr/bin/env bash
# Starts the real delayd on 127.0.0.1 (OS-picked port, fresh data directory),
# runs a client test command against it with DELAYD_ENDPOINT set, stops
# delayd, and exits with the command's status.
# Usage: run_with_delayd.sh DELAYD COMMAND [ARGS...]
set -uo pipefail
delayd=$1
shift
work=$(mktemp -d)
daemon_pid=
cleanup() {
  if [ -n "$daemon_pid" ]; then
    kill "$daemon_pid" 2>/dev/null
    wait "$daemon_pid" 2>/dev/null
  fi
  rm -rf "$work"
}
trap cleanup EXIT

"$delayd" --listen 127.0.0.1:0 --data-dir "$work/data" >"$work/delayd.log" 2>&1 &
daemon_pid=$!
deadline=$((SECONDS + 20))
port=
while [ -z "$port" ]; do
  port=$(grep -oE ' port [0-9]+ ' "$work/delayd.log" | grep -oE '[0-9]+')
  if [ -z "$port" ]; then
    if [ $SECONDS -ge $deadline ] || ! kill -0 "$daemon_pid" 2>/dev/null; then
      echo "delayd did not start:" >&2
      cat "$work/delayd.log" >&2
      exit 1
    fi
    sleep 0.05  # Polls the log for the port, bounded by the deadline.
  fi
done
export DELAYD_ENDPOINT=127.0.0.1:$port
"$@"
status=$?
if [ $status -ne 0 ]; then
  echo "--- delayd log ---" >&2
  cat "$work/delayd.log" >&2
fi
exit $status
