// The TypeScript library (client/typescript, built into DELAYD_LIB) against
// a real delayd that run_with_delayd.sh started (TLS, a bearer token):
// every call and every error class, configuration shared with delayctl,
// retries, the stream's decoder, the window of handled ids, and the
// package. The workers' promises: worker.test.mjs.
//
// Usage: DELAYD_LIB=<built package dir> node --test library.test.mjs
import assert from 'node:assert/strict';
import {mkdtempSync, readFileSync, rmSync, writeFileSync} from 'node:fs';
import {tmpdir} from 'node:os';
import {join} from 'node:path';
import {describe, test} from 'node:test';

import {Attempts, client, d, Done, eventOf, eventually, LIB, namespace, pb,
        protobuf, readmeExample, useClient, wire, wkt} from './common.mjs';

useClient();

describe('calls', () => {
  test('timers set, moved, got, listed, removed', async () => {
    const ns = await namespace();
    const at = new Date(Date.now() + 3_600_000);
    const r = await client.setTimer('order-42', '{"order":42}', {at, namespace: ns});
    assert.equal(r.replaced, false);
    assert.equal(r.fireTime.getTime(), at.getTime());
    const t = await client.getTimer('order-42', {namespace: ns});
    assert.equal(new TextDecoder().decode(t.payload), '{"order":42}');
    assert.equal(t.version, r.version);
    const m = await client.moveTimer('order-42', {delay: 300_000, namespace: ns,
                                                  expectedVersion: r.version});
    assert.ok(m.version > r.version);
    assert.ok(m.fireTime < at);
    const r2 = await client.setTimer('order-42', new Uint8Array([1, 2]), {delay: 60_000, namespace: ns});
    assert.equal(r2.replaced, true);
    for (let i = 0; i < 7; i++) {
      await client.setTimer(`other-${i}`, '', {delay: 3_600_000, namespace: ns});
    }
    const keys = [];
    for await (const x of client.listTimers({namespace: ns, prefix: 'other-', pageSize: 2})) {
      keys.push(x.key);
    }
    assert.deepEqual(keys.sort(), [0, 1, 2, 3, 4, 5, 6].map((i) => `other-${i}`));
    assert.equal(await client.removeTimer('order-42', {namespace: ns}), r2.version);
    await assert.rejects(client.getTimer('order-42', {namespace: ns}), (e) =>
      e instanceof d.NotFoundError && e.rawMessage.includes('order-42'));
    assert.equal(await client.drain({namespace: ns}), 8n);  // (and the anchor)
  });

  test('each error class carries the daemon\'s message', async () => {
    const ns = await namespace();
    const refused = (p, cls, text) => assert.rejects(p, (e) => {
      assert.ok(e instanceof cls, `${e.name}: ${e.message}`);
      assert.ok(e instanceof d.DelaydError);
      if (text) assert.match(e.rawMessage, text);
      return true;
    });
    await refused(client.setTimer('', '', {delay: 1, namespace: ns}), d.InvalidArgumentError, /key/);
    await refused(client.setTimer('k', new Uint8Array(64 * 1024 + 1), {delay: 1, namespace: ns}),
                  d.InvalidArgumentError, /payload/);
    await refused(client.setTimer('k', '', {delay: -5, namespace: ns}), d.InvalidArgumentError, /negative/);
    await refused(client.setTimer('k', '', {namespace: ns}), d.InvalidArgumentError, /delay and at/);
    const r = await client.setTimer('k', '', {delay: 60_000, namespace: ns});
    await refused(client.setTimer('k', '', {delay: 60_000, namespace: ns, ifAbsent: true}),
                  d.AlreadyExistsError);
    await refused(client.removeTimer('k', {namespace: ns, expectedVersion: r.version + 1n}),
                  d.AbortedError);
    await refused(client.moveTimer('absent', {delay: 1, namespace: ns}), d.NotFoundError);
    await refused(client.clusterStatus(), d.FailedPreconditionError);
    await refused(client.getTimer('k', {namespace: 'bad name'}), d.InvalidArgumentError, /namespace/);
    const e = await client.getTimer('absent', {namespace: ns}).catch((x) => x);
    assert.equal(e.code, 'NOT_FOUND');
    // An aborted call ends with CancelledError.
    const ac = new AbortController();
    ac.abort();
    await refused(client.getTimer('k', {namespace: ns, signal: ac.signal}), d.CancelledError);
  });

  test('a batch answers each operation', async () => {
    const ns = await namespace();
    const results = await client.batch({namespace: ns})
      .set('a', '1', {delay: 60_000})
      .set('a', '2', {delay: 60_000, ifAbsent: true})
      .move('a', {delay: 120_000})
      .remove('missing')
      .commit();
    assert.deepEqual(results.map((x) => x.error === undefined), [true, false, true, false]);
    assert.ok(results[1].error instanceof d.AlreadyExistsError);
    assert.ok(results[3].error instanceof d.NotFoundError);
    assert.ok(results[2].version > results[0].version);
  });

  test('policies, dead letters, schedules and figures', async () => {
    const ns = await namespace();
    const p = await client.setPolicy({maxAttempts: 1, initialBackoff: 100}, {namespace: ns});
    assert.equal(p.maxAttempts, 1);
    assert.equal(p.initialBackoff, 100);
    assert.equal((await client.pause({namespace: ns})).paused, true);
    assert.equal((await client.getPolicy({namespace: ns})).maxAttempts, 1);
    assert.equal((await client.resume({namespace: ns})).paused, false);
    await assert.rejects(client.setPolicy({noSuchField: 1}, {namespace: ns}), d.InvalidArgumentError);
    // The dedup window: a removed key refuses a create-only set.
    assert.equal((await client.setPolicy({dedupWindow: 300_000}, {namespace: ns})).dedupWindow,
                 300_000);
    await client.setTimer('once', 'p', {delay: 3_600_000, namespace: ns});
    await client.removeTimer('once', {namespace: ns});
    await assert.rejects(client.setTimer('once', 'p', {delay: 60_000, namespace: ns, ifAbsent: true}),
                         (e) => e instanceof d.AlreadyExistsError && /was removed/.test(e.message));
    // A dead letter: one attempt, nacked.
    await client.setTimer('dies', 'p', {delay: 0, namespace: ns});
    const sub = client.subscribe({namespace: ns});
    let event;
    for await (const e of sub) { event = e; break; }
    assert.equal(await client.nack([event.id], {namespace: ns, error: 'card declined'}), 1);
    sub.cancel();
    const letters = await eventually(async () => {
      const all = [];
      for await (const x of client.deadLetters({namespace: ns})) all.push(x);
      return all.length > 0 && all;
    }, 'the dead letter');
    assert.equal(letters[0].event.key, 'dies');
    assert.equal(letters[0].error, 'card declined');
    assert.equal(await client.requeueDeadLetters([event.id], {namespace: ns}), 1);
    const s = await client.stats({namespace: ns});
    assert.equal(s.durable, undefined);  // daemon-wide: left out
    assert.equal(s.namespaces[0].namespace, ns);
    assert.notEqual((await client.stats()).durable, undefined);
    // Schedules.
    const sched = await client.setSchedule('nightly', 'r', {
      cron: '0 3 * * *', timeZone: 'Europe/Berlin', namespace: ns});
    assert.equal(sched.spec.timeZone, 'Europe/Berlin');
    assert.ok([1, 2].includes(sched.nextInstant.getUTCHours()));
    assert.equal((await client.pauseSchedule('nightly', {namespace: ns})).paused, true);
    assert.equal((await client.resumeSchedule('nightly', {namespace: ns})).paused, false);
    const names = [];
    for await (const x of client.listSchedules({namespace: ns})) names.push(x.key);
    assert.deepEqual(names, ['nightly']);
    const instants = await client.previewSchedule(
      {every: 1_800_000}, {count: 3, after: new Date(Date.UTC(2030, 0, 1))});
    assert.equal(instants.length, 3);
    assert.ok(instants[0] instanceof Date);
    assert.equal(await client.deleteSchedule('nightly', {namespace: ns}), sched.version);
    await assert.rejects(client.getSchedule('nightly', {namespace: ns}), d.NotFoundError);
  });
});

describe('configuration and retries', () => {
  test('the environment means what it means to delayctl', () => {
    const c = d.configFromEnv({}, {DELAYD_ENDPOINT: 'a:1, b:2', DELAYD_TLS: '1',
                                   DELAYD_TLS_CA: '/ca.pem', DELAYD_TOKEN: 't'});
    assert.deepEqual(c.endpoints, ['a:1', 'b:2']);
    assert.equal(c.tls, true);
    assert.equal(c.tlsCa, '/ca.pem');
    assert.equal(c.token, 't');
  });

  test('a token file and a dead endpoint first', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'delayd-ts-'));
    try {
      writeFileSync(join(dir, 'token'), `${process.env.DELAYD_TOKEN}\n`);
      const env = {...process.env, DELAYD_TOKEN_FILE: join(dir, 'token'),
                   DELAYD_ENDPOINT: `127.0.0.1:1,${process.env.DELAYD_ENDPOINT}`};
      delete env.DELAYD_TOKEN;
      const c = new d.Client(d.configFromEnv({}, env));
      try {
        assert.notEqual((await c.stats()).durable, undefined);
      } finally {
        c.close();
      }
    } finally {
      rmSync(dir, {recursive: true});
    }
  });

  test('a conditional call whose answer was lost is not retried', () => {
    const policy = {...d.DEFAULT_RETRY};
    const lost = new d.UnavailableError('stream closed');
    const never = new d.UnavailableError('connect ECONNREFUSED 127.0.0.1:1');
    const conditional = new Attempts(policy, 'conditional');
    assert.ok(conditional.failed(never) > 0);  // not sent: retried
    assert.throws(() => conditional.failed(lost), (e) =>
      e instanceof d.OutcomeUnknownError && e.last === lost);
    const safe = new Attempts({...policy, attempts: 2}, 'safe');
    assert.ok(safe.failed(lost) > 0);
    assert.throws(() => safe.failed(lost), d.UnavailableError);  // out of attempts
    assert.throws(() => safe.failed(new d.NotFoundError('x')), d.NotFoundError);
    // A stopping node's gRPC ends the calls it had not answered: an answer
    // lost, not the caller's own cancellation (an aborted signal is
    // answered before this).
    const ended = new d.CancelledError('CANCELLED');
    assert.ok(new Attempts(policy, 'safe').failed(ended) > 0);
    assert.throws(() => new Attempts(policy, 'conditional').failed(ended),
                  d.OutcomeUnknownError);
  });
});

describe('the stream decoder', () => {
  // The library decodes its streams' messages itself (src/wire.ts); these
  // hold it to what protobuf-es decodes from the same bytes.
  let seed = 11;
  const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
  const pick = (xs) => xs[Math.floor(rand() * xs.length)];
  const u64 = () => pick([0n, 1n, 127n, 128n, 300n, (1n << 53n) - 1n, 1n << 53n,
                          (1n << 63n) + 5n, (1n << 64n) - 1n,
                          BigInt(Math.floor(rand() * 2 ** 40))]);
  const text = () => pick(['', 'k', 'jobs', 'clé-ü', '注文/42', 'a'.repeat(70),
                           'é'.repeat(40), `k${Math.floor(rand() * 1e6)}`]);
  const instant = () => pick([undefined, {seconds: 0n, nanos: 0},
    {seconds: 1764800000n, nanos: Math.floor(rand() * 1e9)}, {seconds: -62135596800n, nanos: 1},
    {seconds: 253402300799n, nanos: 999999999}]);
  // An unknown field of each wire type (numbers no message uses).
  const unknown = () => pick([[], [0xb8, 0x06, 0x96, 0x01], [0xc1, 0x06, 1, 2, 3, 4, 5, 6, 7, 8],
                              [0xca, 0x06, 2, 0x61, 0x62], [0xd5, 0x06, 9, 9, 9, 9]]);
  const lenPrefixed = (bytes) => {
    const len = [];
    for (let n = bytes.length; ; n >>>= 7) {
      if (n < 0x80) { len.push(n); break; }
      len.push((n & 0x7f) | 0x80);
    }
    return [...len, ...bytes];
  };
  // A random SubscribeResponse, encoded with unknown fields among its own.
  const message = () => {
    const events = Array.from({length: Math.floor(rand() * 4)}, () => protobuf.create(pb.EventSchema, {
      id: u64(), namespace: text(), key: text(),
      payload: Uint8Array.from({length: pick([0, 1, 200])}, () => Math.floor(rand() * 256)),
      version: u64(), fireTime: instant(), firedAt: instant(),
      attempt: pick([0, 1, 7, 2 ** 32 - 1]), reason: pick([0, 1, 2, 3, 9]), scheduleRun: u64()}));
    const answers = Array.from({length: Math.floor(rand() * 3)}, () => protobuf.create(pb.WorkAnswerSchema, {
      ref: u64(), code: pick([0, 5, 14, -1]), message: text(), done: pick([0, 3, 2 ** 32 - 1]),
      unknownIds: [u64(), u64()]}));
    const bytes = [];
    for (const e of events) bytes.push(0x0a, ...lenPrefixed([...protobuf.toBinary(pb.EventSchema, e), ...unknown()]));
    for (const a of answers) bytes.push(0x12, ...lenPrefixed([...protobuf.toBinary(pb.WorkAnswerSchema, a), ...unknown()]));
    bytes.push(...unknown());
    return Buffer.from(bytes);
  };

  test('it reads what protobuf-es reads, unknown fields skipped', () => {
    for (let i = 0; i < 3000; i++) {
      const bytes = message();
      const want = protobuf.fromBinary(pb.SubscribeResponseSchema, bytes);
      const got = wire.decodeResponse(bytes);
      assert.equal(got.events.length, want.events.length);
      want.events.forEach((w, j) => {
        const e = eventOf(w);
        const g = got.events[j];
        for (const f of ['id', 'namespace', 'key', 'version', 'attempt', 'reason', 'scheduleRun',
                         'fireTimeNs', 'firedAtNs']) {
          assert.equal(g[f], e[f], `event ${f}`);
        }
        assert.equal(g.fireTime.getTime(), e.fireTime.getTime());
        assert.equal(g.firedAt.getTime(), e.firedAt.getTime());
        assert.deepEqual([...g.payload], [...e.payload]);
      });
      assert.deepEqual(got.answers.map(({ref, code, message, done}) => ({ref, code, message, done})),
                       want.answers.map(({ref, code, message, done}) => ({ref, code, message, done})));
    }
  });

  test('it knows every field of the schemas it reads', () => {
    const schemas = {'delayd.v1.SubscribeResponse': pb.SubscribeResponseSchema,
                     'delayd.v1.Event': pb.EventSchema, 'delayd.v1.WorkAnswer': pb.WorkAnswerSchema,
                     'google.protobuf.Timestamp': wkt.TimestampSchema};
    assert.deepEqual(Object.keys(wire.KNOWN_FIELDS).sort(), Object.keys(schemas).sort());
    for (const [name, schema] of Object.entries(schemas)) {
      assert.deepEqual(wire.KNOWN_FIELDS[name], schema.fields.map((f) => f.number).sort((a, b) => a - b),
                       `${name}: a field the decoder does not read`);
    }
  });

  test('a damaged message is refused', () => {
    const bytes = protobuf.toBinary(pb.SubscribeResponseSchema, protobuf.create(pb.SubscribeResponseSchema, {
      events: [{id: 5n, namespace: 'n', key: 'k', fireTime: {seconds: 9n, nanos: 1}}]}));
    for (let cut = 1; cut < bytes.length; cut++) {
      assert.throws(() => wire.decodeResponse(Buffer.from(bytes.subarray(0, cut))), RangeError,
                    `cut at ${cut}`);
    }
    assert.throws(() => wire.decodeResponse(Buffer.from([0x0b])), RangeError);  // a group
  });
});

describe('the window of handled ids', () => {
  // (A repeat of an id in it is acknowledged, not run again.)
  test('each id is kept its window, then forgotten', () => {
    let seed = 7;
    const rand = () => (seed = (seed * 1103515245 + 12345) % 2147483648) / 2147483648;
    const steps = [1, 10, 300, 2000, 7000];
    const done = new Done(10_000, 10_000);
    const added = [];
    let now = 0;
    for (let i = 0; i < 3000; i++) {
      now += steps[Math.floor(rand() * steps.length)];
      const id = (BigInt(i) << 10n) | 5n;
      done.add(id, now);
      added.push([now, id]);
      for (const [t, j] of added.slice(-400)) {
        if (now - t < 10_000) assert.ok(done.has(j), `${j} forgotten within its window`);
      }
    }
    // Added long after: what was older than two windows is gone.
    done.add(1n << 60n, now + 10_000);
    done.add((1n << 60n) + 1n, now + 20_000);
    assert.ok(!added.some(([, j]) => done.has(j)));
    assert.ok(done.has((1n << 60n) + 1n), 'an id past 2^53 is kept too');
  });

  test('its tables answer as two generations of Sets would', () => {
    // Random ids (0, near each other, far apart, past 2^53) added and
    // looked up over turns by time and by size, against the same window
    // kept in JavaScript Sets: every answer and size the same.
    let seed = 11;
    const rand = (n) => (seed = (seed * 1103515245 + 12345) % 2147483648) % n;
    const model = {ids: new Set(), old: new Set(), turnAt: 0};
    const half = 3000;
    const done = new Done(1000, 2 * half);
    const pick = () => {
      switch (rand(4)) {
        case 0: return BigInt(rand(5000));
        case 1: return BigInt(rand(2 ** 30)) * 1024n + BigInt(rand(1024));
        case 2: return (1n << 53n) - 2n + BigInt(rand(4));  // around 2^53
        default: return BigInt(rand(1000)) * 4294967296n;  // the same low half
      }
    };
    let now = 0;
    for (let i = 0; i < 40_000; i++) {
      now += rand(3);
      const id = pick();
      const probe = pick();
      assert.equal(done.has(probe), model.ids.has(probe) || model.old.has(probe), `has(${probe})`);
      done.add(id, now);
      model.ids.add(id);
      if (now >= model.turnAt || model.ids.size >= half) {
        model.old = model.ids;
        model.ids = new Set();
        model.turnAt = now + 1000;
      }
      assert.equal(done.size, model.ids.size + model.old.size);
    }
    for (const id of [...model.ids, ...model.old]) assert.ok(done.has(id), `${id} kept`);
  });

  test('a burst keeps the latest half of its limit at least, never more than it', () => {
    const done = new Done(600_000, 100);
    for (let i = 0; i < 1000; i++) done.add(BigInt(i), 5);
    const kept = Array.from({length: 1000}, (_, i) => i).filter((i) => done.has(BigInt(i)));
    assert.ok(kept.length <= 100 && done.size <= 100);
    assert.deepEqual(kept.slice(-50), Array.from({length: 50}, (_, i) => 950 + i));
  });
});


describe('the package', () => {
  test('the project\'s README shows the worker as written', () => {
    const readme = readFileSync(join(process.env.DELAYD_SOURCE_DIR, 'README.md'), 'utf8');
    assert.ok(readme.includes('```js\n' + readmeExample() + '```'));
  });

  test('its version is the project\'s', () => {
    const pkg = JSON.parse(readFileSync(join(LIB, 'package.json'), 'utf8'));
    assert.equal(d.VERSION, pkg.version);
    if (process.env.DELAYD_VERSION) assert.equal(pkg.version, process.env.DELAYD_VERSION);
  });
});
