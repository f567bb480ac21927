// What users would pick instead of delayd on PostgreSQL, driven the way
// tests/bench/pg_bench.cc drives delayd, on databases of the same server:
//   ingest URL_BOSS URL_GRAPHILE SECONDS ROUNDS
//     jobs/s of delayed jobs (16 B key, 100 B payload, due in 1 h):
//     pg-boss `send` with startAfter (64 in flight) and `insert` (100 per
//     call, 16 in flight); Graphile Worker `addJob` with runAt (64 in
//     flight) and its batch form, graphile_worker.add_jobs (100 per call,
//     16 in flight); medians of ROUNDS alternating rounds.
//   firing URL_BOSS URL_GRAPHILE SECONDS
//     lateness at the worker (run time minus due time) at a steady 2k jobs/s,
//     each due 50 ms after it is added, for each.
// Prints one line per figure.
'use strict';
const PgBoss = require('pg-boss');
const { Logger, makeWorkerUtils, run } = require('graphile-worker');

const quiet = new Logger(() => () => {});
const { Pool } = require('pg');

const PAYLOAD = '0123456789abcdef'.repeat(7).slice(0, 100);
const median = (v) => [...v].sort((a, b) => a - b)[Math.floor(v.length / 2)];

// Runs `op(i)` with `inFlight` calls at a time for `seconds`: ops/s.
async function closedLoop(inFlight, seconds, op) {
  const until = Date.now() + seconds * 1000;
  let done = 0;
  let next = 0;
  const start = Date.now();
  await Promise.all(Array.from({ length: inFlight }, async () => {
    while (Date.now() < until) {
      await op(next++);
      done++;
    }
  }));
  return done / ((Date.now() - start) / 1000);
}

async function bossIngest(url, seconds, rounds) {
  const boss = new PgBoss({ connectionString: url, max: 16 });
  boss.on('error', () => {});
  await boss.start();
  await boss.createQueue('bench');
  const single = [];
  const batch = [];
  for (let r = 0; r < rounds; r++) {
    single.push(await closedLoop(64, seconds, (i) => boss.send(
        'bench', { key: `k${r}-${i}`.padEnd(16, '0'), p: PAYLOAD },
        { startAfter: new Date(Date.now() + 3600e3) })));
    batch.push(100 * await closedLoop(16, seconds, (i) => boss.insert(
        Array.from({ length: 100 }, (_, j) => ({
          name: 'bench',
          data: { key: `b${r}-${i}-${j}`.padEnd(16, '0'), p: PAYLOAD },
          startAfter: new Date(Date.now() + 3600e3),
        })))));
  }
  await boss.stop({ graceful: false, wait: true });
  return { single: median(single), batch: median(batch) };
}

async function graphileIngest(url, seconds, rounds) {
  const utils = await makeWorkerUtils({ connectionString: url });
  await utils.migrate();
  const pool = new Pool({ connectionString: url, max: 16 });
  const single = [];
  const batch = [];
  for (let r = 0; r < rounds; r++) {
    single.push(await closedLoop(64, seconds, (i) => utils.addJob(
        'bench', { key: `k${r}-${i}`.padEnd(16, '0'), p: PAYLOAD },
        { runAt: new Date(Date.now() + 3600e3) })));
    batch.push(100 * await closedLoop(16, seconds, (i) => pool.query(
        'SELECT count(*) FROM graphile_worker.add_jobs((SELECT ' +
        'array_agg(json_populate_record(null::graphile_worker.job_spec, x)) ' +
        'FROM json_array_elements($1::json) x))',
        [JSON.stringify(Array.from({ length: 100 }, (_, j) => ({
          identifier: 'bench',
          payload: { key: `b${r}-${i}-${j}`.padEnd(16, '0'), p: PAYLOAD },
          run_at: new Date(Date.now() + 3600e3).toISOString(),
        })))])));
  }
  await pool.end();
  await utils.release();
  return { single: median(single), batch: median(batch) };
}

function percentiles(late) {
  const s = [...late].sort((a, b) => a - b);
  const at = (q) => s[Math.min(s.length - 1, Math.floor(q * s.length))];
  return `n=${s.length} p50 ${at(0.5).toFixed(2)} ms p99 ${at(0.99).toFixed(2)} ms`;
}

// Adds 2k jobs/s for `seconds`, each due 50 ms later, with `add(i, due)`;
// resolves once every job ran (or 30 s after the last was added).
async function steady(seconds, add, ran) {
  const n = 2000 * seconds;
  const start = Date.now();
  for (let i = 0; i < n; i++) {
    const wait = start + i / 2 - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    add(i, Date.now() + 50);
  }
  const deadline = Date.now() + 30000;
  while (ran.length < n && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function bossFiring(url, seconds) {
  const boss = new PgBoss({ connectionString: url, max: 16 });
  boss.on('error', () => {});
  await boss.start();
  await boss.createQueue('fire');
  const late = [];
  // One pg-boss worker fetches a batch, then waits out its polling
  // interval: 16 of them (as its docs suggest for more throughput) take up
  // to 3,200 jobs/s at 100 per fetch every 0.5 s.
  for (let w = 0; w < 16; w++) {
    await boss.work('fire', { batchSize: 100, pollingIntervalSeconds: 0.5 },
        async (jobs) => {
          const now = Date.now();
          for (const job of jobs) late.push(now - job.data.due);
        });
  }
  await steady(seconds, (i, due) => boss.send('fire', { due, p: PAYLOAD },
      { startAfter: new Date(due) }), late);
  await boss.stop({ graceful: false, wait: true });
  return late;
}

async function graphileFiring(url, seconds) {
  const late = [];
  const runner = await run({
    connectionString: url,
    concurrency: 16,
    pollInterval: 500,
    noHandleSignals: true,
    logger: quiet,
    parsedCronItems: [],
    taskList: {
      fire: async (payload) => { late.push(Date.now() - payload.due); },
    },
  });
  const utils = await makeWorkerUtils({ connectionString: url, logger: quiet });
  await steady(seconds, (i, due) => utils.addJob('fire', { due, p: PAYLOAD },
      { runAt: new Date(due) }), late);
  await utils.release();
  await runner.stop();
  return late;
}

async function main() {
  const [mode, bossUrl, graphileUrl, secondsArg, roundsArg] =
      process.argv.slice(2);
  const seconds = Number(secondsArg || 5);
  const rounds = Number(roundsArg || 3);
  if (mode === 'ingest') {
    const b = await bossIngest(bossUrl, seconds, rounds);
    const g = await graphileIngest(graphileUrl, seconds, rounds);
    console.log(`peers ingest (medians of ${rounds}): pg-boss send ` +
        `${b.single.toFixed(0)}/s, insert ${b.batch.toFixed(0)} jobs/s; ` +
        `Graphile Worker addJob ${g.single.toFixed(0)}/s, add_jobs ` +
        `${g.batch.toFixed(0)} jobs/s`);
  } else if (mode === 'firing') {
    console.log(`pg-boss firing steady 2k/s: ${percentiles(
        await bossFiring(bossUrl, seconds))}`);
    console.log(`Graphile Worker firing steady 2k/s: ${percentiles(
        await graphileFiring(graphileUrl, seconds))}`);
  } else {
    console.error('usage: pg_peers.js ingest|firing URL_BOSS URL_GRAPHILE ' +
        'SECONDS [ROUNDS]');
    process.exit(2);
  }
  process.exit(0);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
