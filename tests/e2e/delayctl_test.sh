#!/usr/bin/env bash
# End-to-end test of delayctl against a real delayd, as an operator uses them:
# every subcommand, both output formats, every exit code, durations and bad
# input, watch and work seeing events, and work redelivering after a failing
# command. Usage: delayctl_test.sh DELAYD DELAYCTL
set -uo pipefail
DELAYD=$1
DELAYCTL=$2
work=$(mktemp -d)
trap 'kill "$daemon_pid" 2>/dev/null; wait "$daemon_pid" 2>/dev/null; rm -rf "$work"' EXIT

failures=0
passes=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { passes=$((passes + 1)); }

# expect_code WANT CMD...: runs CMD (stdout to $work/out, stderr to
# $work/err) and checks its exit code.
expect_code() {
  local want=$1
  shift
  timeout 20 "$@" >"$work/out" 2>"$work/err"
  local got=$?
  if [ "$got" -ne "$want" ]; then
    fail "exit $got, want $want: $* (stderr: $(cat "$work/err"))"
  else
    pass
  fi
}
expect_out() {  # expect_out PATTERN: the last command's stdout matches.
  if grep -qE -- "$1" "$work/out"; then pass; else fail "stdout lacks /$1/: $(cat "$work/out")"; fi
}
expect_err() {
  if grep -qE -- "$1" "$work/err"; then pass; else fail "stderr lacks /$1/: $(cat "$work/err")"; fi
}
# wait_for FILE PATTERN: waits (up to 10 s) until FILE has a matching line.
wait_for() {
  local deadline=$((SECONDS + 10))
  until grep -qE -- "$2" "$1" 2>/dev/null; do
    if [ $SECONDS -ge $deadline ]; then fail "timed out waiting for /$2/ in $1: $(cat "$1")"; return 1; fi
    sleep 0.05
  done
  pass
}

"$DELAYD" --listen 127.0.0.1:0 --data-dir "$work/data" \
  --backup-dir "$work/backups" >"$work/delayd.log" 2>&1 &
daemon_pid=$!
wait_for "$work/delayd.log" " port [0-9]+ " || exit 1
port=$(grep -oE ' port [0-9]+ ' "$work/delayd.log" | grep -oE '[0-9]+')
export DELAYD_ENDPOINT=127.0.0.1:$port
C=$DELAYCTL

# --version: both binaries, one version; the daemon's start-up line and
# stats name it too.
release='[0-9]+\.[0-9]+\.[0-9]+'
expect_code 0 "$DELAYD" --version
expect_out "^delayd $release \(commit ([0-9a-f]{12}\+?|unknown)\)$"
daemon_version=$(cut -d' ' -f2- "$work/out")
expect_code 0 "$C" --version
expect_out "^delayctl $release \(commit ([0-9a-f]{12}\+?|unknown)\)$"
[ "$(cut -d' ' -f2- "$work/out")" = "$daemon_version" ] && pass ||
  fail "delayctl $(cat "$work/out") is not delayd $daemon_version"
grep -qF "delayd $daemon_version starting" "$work/delayd.log" && pass ||
  fail "no start-up line names $daemon_version: $(head -3 "$work/delayd.log")"
expect_code 0 "$C" stats
expect_out "^version +${daemon_version//[().+]/.}$"
# (A subcommand's own --version is still its own.)
expect_code 1 "$C" schedule set k p --every 1m --version
expect_err "--version: 1 required UINT missing"

# health, stats
expect_code 0 "$C" health
expect_out '^SERVING$'
expect_code 0 "$C" health delayd.store
expect_out '^SERVING$'
expect_code 0 "$C" stats
expect_out 'pending_timers +0'
expect_out 'durable +yes'
expect_out 'store_errors +0'
expect_code 0 "$C" stats -o json
expect_out '"partitions":'

# set / get / ls / move / rm, both formats
expect_code 0 "$C" set order-1 'cancel me' --in 1h30m
expect_out '^order-1 +[0-9]+ '
expect_code 0 "$C" get order-1 -o json
expect_out '"key":"order-1"'
expect_code 0 "$C" get order-1
expect_out 'cancel me'
expect_code 0 "$C" set order-2 - --in 2d -n shop < <(printf 'from stdin')
printf 'from a file' >"$work/payload"
expect_code 0 "$C" set order-3 "@$work/payload" --in 90s -n shop
expect_code 0 "$C" ls -n shop -o json
expect_out '"key":"order-2".*"payload":"ZnJvbSBzdGRpbg=="'
[ "$(wc -l <"$work/out")" -eq 2 ] && pass || fail "ls -o json: want 2 lines: $(cat "$work/out")"
expect_code 0 "$C" ls -n shop --prefix order-3
expect_out 'from a file'
expect_code 0 "$C" ls -n shop --prefix order-3 --no-payloads -o json
expect_out '"key":"order-3"'

# stats per namespace: every namespace in use (sorted) after the daemon's
# figures, or one namespace alone with -n
expect_code 0 "$C" stats
expect_out '^NAMESPACE +PENDING +READY +IN_FLIGHT +RETRYING +DEAD'
expect_out '^default +1 +0 +0 +0 +0 +0 +0 +1 '
expect_out '^shop +2 +0 +0 +0 +0 +0 +0 +2 '
expect_code 0 "$C" stats -n shop -o json
expect_out '"namespaces":\[\{"namespace":"shop","pending_timers":"2",.*"timers_set":"2"'
grep -q '"partitions"' "$work/out" && fail "stats -n: daemon-wide figures shown" || pass
expect_code 0 "$C" stats -n nobody-here
expect_out '^nobody-here +0 +0 +0 +0 +0 '
expect_code 3 "$C" stats -n 'bad name!'
expect_err 'INVALID_ARGUMENT'
# --watch: refreshes until --count (or a signal), each with a header line
expect_code 0 "$C" stats --watch --interval 50ms --count 3
[ "$(grep -c ' every 50ms, ' "$work/out")" -eq 3 ] && pass || fail "stats --watch: not 3 refreshes: $(cat "$work/out")"
expect_out '^timers_set +3 +0.0/s'
expect_code 0 "$C" stats --watch --interval 50ms --count 2 -o json
[ "$(grep -c '^{"pending_timers":"3"' "$work/out")" -eq 2 ] && pass || fail "stats --watch -o json: $(cat "$work/out")"
expect_code 1 "$C" stats --watch --interval 0s
expect_err 'interval'
"$C" stats --watch --interval 1h >"$work/watching" 2>&1 &
watching_pid=$!
wait_for "$work/watching" '^shop '
kill -TERM $watching_pid
wait $watching_pid
[ $? -eq 0 ] && pass || fail "stats --watch interrupted: want exit 0"
grep -q payload "$work/out" && fail "ls --no-payloads printed a payload" || pass
expect_code 0 "$C" set spread 'x' --in 1h --jitter 10m -n jit
expect_out '^spread +[0-9]+ '
expect_code 1 "$C" set spread 'x' --in 1h --jitter soon -n jit
expect_code 3 "$C" set order-1 'again' --in 1h --if-absent
expect_err 'ALREADY_EXISTS'
expect_code 0 "$C" move order-1 --at 2030-01-02T03:04:05Z
expect_out '2030-01-02T03:04:05Z'
expect_code 3 "$C" move order-1 --in 1h --version 999
expect_err 'ABORTED'
expect_code 0 "$C" rm order-1
expect_code 4 "$C" rm order-1
expect_err 'NOT_FOUND'
expect_code 4 "$C" get order-1

# bad input: usage errors, nothing changed
expect_code 1 "$C" set k --in -5s
expect_err 'not a duration'
expect_code 1 "$C" set k --in 3x
expect_code 1 "$C" set k --in 1h --at 2030-01-01T00:00:00Z
expect_code 1 "$C" set k --at yesterday
expect_code 1 "$C" set --in 1h
expect_code 1 "$C" nosuchcommand
expect_code 3 "$C" set '' --in 1h
expect_err 'INVALID_ARGUMENT: key'
expect_code 0 "$C" --help
expect_out 'Exit codes: 0 success; 1 usage error; 2 cannot connect'

# cannot connect
expect_code 2 "$C" --endpoint 127.0.0.1:1 --timeout 1s stats
expect_err 'cannot connect'

# batch: text lines and JSON lines, a failing line gives exit 3
printf 'set b1 1h one\n# a comment\n\nset b2 1h\n{"remove":{"key":"b2"}}\nmove nope 1s\n' >"$work/ops"
expect_code 3 "$C" batch "$work/ops"
expect_out '^1 ok'
expect_out '^4 error NOT_FOUND'
expect_code 0 "$C" batch - < <(printf 'rm b1\n')
expect_code 1 "$C" batch /nonexistent

# watch sees a timer fire; drain fires a namespace now
"$C" watch -n wns -o json --count 2 >"$work/watch" 2>&1 &
watch_pid=$!
wait_for_registered() {  # a watcher registers before its first event
  local deadline=$((SECONDS + 10))
  until "$C" stats -o json | grep -q '"watchers":"1"'; do
    [ $SECONDS -ge $deadline ] && { fail "watcher never registered"; return; }
    sleep 0.05
  done
}
wait_for_registered
expect_code 0 "$C" set w1 'watched' --in 100ms -n wns
wait_for "$work/watch" '"key":"w1"'
expect_code 0 "$C" set w2 'drained' --in 1h -n wns
expect_code 0 "$C" drain -n wns
expect_out 'drained 1 timers'
wait $watch_pid
[ $? -eq 0 ] && pass || fail "watch --count 2 did not exit 0"
grep -q '"key":"w2".*"reason":"REASON_DRAINED"' "$work/watch" && pass || fail "watch: no drained w2: $(cat "$work/watch")"
grep -q '"key":"w1".*"reason":"REASON_EXPIRED"' "$work/watch" && pass || fail "watch: no expired w1: $(cat "$work/watch")"

# watch ends cleanly (exit 0) when interrupted
"$C" watch -n idle >/dev/null 2>&1 &
idle_pid=$!
deadline=$((SECONDS + 10))
until "$C" stats -o json | grep -q '"watchers":"1"'; do
  [ $SECONDS -ge $deadline ] && break
  sleep 0.05
done
kill -INT $idle_pid
wait $idle_pid
[ $? -eq 0 ] && pass || fail "watch interrupted: want exit 0"

# work: runs the command with the payload on stdin and fields in env; acks
# on exit 0; a failing command leaves the event for redelivery (attempt 2).
expect_code 0 "$C" set job-1 'payload-one' --in 0s -n q
expect_code 0 "$C" work -n q --count 1 --exec "cat >$work/job.txt; echo \" \$DELAYD_KEY \$DELAYD_ATTEMPT \$DELAYD_REASON\" >>$work/job.txt"
grep -q 'payload-one job-1 1 EXPIRED' "$work/job.txt" && pass || fail "work: command saw $(cat "$work/job.txt")"
expect_code 0 "$C" stats -o json
grep -q '"events_acked":"1"' "$work/out" && pass || fail "work: not acked: $(cat "$work/out")"
expect_code 0 "$C" set job-2 'flaky' --in 0s -n q
expect_code 0 "$C" work -n q --count 2 --ack-timeout 200ms \
  --exec '[ "$DELAYD_ATTEMPT" -ge 2 ] || exit 7'
expect_out 'job-2 attempt=1 exit=7'
expect_out 'job-2 attempt=2 exit=0'
expect_err 'command exited 7; nacked'
# (The namespace is freed once empty: the daemon's totals keep count.)
expect_code 0 "$C" stats -o json
expect_out '"events_redelivered":"1","durable"'

# work extends the lease of a command that runs past --ack-timeout: it is
# not delivered again while it runs (without the extension the 500 ms
# deadline would pass four times over).
expect_code 0 "$C" set long-job 'slow' --in 0s -n long
expect_code 0 "$C" work -n long --count 1 --ack-timeout 500ms --exec 'sleep 2'
expect_out 'long-job attempt=1 exit=0'
expect_code 0 "$C" stats -o json
expect_out '"events_redelivered":"1","durable"'

# nack and extend, called by the command on its own event
expect_code 0 "$C" set by-hand 'x' --in 0s -n hand
expect_code 0 "$C" work -n hand --count 1 --exec "$C extend \$DELAYD_EVENT_ID --by 1m -n hand >$work/hand; $C nack \$DELAYD_EVENT_ID --retry-after 1h -n hand >>$work/hand; exit 3"
grep -q '^extended 1$' "$work/hand" && pass || fail "extend: $(cat "$work/hand")"
grep -q '^nacked 1$' "$work/hand" && pass || fail "nack: $(cat "$work/hand")"
expect_code 0 "$C" stats -n hand -o json
expect_out '"retrying_events":"1"'
expect_code 4 "$C" nack 123456 -n hand
expect_out 'unknown 123456'
expect_code 4 "$C" extend 123456 --by 1s -n hand
expect_code 1 "$C" nack 1 --retry-after soon
expect_code 1 "$C" extend 1
expect_code 3 "$C" extend 1 --by 2h
expect_err 'INVALID_ARGUMENT: extension'

# work runs its commands on a fixed pool of --concurrency threads: over 300
# events its virtual memory stays flat (a thread per event took 8 MiB of
# stack each, never given back until exit).
for i in $(seq 300); do echo "set many-$i 0s"; done >"$work/many"
expect_code 0 "$C" batch -n many "$work/many"
expect_code 0 "$C" work -n many --count 300 --concurrency 2 \
  --exec "grep VmSize /proc/\$PPID/status >>$work/vm"
# (Growth over the run, not the size: sanitizer builds reserve terabytes.)
vm_growth_kb=$(grep -oE "[0-9]+" "$work/vm" | sort -n | sed -n '1p;$p' | tr '\n' ' ' | awk '{print $2 - $1}')
[ "$vm_growth_kb" -lt $((512 * 1024)) ] && pass || fail "work: virtual memory grew ${vm_growth_kb} kB over 300 events"
[ "$(grep -c 'exit=0' "$work/out")" -eq 300 ] && pass || fail "work: not 300 runs: $(tail -3 "$work/out")"

# work --count N takes N events, not more: with three ready, one attempt
# allowed and room for four, the two it does not run stay ready, unattempted
# (handed over and abandoned, they would have become dead letters).
expect_code 0 "$C" policy set -n few --max-attempts 1
for k in a b c; do expect_code 0 "$C" set "few-$k" x --in 0s -n few; done
deadline=$((SECONDS + 10))
until "$C" stats -n few -o json | grep -q '"ready_events":"3"'; do
  [ $SECONDS -ge $deadline ] && { fail "few: the events never became ready"; break; }
  sleep 0.05
done
expect_code 0 "$C" work -n few --count 1 --concurrency 4 --exec 'cat >/dev/null'
expect_code 0 "$C" stats -n few -o json
expect_out '"ready_events":"2"'
expect_out '"events_delivered":"1",'
grep -q dead_letters "$work/out" && fail "few: dead letters: $(cat "$work/out")" || pass
expect_code 0 "$C" work -n few --count 2 --exec 'cat >/dev/null'
[ "$(grep -c 'attempt=1 exit=0' "$work/out")" -eq 2 ] && pass || fail "few: $(cat "$work/out")"

# policy: defaults shown; set changes only the fields given; pause holds
# delivery (timers still fire), resume delivers; bad values refused
expect_code 0 "$C" policy get -n pol
expect_out '^paused +no'
expect_out '^initial_backoff +1s'
expect_out '^max_dispatch_rate +unlimited'
expect_code 0 "$C" policy set -n pol --max-in-flight 3 --backoff-jitter 0.5
expect_out '^max_in_flight +3'
expect_code 0 "$C" policy set -n pol --max-dispatch-rate 100
expect_out '^max_in_flight +3'
expect_out '^max_dispatch_rate +100/s'
expect_code 0 "$C" policy get -n pol -o json
expect_out '"backoff_jitter":0.5'
expect_code 0 "$C" pause -n pol
expect_out '^paused +yes'
expect_code 0 "$C" set held 'x' --in 0s -n pol
deadline=$((SECONDS + 10))
until "$C" stats -n pol | grep -qE '^pol +0 +1 +0 '; do
  [ $SECONDS -ge $deadline ] && { fail "paused: the event never became ready"; break; }
  sleep 0.05
done
expect_code 0 "$C" resume -n pol
expect_out '^paused +no'
expect_code 0 "$C" work -n pol --count 1 --exec 'cat >/dev/null'
expect_out 'held attempt=1 exit=0'
expect_code 0 "$C" policy set -n pol --reset
expect_out '^max_in_flight +unlimited'
expect_code 3 "$C" policy set -n pol --backoff-multiplier 0.5
expect_err 'INVALID_ARGUMENT: backoff_multiplier'
expect_code 1 "$C" policy set -n pol --max-backoff forever
expect_code 1 "$C" policy

# dead letters: with max attempts 2 and no backoff, a command that always
# fails leaves its event a dead letter (with the exit in its error); requeue
# delivers it again, from attempt 1; purge deletes
expect_code 0 "$C" policy set -n dlq --max-attempts 2 --initial-backoff 0s --max-backoff 0s
expect_out '^max_attempts +2'
expect_code 0 "$C" set poison 'p' --in 0s -n dlq
expect_code 0 "$C" work -n dlq --count 2 --exec 'exit 9'
expect_out 'poison attempt=2 exit=9'
deadline=$((SECONDS + 10))
until "$C" stats -n dlq -o json | grep -q '"dead_letters":"1"'; do
  [ $SECONDS -ge $deadline ] && { fail "dlq: no dead letter"; break; }
  sleep 0.05
done
expect_code 0 "$C" dlq ls -n dlq
expect_out '^[0-9]+ +poison +2 .*command exited 9 +p$'
dead_id=$(grep -oE '^[0-9]+ +poison' "$work/out" | grep -oE '^[0-9]+')
expect_code 0 "$C" dlq requeue "$dead_id" -n dlq
expect_out '^requeued 1$'
expect_code 0 "$C" work -n dlq --count 2 --exec 'exit 9'
expect_out 'poison attempt=1 exit=9'
expect_out 'poison attempt=2 exit=9'
deadline=$((SECONDS + 10))
until "$C" stats -n dlq -o json | grep -q '"dead_letters":"1"'; do
  [ $SECONDS -ge $deadline ] && { fail "dlq: no dead letter again"; break; }
  sleep 0.05
done
expect_code 0 "$C" dlq purge --all -n dlq
expect_out '^purged 1$'
expect_code 0 "$C" dlq ls -n dlq -o json
[ -s "$work/out" ] && fail "dlq: left after purge: $(cat "$work/out")" || pass
expect_code 4 "$C" dlq requeue 12345 -n dlq
expect_code 1 "$C" dlq purge 1 --all -n dlq
expect_code 1 "$C" dlq purge -n dlq

# backup: a copy of the store under the daemon's --backup-dir
expect_code 0 "$C" backup first
expect_out "backup written to .*/backups/first"
[ -f "$work/backups/first/CURRENT" ] && pass || fail "backup: no store in $work/backups/first"
expect_code 3 "$C" backup ../escape
expect_err 'INVALID_ARGUMENT|inside --backup-dir'

# schedule next: a spec's instants in its zone (Berlin springs forward on
# 2026-03-29: 02:30 stands for 03:00 CEST), as a table and as JSON; bad specs
# named by field and position; usage errors before any call
expect_code 0 "$C" schedule next --cron '30 2 * * *' --tz Europe/Berlin \
  --after 2026-03-28T00:00:00Z -c 3
expect_out '^1 +2026-03-28T01:30:00Z +2026-03-28 02:30:00 CET'
expect_out '^2 +2026-03-29T01:00:00Z +2026-03-29 03:00:00 CEST'
expect_out '^3 +2026-03-30T00:30:00Z +2026-03-30 02:30:00 CEST'
# Past the transitions the zone file lists (2037), its footer's rule: noon
# in Berlin in July 2038 is 10:00 UTC, shown as CEST.
expect_code 0 "$C" schedule next --cron '0 12 * * *' --tz Europe/Berlin \
  --after 2038-07-01T00:00:00Z -c 1
expect_out '^1 +2038-07-01T10:00:00Z +2038-07-01 12:00:00 CEST'
expect_code 0 "$C" schedule next --every 90m --start 2026-01-01T00:00:00Z \
  --after 2026-01-01T00:00:00Z --max-runs 2 -o json
expect_out '^\{"instants":\["2026-01-01T01:30:00Z","2026-01-01T03:00:00Z"\]\}$'
expect_code 3 "$C" schedule next --cron '0 9 * * MON-FUN'
expect_err 'spec.cron: day-of-week field at character 13'
expect_code 3 "$C" schedule next --cron '@daily' --tz Europe/Atlantis
expect_err "unknown time zone 'Europe/Atlantis'"
expect_code 1 "$C" schedule next
expect_code 1 "$C" schedule next --cron '@daily' --every 1h

# schedule set|get|ls|rm: a stored schedule's runs reach a watcher as events
# with its key and run number; removed, it is gone
expect_code 0 "$C" schedule set tick hello --every 1s -n sched
expect_out '^tick +[0-9]+ +every 1s +0 +- +20'
expect_code 0 "$C" watch -n sched --count 2 -o json
expect_out '"key":"tick".*"schedule_run":"1"'
expect_out '"schedule_run":"2"'
expect_code 0 "$C" schedule get tick -n sched
expect_out '^catch-up latest \(limit 100\), overlap allow, jitter 0s$'
expect_code 0 "$C" schedule set nightly report --cron '0 3 * * *' \
  --tz Europe/Berlin --overlap skip --catch-up none -n sched -o json
expect_out '"overlap":"OVERLAP_SKIP"'
expect_out '"catch_up":"CATCH_UP_NONE"'
expect_code 1 "$C" schedule set x --every 1s --overlap sometimes
expect_code 0 "$C" schedule ls -n sched
expect_out '^nightly +[0-9]+ +0 3 \* \* \* Europe/Berlin +0 +- +20[0-9-]+T0[12]:00:00Z'
expect_out '^tick '
expect_code 0 "$C" schedule ls -n sched -o json --prefix night
expect_out '^\{"namespace":"sched","key":"nightly"'
expect_code 0 "$C" schedule pause nightly -n sched
expect_out '^nightly .* paused '
expect_code 0 "$C" schedule trigger nightly -n sched
expect_out '^nightly +[0-9]+ +0 3 .* +1 +- +paused '
expect_code 0 "$C" schedule resume nightly -n sched -o json
expect_out '"runs":"1"'
expect_code 4 "$C" schedule pause nothing -n sched
expect_code 0 "$C" schedule rm tick -n sched
expect_out '^removed schedule tick \(version [0-9]+\)$'
expect_code 4 "$C" schedule get tick -n sched
expect_code 4 "$C" schedule rm tick -n sched
expect_code 3 "$C" schedule set nightly x --cron '@daily' --if-absent -n sched
expect_err 'ALREADY_EXISTS'
expect_code 1 "$C" schedule set x --every 1s --catch-up sometimes
expect_code 1 "$C" schedule set x

# ack: unknown ids are not found
expect_code 4 "$C" ack 123456 -n q
expect_out 'unknown 123456'

echo "delayctl: $passes passed, $failures failed"
[ "$failures" -eq 0 ]
