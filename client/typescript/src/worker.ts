/**
 * Workers: the client's half of at-least-once delivery.
 *
 * ```ts
 * import {Worker} from 'delayd';
 * await new Worker('shop', async (event) => {
 *   await cancelOrder(event.key);    // resolves: acknowledged; throws: retried later
 * }, {concurrency: 8}).run();
 * ```
 *
 * A Worker subscribes to a namespace and runs `handler(event, signal)` for
 * each event, at most `concurrency` at once (the stream's flow control is
 * set to it, so the daemon hands it no more):
 *
 * - the handler resolves: the event is acknowledged; it throws: the event is
 *   nacked with the error's text and comes back after the policy's backoff
 *   (or after a {@link Retry}'s `afterMs`); after the policy's last attempt
 *   it is a dead letter. Acks, nacks and lease extensions go on the
 *   worker's stream (the Work method), a message each; while it reconnects,
 *   or against a daemon without Work (then Subscribe), as calls;
 * - while a handler runs, its event's lease is extended every third of the
 *   ack timeout, so a long job is never handed to another worker;
 * - the stream ending (a node stopped or killed, a hand-over, a database
 *   fail-over) is met by reconnecting, with jittered backoff, to the next
 *   endpoint; handlers already running finish and their acknowledgements
 *   still go out (to any node); an event delivered again that this worker
 *   already handled (within `dedupWindow`) is acknowledged without running
 *   the handler again, and one still running is not started twice;
 * - `stop()` (or SIGTERM/SIGINT under `run()`) takes nothing new, gives back
 *   what was received but not started, lets running handlers finish within
 *   `grace` and acknowledges them, then closes the stream; a second signal
 *   (or `stopNow()`) stops at once: handlers' signals abort, and what was
 *   not acknowledged comes back to other workers after its ack timeout.
 * @module
 */
import {create} from '@bufbuild/protobuf';

import {Client} from './client.js';
import type {Subscription} from './client.js';
import type {Config, RetryPolicy} from './config.js';
import {Done, keyOf} from './done.js';
import {DelaydError} from './errors.js';
import * as pb from './gen/delayd/v1/delayd_pb.js';
import {Outbox, now, within} from './outbox.js';
import {duration} from './requests.js';
import {sleep} from './retry.js';
import type {Event} from './types.js';
import {WorkStream} from './work_stream.js';

/** Thrown by a handler: the event failed; deliver it again after `afterMs`. */
export class Retry extends Error {
  /** @param message - the failure's text; @param afterMs - ms (default: the policy's backoff) */
  constructor(message: string, readonly afterMs?: number) {
    super(message);
    this.name = 'Retry';
  }
}

/** Callbacks for logs and metrics; times in ms. A hook that throws is ignored. */
export interface Hooks {
  /** An event arrived, `latenessMs` after its fire time. */
  onEvent?: (event: Event, latenessMs: number) => void;
  /** A handler resolved after `tookMs`. */
  onHandled?: (event: Event, tookMs: number) => void;
  /** A handler threw. */
  onFailed?: (event: Event, error: unknown, tookMs: number) => void;
  /** The stream is up ("connected") or ended ("lost", with its error). */
  onStream?: (state: 'connected' | 'lost', error?: DelaydError) => void;
}

/** A handler: resolves when the job is done; `signal` aborts on stopNow(). */
export type Handler = (event: Event, signal: AbortSignal) => unknown;

/** A Worker's options; times in ms. */
export interface WorkerOptions {
  /** Handlers at most at once (default 1). */
  concurrency?: number;
  /** The client to use (default: a client of its own, from `config`). */
  client?: Client;
  /** The configuration of the worker's own client. */
  config?: Partial<Config>;
  /** Per event, before it counts as failed unless extended (default 30000). */
  ackTimeout?: number;
  /** How long a handled event's id is remembered (default 600000). */
  dedupWindow?: number;
  /** How long stop() waits for running handlers (default 30000). */
  grace?: number;
  hooks?: Hooks;
  /** The waits between reconnections (default 50 ms doubling to 2 s). */
  reconnect?: Partial<RetryPolicy>;
}

/** Runs a handler for each event of a namespace (see the module's text). */
export class Worker {
  readonly client: Client;
  private readonly concurrency: number;
  private readonly ackTimeout: number;
  private readonly grace: number;
  private readonly hooks: Hooks;
  private readonly reconnect: RetryPolicy;
  private readonly ownClient: boolean;
  private readonly done: Done;
  private readonly queued: Event[] = [];
  // The handlers awaited, by keyOf() of their event's id.
  private readonly runningIds = new Map<number | bigint, Event>();
  private inHandler = 0;  // 1 while a handler's call has not returned
  private pumping = false;  // pump() runs
  // now() when the events in hand came or the last handler's promise
  // settled: when a handler that returns no promise ended, to the window of
  // handled ids (one clock read per message rather than per event).
  private clock = 0;
  private readonly timed: boolean;  // hooks take handlers' durations
  private stream?: Subscription | WorkStream;
  // The daemon has no Work method (an older release): Subscribe it is.
  private legacy = false;
  private readonly outbox: Outbox;  // acks and nacks, on the Work stream once up
  private stopping = false;
  private readonly halt = new AbortController();  // aborts on stopNow()
  private readonly ended = new AbortController();  // aborts once finished
  private leaseTimer?: NodeJS.Timeout;
  private idle?: () => void;  // resolves stop()'s wait for running handlers
  private finished!: () => void;
  /** Resolves once the worker has stopped. */
  readonly stopped = new Promise<void>((resolve) => {
    this.finished = resolve;
  });

  /**
   * @param namespace - the namespace whose events it handles
   * @param handler - run for each event
   */
  constructor(readonly namespace: string, private readonly handler: Handler,
              options: WorkerOptions = {}) {
    this.concurrency = options.concurrency ?? 1;
    this.ackTimeout = options.ackTimeout ?? 30_000;
    if (!Number.isInteger(this.concurrency) || this.concurrency < 1) {
      throw new RangeError('concurrency: an integer, at least 1');
    }
    if (!(this.ackTimeout >= 100 && this.ackTimeout <= 3_600_000)) {
      throw new RangeError('ackTimeout: from 100 to 3600000 ms');
    }
    this.grace = options.grace ?? 30_000;
    this.hooks = options.hooks ?? {};
    this.reconnect = {attempts: Infinity, initialBackoffMs: 50, maxBackoffMs: 2000,
                      multiplier: 2, ...options.reconnect};
    this.ownClient = options.client === undefined;
    this.client = options.client ?? new Client(options.config);
    this.done = new Done(options.dedupWindow ?? 600_000);
    this.outbox = new Outbox(this.client, namespace, this.halt.signal);
    this.timed = this.hooks.onHandled !== undefined || this.hooks.onFailed !== undefined;
  }

  /** How many handlers run now. */
  get running(): number {
    return this.runningIds.size + this.inHandler;
  }

  /** Starts reading and handling; returns at once (see `stopped`). */
  start(): void {
    this.leaseTimer = setInterval(() => void this.extendLeases(), this.ackTimeout / 3);
    void this.readLoop();
  }

  /**
   * Starts, and resolves once stopped: by stop(), or by SIGTERM or SIGINT
   * (a second one stops at once).
   */
  async run(options: {signals?: boolean} = {}): Promise<void> {
    const onSignal = () => {
      if (this.stopping) this.stopNow();
      else void this.stop();
    };
    const signals = options.signals ?? true;
    if (signals) {
      process.on('SIGTERM', onSignal);
      process.on('SIGINT', onSignal);
    }
    this.start();
    try {
      await this.stopped;
    } finally {
      process.off('SIGTERM', onSignal);
      process.off('SIGINT', onSignal);
    }
  }

  /**
   * Takes nothing new, gives back what was not started, lets running
   * handlers finish within `graceMs` and acknowledges them; resolves once
   * stopped.
   */
  async stop(graceMs: number = this.grace): Promise<void> {
    if (this.stopping) return this.stopped;
    this.stopping = true;
    // The stream stays open until what runs is acknowledged: an event of a
    // stream that ended could go to another worker while its handler ran.
    for (const e of this.queued.splice(0)) this.outbox.nack(e.id, 'the worker stopped', 0);
    if (this.running > 0) {  // (a handler that calls stop() counts)
      const idle = new Promise<void>((resolve) => { this.idle = resolve; });
      await within(idle, graceMs, this.halt.signal);
    }
    await this.outbox.flushUntil(now() + 5000);
    this.finish();
  }

  /** Stops at once: running handlers' signals abort; nothing waits for them. */
  stopNow(): void {
    this.stopping = true;
    this.halt.abort();
    this.finish();
  }

  private finish(): void {
    if (this.ended.signal.aborted) return;
    this.ended.abort();
    clearInterval(this.leaseTimer);
    this.stream?.cancel();
    if (this.ownClient) this.client.close();
    this.finished();
  }

  private hook<K extends keyof Hooks>(name: K, ...args: Parameters<NonNullable<Hooks[K]>>): void {
    try {
      (this.hooks[name] as ((...a: unknown[]) => void) | undefined)?.(...args);
    } catch {
      // A hook's failure is its own.
    }
  }

  // ---- The stream ----

  private async readLoop(): Promise<void> {
    let wait = this.reconnect.initialBackoffMs;
    const connected = () => {
      wait = this.reconnect.initialBackoffMs;
      this.hook('onStream', 'connected');
    };
    while (!this.stopping) {
      const conn = this.client.conn;
      const at = conn.endpoint();
      let error: DelaydError | undefined;
      try {
        if (this.legacy) {
          await this.readSubscription(connected);
        } else {
          await this.readWork(at, connected);
        }
      } catch (e) {
        error = e as DelaydError;
        if (error.code === 'UNIMPLEMENTED' && !this.legacy) {
          this.legacy = true;  // an older daemon: at once, the old way
          continue;
        }
      }
      if (this.stopping) return;
      this.hook('onStream', 'lost', error);
      conn.rotate(at);  // another endpoint next time, after a jittered wait,
      this.legacy = false;  // asking for Work again (an older node refuses it at once)
      await sleep(wait * (0.5 + Math.random() / 2), this.ended.signal).catch(() => {});
      wait = Math.min(wait * this.reconnect.multiplier, this.reconnect.maxBackoffMs);
    }
  }

  /** The subscription's options, as the daemon takes them. */
  private subscribeRequest(): pb.SubscribeRequest {
    return create(pb.SubscribeRequestSchema, {
      namespace: this.namespace, mode: pb.SubscribeRequest_Mode.WORKER,
      maxInFlight: this.concurrency, ackTimeout: duration(this.ackTimeout, 'ackTimeout'),
      keepLeases: true});
  }

  /** Reads a Work stream until it ends (throws how, unless it was stopped). */
  private async readWork(at: number, connected: () => void): Promise<void> {
    const stream = new WorkStream(this.client.conn, at, this.subscribeRequest());
    this.stream = stream;
    void stream.registered.then(() => {
      if (this.stream !== stream) return;
      this.outbox.work = stream;
      connected();
      this.outbox.resume();
    });
    try {
      await stream.read((batch) => {
        this.clock = now();
        for (const e of batch) this.received(e);
      });
    } finally {
      if (this.outbox.work === stream) this.outbox.work = undefined;
    }
  }

  /** Reads a Subscribe stream (a daemon without Work) until it ends. */
  private async readSubscription(connected: () => void): Promise<void> {
    const stream = this.client.subscribe({
      namespace: this.namespace, maxInFlight: this.concurrency,
      ackTimeout: this.ackTimeout, keepLeases: true});
    this.stream = stream;
    void stream.registered.then(connected);
    for await (const batch of stream.batches()) {
      this.clock = now();
      for (const e of batch) this.received(e);
    }
  }

  private received(e: Event): void {
    if (this.hooks.onEvent !== undefined) {
      this.hook('onEvent', e, Math.max(0, now() - Number(e.fireTimeNs / 1000n) / 1000));
    }
    const k = keyOf(e.id);
    if (this.done.hasKey(k)) {
      this.outbox.ack(e.id);  // handled already
    } else if (this.runningIds.has(k) || this.queued.some((q) => q.id === e.id)) {
      // In hand: its lease is kept and its ack will go.
    } else if (this.stopping) {
      this.outbox.nack(e.id, 'the worker stopped', 0);
    } else if (this.queued.length === 0 && this.runningIds.size < this.concurrency) {
      this.handle(e, k);  // (nothing waits before it: no trip through the queue)
    } else {
      this.queued.push(e);
      this.pump();
    }
  }

  // ---- Handlers ----

  private pump(): void {
    if (this.pumping) return;  // (a handler done at once, inside the loop below)
    this.pumping = true;
    try {
      while (this.runningIds.size < this.concurrency && this.queued.length > 0) {
        const e = this.queued.shift()!;
        this.handle(e, keyOf(e.id));
      }
    } finally {
      this.pumping = false;
    }
  }

  /**
   * Runs the handler. One that returns no promise is done before anything
   * else runs: it is counted in `inHandler` while its call runs, never in
   * `runningIds` (the handlers awaited), and no promise is made and awaited
   * for it (for a quick handler that was a fifth of what the worker spent
   * on an event).
   */
  private handle(e: Event, k: number | bigint): void {
    const started = this.timed ? now() : 0;
    let result: unknown;
    this.inHandler++;
    try {
      result = this.handler(e, this.halt.signal);
    } catch (error) {
      this.inHandler--;
      this.handled(e, k, started, {error});
      return;
    }
    this.inHandler--;
    if (typeof (result as PromiseLike<unknown> | undefined)?.then === 'function') {
      this.runningIds.set(k, e);
      (result as PromiseLike<unknown>).then(() => {
        this.runningIds.delete(k);
        this.clock = now();
        this.handled(e, k, started);
      }, (error) => {
        this.runningIds.delete(k);
        this.clock = now();
        this.handled(e, k, started, {error});
      });
    } else {
      this.handled(e, k, started);
    }
  }

  /** A handler ended (and is no longer in `runningIds`). */
  private handled(e: Event, k: number | bigint, started: number,
                  failure?: {error: unknown}): void {
    if (this.halt.signal.aborted) return;  // stopNow(): it comes back
    if (failure === undefined) {
      this.done.addKey(k, this.clock);
      this.outbox.ack(e.id);
      if (this.hooks.onHandled !== undefined) this.hook('onHandled', e, now() - started);
    } else {
      const err = failure.error;
      const text = err instanceof Error ? err.message || err.name : String(err);
      this.outbox.nack(e.id, text, err instanceof Retry ? err.afterMs : undefined);
      if (this.hooks.onFailed !== undefined) this.hook('onFailed', e, err, now() - started);
    }
    if (this.running === 0) this.idle?.();
    if (this.queued.length > 0) this.pump();
  }

  // ---- Leases ----

  private async extendLeases(): Promise<void> {
    const held = [...[...this.runningIds.values()].map((e) => e.id), ...this.queued.map((e) => e.id)];
    if (held.length === 0 || this.halt.signal.aborted) return;
    const work = this.outbox.work;
    if (work !== undefined) {
      await work.extendLease(held, this.ackTimeout, this.namespace).catch(() => {});
      return;
    }
    await this.client.extendLease(held, this.ackTimeout, {namespace: this.namespace})
      .catch(() => {});  // tried again at the next period
  }
}
