// delayd from Node.js: @grpc/grpc-js with the .proto loaded at run time by
// @grpc/proto-loader. A worker subscribes, receives timers set from Node,
// acknowledges them; error statuses come through.
//
// Over TLS with a bearer token: DELAYD_TLS_CA is the CA to check the daemon
// against and DELAYD_TOKEN the token; a call without the token is refused.
//
// Usage: node client_test.js PROTO_ROOT   (DELAYD_ENDPOINT names the daemon)
'use strict';
const assert = require('node:assert/strict');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const protoRoot = process.argv[2];
const endpoint = process.env.DELAYD_ENDPOINT;
const definition = protoLoader.loadSync('delayd/v1/delayd.proto', {
  includeDirs: [protoRoot],
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
});
const {Delayd} = grpc.loadPackageDefinition(definition).delayd.v1;
const tls = grpc.credentials.createSsl(
    require('node:fs').readFileSync(process.env.DELAYD_TLS_CA));
const bearer = grpc.credentials.createFromMetadataGenerator((_, callback) => {
  const md = new grpc.Metadata();
  md.set('authorization', `Bearer ${process.env.DELAYD_TOKEN}`);
  callback(null, md);
});
const client = new Delayd(
    endpoint, grpc.credentials.combineChannelCredentials(tls, bearer));

const deadline = () => new Date(Date.now() + 5000);
const call = (method, request) => new Promise((resolve, reject) => {
  client[method](request, {deadline: deadline()},
                 (err, response) => (err ? reject(err) : resolve(response)));
});
const nanos = (ts) => BigInt(ts.seconds) * 1000000000n + BigInt(ts.nanos);

async function main() {
  const ns = 'node';
  const keys = ['job-0', 'job-1', 'job-2', 'job-3', 'job-4'];
  const stream = client.subscribe(
      {namespace: ns, mode: 'WORKER', max_in_flight: 10},
      {deadline: new Date(Date.now() + 30000)});
  const received = new Map();
  let registered;
  const isRegistered = new Promise((resolve) => (registered = resolve));
  let allReceived;
  const allDone = new Promise((resolve, reject) => {
    allReceived = resolve;
    stream.on('error', (err) => {
      if (err.code !== grpc.status.CANCELLED) reject(err);
    });
  });
  // Every event in arrival order; nextEvent(n) resolves with the n-th.
  const events = [];
  let waiter = () => {};
  const nextEvent = (n) => new Promise((resolve) => {
    waiter = () => {
      if (events.length >= n) resolve(events[n - 1]);
    };
    waiter();
  });
  stream.on('data', (msg) => {
    registered();  // The first message, without events.
    for (const e of msg.events) {
      received.set(e.key, e);
      events.push(e);
    }
    if (received.size === keys.length) allReceived();
    waiter();
  });
  await isRegistered;

  const versions = new Map();
  for (const key of keys) {
    const r = await call('SetTimer', {
      namespace: ns,
      key,
      payload: Buffer.from(`payload of ${key}`),
      delay: {seconds: 0, nanos: 50000000},
    });
    assert.ok(BigInt(r.version) > 0n && !r.replaced);
    versions.set(key, r.version);
  }
  await allDone;
  for (const [key, e] of received) {
    assert.equal(e.namespace, ns);
    assert.equal(e.payload.toString(), `payload of ${key}`);
    assert.equal(e.version, versions.get(key));
    assert.ok(nanos(e.fired_at) >= nanos(e.fire_time), 'fired early');
    assert.equal(e.attempt, 1);
    assert.equal(e.reason, 'REASON_EXPIRED');
  }
  const ack = await call('Ack', {
    namespace: ns,
    event_ids: [...received.values()].map((e) => e.id),
  });
  assert.equal(ack.acked, keys.length);
  assert.equal(ack.unknown_ids.length, 0);

  // Errors arrive as gRPC statuses naming the problem.
  await assert.rejects(
      call('SetTimer', {namespace: ns, key: '', delay: {seconds: 1}}),
      (err) => err.code === grpc.status.INVALID_ARGUMENT &&
          err.details.includes('key'));
  await assert.rejects(
      call('GetTimer', {namespace: ns, key: 'no-such-job'}),
      (err) => err.code === grpc.status.NOT_FOUND);
  const stats = await call('Stats', {});
  assert.equal(stats.in_flight_events, '0');

  // A failed job, in a namespace allowing 3 attempts with a backoff of
  // 300 ms doubling: nacked with retry_after, it comes back (attempt 2)
  // after that; nacked without, after the backoff of attempt 2 (600 ms);
  // nacked a third time, it becomes a dead letter, listed with the worker's
  // error; requeued, it comes back from attempt 1.
  await call('SetPolicy', {
    namespace: ns,
    policy: {max_attempts: 3, initial_backoff: {seconds: 0, nanos: 300000000}},
  });
  await call('SetTimer', {namespace: ns, key: 'flaky', delay: {seconds: 0}});
  const failed = await nextEvent(keys.length + 1);
  assert.equal(failed.key, 'flaky');
  assert.equal(failed.attempt, 1);
  const nackedAt = Date.now();
  const nack = await call('Nack', {
    namespace: ns,
    event_ids: [failed.id],
    retry_after: {seconds: 0, nanos: 200000000},
  });
  assert.equal(nack.nacked, 1);
  const retried = await nextEvent(keys.length + 2);
  assert.ok(Date.now() - nackedAt >= 200, 'retried early');
  assert.equal(retried.id, failed.id);
  assert.equal(retried.attempt, 2);
  const backedOffFrom = Date.now();
  await call('Nack', {namespace: ns, event_ids: [retried.id]});
  const third = await nextEvent(keys.length + 3);
  assert.ok(Date.now() - backedOffFrom >= 600, 'backed off too little');
  assert.equal(third.id, failed.id);
  assert.equal(third.attempt, 3);
  await call('Nack', {
    namespace: ns,
    event_ids: [retried.id],
    error: 'card declined',
  });
  const until = Date.now() + 10000;
  while ((await call('Stats', {namespace: ns})).namespaces[0].dead_letters !==
         '1') {
    assert.ok(Date.now() < until, 'no dead letter');
    await new Promise((resolve) => setTimeout(resolve, 10));  // Bounded poll.
  }
  const dead = (await call('ListDeadLetters', {namespace: ns})).dead_letters;
  assert.equal(dead.length, 1);
  assert.equal(dead[0].event.id, failed.id);
  assert.equal(dead[0].error, 'card declined');
  assert.equal(dead[0].event.attempt, 3);
  const requeued =
      await call('RequeueDeadLetters', {namespace: ns, event_ids: [failed.id]});
  assert.equal(requeued.count, 1);
  const again = await nextEvent(keys.length + 4);
  assert.equal(again.id, failed.id);
  assert.equal(again.attempt, 1);
  const acked = await call('Ack', {namespace: ns, event_ids: [again.id]});
  assert.equal(acked.acked, 1);

  // A recurring schedule (one run: max_runs): its run arrives as an event
  // with the schedule's key, payload and run number.
  const sched = await call('SetSchedule', {
    namespace: ns, key: 'every-second', payload: Buffer.from('tick'),
    spec: {every: {seconds: 1}, max_runs: 1},
  });
  assert.ok(Number(sched.version) > 0);
  assert.equal(sched.runs, '0');
  const run = await nextEvent(keys.length + 5);
  assert.equal(run.key, 'every-second');
  assert.equal(run.schedule_run, '1');
  assert.equal(run.payload.toString(), 'tick');
  assert.equal(
      (await call('Ack', {namespace: ns, event_ids: [run.id]})).acked, 1);
  const done =
      await call('GetSchedule', {namespace: ns, key: 'every-second'});
  assert.equal(done.runs, '1');
  assert.equal(done.next_instant, null);

  // TLS without the token: refused.
  const anonymous = new Delayd(endpoint, tls);
  await assert.rejects(
      new Promise((resolve, reject) => anonymous.SetTimer(
          {namespace: ns, key: 'anonymous', delay: {seconds: 60}},
          {deadline: deadline()}, (err, r) => (err ? reject(err) : resolve(r)))),
      (err) => err.code === grpc.status.UNAUTHENTICATED);
  anonymous.close();

  stream.cancel();
  client.close();
  console.log(`node client: ${received.size} events received and ` +
              'acknowledged, one nacked, backed off, dead-lettered and ' +
              'requeued; a schedule\'s run received; ' +
              'INVALID_ARGUMENT, NOT_FOUND and UNAUTHENTICATED ' +
              'seen (TLS, token)');
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
