/**
 * A Worker's acknowledgements on their way to the daemon: queued as the
 * handlers end, sent together at the next microtask, on the worker's Work
 * stream while one is up (else by unary calls), and sent again if they fail.
 * @internal
 * @module
 */
import type {Client} from './client.js';
import {sleep} from './retry.js';
import type {WorkStream} from './work_stream.js';

/** A nack to send. */
export type Nack = {id: bigint; error: string; afterMs?: number};

/** The wall clock in ms, to the microsecond. */
export const now = () => performance.timeOrigin + performance.now();

/** Nacks by their error and retry time, one group each. */
function groupNacks(nacks: Nack[]): Nack[][] {
  const groups = new Map<string, Nack[]>();
  for (const n of nacks) {
    const k = `${n.afterMs ?? ''}\n${n.error}`;
    const g = groups.get(k);
    if (g === undefined) groups.set(k, [n]);
    else g.push(n);
  }
  return [...groups.values()];
}

/** Waits for `p`, at most `ms` (no timer outlives the wait). */
export async function within(p: Promise<void>, ms: number, signal?: AbortSignal): Promise<void> {
  const timer = new AbortController();
  const stop = () => timer.abort();
  signal?.addEventListener('abort', stop, {once: true});
  try {
    await Promise.race([p, sleep(Math.max(0, ms), timer.signal).catch(() => {})]);
  } finally {
    timer.abort();
    signal?.removeEventListener('abort', stop);
  }
}

/**
 * What a Worker has to send. Everything runs on Node's one thread; `halt`
 * aborting (the worker's stopNow()) drops what waits.
 */
export class Outbox {
  /** The worker's Work stream once registered: sent on it (else by calls). */
  work?: WorkStream;
  // What is to be sent: acks by event id, nacks apart.
  private acks: bigint[] = [];
  private nacks: Nack[] = [];
  private flushing?: Promise<void>;  // flushLoop() runs
  private flushQueued = false;  // flushSoon() is queued
  // Requests sent on a Work stream awaiting their answers, and what waits
  // for the next answer (flushUntil()).
  private awaited = 0;
  private nextAnswer?: Promise<void>;
  private answerCame?: () => void;

  constructor(private readonly client: Client, private readonly namespace: string,
              private readonly halt: AbortSignal) {}

  /** Sends what waits, if anything does (a Work stream was registered). */
  resume(): void {
    if (this.pending()) this.flushing ??= this.flushLoop();
  }

  /** Queues an ack, to be sent at the next microtask. */
  ack(id: bigint): void {
    this.acks.push(id);
    this.queueFlush();
  }

  /** Queues a nack, to be sent at the next microtask. */
  nack(id: bigint, error: string, afterMs?: number): void {
    this.nacks.push({id, error, afterMs});
    this.queueFlush();
  }

  /**
   * Sends what is queued at the next microtask: what the handlers of one
   * message queue goes together (those that return no promise run in one
   * turn, and the reactions of promises settled meanwhile come first). Not
   * setImmediate(): that waits for the event loop's turn and cost 4 % of
   * the rate.
   */
  private queueFlush(): void {
    if (this.flushQueued) return;
    this.flushQueued = true;
    queueMicrotask(this.flushSoon);
  }

  private readonly flushSoon = (): void => {
    this.flushQueued = false;
    if (!this.pending() || this.halt.aborted) return;
    if (this.work !== undefined && this.flushing === undefined) {
      this.sendOn(this.work);  // (at once: nothing to await)
    } else {
      this.flushing ??= this.flushLoop();
    }
  };

  /** Whether anything waits to be sent. */
  pending(): boolean {
    return this.acks.length > 0 || this.nacks.length > 0;
  }

  /**
   * Sends what is queued until nothing is: on the Work stream if one is up
   * (without waiting for the answers: a request that fails is queued
   * again), else by unary calls (acks in one, nacks grouped).
   */
  private async flushLoop(): Promise<void> {
    await new Promise<void>((resolve) => queueMicrotask(resolve));  // (as queueFlush)
    while (this.pending() && !this.halt.aborted) {
      if (this.work !== undefined) {
        this.sendOn(this.work);
        continue;
      }
      const failed = await this.sendOnce();
      if (failed) await sleep(200, this.halt).catch(() => {});
    }
    this.flushing = undefined;
  }

  /** Sends what is queued on a Work stream: acks in one request, nacks grouped. */
  private sendOn(stream: WorkStream): void {
    const acks = this.acks;
    const nacks = this.nacks;
    this.acks = [];
    this.nacks = [];
    for (let i = 0; i < acks.length; i += 1000) {
      const part = acks.length <= 1000 ? acks : acks.slice(i, i + 1000);
      this.awaited++;
      stream.ack(part, this.namespace, (error) => this.answered(error, part, []));
    }
    for (const group of groupNacks(nacks)) {
      const {error, afterMs} = group[0];
      this.awaited++;
      stream.nack(group.map((n) => n.id), this.namespace, error, afterMs,
                  (failure) => this.answered(failure, [], group));
    }
  }

  /**
   * A request sent on a Work stream was answered; if it failed, what it
   * sent goes again (200 ms on).
   */
  private answered(error: unknown, acks: bigint[], nacks: Nack[]): void {
    this.awaited--;
    if (error !== undefined) {
      this.acks.push(...acks);
      this.nacks.push(...nacks);
      setTimeout(() => { this.flushing ??= this.flushLoop(); }, 200).unref();
    }
    const came = this.answerCame;
    this.nextAnswer = this.answerCame = undefined;
    came?.();
  }

  /** Sends what is queued once, by calls; whether some of it failed (it is kept). */
  private async sendOnce(): Promise<boolean> {
    const acks = this.acks;
    const nacks = this.nacks;
    this.acks = [];
    this.nacks = [];
    const keptAcks: bigint[] = [];
    const keptNacks: Nack[] = [];
    const ns = {namespace: this.namespace};
    for (let i = 0; i < acks.length; i += 1000) {
      const ids = acks.slice(i, i + 1000);
      await this.client.ack(ids, ns).catch(() => keptAcks.push(...ids));
    }
    for (const group of groupNacks(nacks)) {
      const {error, afterMs} = group[0];
      await this.client.nack(group.map((n) => n.id), {...ns, error, retryAfter: afterMs})
        .catch(() => keptNacks.push(...group));
    }
    this.acks = keptAcks.concat(this.acks);
    this.nacks = keptNacks.concat(this.nacks);
    return keptAcks.length > 0 || keptNacks.length > 0;
  }

  /** Waits until all is sent and every answer is in, until `deadline`. */
  async flushUntil(deadline: number): Promise<void> {
    while ((this.flushing !== undefined || this.pending() || this.awaited > 0) &&
           now() < deadline) {
      // (A flush only for what is queued: one started while only answers
      // are awaited ends at once, and waiting on such flushes one after
      // another spun the event loop until the answers came.)
      if (this.pending()) this.flushing ??= this.flushLoop();
      const waits: Promise<void>[] = [];
      if (this.awaited > 0) {
        waits.push(this.nextAnswer ??= new Promise((resolve) => { this.answerCame = resolve; }));
      }
      if (this.flushing !== undefined) waits.push(this.flushing);
      await within(Promise.race(waits), deadline - now());
    }
  }
}
