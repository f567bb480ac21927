#!/usr/bin/env bash
# The client libraries' workers, side by side, in rounds (ROUNDS, default
# 3), each pair run back to back on one daemon so that the ratios hold on a
# noisy machine:
#   - each library's Worker against a loop written by hand over the raw
#     stubs in its language (throughput at concurrency 32 and 1; lateness
#     at 2,000 events/s, 50 ms ahead): Subscribe with an Ack call per
#     message ("raw"), and at concurrency 32 also a Work stream with the
#     Ack a message on it ("rawwork") and, in Python, the Subscribe loop on
#     a channel that reads on the loop's thread, as the Worker's ("rawst");
#     and Python's AsyncWorker (a coroutine handler) against the Work loop
#     on grpc.aio ("rawaio");
#   - the TypeScript Worker against BullMQ's Worker at the same concurrency
#     (1, 32, 256; Redis without persistence, as delayd --in-memory).
# A fifth number after a TypeScript throughput figure's is a warm-up: that
# many jobs handled off the clock first, so that the figure is of a process
# V8 has compiled (a worker's steady state) rather than of its start.
# TRIALS (default 1) runs each pair that many times in a round, the two
# alternating, and takes each one's median: a burst of load from elsewhere
# on a shared machine then moves one trial, not the round's ratio.
# Prints every run's JSON line, then per figure the ratio in each round and
# their range (for lateness, also the daemon's own p99 where a side reads
# it: fired_at minus the due time).
#
# BUSY=N (default 0) runs N busy loops beside them throughout, as another
# process on a loaded machine would: a worker then has less than a core, and
# its CPU per event sets its rate.
#
# DELAYD (default build/server/delayd) is the daemon they run against;
# DELAYD_TS_LIB (default client/typescript) the built TypeScript library.
#
# Usage: tests/bench/clients/run.sh   (from the repository root, after the
#        build; installs the TypeScript library's and BullMQ's npm packages)
set -euo pipefail
cd "$(dirname "$0")/../../.."
rounds=${ROUNDS:-3}
trials=${TRIALS:-1}
work=$(mktemp -d)
daemon_pid= redis_pid= busy_pids=()
cleanup() {
  [ -z "$daemon_pid" ] || kill "$daemon_pid" 2>/dev/null || true
  [ ${#busy_pids[@]} -eq 0 ] || kill "${busy_pids[@]}" 2>/dev/null || true
  [ -z "$redis_pid" ] || kill "$redis_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

if ! command -v redis-server >/dev/null; then
  sudo=; [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get install -y --no-install-recommends redis-server redis-tools >&2
fi
[ -d tests/bench/node/node_modules/bullmq ] || npm ci --prefix tests/bench/node >&2
[ -f client/typescript/dist/esm/index.js ] ||
  (cd client/typescript && npm ci --ignore-scripts && npm run build) >&2

# Waits (bounded) until $1 prints a line matching $2 into file $3.
wait_for() {
  local deadline=$((SECONDS + 20))
  until grep -qE "$2" "$3"; do
    [ $SECONDS -lt $deadline ] || { cat "$3" >&2; echo "$1 did not start" >&2; exit 1; }
    sleep 0.05  # Polls the log, bounded by the deadline.
  done
}

"${DELAYD:-build/server/delayd}" --in-memory --listen 127.0.0.1:0 >"$work/delayd.log" 2>&1 &
daemon_pid=$!
wait_for delayd ' port [0-9]+' "$work/delayd.log"
export DELAYD_ENDPOINT=127.0.0.1:$(grep -oE ' port [0-9]+' "$work/delayd.log" | head -1 | grep -oE '[0-9]+')

redis_port=$(/usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$work" --save "" \
  >"$work/redis.log" 2>&1 &
redis_pid=$!
wait_for redis-server 'Ready to accept connections' "$work/redis.log"
export REDIS_PORT=$redis_port BULLMQ_DIR=$PWD/tests/bench/node
export DELAYD_TS_LIB=${DELAYD_TS_LIB:-$PWD/client/typescript}

for ((i = 0; i < ${BUSY:-0}; i++)); do
  /usr/bin/python3 -c 'while True: pass' &
  busy_pids+=($!)
done

py() { /usr/bin/python3 tests/bench/clients/worker_bench.py client/python "$@"; }
ts() { node tests/bench/clients/worker_bench.mjs "$@"; }
results=$work/results
# Each pair: language, baseline, library, figure and its arguments. PAIRS
# (the same, separated by ';') runs others instead, e.g.
# PAIRS='py rawaio async throughput 50000 32'. The Python pairs at
# concurrency 32 take 200,000 events (1.2-1.5 s a run): over 50,000 (0.35 s)
# a loop's start weighs on its rate, and the raw Work loop's more than the
# Worker's (its stream and request thread start with it).
pairs=("py raw library throughput 200000 32"
       "py rawwork library throughput 200000 32"
       "py rawst library throughput 200000 32"
       "py raw library throughput 10000 1"
       "py raw library lateness 2000 10 50 32"
       "py rawaio async throughput 200000 32"
       "py rawaio async lateness 2000 10 50 32"
       "ts raw library throughput 50000 32"
       "ts rawwork library throughput 50000 32"
       "ts rawwork library throughput 50000 32 20000"
       "ts raw library lateness 2000 10 50 32"
       "ts rawwork library lateness 2000 10 50 32"
       "ts bullmq library throughput 50000 32"
       "ts bullmq library throughput 50000 32 20000"
       "ts bullmq library throughput 10000 1"
       "ts bullmq library throughput 50000 256"
       "ts bullmq library lateness 2000 10 50 32")
[ -z "${PAIRS:-}" ] || IFS=';' read -ra pairs <<<"$PAIRS"
for ((round = 1; round <= rounds; round++)); do
  for pair in "${pairs[@]}"; do
    read -r lang base lib kind rest <<<"$pair"
    for ((trial = 1; trial <= trials; trial++)); do
      for mode in "$base" "$lib"; do
        # shellcheck disable=SC2086 # (rest: the figure's arguments)
        line=$($lang "$mode" "$kind" $rest)
        echo "$line"
        echo "$round $lang $base $lib $kind ${rest// /_} $line" >>"$results"
      done
    done
  done
done

/usr/bin/python3 - "$results" <<'EOF'
import collections, json, statistics, sys
trials = collections.defaultdict(list)
for line in open(sys.argv[1]):
    rnd, lang, base, lib, kind, args, js = line.split(" ", 6)
    r = json.loads(js)
    trials[(lang, base, lib, kind, args, rnd, r["mode"])].append(r)
# A round's figure of each mode: the median of its trials, field by field.
runs = collections.defaultdict(dict)
for (lang, base, lib, kind, args, rnd, mode), rs in trials.items():
    runs[(lang, base, lib, kind, args)].setdefault(rnd, {})[mode] = {
        k: statistics.median(r[k] for r in rs)
        for k in rs[0] if isinstance(rs[0][k], (int, float))}
print("\nfigure: library against the baseline, per round [range]")
for (lang, base, lib, kind, args), by_round in runs.items():
    pairs = [r for r in by_round.values() if base in r and lib in r]
    if kind == "throughput":
        ratios = [r[lib]["per_second"] / r[base]["per_second"] for r in pairs]
        text = " ".join(f"{x:.2f}x" for x in ratios)
        print(f"{lang} {kind} {args} {lib} vs {base}: {text} [{min(ratios):.2f}-{max(ratios):.2f}x]")
    else:
        for q in ("p50_ms", "p99_ms"):
            diff = [r[lib][q] - r[base][q] for r in pairs]
            ratio = [r[lib][q] / max(r[base][q], 1e-9) for r in pairs]
            print(f"{lang} {kind} {args} {q} {lib} vs {base}: "
                  + " ".join(f"{d:+.3f} ms ({x:.2f}x)" for d, x in zip(diff, ratio))
                  + f" [{min(ratio):.2f}-{max(ratio):.2f}x]")
        # The daemon's own part (fired_at minus due), where a side has it.
        for mode in (base, lib):
            own = [r[mode]["daemon_p99_ms"] for r in pairs
                   if "daemon_p99_ms" in r[mode]]
            if own:
                print(f"{lang} {kind} {args} daemon_p99_ms under {mode}: "
                      + " ".join(f"{x:.3f} ms" for x in own))
EOF
