#!/usr/bin/env bash
# The Debian package, as an operator installs it: two builds of the package
# (Debian revisions 1 and 2) made with cpack from BUILD_DIR; in a fresh
# Debian 12 container, revision 1 installed with apt (its dependencies
# resolved from the package's), the delayd user, state directory, unit and
# /etc/default/delayd checked, the unit's command run as the unit runs it
# (its user, its environment file, its working directory), a timer set and
# seen firing and another left pending; /etc/default/delayd edited; then
# revision 2 installed over it: the edit kept (a conffile), the store kept
# (the pending timer still there under the new binary).
#
# Usage: deb_test.sh BUILD_DIR
# The docker-compatible CLI is ${CONTAINER_CLI:-docker}.
set -euo pipefail

build=$(cd "$1" && pwd)
read -ra cli <<<"${CONTAINER_CLI:-docker}"
work=$(mktemp -d)
name=delayd-deb-test-$$-$RANDOM
cleanup() {
  "${cli[@]}" rm -f "$name" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

echo "==> cpack: revisions 1 and 2"
for rev in 1 2; do
  (cd "$build" && cpack -G DEB -B "$work/r$rev" \
    -D CPACK_DEBIAN_PACKAGE_RELEASE="$rev" >"$work/cpack-$rev.log" 2>&1) ||
    { cat "$work/cpack-$rev.log"; exit 1; }
  mv "$work/r$rev"/delayd_*.deb "$work/delayd-$rev.deb"
done
dpkg-deb -f "$work/delayd-1.deb" Package Version Depends
dpkg-deb -c "$work/delayd-1.deb" | awk '{print $1, $6}'

cat >"$work/inside.sh" <<'EOF'
set -euo pipefail
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
check() { if eval "$1"; then echo "ok: $1"; else fail "$1"; fi; }
unit=/usr/lib/systemd/system/delayd.service

# Runs ExecStart as the unit would: User=, EnvironmentFile=,
# WorkingDirectory=; `pid` is delayd's own; waits (bounded) until it
# serves.
start() {
  local exec user dir
  exec=$(sed -n 's/^ExecStart=//p' "$unit")
  user=$(sed -n 's/^User=//p' "$unit")
  dir=$(sed -n 's/^WorkingDirectory=//p' "$unit")
  (cd "$dir" && set -a && . /etc/default/delayd && set +a &&
    exec setpriv --reuid "$user" --regid "$user" --init-groups -- $exec) \
    >/tmp/delayd.log 2>&1 &
  pid=$!
  local deadline=$((SECONDS + 30))
  until delayctl --timeout 1s health >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ] || ! kill -0 "$pid" 2>/dev/null; then
      cat /tmp/delayd.log; exit 1
    fi
    sleep 0.1  # Polls the health check, bounded by the deadline.
  done
}
stop() {
  kill -TERM "$pid"
  wait "$pid" || fail "delayd exited $? on SIGTERM"
}

apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq /pkgs/delayd-1.deb >/tmp/apt.log 2>&1 ||
  { cat /tmp/apt.log; exit 1; }
check 'getent passwd delayd | grep -q ":/var/lib/delayd:"'
check '[ "$(stat -c %U:%a /var/lib/delayd)" = delayd:750 ]'
check 'grep -q "^ProtectSystem=strict" "$unit"'
check 'grep -q "^NoNewPrivileges=yes" "$unit"'
check 'grep -q "^Restart=on-failure" "$unit"'
check 'grep -qx "DELAYD_DATA_DIR=/var/lib/delayd" /etc/default/delayd'
check 'grep -qx "GLIBC_TUNABLES=glibc.malloc.hugetlb=1" /etc/default/delayd'
check 'delayd --version | grep -qE "^delayd [0-9.]+ \(commit "'
check '[ "$(delayctl --version | cut -d" " -f2-)" = "$(delayd --version | cut -d" " -f2-)" ]'

start
check '[ "$(stat -c %U "/proc/$pid")" = delayd ] && [ "$(cat "/proc/$pid/comm")" = delayd ]'
# (Read as delayd's user: the container's root may not read another user's
# process environment.)
check 'setpriv --reuid delayd --regid delayd --init-groups -- cat "/proc/$pid/environ" |
  tr "\\0" "\\n" | grep -qx "GLIBC_TUNABLES=glibc.malloc.hugetlb=1"'
delayctl set soon "from the package" --in 1s >/dev/null
check 'timeout 20 delayctl watch --count 1 | grep -q "from the package"'
delayctl set later kept --in 1h >/dev/null
stop
echo "# edited by the operator" >>/etc/default/delayd

DEBIAN_FRONTEND=noninteractive apt-get install -y -qq /pkgs/delayd-2.deb >/tmp/apt.log 2>&1 ||
  { cat /tmp/apt.log; exit 1; }
check 'dpkg-query -W -f="\${Version}" delayd | grep -q -- "-2$"'
check 'grep -q "^# edited by the operator" /etc/default/delayd'
start
check 'delayctl get later | grep -q "later"'
stop
exit $fails
EOF

echo "==> in a fresh Debian 12 container"
"${cli[@]}" run --rm --name "$name" -v "$work:/pkgs" debian:bookworm-slim \
  bash /pkgs/inside.sh
