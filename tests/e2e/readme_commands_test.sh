#!/usr/bin/env bash
# Every delayctl command the README shows is one delayctl takes: each
# command line in its code blocks (the session's `$ delayctl ...` lines
# included, as written, in order) and each `delayctl ...` it names inline
# without a placeholder, run against a real delayd. A refused call (exit 3)
# or a missing key (4) is an answer; a usage error (1) means the README and
# the CLI disagree. Usage: readme_commands_test.sh DELAYD DELAYCTL README
set -uo pipefail
DELAYD=$1
DELAYCTL=$2
README=$3
work=$(mktemp -d)
trap 'kill "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null; rm -rf "$work"' EXIT

"$DELAYD" --listen 127.0.0.1:0 --in-memory >"$work/delayd.log" 2>&1 &
daemon_pid=$!
deadline=$((SECONDS + 10))
until grep -qE ' port [0-9]+ ' "$work/delayd.log"; do
  [ $SECONDS -ge $deadline ] && { echo "FAIL: delayd did not start"; exit 1; }
  sleep 0.05  # (polls the log for the port line, bounded)
done
port=$(grep -oE ' port [0-9]+ ' "$work/delayd.log" | grep -oE '[0-9]+')
export DELAYD_ENDPOINT=127.0.0.1:$port
mkdir -p "$work/bin"
ln -s "$(realpath "$DELAYCTL")" "$work/bin/delayctl"
export PATH=$work/bin:$PATH

# The command lines: in code blocks, those that start with delayctl (a
# leading "$ " dropped, a trailing "# comment" dropped); inline, spans of
# `delayctl ...` with no placeholder (an upper-case word or a|b).
awk '/^```/ { block = !block; next }
     block && /^(\$ )?delayctl / { sub(/^\$ /, ""); sub(/  +# .*$/, ""); print }' \
  "$README" >"$work/commands"
grep -oE '`delayctl [^`]*`' "$README" | tr -d '`' |
  grep -vE '\b[A-Z]+\b|\|' >>"$work/commands"

# The files the README's commands read, made where they run as the README
# makes them.
cd "$work" || exit 1
printf 'whsec_%s' "$(head -c 32 /dev/urandom | base64)" >hook.secret

failures=0
ran=0
while IFS= read -r line; do
  # An endpoint elsewhere (an example's host) is this daemon's here.
  line=$(sed -E 's/--endpoint [^ ]+ //; s/--tls-ca [^ ]+ //' <<<"$line")
  timeout 30 bash -c "$line" </dev/null >"$work/out" 2>"$work/err"
  code=$?
  ran=$((ran + 1))
  if [ "$code" -eq 1 ] || [ "$code" -eq 2 ] || [ "$code" -ge 124 ]; then
    echo "FAIL: exit $code: $line"
    sed 's/^/  /' "$work/err"
    failures=$((failures + 1))
  fi
done <"$work/commands"
if [ "$ran" -lt 15 ]; then
  echo "FAIL: only $ran commands found in $README"
  failures=$((failures + 1))
fi
echo "README commands: $ran run, $failures failed"
[ "$failures" -eq 0 ]
