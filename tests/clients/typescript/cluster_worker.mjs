// The TypeScript Worker on a three-node cluster (run_with_cluster.sh): under
// a steady load, the node serving the worker's stream is killed (kill -9),
// then a second node is stopped (SIGTERM). Every timer whose set was
// acknowledged reaches the handler (none lost), none early, and the handler
// runs again for at most what could be in flight at the two faults.
//
// Usage: DELAYD_LIB=<built package dir> node cluster_worker.mjs
//        (DELAYD_ENDPOINT: the nodes; DELAYD_TEST_NODE_PIDS: their pids)
import assert from 'node:assert/strict';
import {join} from 'node:path';
import {setTimeout as sleep} from 'node:timers/promises';

const d = await import(join(process.env.DELAYD_LIB, 'dist/esm/index.js'));
const CONCURRENCY = 8;
const pids = process.env.DELAYD_TEST_NODE_PIDS.split(',').map(Number);
const client = new d.Client({timeoutMs: 5000});
const runs = new Map();
const early = [];

const worker = new d.Worker('jobs', async (event) => {
  // (Date.now() has whole milliseconds: early by a millisecond or more.)
  if (Date.now() < Number(event.fireTimeNs / 1_000_000n)) early.push(event.key);
  runs.set(event.key, (runs.get(event.key) ?? 0) + 1);
  await sleep(2);
}, {concurrency: CONCURRENCY, ackTimeout: 2000});
worker.start();

const acked = new Set();
// Sets acknowledged in each phase: before the kill, between the faults,
// after the stop (each must have load: the faults happen under it).
const perPhase = [0, 0, 0];
let phase = 0;
let producing = true;
const producer = (async () => {
  for (let i = 0; producing; i++) {
    const key = `job-${i}`;
    try {
      await client.setTimer(key, 'x', {delay: 300, namespace: 'jobs'});
      acked.add(key);
      perPhase[phase]++;
    } catch (e) {
      if (!(e instanceof d.DelaydError)) throw e;
      // Unanswered after its retries: it may or may not exist.
    }
    await sleep(10);  // the load's pace
  }
})();

// The load's phases: steady, after the kill, after the stop. Each lasts its
// length and until 20 sets were acknowledged in it (30 s at most: CPU
// contention lengthens a phase, it does not empty it).
async function endPhase(ms, then) {
  await sleep(ms);  // the phase's length under load, not a wait
  const deadline = Date.now() + 30_000;
  while (perPhase[phase] < 20 && Date.now() < deadline) {
    await sleep(20);  // (polls a condition, bounded)
  }
  then();
  if (phase < 2) phase++;
}
await endPhase(1500, () => process.kill(pids[0], 'SIGKILL'));  // the stream's node
await endPhase(2000, () => process.kill(pids[1], 'SIGTERM'));
await endPhase(1500, () => { producing = false; });
await producer;

let lost = [];
const deadline = Date.now() + 60_000;
for (;;) {
  lost = [...acked].filter((k) => !runs.has(k));
  if (lost.length === 0 || Date.now() > deadline) break;
  await sleep(50);  // (polls a condition, bounded)
}
await worker.stop();
client.close();
const repeats = [...runs.values()].reduce((a, n) => a + n - 1, 0);
console.log(`${acked.size} timers acknowledged (${perPhase.join(' / ')} by phase), ` +
            `${lost.length} lost, ${repeats} handled again, ${early.length} early`);
assert.ok(perPhase.every((n) => n >= 20), 'the load was too small in a phase');
assert.deepEqual(lost.slice(0, 10), [], 'lost');
assert.deepEqual(early.slice(0, 10), [], 'early');
assert.ok(repeats <= 2 * CONCURRENCY, `${repeats} repeats`);
