#!/usr/bin/env bash
# End-to-end test of delayd's TLS, mutual TLS, tokens and certificate
# rotation, with certificates made here by openssl: who is let in and who is
# refused, and that SIGHUP switches certificates without a restart while an
# open stream keeps working; the same for the HTTP door (curl), which serves
# TLS with the same certificates. Usage: tls_test.sh DELAYD DELAYCTL
set -uo pipefail
DELAYD=$(realpath "$1")
DELAYCTL=$(realpath "$2")
work=$(mktemp -d)
daemon_pid=
watch_pid=
trap 'kill $watch_pid $daemon_pid 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
cd "$work" || exit 1

failures=0
passes=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { passes=$((passes + 1)); }
expect_code() {  # expect_code WANT CMD...
  local want=$1
  shift
  timeout 20 "$@" >out 2>err
  local got=$?
  if [ "$got" -ne "$want" ]; then
    fail "exit $got, want $want: $* (stderr: $(cat err))"
  else
    pass
  fi
}
expect_http() {  # expect_http WANT_STATUS CURL_ARGS... (000: no answer)
  local want=$1
  shift
  local got
  got=$(timeout 20 curl -s -o body -w '%{http_code}' "$@" 2>err)
  if [ "$got" != "$want" ]; then
    fail "HTTP $got, want $want: curl $* ($(cat body err 2>/dev/null))"
  else
    pass
  fi
}
expect_err() {
  if grep -qE -- "$1" err; then pass; else fail "stderr lacks /$1/: $(cat err)"; fi
}
expect_log() {  # delayd logs to stdout
  if grep -qE -- "$1" out; then pass; else fail "log lacks /$1/: $(cat out err)"; fi
}
wait_for() {  # wait_for FILE PATTERN (up to 15 s)
  local deadline=$((SECONDS + 15))
  until grep -qE -- "$2" "$1" 2>/dev/null; do
    if [ $SECONDS -ge $deadline ]; then fail "timed out waiting for /$2/ in $1: $(cat "$1")"; return 1; fi
    sleep 0.05
  done
  pass
}

# ca NAME: a self-signed CA. cert CA NAME [SAN]: a certificate signed by CA.
ca() {
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$1.key" -out "$1.pem" -days 2 -subj "/CN=$1" 2>/dev/null
}
cert() {
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
    -keyout "$2.key" -out "$2.csr" -subj "/CN=$2" 2>/dev/null
  printf 'subjectAltName=%s\n' "${3:-IP:127.0.0.1}" >"$2.ext"
  openssl x509 -req -in "$2.csr" -CA "$1.pem" -CAkey "$1.key" \
    -CAcreateserial -out "$2.pem" -days 2 -extfile "$2.ext" 2>/dev/null
}
ca ca1
ca ca2
ca clientca
ca rogueca
cert ca1 server1
cert ca2 server2
cert clientca client
cert rogueca rogue
printf 'writer-token default write,read\nadmin-token * admin\n' >tokens

start() {  # start ARGS...: delayd with ARGS; sets C (delayctl with endpoint)
  # and H (the HTTP door's https:// address)
  # Emptied here, not by the background job's redirection: that may run
  # after wait_for has read the previous daemon's log.
  : >delayd.log
  "$DELAYD" --in-memory --listen 127.0.0.1:0 --http-listen 127.0.0.1:0 "$@" \
    >>delayd.log 2>&1 &
  daemon_pid=$!
  wait_for delayd.log "HTTP/JSON API on .*port [0-9]+," || exit 1
  local port
  port=$(grep -oE ' port [0-9]+ ' delayd.log | grep -oE '[0-9]+')
  C=("$DELAYCTL" --endpoint "127.0.0.1:$port" --timeout 3s)
  port=$(grep -oE 'HTTP/JSON API on .*\(port [0-9]+' delayd.log | grep -oE '[0-9]+$')
  H="https://127.0.0.1:$port"
  grep -q "HTTP/JSON API on https://" delayd.log && pass ||
    fail "the HTTP door is not on TLS: $(cat delayd.log)"
}
T() {  # T TOKEN: curl's header for a bearer token
  printf 'Authorization: Bearer %s' "$1"
}
stop() {
  kill "$daemon_pid"
  wait "$daemon_pid"
  local code=$?
  [ "$code" -eq 0 ] && pass || fail "delayd exited $code"
}

# --- TLS with tokens ---
cp server1.pem server.pem
cp server1.key server.key
start --tls-cert server.pem --tls-key server.key --auth-tokens tokens
grep -q "TLS, tokens required" delayd.log && pass || fail "start-up line: $(cat delayd.log)"
expect_code 2 "${C[@]}" health                        # plaintext client
expect_code 2 "${C[@]}" --tls-ca ca2.pem health       # server not trusted
expect_code 0 "${C[@]}" --tls-ca ca1.pem health       # health needs no token
expect_code 3 "${C[@]}" --tls-ca ca1.pem set k v --in 1h
expect_err UNAUTHENTICATED
expect_code 3 "${C[@]}" --tls-ca ca1.pem --token wrong set k v --in 1h
expect_err UNAUTHENTICATED
expect_code 0 "${C[@]}" --tls-ca ca1.pem --token writer-token set k v --in 1h
expect_code 3 "${C[@]}" --tls-ca ca1.pem --token writer-token drain
expect_err PERMISSION_DENIED
DELAYD_TOKEN=admin-token DELAYD_TLS_CA=ca1.pem expect_code 0 "${C[@]}" stats
# The variables the client libraries read mean the same to delayctl: a token
# file (its first line) and a list of endpoints (the first that answers).
printf 'admin-token\nignored\n' >token-file
DELAYD_TOKEN_FILE=token-file DELAYD_TLS_CA=ca1.pem expect_code 0 "${C[@]}" drain
DELAYD_TOKEN_FILE=token-file expect_code 3 "${C[@]}" --tls-ca ca1.pem --token writer-token drain
expect_err PERMISSION_DENIED  # (--token wins over the file)
DELAYD_TOKEN_FILE=absent expect_code 1 "${C[@]}" --tls-ca ca1.pem stats
expect_err "token-file: cannot read absent"
endpoint=${C[2]}
DELAYD_ENDPOINT="127.0.0.1:1, $endpoint" expect_code 0 "$DELAYCTL" --timeout 4s \
  --tls-ca ca1.pem --token admin-token stats
DELAYD_ENDPOINT="127.0.0.1:1,127.0.0.1:2" expect_code 2 "$DELAYCTL" --timeout 1s health
# The HTTP door: the same certificate and the same tokens.
expect_http 000 "${H/https/http}/v1/stats"                   # plaintext client
expect_http 000 --cacert ca2.pem "$H/v1/stats"                # server not trusted
expect_http 000 --cacert ca1.pem --tls-max 1.1 "$H/v1/stats"  # TLS 1.2 at least
expect_http 401 --cacert ca1.pem -X PUT "$H/v1/namespaces/default/timers/h" -d '{"delay":"3600s"}'
expect_http 403 --cacert ca1.pem -H "$(T writer-token)" -X POST "$H/v1/namespaces/default:drain" -d '{}'
expect_http 200 --cacert ca1.pem -H "$(T writer-token)" -X PUT "$H/v1/namespaces/default/timers/h" -d '{"delay":"3600s"}'

# --- rotation: SIGHUP switches to a certificate of another CA ---
DELAYD_TOKEN=admin-token "${C[@]}" --tls-ca ca1.pem watch >watch.out 2>&1 &
watch_pid=$!
# Timers fired until the watcher, once registered, sees one (bounded).
deadline=$((SECONDS + 15))
until grep -q " before " watch.out; do
  if [ $SECONDS -ge $deadline ]; then fail "watch saw nothing: $(cat watch.out)"; break; fi
  "${C[@]}" --tls-ca ca1.pem --token writer-token set before x --in 1ms >/dev/null
  sleep 0.1
done
# A key that does not match the certificate is refused; the old set stays.
cp server2.pem server.pem
cp server1.key server.key
kill -HUP "$daemon_pid"
wait_for delayd.log "SIGHUP: .*does not match"
expect_code 0 "${C[@]}" --tls-ca ca1.pem health
cp server2.key server.key
kill -HUP "$daemon_pid"
wait_for delayd.log "SIGHUP: tokens and certificates reloaded"
# New handshakes get the new certificate within gRPC's 1 s refresh.
deadline=$((SECONDS + 15))
until timeout 5 "${C[@]}" --tls-ca ca2.pem health >/dev/null 2>&1; do
  if [ $SECONDS -ge $deadline ]; then fail "the new certificate was never served"; break; fi
  sleep 0.1
done
expect_code 2 "${C[@]}" --tls-ca ca1.pem health       # the old one is gone
# The HTTP door switched with it.
expect_http 200 --cacert ca2.pem -H "$(T admin-token)" "$H/v1/stats"
expect_http 000 --cacert ca1.pem -H "$(T admin-token)" "$H/v1/stats"
# The stream opened before the switch still works.
expect_code 0 "${C[@]}" --tls-ca ca2.pem --token writer-token set after x --in 1ms
wait_for watch.out " after "
kill "$watch_pid" 2>/dev/null
wait "$watch_pid" 2>/dev/null
watch_pid=
stop

# --- a plaintext health port for probes, with nothing else on it ---
start --tls-cert server1.pem --tls-key server1.key --auth-tokens tokens \
  --health-listen 127.0.0.1:0
hport=$(grep -oE 'health service only\) on [^ ]+ \(port [0-9]+\)' delayd.log | grep -oE '[0-9]+\)$' | tr -d ')')
[ -n "$hport" ] && pass || fail "no health port line: $(cat delayd.log)"
expect_code 0 "$DELAYCTL" --endpoint "127.0.0.1:$hport" --timeout 3s health
expect_code 3 "$DELAYCTL" --endpoint "127.0.0.1:$hport" --timeout 3s --token admin-token stats
expect_err UNIMPLEMENTED
stop

# --- mutual TLS ---
start --tls-cert server1.pem --tls-key server1.key --tls-client-ca clientca.pem
grep -q "mutual TLS, no tokens" delayd.log && pass || fail "start-up line: $(cat delayd.log)"
expect_code 2 "${C[@]}" --tls-ca ca1.pem health                    # no client cert
expect_code 2 "${C[@]}" --tls-ca ca1.pem --tls-cert rogue.pem --tls-key rogue.key health
expect_code 0 "${C[@]}" --tls-ca ca1.pem --tls-cert client.pem --tls-key client.key health
expect_code 0 "${C[@]}" --tls-ca ca1.pem --tls-cert client.pem --tls-key client.key set m v --in 1h
expect_http 000 --cacert ca1.pem "$H/v1/stats"
expect_http 000 --cacert ca1.pem --cert rogue.pem --key rogue.key "$H/v1/stats"
expect_http 200 --cacert ca1.pem --cert client.pem --key client.key "$H/v1/stats"
stop

# --- bad configurations stop the start with a clear message ---
expect_code 2 "$DELAYD" --in-memory --listen 127.0.0.1:0 --tls-cert server1.pem --tls-key server2.key
expect_log "does not match"
expect_code 2 "$DELAYD" --in-memory --listen 127.0.0.1:0 --tls-cert server1.pem
expect_log "go together"
expect_code 2 "$DELAYD" --in-memory --listen 127.0.0.1:0 --auth-tokens missing-file
expect_log "cannot read token file"

# --- JSON log lines stay JSON whatever the message holds ---
expect_code 2 "$DELAYD" --in-memory --listen 127.0.0.1:0 --log-format json \
  --auth-tokens 'no "such" \file'
if /usr/bin/python3 -c 'import json, sys
for line in open(sys.argv[1]): json.loads(line)
assert any("no \"such\" \\file" in json.loads(l)["msg"] for l in open(sys.argv[1]))' out; then
  pass
else
  fail "log lines are not JSON: $(cat out)"
fi

# --- no TLS nor tokens on a non-loopback address: a warning ---
"$DELAYD" --in-memory --listen 0.0.0.0:0 >open.log 2>&1 &
daemon_pid=$!
wait_for open.log "neither TLS nor tokens"
stop

echo "$passes passed, $failures failed"
[ "$failures" -eq 0 ]
