#!/usr/bin/env bash
# delayd and delayctl leave OpenSSL's state to each thread's end rather
# than to OpenSSL's exit-time clean-up (see delayctl's main.cc): with a probe
# loaded (openssl_exit_probe.cc) that reports, after every other exit
# handler, whether that clean-up ran. Each binary first uses TLS, so that
# gRPC has set OpenSSL up. Usage: openssl_exit_test.sh DELAYD DELAYCTL PROBE
set -uo pipefail
DELAYD=$(realpath "$1")
DELAYCTL=$(realpath "$2")
PROBE=$(realpath "$3")
work=$(mktemp -d)
daemon_pid=
trap 'kill $daemon_pid 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
cd "$work" || exit 1
failures=0
expect_kept() {  # expect_kept WHO FILE
  local got
  got=$(cat "$2" 2>/dev/null)
  if [ "$got" != kept ]; then
    echo "FAIL: $1: OpenSSL's state at exit: '${got:-no report}', want 'kept'"
    failures=$((failures + 1))
  fi
}

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout ca.key -out ca.pem -days 2 -subj /CN=ca 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout server.key -out server.csr -subj /CN=server 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >ext
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
  -out server.pem -days 2 -extfile ext 2>/dev/null

DELAYD_OPENSSL_PROBE=$work/delayd.probe LD_PRELOAD=$PROBE \
  "$DELAYD" --in-memory --listen 127.0.0.1:0 --tls-cert server.pem \
  --tls-key server.key >delayd.log 2>&1 &
daemon_pid=$!
deadline=$((SECONDS + 15))
until grep -qE ' port [0-9]+ ' delayd.log; do
  if [ $SECONDS -ge $deadline ] || ! kill -0 $daemon_pid 2>/dev/null; then
    echo "FAIL: delayd did not start: $(cat delayd.log)"
    exit 1
  fi
  sleep 0.05  # Polls the log, bounded by the deadline.
done
port=$(grep -oE ' port [0-9]+ ' delayd.log | grep -oE '[0-9]+')

# (The probe is given to delayctl alone: in timeout's process too it would
# write its own report.)
timeout 20 env DELAYD_OPENSSL_PROBE="$work/delayctl.probe" LD_PRELOAD="$PROBE" \
  "$DELAYCTL" --endpoint "127.0.0.1:$port" --tls-ca ca.pem --timeout 5s \
  health >ctl.out 2>&1 ||
  { echo "FAIL: delayctl health: $(cat ctl.out)"; failures=$((failures + 1)); }
expect_kept delayctl delayctl.probe

kill "$daemon_pid"
wait "$daemon_pid"
code=$?
daemon_pid=
[ "$code" -eq 0 ] || { echo "FAIL: delayd exited $code"; failures=$((failures + 1)); }
expect_kept delayd delayd.probe

[ "$failures" -eq 0 ] && echo "both kept OpenSSL's state to their threads' end"
exit $((failures > 0))
