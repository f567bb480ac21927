// Push delivery against a gRPC worker that acknowledges at once (the
// TypeScript library's Worker), on the same daemon, each with CONCURRENCY
// requests (events) in flight. The receiver is an HTTP/1.1 server with
// keep-alive in this process, answering 200 at once. Prints one JSON line.
//
//   throughput: N events due at once (a paused namespace); the clock runs
//       from the resume until every event is acknowledged: events per second.
//   lateness: RATE timers a second for SECONDS, each due DELAY_MS after it
//       is set; lateness is when the receiver (the worker's handler) gets it
//       minus its fire time (p50, p99, ms).
//   blackhole: the lateness run, with BLACKHOLE events due at once on
//       another namespace whose target accepts connections and never
//       answers (timeout 60 s); also the daemon's RSS (DELAYD_PID) at the
//       start, the largest seen, and at the end (MiB).
//
// Usage: node push_bench.mjs worker|push throughput N CONCURRENCY
//        node push_bench.mjs worker|push lateness RATE SECONDS DELAY_MS CONCURRENCY
//        node push_bench.mjs push blackhole BLACKHOLE RATE SECONDS DELAY_MS CONCURRENCY
// Environment: DELAYD_ENDPOINT (host:port), DELAYD_TS_LIB (client/typescript,
// built); delayd runs with --push-allow 127.0.0.1 --push-allow-http.
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import path from 'node:path';
import {pathToFileURL} from 'node:url';

const [mode, kind, ...rest] = process.argv.slice(2);
const args = rest.map(Number);
const delayd = await import(pathToFileURL(path.join(process.env.DELAYD_TS_LIB, 'dist/esm/index.js')).href);
const client = new delayd.Client();
const ns = `push-${mode}-${kind}-${process.pid}`;

async function waitUntil(done, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`${mode} ${kind}: ${what}`);
    await new Promise((r) => setTimeout(r, 5));  // (polls, bounded)
  }
}

// Wall-clock milliseconds with a fraction (Date.now() has whole ones).
const nowMs = () => performance.timeOrigin + performance.now();

const statsOf = async (name) => (await client.stats({namespace: name})).namespaces[0];

// Starts delivery to `handler(fireMs)`; returns {stop()}.
async function deliver(name, handler, concurrency) {
  if (mode === 'worker') {
    let registered;
    const ready = new Promise((r) => { registered = r; });
    const w = new delayd.Worker(name, (e) => handler(Number(e.fireTimeNs / 1_000_000n)), {
      concurrency, client, hooks: {onStream: (s) => s === 'connected' && registered()}});
    w.start();
    await ready;
    return {stop: () => w.stop()};
  }
  const server = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      handler(Date.parse(req.headers['delayd-fire-time']));
      res.writeHead(200, {'content-length': '0'});
      res.end();
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  await setTarget(name, {url: `http://127.0.0.1:${server.address().port}/`, maxInFlight: concurrency});
  return {stop: async () => {
    await setTarget(name, null);
    server.closeAllConnections();
    await new Promise((r) => server.close(r));
  }};
}

function setTarget(name, push) {
  return client.setPolicy({push}, {namespace: name});
}

async function throughput(n, concurrency) {
  await client.pause({namespace: ns});
  for (let i = 0; i < n; i += 1000) {
    const b = client.batch({namespace: ns});
    for (let j = i; j < Math.min(n, i + 1000); j++) b.set(`k${j}`, '', {delay: 0});
    await b.commit();
  }
  const d = await deliver(ns, () => {}, concurrency);
  const t0 = performance.now();
  await client.resume({namespace: ns});
  await waitUntil(async () => BigInt((await statsOf(ns)).eventsAcked) >= BigInt(n), 120_000,
    'not all acknowledged');
  const seconds = (performance.now() - t0) / 1000;
  await d.stop();
  return {events: n, seconds, per_second: n / seconds};
}

// `rate` timers a second in groups every 10 ms, each due `delayMs` later.
async function lateness(rate, seconds, delayMs, concurrency) {
  // The garbage of what came before (the black hole's 100,000 sets) is
  // collected now, not during the measurement (run with --expose-gc).
  globalThis.gc?.();
  const late = [];
  const d = await deliver(ns, (fireMs) => late.push(nowMs() - fireMs), concurrency);
  const perTick = rate / 100;
  const t0 = Date.now();
  for (let tick = 0; tick < seconds * 100; tick++) {
    const due = t0 + tick * 10;
    const wait = due - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));  // the load's pace
    const b = client.batch({namespace: ns});
    for (let i = 0; i < perTick; i++) {
      b.set(`t${tick}-${i}`, '', {at: new Date(due + delayMs + Math.floor((i * 10) / perTick))});
    }
    await b.commit();
  }
  const n = rate * seconds;
  await waitUntil(() => late.length >= n, 60_000, `${late.length} of ${n} delivered`);
  await d.stop();
  late.sort((a, b) => a - b);
  const pick = (q) => late[Math.min(late.length - 1, Math.floor(q * late.length))];
  return {events: late.length, p50_ms: pick(0.5), p99_ms: pick(0.99)};
}

const rssMiB = () => {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${process.env.DELAYD_PID}/status`, 'utf8'));
  return Number(m[1]) / 1024;
};

async function blackhole(n, rate, seconds, delayMs, concurrency) {
  // Accepts, reads, never answers.
  const sockets = [];
  const hole = net.createServer((s) => { sockets.push(s); s.resume(); });
  await new Promise((r) => hole.listen(0, '127.0.0.1', r));
  const bh = `${ns}-hole`;
  await client.pause({namespace: bh});
  for (let i = 0; i < n; i += 1000) {
    const b = client.batch({namespace: bh});
    for (let j = i; j < Math.min(n, i + 1000); j++) b.set(`k${j}`, 'x'.repeat(100), {delay: 0});
    await b.commit();
  }
  await setTarget(bh, {url: `http://127.0.0.1:${hole.address().port}/`, timeout: 60_000});
  const start = rssMiB();
  let peak = start;
  const sample = setInterval(() => { peak = Math.max(peak, rssMiB()); }, 100);
  await client.resume({namespace: bh});
  const result = await lateness(rate, seconds, delayMs, concurrency);
  const held = (await statsOf(bh)).inFlightEvents;
  clearInterval(sample);
  const end = rssMiB();
  await setTarget(bh, null);
  sockets.forEach((s) => s.destroy());
  hole.close();
  return {...result, blackhole_events: n, blackhole_in_flight: Number(held),
          rss_start_mib: start, rss_peak_mib: peak, rss_end_mib: end};
}

await client.setTimer('~anchor', '', {delay: 3_600_000, namespace: ns});
const run = {throughput, lateness, blackhole}[kind];
console.log(JSON.stringify({mode, kind, ...(await run(...args))}));
client.close?.();
process.exit(0);
