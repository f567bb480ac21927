#!/usr/bin/env bash
# Starts PostgreSQL (initdb into a temporary directory, on 127.0.0.1 with a
# port the OS picked, as the postgres user when run as root) and three
# delayd nodes of one cluster on it (leases of 1 s), runs a client test
# command with DELAYD_ENDPOINT listing the three nodes and
# DELAYD_TEST_NODE_PIDS their process ids (same order), stops whatever is
# left by PID, and exits with the command's status. The test may kill
# nodes. DELAYD_NODE_ARGS: more flags for every node (split on spaces).
# Usage: run_with_cluster.sh DELAYD COMMAND [ARGS...]
set -uo pipefail
delayd=$(realpath "$1")
shift
bindir=${DELAYD_PG_BINDIR:-/usr/lib/postgresql/15/bin}
work=$(mktemp -d)
pg_pid=
pids=()
# The postmaster's own PID (the first line of its postmaster.pid once it
# runs), else the PID started: as root that is runuser's, which does not
# pass SIGINT on, and a signal to it alone left the server running.
postmaster() {
  local p
  p=$(head -1 "$work/pg/postmaster.pid" 2>/dev/null) || true
  echo "${p:-$pg_pid}"
}
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  if [ -n "$pg_pid" ]; then
    local pm
    pm=$(postmaster)
    kill -INT "$pm" 2>/dev/null
    # Polls the server's exit, bounded (5 s).
    for _ in $(seq 100); do kill -0 "$pm" 2>/dev/null || break; sleep 0.05; done
  fi
  rm -rf "$work"
}
trap cleanup EXIT

as_pg=()
if [ "$(id -u)" -eq 0 ]; then
  chown postgres "$work"
  as_pg=(runuser -u postgres --)
fi
"${as_pg[@]}" "$bindir/initdb" -D "$work/pg" -A trust -U delayd \
  >"$work/initdb.log" 2>&1 || { cat "$work/initdb.log"; exit 1; }
port=$(/usr/bin/python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"${as_pg[@]}" "$bindir/postgres" -D "$work/pg" -p "$port" -k "$work" \
  -c listen_addresses=127.0.0.1 -c fsync=off >"$work/pg.log" 2>&1 &
pg_pid=$!
disown "$pg_pid"
for _ in $(seq 200); do
  "$bindir/pg_isready" -h 127.0.0.1 -p "$port" -q && break
  sleep 0.05  # Polls readiness, bounded (10 s).
done
"$bindir/createdb" -h 127.0.0.1 -p "$port" -U delayd delayd || exit 1
url="postgresql://delayd@127.0.0.1:$port/delayd"
printf 'client-cluster-token-0123456789\n' >"$work/cluster-token"

# start_node I [PORT]: node I in the background; waits for its port.
start_node() {
  local i=$1 listen=127.0.0.1:${2:-0}
  "$delayd" --store "$url" --node-id "n$i" --advertise 127.0.0.1:0 \
    --cluster-token-file "$work/cluster-token" --lease-ttl 1s \
    --shutdown-grace 2s --listen "$listen" ${DELAYD_NODE_ARGS:-} \
    >>"$work/node$i.log" 2>&1 &
  pids[$i]=$!
  disown "${pids[$i]}"  # (the test kills nodes: no job notices)
  local deadline=$((SECONDS + 30))
  until [ -n "$(grep -oE ' port [0-9]+ ' "$work/node$i.log" | tail -1)" ]; do
    if [ $SECONDS -ge $deadline ] || ! kill -0 "${pids[$i]}" 2>/dev/null; then
      echo "node $i did not start:" >&2
      cat "$work/node$i.log" >&2
      exit 1
    fi
    sleep 0.05  # Polls the log for the port, bounded.
  done
  ports[$i]=$(grep -oE ' port [0-9]+ ' "$work/node$i.log" | tail -1 | grep -oE '[0-9]+')
}
ports=()
for i in 0 1 2; do start_node "$i"; done
export DELAYD_ENDPOINT="127.0.0.1:${ports[0]},127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}"
export DELAYD_TEST_NODE_PIDS="${pids[0]},${pids[1]},${pids[2]}"
# Until every node holds partitions (they spread over a few lease rounds).
for _ in $(seq 400); do
  owners=$("$bindir/psql" -h 127.0.0.1 -p "$port" -U delayd -d delayd -tAc \
    "SELECT count(DISTINCT owner) FROM delayd_leases WHERE expires_at > now()")
  [ "$owners" = 3 ] && break
  sleep 0.05  # Polls the database, bounded (20 s).
done
"$@"
status=$?
if [ $status -ne 0 ]; then
  for i in 0 1 2; do echo "--- node $i ---" >&2; tail -30 "$work/node$i.log" >&2; done
fi
exit $status
