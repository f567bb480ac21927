// The web console in a real browser (Debian's Chromium, driven by
// Playwright) against the real delayd, which this test starts on 127.0.0.1
// (OS-picked ports, in memory, bearer tokens on) and fills through the HTTP
// API. What the page shows is checked against the API; what is done on the
// page (requeue, purge, policy, pause, drain) is checked in the daemon.
// Screenshots of each view are written to SHOTS_DIR.
//
// Usage: node console_test.js DELAYD SHOTS_DIR
'use strict';

const {spawn} = require('node:child_process');
const crypto = require('node:crypto');
const fs = require('node:fs');
const http = require('node:http');
const os = require('node:os');
const path = require('node:path');
const {chromium} = require('playwright-core');

const [delaydBin, shotsDir] = process.argv.slice(2);
const TIMEOUT = 15000;  // any one wait, in ms
let base = '';
const token = crypto.randomBytes(16).toString('hex');

function check(cond, what) {
  if (!cond) throw new Error(`failed: ${what}`);
  console.log(`ok - ${what}`);
}

// Polls `fn` until it returns a truthy value, for at most TIMEOUT ms.
async function until(fn, what) {
  const end = Date.now() + TIMEOUT;
  let last;
  while (Date.now() < end) {
    last = await fn();
    if (last) return last;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what} (last: ${JSON.stringify(last)})`);
}

async function api(method, p, body) {
  const res = await fetch(base + p, {
    method,
    headers: {Authorization: `Bearer ${token}`, 'Content-Type': 'application/json'},
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await res.json();
  if (!res.ok) throw new Error(`${method} ${p}: ${res.status} ${JSON.stringify(json)}`);
  return json;
}
const b64 = (s) => Buffer.from(s).toString('base64');

async function startDaemon(work) {
  const digest = crypto.createHash('sha256').update(token).digest('hex');
  fs.writeFileSync(path.join(work, 'tokens'), `sha256:${digest} * admin\n`);
  const log = fs.openSync(path.join(work, 'delayd.log'), 'w');
  const child = spawn(delaydBin, [
    '--in-memory', '--listen', '127.0.0.1:0', '--http-listen', '127.0.0.1:0',
    '--auth-tokens', path.join(work, 'tokens'), '--push-allow', '127.0.0.1',
    '--push-allow-http',
  ], {stdio: ['ignore', log, log]});
  const port = await until(() => {
    const m = /HTTP\/JSON API on .* \(port (\d+),/.exec(
      fs.readFileSync(path.join(work, 'delayd.log'), 'utf8'));
    return m && m[1];
  }, 'the HTTP door to listen');
  base = `http://127.0.0.1:${port}`;
  return child;
}

async function fill() {
  for (let i = 0; i < 120; i++) {
    await api('PUT', `/v1/namespaces/orders/timers/order-${i}`,
      {payload: b64(JSON.stringify({order: i, total: 10 + i})), delay: '3600s'});
  }
  for (let i = 0; i < 7; i++) {
    await api('PUT', `/v1/namespaces/mail/timers/digest-${i}`, {delay: '600s'});
  }
  // Three dead letters in "jobs": one attempt each, nacked with an error.
  await api('PUT', '/v1/namespaces/jobs/policy', {policy: {maxAttempts: 1}});
  for (const k of ['charge-1', 'charge-2', 'charge-3']) {
    await api('PUT', `/v1/namespaces/jobs/timers/${k}`, {payload: b64(`{"card":"${k}"}`), delay: '0s'});
  }
  const ids = [];
  while (ids.length < 3) {
    const r = await api('POST', '/v1/namespaces/jobs/events:pull', {maxEvents: 10, wait: '5s'});
    for (const e of r.events || []) ids.push(e.id);
  }
  await api('POST', '/v1/namespaces/jobs/events:nack', {eventIds: ids, error: 'card declined'});
  await until(async () => {
    const s = await api('GET', '/v1/namespaces/jobs/stats');
    return s.namespaces[0].deadLetters === '3';
  }, 'three dead letters');
}

async function run(page) {
  const shot = (name) => page.screenshot({path: path.join(shotsDir, `${name}.png`), fullPage: true});
  await page.goto(base + '/');

  // Tokens are on: a prompt first; a wrong token is refused and asked again.
  await page.fill('#token', 'not-the-token');
  await page.click('text=Sign in');
  await page.locator('text=This daemon asks for a token').waitFor({timeout: TIMEOUT});
  await page.fill('#token', token);
  await page.click('text=Sign in');

  // The namespaces at a glance, as Stats has them.
  const row = (ns) => page.locator(`#namespaces tr[data-ns="${ns}"]`);
  await row('orders').waitFor({timeout: TIMEOUT});
  const stats = await api('GET', '/v1/stats');
  for (const n of stats.namespaces) {
    for (const f of ['pendingTimers', 'deadLetters']) {
      const shown = await row(n.namespace).locator(`td[data-field="${f}"]`).textContent();
      check(shown.replace(/,/g, '') === n[f], `${n.namespace} ${f} shows ${n[f]}`);
    }
  }
  const pendingCard = await page.locator('[data-figure="Pending timers"] .value').textContent();
  check(pendingCard.replace(/,/g, '') === stats.pendingTimers, `the pending card shows ${stats.pendingTimers}`);
  await page.locator('svg.chart polyline').first().waitFor({state: 'attached', timeout: TIMEOUT});
  await shot('namespaces');
  const theme = () => page.evaluate(() => document.documentElement.dataset.theme);
  const before = await theme();
  await page.click('button#theme');
  const after = await theme();
  check(['dark', 'light'].includes(before) && after !== before,
    `the theme switches from ${before} to ${after}`);
  await shot('namespaces-other-theme');
  await page.click('button#theme');

  // Timers: a key prefix, paging.
  await page.click('#namespaces a:text-is("orders")');
  await page.locator('#timers tbody tr').first().waitFor({timeout: TIMEOUT});
  check(await page.locator('#timers tbody tr').count() === 50, 'the first page holds 50 timers');
  await page.fill('#prefix', 'order-11');
  await page.click('text=Search');
  const listed = await api('GET', '/v1/namespaces/orders/timers?keyPrefix=order-11&pageSize=50');
  await until(async () => (await page.locator('#timers tbody tr').count()) === listed.timers.length,
    'the prefix search');
  const firstKey = await page.locator('#timers tbody tr td').first().textContent();
  check(firstKey === listed.timers[0].key, `the search lists ${listed.timers.length} timers from ${firstKey}`);
  check((await page.locator('#timers tbody').textContent()).includes('"order":11'), 'payloads are previewed');
  await shot('timers');

  // Paging: Next and Previous go a page at a time (none of them a search).
  const pageShown = (n) => until(async () =>
    (await page.getAttribute('#page-info', 'data-page')) === String(n) &&
    !(await page.locator('#next').isDisabled() && await page.locator('#prev').isDisabled()), `page ${n}`);
  const keysShown = () => page.locator('#timers tbody tr td:first-child').allTextContents();
  await page.fill('#prefix', '');
  await page.click('text=Search');
  await pageShown(1);
  const p1 = await keysShown();
  await page.click('#next');
  await pageShown(2);
  const p2 = await keysShown();
  check(p1.length === 50 && p2.length === 50 && !p2.some((k) => p1.includes(k)),
    'Next shows the second page: 50 other timers');
  await page.click('#next');
  await until(async () => (await page.getAttribute('#page-info', 'data-page')) === '3', 'page 3');
  const p3 = await keysShown();
  check(p3.length === 20 && !p3.some((k) => p1.includes(k) || p2.includes(k)),
    'the third page holds the last 20');
  check(await page.locator('#next').isDisabled(), 'no page after the last');
  await page.click('#prev');
  await pageShown(2);
  check(JSON.stringify(await keysShown()) === JSON.stringify(p2), 'Previous goes back to page 2');

  // Live events: a timer set now shows up on the page.
  await page.click('text=Live events');
  await page.locator('#watch-status:text("watching")').waitFor({timeout: TIMEOUT});
  await api('PUT', '/v1/namespaces/orders/timers/now-1', {payload: b64('hello'), delay: '0s'});
  await page.locator('#events tbody tr:has-text("now-1")').waitFor({timeout: TIMEOUT});
  check(true, 'a fired timer appears in the live events');
  await shot('events');

  // Dead letters: requeue one, purge one (each confirmed).
  await page.goto(`${base}/#/ns/jobs/dead`);
  await page.locator('#dead tbody tr[data-id]').first().waitFor({timeout: TIMEOUT});
  check((await page.locator('#dead tbody tr[data-id]').count()) === 3, 'three dead letters are listed');
  check((await page.locator('#dead tbody').textContent()).includes('card declined'), 'with their last error');
  // Every column header has a name (the first: a select-all box).
  const unnamed = await page.locator('#dead thead th').evaluateAll((ths) =>
    ths.filter((th) => !th.textContent.trim() &&
      !th.querySelector('[aria-label]')).length);
  check(unnamed === 0, 'no empty column header');
  await page.check('#select-all');
  check((await page.locator('#dead tbody input:checked').count()) === 3, 'select-all selects every letter');
  await page.uncheck('#select-all');
  await shot('dead-letters');
  const ids = await page.locator('#dead tbody tr[data-id]').evaluateAll((rows) => rows.map((r) => r.dataset.id));
  await page.check(`#dead tr[data-id="${ids[0]}"] input`);
  await page.click('#requeue');
  await page.click('#confirm-ok');
  await until(async () => {
    const s = await api('GET', '/v1/namespaces/jobs/stats');
    return s.namespaces[0].deadLetters === '2' && s.namespaces[0].readyEvents === '1';
  }, 'the requeued letter to be ready');
  check(true, 'requeue through the page: 2 dead letters left, 1 event ready');
  await page.locator(`#dead tr[data-id="${ids[1]}"] input`).waitFor({timeout: TIMEOUT});
  await page.check(`#dead tr[data-id="${ids[1]}"] input`);
  await page.click('#purge');
  await page.click('button:text("Cancel")');
  check((await api('GET', '/v1/namespaces/jobs/stats')).namespaces[0].deadLetters === '2',
    'a cancelled purge changes nothing');
  await page.click('#purge');
  await page.click('#confirm-ok');
  await until(async () => (await api('GET', '/v1/namespaces/jobs/stats')).namespaces[0].deadLetters === '1',
    'the purge');
  const left = await api('GET', '/v1/namespaces/jobs/deadLetters');
  check(left.deadLetters.length === 1 && left.deadLetters[0].event.id === ids[2],
    'purge through the page: the unselected letter is the one left');

  // Policy: a bad value shows the daemon's error and changes nothing.
  await page.click('text=Policy');
  // (The form is disabled until the policy in force is on it.)
  await page.locator('#p-maxAttempts:enabled').waitFor({timeout: TIMEOUT});
  check(await page.inputValue('#p-maxAttempts') === '1', 'the form shows the policy in force');
  await page.fill('#p-maxDispatchRate', '1e9');
  await page.click('text=Save policy');
  // The error shows right below the field it is about, which is marked,
  // described by it, and focused.
  await page.locator('#e-maxDispatchRate:not([hidden])').waitFor({timeout: TIMEOUT});
  const error = await page.locator('#e-maxDispatchRate').textContent();
  check(error.includes('max_dispatch_rate'), `a bad rate is refused: "${error}"`);
  check(await page.getAttribute('#p-maxDispatchRate', 'aria-invalid') === 'true', 'the field is marked');
  check((await page.getAttribute('#p-maxDispatchRate', 'aria-describedby')).includes('e-maxDispatchRate'),
    'the field is described by its error');
  check(await page.evaluate(() => document.activeElement.id) === 'p-maxDispatchRate', 'the field has focus');
  const gap = await page.evaluate(() => {
    const a = document.getElementById('p-maxDispatchRate').getBoundingClientRect();
    const b = document.getElementById('e-maxDispatchRate').getBoundingClientRect();
    return b.top - a.bottom;
  });
  check(gap >= -1 && gap < 40, `the error is just below the field (${gap.toFixed(0)} px)`);
  check((await api('GET', '/v1/namespaces/jobs/policy')).maxDispatchRate === 0, 'the policy is unchanged');
  await shot('policy-error');
  await page.fill('#p-maxDispatchRate', '50');
  await page.fill('#p-ackTimeout', '45s');
  await page.fill('#p-dedupWindow', '15m');
  await page.click('text=Save policy');
  await page.locator('text=Saved: the policy is in force.').waitFor({timeout: TIMEOUT});
  const saved = await api('GET', '/v1/namespaces/jobs/policy');
  check(saved.maxDispatchRate === 50 && saved.ackTimeout === '45s' && saved.maxAttempts === 1 &&
    saved.dedupWindow === '900s', 'a good edit is saved (the dedup window too), other fields kept');

  // Pause and resume.
  await page.click('#pause');
  await until(async () => (await api('GET', '/v1/namespaces/jobs/policy')).paused === true, 'pause');
  await page.locator('h1 .pill.paused').waitFor({timeout: TIMEOUT});
  check(true, 'pause through the page');
  await page.click('#pause:text("Resume")');
  await until(async () => (await api('GET', '/v1/namespaces/jobs/policy')).paused === false, 'resume');
  check(true, 'resume through the page');
  // Paused by someone else while the form is open (it loaded unpaused): a
  // save changes only what was edited, so the namespace stays paused.
  await api('PUT', '/v1/namespaces/jobs/policy', {policy: {paused: true}, updateMask: 'paused'});
  await page.fill('#p-maxAttempts', '4');
  await page.click('text=Save policy');
  await until(async () => (await api('GET', '/v1/namespaces/jobs/policy')).maxAttempts === 4, 'the edit');
  const kept = await api('GET', '/v1/namespaces/jobs/policy');
  check(kept.paused === true && kept.maxDispatchRate === 50,
    'saving the form keeps a pause made elsewhere and the fields not edited');
  await api('PUT', '/v1/namespaces/jobs/policy', {policy: {paused: false}, updateMask: 'paused'});

  // The push target: set on the page (a secret kept by id), tried with a
  // test event, removed.
  const hits = [];
  const receiver = http.createServer((req, res) => {
    req.resume();
    req.on('end', () => { hits.push(req.headers); res.writeHead(204); res.end(); });
  });
  await new Promise((r) => receiver.listen(0, '127.0.0.1', r));
  try {
    await page.goto(`${base}/#/ns/hooks/push`);
    const url = `http://127.0.0.1:${receiver.address().port}/hook`;
    await page.fill('#t-url', url);
    await page.fill('#t-headers', 'x-team: billing');
    await page.fill('#t-secret', 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw');
    await page.fill('#t-timeout', '2s');
    await page.click('text=Save target');
    await page.locator('#push-ok').waitFor({timeout: TIMEOUT});
    const set = (await api('GET', '/v1/namespaces/hooks/policy')).push;
    check(set.url === url && set.headers[0].name === 'x-team' && set.headers[0].value === 'billing' && set.timeout === '2s' &&
          set.secretIds.length === 1, 'the target saved on the page is in force');
    check(await page.locator('#t-kept input.keep').count() === 1 &&
          await page.inputValue('#t-secret') === '', 'the secret shows by its id only');
    await shot('push');
    // Saved again unchanged: the secret stays.
    await page.click('text=Save target');
    await until(async () => (await api('GET', '/v1/namespaces/hooks/policy')).push.secretIds.length === 1 &&
      await page.locator('#push-ok').count() === 1, 'the second save');
    await page.click('#push-test');
    await page.locator('#push-result >> text=Test event: ack, HTTP 204').waitFor({timeout: TIMEOUT});
    check(hits.length === 1 && hits[0]['delayd-reason'] === 'test' && hits[0]['x-team'] === 'billing' &&
          hits[0]['webhook-signature'].startsWith('v1,'), 'the test event reached the target, signed');
    await page.click('#push-remove');
    await page.click('#confirm-ok');
    await until(async () => (await api('GET', '/v1/namespaces/hooks/policy')).push === undefined, 'removal');
    check(true, 'the target removed through the page');
  } finally {
    receiver.close();
  }

  // Drain, confirmed.
  await page.goto(`${base}/#/ns/mail/timers`);
  await page.locator('#timers tbody tr').first().waitFor({timeout: TIMEOUT});
  await page.click('#drain');
  await page.click('#confirm-ok');
  await until(async () => (await api('GET', '/v1/namespaces/mail/stats')).namespaces[0].pendingTimers === '0', 'drain');
  check(true, 'drain through the page fires every pending timer');

  // Keyboard: Tab reaches a namespace's link and Enter opens it.
  await page.goto(`${base}/#/`);
  await row('orders').waitFor({timeout: TIMEOUT});
  // Focus stays on a link through the refreshes (every 2 s).
  await page.focus('#namespaces a:text-is("mail")');
  const updates = async () => page.locator('#live').textContent();
  for (let i = 0; i < 2; i++) {
    const before = await updates();
    await until(async () => (await updates()) !== before, 'a refresh');
  }
  check(await page.evaluate(() => document.activeElement.textContent === 'mail' &&
    !!document.activeElement.closest('#namespaces')), 'focus stays on a namespace through two refreshes');
  await page.evaluate(() => document.activeElement.blur());
  let presses = 0;
  while (presses++ < 60 &&
         await page.evaluate(() => document.activeElement.textContent) !== 'orders') {
    await page.keyboard.press('Tab');
  }
  await page.keyboard.press('Enter');
  await page.locator('#timers tbody tr').first().waitFor({timeout: TIMEOUT});
  check(page.url().endsWith('#/ns/orders/timers'), `Tab (${presses} presses) and Enter open a namespace`);
}

async function main() {
  fs.mkdirSync(shotsDir, {recursive: true});
  const work = fs.mkdtempSync(path.join(os.tmpdir(), 'delayd-console-'));
  const daemon = await startDaemon(work);
  let browser;
  try {
    await fill();
    browser = await chromium.launch({
      executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
      args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
             '--disable-background-networking', '--disable-component-update',
             '--disable-sync'],
    });
    const page = await browser.newPage({viewport: {width: 1366, height: 800}});
    const errors = [];
    page.on('pageerror', (e) => errors.push(e.message));
    page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
    page.setDefaultTimeout(TIMEOUT);
    await run(page);
    // (The refused token's 401 and the refused policy's 400 are logged by
    // the browser as failed loads: expected.)
    const unexpected = errors.filter((e) => !/status of 40[01]/.test(e));
    check(unexpected.length === 0, `no script errors on the page ${JSON.stringify(unexpected)}`);
  } finally {
    if (browser) await browser.close();
    daemon.kill('SIGTERM');
    await new Promise((r) => daemon.once('exit', r));
    fs.rmSync(work, {recursive: true, force: true});
  }
}

main().then(() => console.log('console: all checks passed'), (e) => {
  console.error(e.stack || e.message);
  process.exit(1);
});
