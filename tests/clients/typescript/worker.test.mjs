// The TypeScript library's Worker against a real delayd that
// run_with_delayd.sh started (TLS, a bearer token): each event handled once
// and acknowledged, retries and dead letters, leases kept, concurrency,
// reconnection, stop and signals, and the README's worker run as written.
//
// Usage: DELAYD_LIB=<built package dir> node --test worker.test.mjs
import assert from 'node:assert/strict';
import {spawn} from 'node:child_process';
import {existsSync, mkdirSync, mkdtempSync, rmSync, symlinkSync,
        writeFileSync} from 'node:fs';
import {tmpdir} from 'node:os';
import {join} from 'node:path';
import {describe, test} from 'node:test';

import {client, d, eventually, LIB, namespace, nsStats, readmeExample,
        useClient, WorkStream} from './common.mjs';

useClient();

describe('workers', () => {
  test('each event handled once and acknowledged', async () => {
    const ns = await namespace();
    const got = [];
    const late = [];
    let first;
    const w = new d.Worker(ns, (e) => { got.push(e.key); first ??= e; }, {
      concurrency: 4, client, hooks: {onEvent: (e, ms) => late.push(ms)}});
    w.start();
    const set = [];
    for (let i = 0; i < 50; i++) {
      set.push(await client.setTimer(`k${i}`, 'p', {delay: 0, namespace: ns}));
    }
    await eventually(() => got.length === 50, '50 events');
    await w.stop();
    assert.deepEqual([...got].sort(), Array.from({length: 50}, (_, i) => `k${i}`).sort());
    // Every field, the instants (getters) among them.
    const i = Number(first.key.slice(1));
    assert.equal(first.namespace, ns);
    assert.deepEqual([...first.payload], [...Buffer.from('p')]);
    assert.equal(first.version, set[i].version);
    assert.ok(first.fireTime instanceof Date);
    assert.equal(first.fireTime.getTime(), set[i].fireTime.getTime());
    // (A Date rounds its nanoseconds to the nearest millisecond.)
    const ms = (ns) => Number((ns + 500_000n) / 1_000_000n);
    assert.equal(ms(first.fireTimeNs), first.fireTime.getTime());
    assert.ok(first.firedAtNs >= first.fireTimeNs);
    assert.equal(ms(first.firedAtNs), first.firedAt.getTime());
    assert.equal(first.attempt, 1);
    assert.equal(first.reason, 'expired');
    assert.equal(first.scheduleRun, 0n);
    assert.equal(typeof first.id, 'bigint');
    const s = await nsStats(ns);
    assert.equal(s.eventsAcked, 50n);
    assert.equal(s.inFlightEvents, 0n);
    assert.equal(late.length, 50);
  });

  test('a long-lived stream keeps no event it has read', async () => {
    // 4,000 events of 16 KiB through one stream: kept, the last 3,000
    // would hold 48 MiB; the worker keeps only their ids (for its dedup
    // window).
    const v8 = await import('node:v8');
    const vm = await import('node:vm');
    v8.setFlagsFromString('--expose-gc');
    const gc = vm.runInNewContext('gc');
    const ns = await namespace();
    const payload = 'x'.repeat(16384);
    let handled = 0;
    const w = new d.Worker(ns, () => { handled += 1; }, {concurrency: 8, client});
    w.start();
    // (Payloads live outside the JavaScript heap, in array buffers, freed
    // a collection or two after their owners: the least of three settled
    // samples.)
    const heap = async () => {
      let least = Infinity;
      for (let i = 0; i < 3; i++) {
        gc();
        await new Promise((r) => setImmediate(r));
        gc();
        const m = process.memoryUsage();
        least = Math.min(least, m.heapUsed + m.arrayBuffers);
      }
      return least;
    };
    const send = async (from) => {
      for (let i = from; i < from + 1000; i += 100) {
        const b = client.batch({namespace: ns});
        for (let j = i; j < i + 100; j++) b.set(`k${j}`, payload, {delay: 0});
        await b.commit();
      }
    };
    await send(0);
    await eventually(() => handled === 1000, '1,000 events', 30_000);
    const before = await heap();
    await send(1000);
    await send(2000);
    await send(3000);
    await eventually(() => handled === 4000, '4,000 events', 30_000);
    const grown = (await heap()) - before;
    await w.stop();
    assert.ok(grown < 8 << 20, `the heap grew by ${grown} bytes over 3,000 events`);
  });

  test('a throwing handler is retried, then dead-lettered', async () => {
    const ns = await namespace();
    await client.setPolicy({maxAttempts: 3, initialBackoff: 200}, {namespace: ns});
    const attempts = [];
    const w = new d.Worker(ns, (e) => {
      attempts.push([e.attempt, performance.now()]);
      if (e.attempt === 1) throw new d.Retry('try again soon', 50);
      throw new Error(`attempt ${e.attempt} failed`);
    }, {client});
    w.start();
    await client.setTimer('flaky', '', {delay: 0, namespace: ns});
    const letters = await eventually(async () => {
      const all = [];
      for await (const x of client.deadLetters({namespace: ns})) all.push(x);
      return all.length > 0 && all;
    }, 'a dead letter');
    await w.stop();
    assert.deepEqual(attempts.map((a) => a[0]), [1, 2, 3]);
    // Attempt 3 after the backoff of attempt 2 (400 ms, jitter aside).
    assert.ok(attempts[2][1] - attempts[1][1] >= 350);
    assert.equal(letters[0].error, 'attempt 3 failed');
  });

  test('a handler three ack timeouts long keeps its lease', async () => {
    const ns = await namespace();
    const seen = [];
    const slow = async (e) => {
      seen.push(e.id);
      await new Promise((r) => setTimeout(r, 1500));  // the job's own length
    };
    const w1 = new d.Worker(ns, slow, {client, ackTimeout: 500});
    const w2 = new d.Worker(ns, slow, {client, ackTimeout: 500});
    w1.start();
    w2.start();
    await client.setTimer('long', '', {delay: 0, namespace: ns});
    await eventually(async () => (await nsStats(ns)).eventsAcked === 1n, 'the ack');
    await Promise.all([w1.stop(), w2.stop()]);
    assert.equal(seen.length, 1, 'handed to a second worker');
    assert.equal((await nsStats(ns)).eventsRedelivered, 0n);
  });

  test('concurrency is never exceeded and a stuck handler slows none', async () => {
    const ns = await namespace();
    let running = 0;
    let peak = 0;
    const done = [];
    let release;
    const stuck = new Promise((r) => { release = r; });
    const w = new d.Worker(ns, async (e) => {
      running++;
      peak = Math.max(peak, running);
      try {
        if (e.key === 'stuck') await stuck;
        else {
          await new Promise((r) => setTimeout(r, 5));
          done.push(e.key);
        }
      } finally {
        running--;
      }
    }, {concurrency: 4, client});
    w.start();
    await client.setTimer('stuck', '', {delay: 0, namespace: ns});
    for (let i = 0; i < 100; i++) await client.setTimer(`k${i}`, '', {delay: 0, namespace: ns});
    await eventually(() => done.length === 100, 'the others');
    release();
    await w.stop();
    assert.equal(peak, 4);
  });

  test('acks whose answers are lost are sent again, at stop too', async (t) => {
    const ns = await namespace();
    // The next answers to an ack are lost (after the ack was applied), on
    // the Work stream and as calls alike.
    const c = new d.Client();
    let lost = 0;
    const losing = (real) => function (...args) {
      const answer = real.apply(this, args);
      if (lost === 0) return answer;
      lost--;
      return answer.then(() => { throw new d.UnavailableError('the answer was lost'); });
    };
    c.ack = losing(c.ack);
    // (On the stream, the answer is a callback's.)
    const real = WorkStream.prototype.ack;
    t.mock.method(WorkStream.prototype, 'ack', function (ids, namespace, answer) {
      if (lost === 0) return real.call(this, ids, namespace, answer);
      lost--;
      return real.call(this, ids, namespace, (error) =>
        answer(error ?? new d.UnavailableError('the answer was lost'), 0));
    });
    let release;
    const gate = new Promise((r) => { release = r; });
    const got = [];
    const w = new d.Worker(ns, async (e) => { got.push(e.key); await gate; }, {
      concurrency: 4, client: c});
    w.start();
    for (let i = 0; i < 4; i++) await client.setTimer(`k${i}`, '', {delay: 0, namespace: ns});
    await eventually(() => w.running === 4, 'four handlers running');
    lost = 3;
    release();
    await w.stop();
    c.close();
    assert.equal(lost, 0);
    assert.deepEqual([...got].sort(), ['k0', 'k1', 'k2', 'k3']);
    const s = await nsStats(ns);
    assert.equal(s.eventsAcked, 4n);
    assert.equal(s.inFlightEvents, 0n);
  });

  test('stop waits for answers without spinning', async (t) => {
    // Answers that take 300 ms: stop() waits for them without spinning
    // (it once started a flush again and again meanwhile, taking the CPU).
    const ns = await namespace();
    const real = WorkStream.prototype.ack;
    t.mock.method(WorkStream.prototype, 'ack', function (ids, namespace, answer) {
      return real.call(this, ids, namespace, (error, n) => setTimeout(() => answer(error, n), 300));
    });
    let release;
    const gate = new Promise((r) => { release = r; });
    const w = new d.Worker(ns, async () => { await gate; }, {client});
    w.start();
    await client.setTimer('k', '', {delay: 0, namespace: ns});
    await eventually(() => w.running === 1, 'the handler to run');
    const cpu = process.cpuUsage();
    const started = performance.now();
    release();
    await w.stop();
    const took = performance.now() - started;
    const used = process.cpuUsage(cpu);
    assert.ok(took >= 250, `stop returned after ${took} ms, before the answer`);
    assert.ok((used.user + used.system) / 1000 < took / 3,
              `${(used.user + used.system) / 1000} ms of CPU in a ${took} ms stop`);
    assert.equal((await nsStats(ns)).eventsAcked, 1n);
  });

  test('acks go on the Work stream, not as calls', async () => {
    const ns = await namespace();
    const c = new d.Client();
    let calls = 0;
    const realAck = c.ack.bind(c);
    c.ack = (...args) => { calls++; return realAck(...args); };
    const got = [];
    const w = new d.Worker(ns, (e) => { got.push(e.key); }, {concurrency: 4, client: c});
    w.start();
    for (let i = 0; i < 20; i++) await client.setTimer(`k${i}`, '', {delay: 0, namespace: ns});
    await eventually(() => got.length === 20, '20 events');
    await w.stop();
    c.close();
    assert.equal(calls, 0);
    const s = await nsStats(ns);
    assert.equal(s.eventsAcked, 20n);
    assert.equal(s.inFlightEvents, 0n);
  });

  test('a worker refused Work subscribes, and asks for Work again when that stream ends', async (t) => {
    // An older node (no Work) refuses the stream; the worker subscribes;
    // that node stops (its Subscribe fails); the worker asks for Work again.
    const ns = await namespace();
    const c = new d.Client();
    const realRead = WorkStream.prototype.read;
    let refused = 0;
    t.mock.method(WorkStream.prototype, 'read', function (...args) {
      if (refused > 0) return realRead.apply(this, args);
      refused++;
      this.cancel();  // (the older node opened nothing)
      return Promise.reject(new d.UnimplementedError('unknown method Work'));
    });
    let subscribed = 0;
    c.subscribe = () => { subscribed++; throw new d.UnavailableError('the node stopped'); };
    const got = [];
    const w = new d.Worker(ns, (e) => { got.push(e.key); }, {concurrency: 2, client: c});
    w.start();
    await eventually(() => subscribed === 1, 'a Subscribe');
    for (let i = 0; i < 5; i++) await client.setTimer(`k${i}`, '', {delay: 0, namespace: ns});
    await eventually(() => got.length === 5, '5 events');
    await w.stop();
    c.close();
    assert.equal(subscribed, 1);
    assert.deepEqual([...got].sort(), ['k0', 'k1', 'k2', 'k3', 'k4']);
    const s = await nsStats(ns);
    assert.equal(s.eventsAcked, 5n);
    assert.equal(s.inFlightEvents, 0n);
  });

  test('stop finishes and acknowledges what runs', async () => {
    const ns = await namespace();
    let started;
    const began = new Promise((r) => { started = r; });
    const w = new d.Worker(ns, async () => {
      started();
      await new Promise((r) => setTimeout(r, 500));
    }, {client});
    w.start();
    await client.setTimer('mid', '', {delay: 0, namespace: ns});
    await began;
    await w.stop();
    const s = await nsStats(ns);
    assert.equal(s.eventsAcked, 1n);
    assert.equal(s.eventsRedelivered, 0n);
  });

  test('a handler that stops its worker, and returns no promise, is acknowledged', async () => {
    // (A handler that returns no promise runs outside the map of awaited
    // handlers; stop() called from it still waits for it to return.)
    const ns = await namespace();
    let stopping;
    const ran = [];
    const w = new d.Worker(ns, (e) => {
      ran.push(e.key);
      stopping = w.stop();
    }, {client});
    w.start();
    await client.setTimer('only', '', {delay: 0, namespace: ns});
    await eventually(() => stopping !== undefined, 'the handler to run');
    await stopping;
    assert.deepEqual(ran, ['only']);
    const s = await nsStats(ns);
    assert.equal(s.eventsAcked, 1n);
    assert.equal(s.inFlightEvents, 0n);
  });

  test('SIGTERM to the worker\'s process finishes its handler', async () => {
    // The README's worker, run as written in a process of its own.
    const ns = await namespace();
    const dir = mkdtempSync(join(tmpdir(), 'delayd-ts-'));
    try {
      mkdirSync(join(dir, 'node_modules'));
      symlinkSync(LIB, join(dir, 'node_modules', 'delayd'));
      const marker = join(dir, 'started');
      const script = readmeExample()
        .replace("'shop'", JSON.stringify(ns))
        .replace(/ {2}console\.log\(.*\);/,
                 `  (await import('node:fs')).writeFileSync(${JSON.stringify(marker)}, '');\n` +
                 '  await new Promise((r) => setTimeout(r, 1000));');
      assert.notEqual(script, readmeExample());
      writeFileSync(join(dir, 'worker.mjs'), script);
      const child = spawn(process.execPath, [join(dir, 'worker.mjs')], {stdio: 'inherit'});
      const exited = new Promise((r) => child.on('exit', (code) => r(code)));
      await client.setTimer('job', '', {delay: 0, namespace: ns});
      await eventually(() => existsSync(marker), 'the handler to start');
      child.kill('SIGTERM');
      assert.equal(await exited, 0);
      const s = await nsStats(ns);
      assert.equal(s.eventsAcked, 1n);
      assert.equal(s.inFlightEvents, 0n);
      assert.equal(s.eventsRedelivered, 0n);
    } finally {
      rmSync(dir, {recursive: true});
    }
  });

  test('bad input throws and the worker keeps running', async () => {
    const ns = await namespace();
    const got = [];
    const w = new d.Worker(ns, (e) => { got.push(e.key); }, {client});
    w.start();
    await assert.rejects(client.setTimer('k\u0000', '', {delay: 0, namespace: ns}),
                         d.InvalidArgumentError);
    await client.setTimer('fine', '', {delay: 0, namespace: ns});
    await eventually(() => got.length === 1, 'the event');
    assert.deepEqual(got, ['fine']);
    await w.stop();
  });
});
