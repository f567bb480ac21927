// Push delivery against real receivers on 127.0.0.1: what is sent and
// signed (checked with the standardwebhooks library, not delayd's code),
// how each answer is read, TLS, the address rules, and a kill -9 in the
// middle of a delivery.
//
// node push_test.mjs DELAYD DELAYCTL
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { Webhook } from 'standardwebhooks';
import { Daemon, Receiver, makeCerts, tempDir, waitFor } from './harness.mjs';

const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const SECRET2 = 'whsec_' + Buffer.alloc(32, 7).toString('base64');
const FAST = { initialBackoff: '0.1s', maxBackoff: '1s' };

const cases = [];
const test = (name, fn) => cases.push({ name, fn });
const ok = (res, body = 'ok') => { res.writeHead(200); res.end(body); };

let daemon;
let recv;

function target(p, extra = {}) {
  return { url: `http://127.0.0.1:${recv.port}${p}`, secrets: [SECRET], ...extra };
}

test('an event is posted once, signed, with its headers, and acknowledged', async () => {
  recv.on('/ok', (r, res) => ok(res));
  await daemon.setPolicy('ok', { push: target('/ok', { headers: [{ name: 'x-team', value: 'payments' }] }) });
  await daemon.setTimer('ok', 'order/42 é', '{"order":42}');
  const [r] = await waitFor('the request', () => recv.at('/ok').length === 1 && recv.at('/ok'));
  assert.equal(r.method, 'POST');
  assert.equal(r.body.toString(), '{"order":42}');
  assert.equal(r.headers['content-type'], 'application/octet-stream');
  assert.equal(r.headers['x-team'], 'payments');
  assert.equal(r.headers['delayd-namespace'], 'ok');
  assert.equal(decodeURIComponent(r.headers['delayd-key']), 'order/42 é');
  assert.equal(r.headers['delayd-attempt'], '1');
  assert.equal(r.headers['delayd-reason'], 'expired');
  assert.match(r.headers['delayd-fire-time'], /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
  assert.equal(r.headers['webhook-id'], r.headers['delayd-event-id']);
  // The independent implementation verifies the signature (and the
  // timestamp's freshness); a changed body does not verify.
  new Webhook(SECRET).verify(r.body, r.headers);
  assert.throws(() => new Webhook(SECRET).verify('changed', r.headers));
  await waitFor('the ack', async () => (await daemon.stats('ok')).eventsAcked === '1');
  assert.equal(recv.at('/ok').length, 1);
});

test('a 500 is retried after the backoff, with the same webhook-id', async () => {
  let n = 0;
  recv.on('/flaky', (r, res) => {
    n += 1;
    if (n === 1) { res.writeHead(500); res.end('try later'); } else ok(res);
  });
  await daemon.setPolicy('flaky', { ...FAST, push: target('/flaky') });
  await daemon.setTimer('flaky', 'k', 'x');
  const rs = await waitFor('two attempts', () => recv.at('/flaky').length === 2 && recv.at('/flaky'));
  assert.equal(rs[0].headers['webhook-id'], rs[1].headers['webhook-id']);
  assert.equal(rs[1].headers['delayd-attempt'], '2');
  assert.ok(rs[1].at - rs[0].at >= 80, `retried after ${rs[1].at - rs[0].at} ms`);
  await waitFor('the ack', async () => (await daemon.stats('flaky')).eventsAcked === '1');
});

test('a 429 with Retry-After waits that long (bounded by max_backoff)', async () => {
  let n = 0;
  recv.on('/busy', (r, res) => {
    n += 1;
    if (n === 1) { res.writeHead(429, { 'retry-after': '1' }); res.end(); } else ok(res);
  });
  await daemon.setPolicy('busy', { initialBackoff: '0.05s', maxBackoff: '10s', push: target('/busy') });
  await daemon.setTimer('busy', 'k', 'x');
  const rs = await waitFor('two attempts', () => recv.at('/busy').length === 2 && recv.at('/busy'));
  assert.ok(rs[1].at - rs[0].at >= 900, `retried after ${rs[1].at - rs[0].at} ms`);
  // A Retry-After of an hour is cut to the policy's max_backoff.
  let m = 0;
  recv.on('/busier', (r, res) => {
    m += 1;
    if (m === 1) { res.writeHead(503, { 'retry-after': '3600' }); res.end(); } else ok(res);
  });
  await daemon.setPolicy('busier', { initialBackoff: '0.05s', maxBackoff: '0.3s', push: target('/busier') });
  await daemon.setTimer('busier', 'k', 'x');
  await waitFor('the capped retry', () => recv.at('/busier').length === 2, 5000);
});

test('any other 4xx makes a dead letter at once, with the answer as its error', async () => {
  recv.on('/gone', (r, res) => { res.writeHead(404); res.end('no such order'); });
  await daemon.setPolicy('gone', { ...FAST, maxAttempts: 5, push: target('/gone') });
  await daemon.setTimer('gone', 'k', 'x');
  const [d] = await waitFor('the dead letter', () => daemon.deadLetters('gone').then((l) => l.length && l));
  assert.equal(d.error, 'HTTP 404: no such order');
  assert.equal(recv.at('/gone').length, 1);
});

test('a failing target shows in Stats, and pauses its namespace if it asks to', async () => {
  recv.on('/down', (r, res) => { res.writeHead(503); res.end('down for maintenance'); });
  await daemon.setPolicy('down', { initialBackoff: '0.02s', maxBackoff: '0.05s',
    push: target('/down', { pauseAfterFailures: 3 }) });
  await daemon.setTimer('down', 'k', '{}');
  await waitFor('the pause', async () => (await daemon.stats('down')).paused === true);
  const s = await daemon.stats('down');
  assert.equal(s.pushFailuresInARow, '3');
  assert.equal(s.pushLastError, 'HTTP 503: down for maintenance');
  assert.equal(recv.at('/down').length, 3);
  // Nothing is dropped: the event waits; resumed, a good answer delivers it.
  recv.on('/down', (r, res) => ok(res));
  await daemon.ok('PUT', '/namespaces/down/policy', { policy: { paused: false }, updateMask: 'paused' });
  await waitFor('the ack', async () => (await daemon.stats('down')).eventsAcked === '1');
  assert.equal((await daemon.stats('down')).pushFailuresInARow ?? '0', '0');
});

test('a redirect is not followed unless the target says so', async () => {
  recv.on('/moved', (r, res) => { res.writeHead(302, { location: '/landing' }); res.end(); });
  recv.on('/landing', (r, res) => ok(res));
  await daemon.setPolicy('moved', { ...FAST, push: target('/moved') });
  await daemon.setTimer('moved', 'k', 'x');
  const [d] = await waitFor('the dead letter', () => daemon.deadLetters('moved').then((l) => l.length && l));
  assert.match(d.error, /^HTTP 302/);
  assert.equal(recv.at('/landing').length, 0);
  await daemon.setPolicy('moved2', { ...FAST, push: target('/moved', { followRedirects: true }) });
  await daemon.setTimer('moved2', 'k', 'x');
  await waitFor('the followed redirect', () => recv.at('/landing').length === 1);
  await waitFor('the ack', async () => (await daemon.stats('moved2')).eventsAcked === '1');
});

test('a target that does not answer in time fails the attempt; so does one that refuses', async () => {
  const held = [];
  recv.on('/slow', (r, res) => held.push(res));
  await daemon.setPolicy('slow', { ...FAST, maxAttempts: 2, push: target('/slow', { timeout: '0.3s' }) });
  await daemon.setTimer('slow', 'k', 'x');
  const [d] = await waitFor('the dead letter', () => daemon.deadLetters('slow').then((l) => l.length && l));
  assert.match(d.error, /[Tt]imeout/);
  assert.equal(recv.at('/slow').length, 2);
  held.forEach((res) => res.destroy());
  // A port nobody listens on.
  const closed = await new Receiver().listen();
  const port = closed.port;
  await closed.close();
  await daemon.setPolicy('refused', { ...FAST, maxAttempts: 1,
    push: { url: `http://127.0.0.1:${port}/` } });
  await daemon.setTimer('refused', 'k', 'x');
  const [e] = await waitFor('the dead letter', () => daemon.deadLetters('refused').then((l) => l.length && l));
  assert.match(e.error, /connect/i);
});

test('a huge, slow answer is cut off: its status counts, and at most 512 bytes are kept', async () => {
  let wrote = 0;
  let timer;
  recv.on('/huge', (r, res) => { res.writeHead(500); timer = setInterval(() => {
    if (res.destroyed) { clearInterval(timer); return; }
    res.write(Buffer.alloc(16384, 'a')); wrote += 16384;
  }, 1); });
  await daemon.setPolicy('huge', { ...FAST, maxAttempts: 1, push: target('/huge', { timeout: '60s' }) });
  await daemon.setTimer('huge', 'k', 'x');
  const [d] = await waitFor('the dead letter', () => daemon.deadLetters('huge').then((l) => l.length && l));
  clearInterval(timer);
  assert.equal(d.error, 'HTTP 500: ' + 'a'.repeat(512));
  assert.ok(wrote < 4 << 20, `the receiver wrote ${wrote} bytes`);
});

test('two secrets during a rotation: each verifies the same request', async () => {
  recv.on('/rotate', (r, res) => ok(res));
  await daemon.setPolicy('rotate', { push: target('/rotate', { secrets: [SECRET, SECRET2] }) });
  const policy = await daemon.ok('GET', '/namespaces/rotate/policy');
  assert.deepEqual(policy.push.secrets, []);
  assert.equal(policy.push.secretIds.length, 2);
  await daemon.setTimer('rotate', 'k', '{"rotating":true}');
  const [r] = await waitFor('the request', () => recv.at('/rotate').length === 1 && recv.at('/rotate'));
  assert.equal(r.headers['webhook-signature'].split(' ').length, 2);
  new Webhook(SECRET).verify(r.body, r.headers);
  new Webhook(SECRET2).verify(r.body, r.headers);
  // A policy written back as it was read keeps its secrets.
  await daemon.setPolicy('rotate', policy);
  const again = await daemon.ok('GET', '/namespaces/rotate/policy');
  assert.deepEqual(again.push.secretIds, policy.push.secretIds);
});

test('a secret given twice is kept once', async () => {
  await daemon.setPolicy('twice', { push: target('/twice', { secrets: [SECRET, SECRET] }) });
  const policy = await daemon.ok('GET', '/namespaces/twice/policy');
  assert.equal(policy.push.secretIds.length, 1);
});

test('a test request is sent at once and answered', async () => {
  recv.on('/try', (r, res) => { res.writeHead(r.headers['delayd-reason'] === 'test' ? 204 : 400); res.end(); });
  const r = await daemon.ok('POST', '/namespaces/try/policy:testPush',
    { target: target('/try'), payload: Buffer.from('{}').toString('base64') });
  assert.equal(r.outcome, 'ack');
  assert.equal(r.httpStatus, 204);
  const [req] = recv.at('/try');
  assert.match(req.headers['webhook-id'], /^test-\d+$/);
  new Webhook(SECRET).verify(req.body, req.headers);
  const none = await daemon.api('POST', '/namespaces/nothing/policy:testPush', {});
  assert.equal(none.status, 400);
  assert.equal(none.body.error.status, 'FAILED_PRECONDITION');
});

test('the target is refused where it must not go, before any connection', async () => {
  const strict = new Daemon(null, ['--push-allow-http']);
  await strict.start();
  try {
    const before = recv.connections;
    for (const [url, rule] of [
      ['http://10.0.0.1/', /private \(10\.0\.0\.0\/8/],
      ['http://169.254.169.254/latest/meta-data/', /link-local \(169\.254/],
      ['http://[::1]/', /loopback \(::1\)/],
      [`http://127.0.0.1:${recv.port}/ok`, /loopback \(127/],
      [`http://localhost:${recv.port}/ok`, /localhost resolves to .*loopback/],
      ['http://[::ffff:192.168.1.1]/', /private \(192\.168/],
      ['ftp://example.com/', /scheme ftp refused/],
      ['https://user:pw@example.com/', /no user or password/],
    ]) {
      const r = await strict.api('PUT', '/namespaces/n/policy', { policy: { push: { url } } });
      assert.equal(r.status, 400, url);
      assert.match(r.body.error.message, rule, url);
    }
    const plain = new Daemon(null, ['--push-allow', '127.0.0.1']);
    await plain.start();
    try {
      const r = await plain.api('PUT', '/namespaces/n/policy',
        { policy: { push: { url: `http://127.0.0.1:${recv.port}/ok` } } });
      assert.match(r.body.error.message, /https only/);
    } finally { await plain.kill(); }
    assert.equal(recv.connections, before);
    // An address that is checked at the connection itself: a redirect to
    // another loopback address than the one allowed.
    recv.on('/hop', (r, res) => { res.writeHead(307, { location: `http://127.0.0.2:${recv.port}/ok` }); res.end(); });
    const one = new Daemon(null, ['--push-allow', '127.0.0.1', '--push-allow-http']);
    await one.start();
    try {
      await one.setPolicy('hop', { maxAttempts: 1, push: { url: `http://127.0.0.1:${recv.port}/hop`, followRedirects: true } });
      await one.setTimer('hop', 'k', 'x');
      const [d] = await waitFor('the dead letter', () => one.deadLetters('hop').then((l) => l.length && l));
      assert.match(d.error, /127\.0\.0\.2 is loopback/);
    } finally { await one.kill(); }
  } finally { await strict.kill(); }
});

test('TLS: the target\'s CA, a wrong CA refused, and mutual TLS', async () => {
  const certs = makeCerts(tempDir('delayd-push-tls-'));
  const secure = await new Receiver({
    cert: certs.serverCert, key: certs.serverKey, ca: certs.ca, requestCert: true,
    rejectUnauthorized: false,
  }).listen();
  try {
    secure.on('/tls', (r, res) => ok(res));
    secure.on('/mtls', (r, res) => { res.writeHead(r.cert === 'client' ? 200 : 403); res.end(); });
    const url = (p) => `https://127.0.0.1:${secure.port}${p}`;
    await daemon.setPolicy('tls', { push: { url: url('/tls'), caPem: certs.ca } });
    await daemon.setTimer('tls', 'k', 'x');
    await waitFor('the ack', async () => (await daemon.stats('tls')).eventsAcked === '1');
    await daemon.setPolicy('wrongca', { ...FAST, maxAttempts: 1, push: { url: url('/tls'), caPem: certs.otherCa } });
    await daemon.setTimer('wrongca', 'k', 'x');
    const [d] = await waitFor('the dead letter', () => daemon.deadLetters('wrongca').then((l) => l.length && l));
    assert.match(d.error, /certificate/i);
    // The system's CAs do not know the test's CA either.
    const sys = await daemon.ok('POST', '/namespaces/sys/policy:testPush', { target: { url: url('/tls') } });
    assert.equal(sys.outcome, 'retry');
    assert.equal(sys.httpStatus, 0);
    await daemon.setPolicy('mtls', { push: { url: url('/mtls'), caPem: certs.ca,
      clientCertPem: certs.clientCert, clientKeyPem: certs.clientKey } });
    const read = await daemon.ok('GET', '/namespaces/mtls/policy');
    assert.equal(read.push.clientKeyPem, '');
    assert.equal(read.push.hasClientKey, true);
    await daemon.setTimer('mtls', 'k', 'x');
    await waitFor('the ack', async () => (await daemon.stats('mtls')).eventsAcked === '1');
    const anon = await daemon.ok('POST', '/namespaces/mtls/policy:testPush',
      { target: { url: url('/mtls'), caPem: certs.ca } });
    assert.equal(anon.httpStatus, 403);
  } finally { await secure.close(); }
});

test('kill -9 in the middle of a delivery: delivered again after the restart, same webhook-id', async () => {
  const dir = tempDir('delayd-push-crash-');
  const d = new Daemon(dir, ['--push-allow', '127.0.0.1', '--push-allow-http']);
  await d.start();
  const held = [];
  recv.on('/crash', (r, res) => { if (held.length === 0) held.push(res); else ok(res); });
  try {
    await d.setPolicy('crash', { push: target('/crash') });
    await d.setTimer('crash', 'k', '{"survives":true}');
    await waitFor('the first request', () => held.length === 1);
    await d.kill('SIGKILL');
    held[0].destroy();
    await d.start();
    const rs = await waitFor('the second request', () => recv.at('/crash').length === 2 && recv.at('/crash'));
    assert.equal(rs[1].headers['webhook-id'], rs[0].headers['webhook-id']);
    assert.equal(rs[1].body.toString(), '{"survives":true}');
    new Webhook(SECRET).verify(rs[1].body, rs[1].headers);
    await waitFor('the ack', async () => (await d.stats('crash')).eventsAcked === '1');
  } finally { await d.kill(); }
});

test('delayctl target set, get, test, a rotation, and rm', async () => {
  recv.on('/cli', (r, res) => ok(res));
  const dir = tempDir('delayd-push-cli-');
  fs.writeFileSync(path.join(dir, 'secret'), `${SECRET}\n`);
  fs.writeFileSync(path.join(dir, 'secret2'), SECRET2);
  const url = `http://127.0.0.1:${recv.port}/cli`;
  const set = await daemon.delayctl(['-n', 'cli', 'target', 'set', url, '--secret-file',
    path.join(dir, 'secret'), '--header', 'x-team: billing', '--timeout', '2s']);
  assert.match(set, /x-team: billing/);
  const got = JSON.parse(await daemon.delayctl(['-n', 'cli', '--json', 'target', 'get']));
  assert.equal(got.url, url);
  assert.equal(got.timeout, '2s');
  assert.equal(got.secret_ids.length, 1);
  assert.match(await daemon.delayctl(['-n', 'cli', 'target', 'test', '--payload', '{"a":1}']), /ack/);
  const [t] = recv.at('/cli');
  assert.equal(t.headers['delayd-reason'], 'test');
  assert.equal(t.headers['x-team'], 'billing');
  new Webhook(SECRET).verify(t.body, t.headers);
  // A rotation: the new secret beside the old, then the old dropped.
  await daemon.delayctl(['-n', 'cli', 'target', 'set', url, '--secret-file', path.join(dir, 'secret2'),
    '--keep-secrets']);
  await daemon.delayctl(['-n', 'cli', 'target', 'test', '--payload', '{}']);
  const rotated = recv.at('/cli')[1];
  new Webhook(SECRET).verify(rotated.body, rotated.headers);
  new Webhook(SECRET2).verify(rotated.body, rotated.headers);
  await daemon.delayctl(['-n', 'cli', 'target', 'set', url, '--secret-file', path.join(dir, 'secret2')]);
  await daemon.delayctl(['-n', 'cli', 'target', 'test', '--payload', '{}']);
  const after = recv.at('/cli')[2];
  assert.throws(() => new Webhook(SECRET).verify(after.body, after.headers));
  new Webhook(SECRET2).verify(after.body, after.headers);
  assert.match(await daemon.delayctl(['-n', 'cli', 'target', 'rm']), /no push target/);
  // A test with no target fails with exit code 3.
  await assert.rejects(daemon.delayctl(['-n', 'cli', 'target', 'test']), (e) => e.code === 3);
});

test('bad targets are refused naming the field, and change nothing', async () => {
  for (const [push, field] of [
    [{ url: 'http://127.0.0.1/', method: 'DELETE' }, /push\.method/],
    [{ url: 'http://127.0.0.1/', headers: [{ name: 'webhook-id', value: 'x' }] }, /push\.headers: webhook-id is set by delayd/],
    [{ url: 'http://127.0.0.1/', headers: [{ name: 'x-a', value: 'line\nbreak' }] }, /push\.headers/],
    [{ url: 'http://127.0.0.1/', headers: [{ name: 'x-a', value: '1' }, { name: 'X-A', value: '2' }] }, /given twice/],
    [{ url: 'http://127.0.0.1/', timeout: '0.01s' }, /push\.timeout/],
    [{ url: 'http://127.0.0.1/', secrets: ['whsec_short'] }, /push\.secrets/],
    [{ url: 'http://127.0.0.1/', caPem: 'not pem' }, /push\.\*_pem/],
    [{ url: 'http://127.0.0.1/', clientCertPem: '-----BEGIN CERTIFICATE-----' }, /both or neither/],
    [{ method: 'PUT' }, /push\.url: required/],
    [{ url: 'x'.repeat(3000) }, /push\.url: at most 2048/],
  ]) {
    const r = await daemon.api('PUT', '/namespaces/bad/policy', { policy: { paused: true, push } });
    assert.equal(r.status, 400, JSON.stringify(push));
    assert.match(r.body.error.message, field);
  }
  const p = await daemon.ok('GET', '/namespaces/bad/policy');
  assert.equal(p.paused, false);
  assert.equal(p.push, undefined);
});

async function main() {
  recv = await new Receiver().listen();
  daemon = new Daemon(null, ['--push-allow', '127.0.0.1', '--push-allow-http']);
  await daemon.start();
  let failed = 0;
  try {
    for (const c of cases) {
      const t0 = Date.now();
      try {
        await c.fn();
        console.log(`ok   ${c.name} (${Date.now() - t0} ms)`);
      } catch (e) {
        failed += 1;
        console.log(`FAIL ${c.name}\n${e.stack}`);
      }
    }
  } finally {
    await daemon.kill();
    await recv.close();
  }
  if (failed) {
    console.log(daemon.log.split('\n').slice(-40).join('\n'));
    process.exit(1);
  }
  console.log(`${cases.length} push cases passed`);
}

main().catch((e) => { console.error(e); process.exit(1); });
