// The TypeScript library's Worker against a loop written by hand over the
// generated stubs (connect-node's gRPC transport), and against BullMQ's
// Worker at the same concurrency, each with a handler that does nothing.
// Prints one JSON line.
//
//   throughput: N jobs due at once (a paused namespace, a paused BullMQ
//       queue); the worker starts, the namespace (queue) resumes, and the
//       clock runs until every job is done: jobs per second. With WARMUP,
//       the worker first handles that many jobs, off the clock: the figure
//       of a process that has compiled its code (a worker's steady state;
//       without it a run of 50,000 is mostly the JIT's warm-up, and the
//       side with more code pays more of it).
//   lateness: a producer process adds RATE jobs a second for SECONDS, each
//       due DELAY_MS later; a job's lateness is when the handler gets it
//       minus when it was due (p50, p99, ms; BullMQ's times are whole ms).
//
// The hand-written loop is the one the raw API invites: for await over the
// stream, the handler for each event of a message, one Ack for the
// message's events ("raw": Subscribe and an Ack call on connect-node;
// "rawwork": a Work stream on grpc-js, the Ack a message on it; "rawh2":
// the same Work stream on node:http2 with no gRPC library, the floor of
// what any transport costs this process).
//
// Usage: node worker_bench.mjs library|raw|rawwork|rawh2|bullmq throughput N CONCURRENCY [WARMUP]
//        node worker_bench.mjs library|raw|rawwork|rawh2|bullmq lateness RATE SECONDS DELAY_MS CONCURRENCY
// Environment: DELAYD_ENDPOINT (host:port), DELAYD_TS_LIB (client/typescript,
// built), REDIS_PORT and BULLMQ_DIR (tests/bench/node) for bullmq.
import {spawn} from 'node:child_process';
import {existsSync, readFileSync} from 'node:fs';
import {createRequire} from 'node:module';
import path from 'node:path';
import {pathToFileURL} from 'node:url';

const [mode, kind, ...rest] = process.argv.slice(2);
const args = rest.map(Number);
const lib = process.env.DELAYD_TS_LIB;
const ns = `bench-${mode}-${process.pid}`;
const fromLib = (file) => import(pathToFileURL(path.join(lib, file)).href);
const libRequire = createRequire(path.join(lib, 'package.json'));
// A package as an ES module imports it (its exports' "import" entry, where
// it has one), as the library and the generated code do: resolving it by
// require() would load its CommonJS build, a second copy of the code whose
// JIT state only the raw loop's messages shape.
const importFrom = async (req, name) => {
  const main = req.resolve(name);
  // The package's directory: the nearest above its entry whose package.json
  // names it.
  for (let dir = path.dirname(main); dir !== path.dirname(dir); dir = path.dirname(dir)) {
    const file = path.join(dir, 'package.json');
    if (!existsSync(file)) continue;
    const pkg = JSON.parse(readFileSync(file, 'utf8'));
    if (pkg.name !== name) continue;
    const entry = pkg.exports?.['.']?.import;
    return import(pathToFileURL(entry === undefined ? main : path.join(dir, entry)).href);
  }
  return import(pathToFileURL(main).href);
};

const delayd = await fromLib('dist/esm/index.js');
const client = new delayd.Client();
const nanos = (t) => t.seconds * 1_000_000_000n + BigInt(t.nanos);
const nowNs = () => BigInt(Math.round((performance.timeOrigin + performance.now()) * 1e6));

async function waitUntil(done, timeoutMs, what) {
  const deadline = Date.now() + timeoutMs;
  while (!(await done())) {
    if (Date.now() > deadline) throw new Error(`${mode}: ${what}`);
    await new Promise((r) => setTimeout(r, 2));  // (polls, bounded)
  }
}

const acked = async () => BigInt((await client.stats({namespace: ns})).namespaces[0].eventsAcked);

// A started worker whose stream is registered: {stop()}. handler(fireNs,
// firedAtNs): the event's due time and when the daemon fired it.
async function delaydWorker(handler, concurrency) {
  if (mode === 'library') {
    let registered;
    const ready = new Promise((r) => { registered = r; });
    const w = new delayd.Worker(ns, (e) => handler(e.fireTimeNs, e.firedAtNs), {
      concurrency, client, hooks: {onStream: (s) => s === 'connected' && registered()}});
    w.start();
    await ready;
    return {stop: () => w.stop()};
  }
  if (mode === 'rawwork') return rawWork(handler, concurrency);
  if (mode === 'rawh2') return rawH2(handler, concurrency);
  const {createClient} = await importFrom(libRequire, '@connectrpc/connect');
  const {createGrpcTransport} = await importFrom(libRequire, '@connectrpc/connect-node');
  const gen = await fromLib('dist/esm/gen/delayd/v1/delayd_pb.js');
  const stub = createClient(gen.Delayd, createGrpcTransport({
    baseUrl: `http://${process.env.DELAYD_ENDPOINT}`}));
  const abort = new AbortController();
  let registered;
  const ready = new Promise((r) => { registered = r; });
  const loop = (async () => {
    try {
      for await (const msg of stub.subscribe({namespace: ns, mode: gen.SubscribeRequest_Mode.WORKER,
                                               maxInFlight: concurrency}, {signal: abort.signal})) {
        registered();  // (the first message registers)
        if (msg.events.length === 0) continue;
        for (const e of msg.events) {
          await handler(nanos(e.fireTime), nanos(e.firedAt));
        }
        await stub.ack({namespace: ns, eventIds: msg.events.map((e) => e.id)});
      }
    } catch (e) {
      if (!abort.signal.aborted) throw e;
    }
  })();
  await ready;
  return {stop: async () => { abort.abort(); await loop; }};
}

// The same loop over a Work stream (@grpc/grpc-js, as the library's): the
// message's Ack is a message on the stream.
async function rawWork(handler, concurrency) {
  const grpc = await importFrom(libRequire, '@grpc/grpc-js');
  const {create, fromBinary, toBinary} = await importFrom(libRequire, '@bufbuild/protobuf');
  const gen = await fromLib('dist/esm/gen/delayd/v1/delayd_pb.js');
  const channel = new grpc.Client(process.env.DELAYD_ENDPOINT, grpc.credentials.createInsecure());
  const call = channel.makeBidiStreamRequest('/delayd.v1.Delayd/Work',
    (r) => Buffer.from(toBinary(gen.WorkRequestSchema, r)),
    (b) => fromBinary(gen.SubscribeResponseSchema, b), new grpc.Metadata());
  call.on('error', () => {});
  call.write(create(gen.WorkRequestSchema, {request: {case: 'subscribe', value: create(
    gen.SubscribeRequestSchema, {namespace: ns, mode: gen.SubscribeRequest_Mode.WORKER,
                                 maxInFlight: concurrency})}}));
  let registered;
  const ready = new Promise((r) => { registered = r; });
  const loop = (async () => {
    try {
      for await (const msg of call) {
        registered();  // (the first message registers)
        if (msg.events.length === 0) continue;
        for (const e of msg.events) {
          await handler(nanos(e.fireTime), nanos(e.firedAt));
        }
        call.write(create(gen.WorkRequestSchema, {request: {case: 'ack', value: create(
          gen.AckRequestSchema, {namespace: ns, eventIds: msg.events.map((e) => e.id)})}}));
      }
    } catch {
      // (cancelled at stop)
    }
  })();
  await ready;
  return {stop: async () => { call.cancel(); await loop; channel.close(); }};
}

// The same Work loop on Node's own http2, with gRPC's framing written here
// (a flag byte and a 4-byte length before each message): what the stream
// costs without a gRPC library in between.
async function rawH2(handler, concurrency) {
  const http2 = await import('node:http2');
  const {create, fromBinary, toBinary} = await importFrom(libRequire, '@bufbuild/protobuf');
  const gen = await fromLib('dist/esm/gen/delayd/v1/delayd_pb.js');
  const session = http2.connect(`http://${process.env.DELAYD_ENDPOINT}`);
  session.on('error', () => {});
  const req = session.request({':method': 'POST', ':path': '/delayd.v1.Delayd/Work',
                               'content-type': 'application/grpc', te: 'trailers'});
  req.on('error', () => {});
  const send = (r) => {
    const body = toBinary(gen.WorkRequestSchema, r);
    const frame = Buffer.allocUnsafe(5 + body.length);
    frame[0] = 0;
    frame.writeUInt32BE(body.length, 1);
    frame.set(body, 5);
    req.write(frame);
  };
  send(create(gen.WorkRequestSchema, {request: {case: 'subscribe', value: create(
    gen.SubscribeRequestSchema, {namespace: ns, mode: gen.SubscribeRequest_Mode.WORKER,
                                 maxInFlight: concurrency})}}));
  let registered;
  const ready = new Promise((r) => { registered = r; });
  let pending = Buffer.alloc(0);
  let chain = Promise.resolve();
  req.on('data', (chunk) => {
    pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
    while (pending.length >= 5) {
      const len = pending.readUInt32BE(1);
      if (pending.length < 5 + len) break;
      const msg = fromBinary(gen.SubscribeResponseSchema, pending.subarray(5, 5 + len));
      pending = pending.subarray(5 + len);
      registered();  // (the first message registers)
      if (msg.events.length === 0) continue;
      chain = chain.then(async () => {
        for (const e of msg.events) {
          await handler(nanos(e.fireTime), nanos(e.firedAt));
        }
        send(create(gen.WorkRequestSchema, {request: {case: 'ack', value: create(
          gen.AckRequestSchema, {namespace: ns, eventIds: msg.events.map((e) => e.id)})}}));
      });
    }
  });
  await ready;
  return {stop: async () => { await chain; req.close(); session.close(); }};
}

async function bullmq() {
  const req = createRequire(path.join(process.env.BULLMQ_DIR, 'package.json'));
  return {mq: req('bullmq'), connection: {host: '127.0.0.1', port: Number(process.env.REDIS_PORT)}};
}

async function throughput(n, concurrency, warmup = 0) {
  let t0;
  // Each side counts its handlers' runs up to `goal` (the warm-up's, then
  // the warm-up's and the figure's): `all` resolves `ran` at it.
  let done = 0;
  let goal = warmup;
  let all;
  let ran = new Promise((r) => { all = r; });
  const count = () => { if (++done === goal) all(); };
  const measured = () => {
    goal = warmup + n;
    ran = new Promise((r) => { all = r; });
  };
  if (mode === 'bullmq') {
    const {mq, connection} = await bullmq();
    const queue = new mq.Queue(ns, {connection});
    const addJobs = async (jobs) => {
      for (let i = 0; i < jobs; i += 1000) {
        await queue.addBulk(Array.from({length: Math.min(1000, jobs - i)},
          (_, j) => ({name: 'job', data: {}, opts: {removeOnComplete: true}})));
      }
    };
    const start = async () => {
      const worker = new mq.Worker(ns, async () => count(), {connection, concurrency});
      await worker.waitUntilReady();
      return worker;
    };
    let worker;
    if (warmup > 0) {
      worker = await start();
      await addJobs(warmup);
      await within(ran, 'warm-up');
    }
    await queue.pause();
    measured();
    await addJobs(n);
    worker ??= await start();
    t0 = performance.now();
    await queue.resume();
    await within(ran, 'timeout');
    const seconds = (performance.now() - t0) / 1000;
    await worker.close();
    await queue.obliterate({force: true});
    await queue.close();
    return {events: n, seconds, per_second: n / seconds};
  }
  const setAll = async (timers, prefix) => {
    for (let i = 0; i < timers; i += 1000) {
      const b = client.batch({namespace: ns});
      for (let j = i; j < Math.min(timers, i + 1000); j++) b.set(`${prefix}${j}`, '', {delay: 0});
      await b.commit();
    }
  };
  // Every handler has run once `done` reaches the goal (no call meanwhile:
  // Stats polled through the whole run cost this process more CPU than the
  // worker); then Stats says when all are acknowledged.
  let w;
  if (warmup > 0) {
    w = await delaydWorker(count, concurrency);
    await setAll(warmup, 'w');
    await within(ran, 'warm-up');
    await waitUntil(async () => (await acked()) >= BigInt(warmup), 120_000, 'warm-up not acknowledged');
  }
  await client.pause({namespace: ns});
  measured();
  await setAll(n, 'k');
  w ??= await delaydWorker(count, concurrency);
  t0 = performance.now();
  const cpu0 = process.cpuUsage();
  await client.resume({namespace: ns});
  await within(ran, 'timeout');
  await waitUntil(async () => (await acked()) >= BigInt(warmup + n), 120_000, 'not all acknowledged');
  const seconds = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  await w.stop();
  // This process's CPU (user + system) per event over the run.
  return {events: n, seconds, per_second: n / seconds, cpu_us_per_event: (cpu.user + cpu.system) / n};
}

// Waits for `p`, at most 120 s.
function within(p, what) {
  return Promise.race([p, new Promise((_, f) => setTimeout(() => f(new Error(`${mode}: ${what}`)), 120_000).unref())]);
}

async function lateness(rate, seconds, delayMs, concurrency) {
  const late = [];
  // delayd: the daemon's own part of each event's lateness (fired_at minus
  // the due time), to tell it from the worker's.
  const daemonLate = [];
  const n = rate * seconds;
  let stop;
  if (mode === 'bullmq') {
    const {mq, connection} = await bullmq();
    const worker = new mq.Worker(ns, async (job) => {
      late.push(Date.now() - (job.timestamp + job.opts.delay));
    }, {connection, concurrency});
    await worker.waitUntilReady();
    stop = async () => {
      await worker.close();
      const queue = new mq.Queue(ns, {connection});
      await queue.obliterate({force: true});
      await queue.close();
    };
  } else {
    const w = await delaydWorker((fireNs, firedNs) => {
      late.push(Number(nowNs() - fireNs) / 1e6);
      daemonLate.push(Number(firedNs - fireNs) / 1e6);
    }, concurrency);
    stop = () => w.stop();
  }
  await new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [process.argv[1], mode, 'produce', ns, rate, seconds, delayMs],
                    {stdio: 'inherit'});
    p.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`producer: ${code}`))));
  });
  await waitUntil(() => late.length >= n, 60_000, `${late.length} of ${n} handled`);
  await stop();
  const pick = (xs, q) => xs[Math.min(xs.length - 1, Math.floor(q * xs.length))];
  late.sort((a, b) => a - b);
  const result = {events: late.length, p50_ms: pick(late, 0.5), p99_ms: pick(late, 0.99)};
  if (daemonLate.length === 0) return result;
  daemonLate.sort((a, b) => a - b);
  return {...result, daemon_p50_ms: pick(daemonLate, 0.5), daemon_p99_ms: pick(daemonLate, 0.99)};
}

// Adds `rate` jobs a second in groups every 10 ms, each due `delayMs` after
// the instant it stands for (BullMQ: a delay from when it is added).
async function produce(queueName, rate, seconds, delayMs) {
  const perTick = rate / 100;
  const t0 = Date.now();
  let add;
  let close = async () => {};
  if (mode === 'bullmq') {
    const {mq, connection} = await bullmq();
    const queue = new mq.Queue(queueName, {connection});
    add = (due) => queue.addBulk(Array.from({length: perTick}, (_, i) => ({
      name: 'job', data: {}, opts: {delay: Math.max(0, due + delayMs + (i * 10) / perTick - Date.now()),
                                    removeOnComplete: true}})));
    close = () => queue.close();
  } else {
    add = (due, tick) => {
      const b = client.batch({namespace: queueName});
      for (let i = 0; i < perTick; i++) {
        b.set(`t${tick}-${i}`, '', {at: new Date(due + delayMs + (i * 10) / perTick)});
      }
      return b.commit();
    };
  }
  for (let tick = 0; tick < seconds * 100; tick++) {
    const due = t0 + tick * 10;
    const wait = due - Date.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));  // the load's pace
    await add(due, tick);
  }
  await close();
}

if (kind === 'produce') {
  await produce(rest[0], ...rest.slice(1).map(Number));
} else {
  if (mode !== 'bullmq') await client.setTimer('~anchor', '', {delay: 3_600_000, namespace: ns});
  const result = kind === 'throughput' ? await throughput(...args) : await lateness(...args);
  console.log(JSON.stringify({mode, kind, ...result}));
}
client.close();
