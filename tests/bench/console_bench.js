// The web console under a large namespace: how long the namespace page takes
// to show its figures and its first page of timers with 1 M pending timers,
// against the same page for a namespace of 10 timers in the same daemon and
// the same browser (the baseline); and the daemon's RSS while the page stays
// open (polling every 2 s) against its RSS before.
//
// Usage (after the console test's `npm ci` in the build tree):
//   NODE_PATH=build/tests/console/node/node_modules \
//     node tests/bench/console_bench.js build-bench/server/delayd [timers] [rounds]
'use strict';

const {spawn} = require('node:child_process');
const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const {chromium} = require('playwright-core');

const [delaydBin, timersArg, roundsArg] = process.argv.slice(2);
const TIMERS = Number(timersArg || 1000000);
const ROUNDS = Number(roundsArg || 7);
let base = '';

async function until(fn, ms, what) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const v = await fn();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`timed out: ${what}`);
}
async function api(method, p, body) {
  const res = await fetch(base + p, {method, body: body && JSON.stringify(body),
    headers: {'Content-Type': 'application/json'}});
  const json = await res.json();
  if (!res.ok) throw new Error(`${method} ${p}: ${JSON.stringify(json)}`);
  return json;
}
function rssKiB(pid) {
  const m = /VmRSS:\s+(\d+)/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m[1]);
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

async function fill(ns, n) {
  const payload = Buffer.from('{"order":12345,"total":"99.90"}').toString('base64');
  const per = 1000, inFlight = 4;
  let next = 0;
  async function worker() {
    while (next < n) {
      const from = next;
      next = Math.min(n, next + per);
      const operations = [];
      for (let i = from; i < next; i++) {
        operations.push({set: {namespace: ns, key: `order-${i}`, payload, delay: `${3600 + (i % 86400)}s`}});
      }
      const r = await api('POST', '/v1/timers:batch', {operations});
      if (r.results.some((x) => x.code)) throw new Error('a set failed');
    }
  }
  await Promise.all(Array.from({length: inFlight}, worker));
}

// Opens the namespace page in a fresh tab; ms until its pending figure and
// its first page of timers are on screen.
async function load(context, ns, expected) {
  const page = await context.newPage();
  const start = performance.now();
  await page.goto(`${base}/#/ns/${ns}/timers`);
  await page.locator('#timers tbody tr').first().waitFor({timeout: 30000});
  await page.locator(`[data-figure="Pending timers"] .value:text-is("${expected.toLocaleString('en-US')}")`)
    .waitFor({timeout: 30000});
  const ms = performance.now() - start;
  return {page, ms};
}

async function main() {
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'delayd-console-bench-'));
  const log = fs.openSync(path.join(work, 'log'), 'w');
  const daemon = spawn(delaydBin, ['--in-memory', '--listen', '127.0.0.1:0',
    '--http-listen', '127.0.0.1:0'], {stdio: ['ignore', log, log]});
  let browser;
  try {
    const port = await until(() => {
      const m = /HTTP\/JSON API on .* \(port (\d+),/.exec(fs.readFileSync(path.join(work, 'log'), 'utf8'));
      return m && m[1];
    }, 20000, 'the daemon');
    base = `http://127.0.0.1:${port}`;
    const t0 = performance.now();
    await fill('big', TIMERS);
    await fill('small', 10);
    console.log(`filled ${TIMERS} timers in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    browser = await chromium.launch({executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
             '--disable-background-networking', '--disable-component-update', '--disable-sync']});
    const context = await browser.newContext({viewport: {width: 1366, height: 800}});
    const big = [], small = [];
    for (let r = 0; r < ROUNDS; r++) {  // interleaved, so a slow spell hits both
      for (const [ns, n, out] of [['small', 10, small], ['big', TIMERS, big]]) {
        const {page, ms} = await load(context, ns, n);
        out.push(ms);
        await page.close();
      }
    }
    console.log(`namespace page, ${TIMERS} timers: median ${median(big).toFixed(0)} ms, ` +
      `range ${Math.min(...big).toFixed(0)}–${Math.max(...big).toFixed(0)} ms`);
    console.log(`namespace page, 10 timers:      median ${median(small).toFixed(0)} ms, ` +
      `range ${Math.min(...small).toFixed(0)}–${Math.max(...small).toFixed(0)} ms`);
    console.log(`ratio of medians: ${(median(big) / median(small)).toFixed(2)}x`);
    // RSS: before, then with the page open for 20 s (10 polls of its
    // figures), sampled every 250 ms.
    const before = rssKiB(daemon.pid);
    const {page} = await load(context, 'big', TIMERS);
    let peak = before;
    const end = Date.now() + 20000;
    while (Date.now() < end) {
      peak = Math.max(peak, rssKiB(daemon.pid));
      await new Promise((r) => setTimeout(r, 250));
    }
    await page.close();
    console.log(`daemon RSS: ${(before / 1024).toFixed(1)} MiB before, peak ${(peak / 1024).toFixed(1)} MiB ` +
      `with the page open 20 s: ${((peak / before - 1) * 100).toFixed(2)} %`);
  } finally {
    if (browser) await browser.close();
    daemon.kill('SIGTERM');
    await new Promise((r) => daemon.once('exit', r));
    fs.rmSync(work, {recursive: true, force: true});
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
