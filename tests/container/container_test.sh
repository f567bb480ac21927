#!/usr/bin/env bash
# The container, as a user runs it: builds the image from the root
# Dockerfile, runs it with a named volume and a loopback port picked by the
# OS, talks to it from the host with delayctl (a timer set, then seen firing
# by `watch`), runs the image's health check, checks that it runs as non-root,
# stops it (must exit 0, quickly), starts a new container on the same volume
# and finds the pending timer still there; then runs it with TLS and tokens
# from mounted files (certificates made here with openssl). Prints the image
# size.
#
# Usage: container_test.sh DELAYCTL
# The docker-compatible CLI is ${CONTAINER_CLI:-docker}.
set -euo pipefail

delayctl=$1
# A command, possibly with arguments (e.g. "podman --runtime runc").
read -ra cli <<<"${CONTAINER_CLI:-docker}"
root=$(cd "$(dirname "$0")/../.." && pwd)
id=$$-$RANDOM
tag=localhost/delayd:test-$id
name=delayd-test-$id
volume=delayd-test-$id
failures=0

fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }
step() { echo "==> $*"; }
secrets=$(mktemp -d)
cleanup() {
  "${cli[@]}" rm -f "$name" "$name-tls" >/dev/null 2>&1 || true
  rm -rf "$secrets"
  "${cli[@]}" volume rm -f "$volume" >/dev/null 2>&1 || true
  "${cli[@]}" rmi "$tag" >/dev/null 2>&1 || true
  # The build stage's image (unnamed, hundreds of MB), where the engine
  # keeps one.
  "${cli[@]}" image prune -f --filter label=org.delayd.stage=build \
    >/dev/null 2>&1 || true
}
trap cleanup EXIT

# Starts a container on the volume; sets `endpoint` once delayctl health
# answers SERVING (bounded).
start() {
  "${cli[@]}" run -d --name "$name" -p 127.0.0.1::7070 -p 127.0.0.1::8080 \
    --health-interval 2s -v "$volume:/var/lib/delayd" "$tag" >/dev/null
  local mapping
  mapping=$("${cli[@]}" port "$name" 7070 | head -1)
  endpoint=127.0.0.1:${mapping##*:}
  mapping=$("${cli[@]}" port "$name" 8080 | head -1)
  http=http://127.0.0.1:${mapping##*:}
  local deadline=$((SECONDS + 60))
  until "$delayctl" --endpoint "$endpoint" --timeout 1s health >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      "${cli[@]}" logs "$name" >&2 || true
      echo "delayd in the container did not become healthy" >&2
      exit 1
    fi
    sleep 0.2  # Polls the health check, bounded by the deadline.
  done
}

# Stops the container; it must exit 0 well within Docker's 10 s.
stop() {
  local t0=$SECONDS
  "${cli[@]}" stop -t 10 "$name" >/dev/null
  local took=$((SECONDS - t0))
  local code
  code=$("${cli[@]}" inspect --format '{{.State.ExitCode}}' "$name")
  echo "stopped in ${took} s, exit code $code"
  [ "$code" = 0 ] || fail "exit code $code after docker stop"
  [ "$took" -le 5 ] || fail "docker stop took ${took} s"
  "${cli[@]}" logs "$name" 2>&1 | grep -q "delayd stopped" ||
    fail "no clean-stop line in the logs"
  "${cli[@]}" rm "$name" >/dev/null
}

step "build the image (${cli[*]})"
build_flags=()
# Podman writes OCI images by default, which drop HEALTHCHECK.
if "${cli[@]}" --version 2>/dev/null | grep -qi podman; then
  build_flags+=(--format docker)
fi
# The build context leaves out .git (.dockerignore): the commit comes in
# as an argument.
commit=$(git -C "$root" rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
build_flags+=(--build-arg "DELAYD_COMMIT=$commit")
t0=$SECONDS
"${cli[@]}" build -q "${build_flags[@]}" -t "$tag" "$root" >/dev/null
echo "built in $((SECONDS - t0)) s"
size=$("${cli[@]}" image inspect --format '{{.Size}}' "$tag")
echo "image size: $((size / 1024 / 1024)) MiB"

step "run it"
"${cli[@]}" run --rm "$tag" --version | grep -qE "^delayd [0-9.]+ \(commit $commit\+?\)$" ||
  fail "delayd --version in the image does not name commit $commit"
start
echo "delayd at $endpoint"
[ "$("${cli[@]}" exec "$name" id -u)" != 0 ] || fail "runs as root"
"${cli[@]}" exec "$name" sh -c 'tr "\0" "\n" </proc/1/environ' |
  grep -qx "GLIBC_TUNABLES=glibc.malloc.hugetlb=1" ||
  fail "delayd in the image runs without its heap on huge pages"
"${cli[@]}" image inspect --format '{{json .Config.Healthcheck}}' "$tag" |
  grep -q "delayctl" || fail "the image has no HEALTHCHECK with delayctl"
# The engine runs the HEALTHCHECK every 2 s; podman without systemd runs it
# on `healthcheck run`.
deadline=$((SECONDS + 60))
health=
until [ "$health" = healthy ] || [ $SECONDS -ge $deadline ]; do
  "${cli[@]}" healthcheck run "$name" >/dev/null 2>&1 || true
  health=$("${cli[@]}" inspect --format '{{.State.Health.Status}}' "$name")
  [ "$health" = healthy ] || sleep 0.5  # Bounded by the deadline.
done
echo "health status: $health"
[ "$health" = healthy ] || fail "health status is '$health', not healthy"

step "set a timer from the host and watch it fire"
"$delayctl" --endpoint "$endpoint" set soon "hello from the host" --in 1s \
  >/dev/null
out=$(timeout 30 "$delayctl" --endpoint "$endpoint" watch --count 1 -o json)
echo "$out"
echo "$out" | grep -q '"key":"soon"' || fail "watch did not see the timer"
"$delayctl" --endpoint "$endpoint" set later "still here" --in 1h >/dev/null

step "the HTTP/JSON API on port 8080, from curl"
out=$(curl -sS --max-time 5 -X PUT "$http/v1/namespaces/web/timers/order-42" \
  -d '{"payload": "aGk=", "delay": "900s"}') || fail "PUT over HTTP failed"
echo "$out"
echo "$out" | grep -q '"version"' || fail "no version in: $out"
out=$(curl -sS --max-time 5 "$http/v1/namespaces/web/timers/order-42")
echo "$out" | grep -q '"payload":"aGk="' || fail "GET over HTTP: $out"
code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 \
  "$http/v1/namespaces/web/timers/none")
[ "$code" = 404 ] || fail "a missing timer over HTTP: $code, not 404"

step "the image's daemon reads time zones (the tz database is in it)"
out=$("$delayctl" --endpoint "$endpoint" schedule next --cron '30 2 * * *' \
  --tz Europe/Berlin --after 2026-03-28T12:00:00Z -c 1 -o json) ||
  fail "schedule next in Europe/Berlin failed: $out"
echo "$out"
echo "$out" | grep -q '2026-03-29T01:00:00Z' || fail "wrong instant: $out"

step "stop, then start a new container on the same volume"
version=$("$delayctl" --endpoint "$endpoint" get later -o json |
  grep -oE '"version":"[0-9]+"')
stop
start
after=$("$delayctl" --endpoint "$endpoint" get later -o json) ||
  fail "the pending timer is gone after the restart"
echo "$after"
echo "$after" | grep -q "$version" || fail "the version changed: $after"
echo "$after" | grep -q '"payload":"c3RpbGwgaGVyZQ=="' ||
  fail "the payload changed: $after"
stop

step "the secure setup: TLS and tokens from mounted files"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$secrets/ca.key" -out "$secrets/ca.pem" -days 2 -subj /CN=test-ca 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes \
  -keyout "$secrets/server.key" -out "$secrets/server.csr" -subj /CN=delayd 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >"$secrets/ext"
openssl x509 -req -in "$secrets/server.csr" -CA "$secrets/ca.pem" \
  -CAkey "$secrets/ca.key" -CAcreateserial -out "$secrets/server.pem" -days 2 \
  -extfile "$secrets/ext" 2>/dev/null
echo "test-token * admin" >"$secrets/tokens"
chmod 755 "$secrets"
chmod 644 "$secrets"/*  # Read by the image's user (a test's throwaway key).
"${cli[@]}" run -d --name "$name-tls" -p 127.0.0.1::7070 -p 127.0.0.1::8080 \
  --health-interval 2s \
  -v "$secrets:/etc/delayd:ro" -e DELAYD_IN_MEMORY=true \
  -e DELAYD_TLS_CERT=/etc/delayd/server.pem \
  -e DELAYD_TLS_KEY=/etc/delayd/server.key \
  -e DELAYD_AUTH_TOKENS=/etc/delayd/tokens "$tag" >/dev/null
mapping=$("${cli[@]}" port "$name-tls" 7070 | head -1)
tls_endpoint=127.0.0.1:${mapping##*:}
tls=("$delayctl" --endpoint "$tls_endpoint" --timeout 2s --tls-ca "$secrets/ca.pem")
deadline=$((SECONDS + 60))
until "${tls[@]}" health >/dev/null 2>&1; do
  if [ $SECONDS -ge $deadline ]; then
    "${cli[@]}" logs "$name-tls" >&2 || true
    fail "delayd with TLS did not answer"
    break
  fi
  sleep 0.2  # Polls the health check, bounded by the deadline.
done
"$delayctl" --endpoint "$tls_endpoint" --timeout 2s health >/dev/null 2>&1 &&
  fail "a plaintext client was served"
"${tls[@]}" set k v --in 1h >/dev/null 2>&1 && fail "a call without a token was served"
"${tls[@]}" --token test-token set k v --in 1h >/dev/null ||
  fail "a call with TLS and the token failed"
# The HTTP port serves the same certificate (OpenSSL loaded without the
# -dev package's names, which the image does not have).
http_mapping=$("${cli[@]}" port "$name-tls" 8080 | head -1)
https=https://127.0.0.1:${http_mapping##*:}
curl -sf --cacert "$secrets/ca.pem" -H 'Authorization: Bearer test-token' \
  "$https/v1/namespaces/default/timers/k" | grep -q '"key":"k"' ||
  fail "the timer was not read over HTTPS"
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:${http_mapping##*:}/v1/stats" || true)
[ "$code" = 000 ] || fail "the HTTP port answered plaintext ($code) with TLS on"
# The image's health check uses the plaintext health-only port.
health=
deadline=$((SECONDS + 60))
until [ "$health" = healthy ] || [ $SECONDS -ge $deadline ]; do
  "${cli[@]}" healthcheck run "$name-tls" >/dev/null 2>&1 || true
  health=$("${cli[@]}" inspect --format '{{.State.Health.Status}}' "$name-tls")
  [ "$health" = healthy ] || sleep 0.5  # Bounded by the deadline.
done
[ "$health" = healthy ] || fail "with TLS on, health status is '$health'"
echo "TLS + tokens: plaintext and token-less calls refused, HTTPS served, health $health"
"${cli[@]}" rm -f "$name-tls" >/dev/null

if [ $failures -ne 0 ]; then
  echo "container test: $failures failure(s)" >&2
  exit 1
fi
echo "container test: passed (image $((size / 1024 / 1024)) MiB)"
