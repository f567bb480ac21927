#!/usr/bin/env bash
# Starts the real delayd on 127.0.0.1 (OS-picked port; a fresh data
# directory, or its state in memory) serving TLS with a certificate made
# here by openssl and requiring a bearer token, runs a client test command
# against it with DELAYD_ENDPOINT, DELAYD_TLS_CA (the CA's PEM file) and
# DELAYD_TOKEN set, stops delayd, and exits with the command's status.
# Usage: [DELAYD_IN_MEMORY=1] run_with_delayd.sh DELAYD COMMAND [ARGS...]
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

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$work/ca.key" -out "$work/ca.pem" -days 2 -subj /CN=test-ca 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$work/server.key" -out "$work/server.csr" -subj /CN=localhost 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$work/ext"
openssl x509 -req -in "$work/server.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" \
  -CAcreateserial -out "$work/server.pem" -days 2 -extfile "$work/ext" 2>/dev/null
token=$(openssl rand -hex 16)
# Only the token's digest is in the file.
printf 'sha256:%s * admin\n' "$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)" >"$work/tokens"

# DELAYD_IN_MEMORY=1: the daemon keeps its state in memory instead of a
# data directory.
store=(--data-dir "$work/data")
[ "${DELAYD_IN_MEMORY:-}" != 1 ] || store=(--in-memory)
"$delayd" --listen 127.0.0.1:0 "${store[@]}" \
  --tls-cert "$work/server.pem" --tls-key "$work/server.key" \
  --auth-tokens "$work/tokens" >"$work/delayd.log" 2>&1 &
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
export DELAYD_ENDPOINT=127.0.0.1:$port DELAYD_TLS_CA=$work/ca.pem DELAYD_TOKEN=$token
"$@"
status=$?
if [ $status -ne 0 ]; then
  echo "--- delayd log ---" >&2
  cat "$work/delayd.log" >&2
fi
exit $status
