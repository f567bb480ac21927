// BullMQ, what a Node.js team would pick instead of delayd, at a steady rate:
// one Queue.add at a time with a delay, one Worker (concurrency 1) taking
// each job as it comes due. Prints one JSON line: jobs added and processed,
// lateness (processed minus timestamp plus delay, ms: BullMQ's clock is in
// milliseconds) and this process's own CPU.
//
// Usage: node bullmq_peer.js PORT RATE SECONDS DELAY_MS
// (Redis on 127.0.0.1:PORT, started and stopped by tests/bench/peers.sh.)
'use strict';
const { Queue, Worker } = require('bullmq');

async function main() {
  const [port, rate, seconds, delay] = process.argv.slice(2).map(Number);
  if (!port || !rate || !seconds || delay === undefined) {
    console.error('usage: bullmq_peer.js PORT RATE SECONDS DELAY_MS');
    process.exit(2);
  }
  const connection = { host: '127.0.0.1', port };
  const queue = new Queue('steady', { connection });
  const late = [];
  const n = rate * seconds;
  let done;
  const all = new Promise((resolve) => { done = resolve; });
  const worker = new Worker('steady', async (job) => {
    late.push(Date.now() - (job.timestamp + job.opts.delay));
    if (late.length === n) done();
  }, { connection, concurrency: 1 });
  await worker.waitUntilReady();

  const cpu0 = process.cpuUsage();
  const start = Date.now();
  for (let i = 0; i < n; i++) {
    const due = start + (i * 1000) / rate;
    const wait = due - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    await queue.add('job', { i }, { delay, removeOnComplete: true });
  }
  const addSeconds = (Date.now() - start) / 1000;
  // Bounded: every job due by now plus the delay, with 20 s to spare.
  const timeout = new Promise((r) => setTimeout(r, delay + 20000));
  await Promise.race([all, timeout]);
  const wall = (Date.now() - start) / 1000;
  const cpu = process.cpuUsage(cpu0);
  await worker.close();
  await queue.close();

  late.sort((a, b) => a - b);
  const pick = (q) => (late.length ? late[Math.min(late.length - 1,
    Math.floor(q * late.length))] : NaN);
  console.log(JSON.stringify({
    added: n,
    processed: late.length,
    add_seconds: addSeconds,
    wall_seconds: wall,
    p50_ms: pick(0.5),
    p99_ms: pick(0.99),
    max_ms: late.length ? late[late.length - 1] : NaN,
    node_cores: (cpu.user + cpu.system) / 1e6 / wall,
  }));
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
