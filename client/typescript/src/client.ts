/**
 * The client: every call of delayd.v1.Delayd, with retries across the
 * configured endpoints.
 *
 * ```ts
 * import {Client} from 'delayd';
 * const client = new Client();               // DELAYD_* from the environment
 * await client.setTimer('order-42', '{"order":42}', {delay: 15 * 60_000, namespace: 'shop'});
 * for await (const t of client.listTimers({namespace: 'shop', prefix: 'order-'})) {
 *   console.log(t.key, t.fireTime);
 * }
 * client.close();
 * ```
 *
 * Retries (the README's "Retries" says why): "safe" calls are retried on
 * UNAVAILABLE and DEADLINE_EXCEEDED, on the next endpoint, with jittered
 * backoff — reads, and writes whose repeat leaves the same end state (a set
 * that replaces, a move or remove without an expected version, acks, nacks,
 * lease extensions, policy and dead-letter changes, Drain). "Conditional"
 * calls (an expected version, ifAbsent, a Batch holding one,
 * triggerSchedule, backup) are retried only when the call cannot have
 * reached a daemon; once sent, a lost answer throws OutcomeUnknownError.
 * @module
 */
import {create} from '@bufbuild/protobuf';
import {timestampDate, timestampFromDate} from '@bufbuild/protobuf/wkt';

import {Batch} from './batch.js';
import type {Config} from './config.js';
import {Connections} from './connection.js';
import type {Call} from './connection.js';
import {toDelaydError} from './errors.js';
import {InvalidArgumentError} from './errors.js';
import * as pb from './gen/delayd/v1/delayd_pb.js';
import {bytes, duration, pushTarget, setRequest, spec, when} from './requests.js';
import type {Kind} from './retry.js';
import {plain, timerOf} from './types.js';
import type {CallOptions, Event, InNamespace, MoveOptions, MoveResult, Plain,
             Policy, PushTarget, PushTestResult, RemoveOptions, ScheduleOptions,
             ScheduleSpec, SetOptions, SetResult, Timer} from './types.js';
import type {WireResponse} from './wire.js';

const ns = (o: InNamespace) => o.namespace ?? '';
const kindOf = (conditional: boolean): Kind => (conditional ? 'conditional' : 'safe');

/** Options of the listing calls. */
export interface ListOptions extends InNamespace, CallOptions {
  /** Only keys starting with this. */
  prefix?: string;
  /** Items per page read (default 100). */
  pageSize?: number;
}

/** Options of subscribe. */
export interface SubscribeOptions extends InNamespace {
  /** A watcher gets a copy of every event and never acknowledges. */
  watcher?: boolean;
  /** A worker's most unacknowledged events at a time (0: the daemon's 100). */
  maxInFlight?: number;
  /** A worker's ack timeout, in ms (default: the namespace policy's). */
  ackTimeout?: number;
  /** Events in flight when the stream ends stay leased until their deadline. */
  keepLeases?: boolean;
}

/** Every call of the service. `namespace` unset means "default". */
export class Client {
  /** @internal */
  readonly conn: Connections;

  /** @param config - fields that win over the DELAYD_* environment variables */
  constructor(config: Partial<Config> = {}) {
    this.conn = new Connections(config);
  }

  /** The configuration in force. */
  get config(): Config {
    return this.conn.config;
  }

  /** Closes the connections; calls made after it open them again. */
  close(): void {
    this.conn.close();
  }

  private invoke<R>(call: Call<R>, kind: Kind, o: CallOptions = {},
                    notFoundAfterLoss?: {value: R}): Promise<R> {
    return this.conn.invoke(call, kind, o.signal, notFoundAfterLoss);
  }

  // ---- Timers ----

  /**
   * Creates a timer, or replaces the pending one under `key`. With
   * `ifAbsent`, creates only (AlreadyExistsError if one is pending).
   */
  async setTimer(key: string, payload: Uint8Array | string,
                 options: SetOptions): Promise<SetResult> {
    const req = setRequest(key, payload, options);
    const r = await this.invoke((s, o) => s.setTimer(req, o),
                                kindOf(options.ifAbsent === true), options);
    return {version: r.version, fireTime: timestampDate(r.fireTime!), replaced: r.replaced};
  }

  /** Changes a pending timer's fire time (NotFoundError if none). */
  async moveTimer(key: string, options: MoveOptions): Promise<MoveResult> {
    const expected = options.expectedVersion ?? 0n;
    const req = create(pb.MoveTimerRequestSchema, {
      namespace: ns(options), key, expectedVersion: expected, when: when(options)});
    const r = await this.invoke((s, o) => s.moveTimer(req, o), kindOf(expected !== 0n), options);
    return {version: r.version, fireTime: timestampDate(r.fireTime!)};
  }

  /**
   * Cancels a pending timer; resolves to the version removed. Without an
   * expected version, a retry that finds nothing after a lost answer
   * resolves to undefined (removed, its version not known).
   */
  async removeTimer(key: string, options: RemoveOptions = {}): Promise<bigint | undefined> {
    const expected = options.expectedVersion ?? 0n;
    const req = create(pb.RemoveTimerRequestSchema, {
      namespace: ns(options), key, expectedVersion: expected});
    const r = await this.invoke<pb.RemoveTimerResponse | undefined>(
      (s, o) => s.removeTimer(req, o), kindOf(expected !== 0n), options,
      expected === 0n ? {value: undefined} : undefined);
    return r?.version;
  }

  /** The pending timer `key` (NotFoundError if none). */
  async getTimer(key: string, options: InNamespace & CallOptions = {}): Promise<Timer> {
    const req = create(pb.GetTimerRequestSchema, {namespace: ns(options), key});
    return timerOf(await this.invoke((s, o) => s.getTimer(req, o), 'safe', options));
  }

  /** Every pending timer whose key starts with `prefix`, a page at a time. */
  async *listTimers(options: ListOptions & {payloads?: boolean} = {}): AsyncGenerator<Timer> {
    let pageToken = '';
    do {
      const req = create(pb.ListTimersRequestSchema, {
        namespace: ns(options), keyPrefix: options.prefix ?? '',
        pageSize: options.pageSize ?? 100, pageToken,
        withoutPayloads: options.payloads === false});
      const r = await this.invoke((s, o) => s.listTimers(req, o), 'safe', options);
      for (const t of r.timers) yield timerOf(t);
      pageToken = r.nextPageToken;
    } while (pageToken !== '');
  }

  /**
   * Fires every pending timer of the namespace now; resolves to how many
   * (a retry after a lost answer counts only what was left).
   */
  async drain(options: InNamespace & CallOptions = {}): Promise<bigint> {
    const req = create(pb.DrainRequestSchema, {namespace: ns(options)});
    return (await this.invoke((s, o) => s.drain(req, o), 'safe', options)).drained;
  }

  /** A {@link Batch} builder: `client.batch().set(...).remove(...).commit()`. */
  batch(options: InNamespace = {}): Batch {
    return new Batch((req, kind, signal) =>
      this.invoke((s, o) => s.batch(req, o), kind, {signal}), options.namespace);
  }

  // ---- Work ----
  //
  // Ack, Nack and ExtendLease go over the grpc-js channel that carries
  // Subscribe's stream (Connections.unary): their round trip bounds a
  // worker's rate, and there it is shorter (a worker at concurrency 32 took
  // 0.93-1.10x a raw connect loop's rate with them, 0.81-0.95x without).

  /** Acknowledges events; resolves to how many were outstanding. */
  async ack(eventIds: bigint[], options: InNamespace & CallOptions = {}): Promise<number> {
    const req = create(pb.AckRequestSchema, {namespace: ns(options), eventIds});
    return Number((await this.invoke((_, o, i) => this.conn.unary(
      i, '/delayd.v1.Delayd/Ack', pb.AckRequestSchema, pb.AckResponseSchema, req, o),
    'safe', options)).acked);
  }

  /**
   * Says events failed: each comes back after `retryAfter` ms (default: the
   * policy's backoff). Resolves to how many were in flight.
   */
  async nack(eventIds: bigint[], options: InNamespace & CallOptions &
             {error?: string; retryAfter?: number} = {}): Promise<number> {
    const req = create(pb.NackRequestSchema, {
      namespace: ns(options), eventIds, error: (options.error ?? '').slice(0, 1024),
      retryAfter: options.retryAfter === undefined ? undefined
        : duration(options.retryAfter, 'retryAfter')});
    return Number((await this.invoke((_, o, i) => this.conn.unary(
      i, '/delayd.v1.Delayd/Nack', pb.NackRequestSchema, pb.NackResponseSchema, req, o),
    'safe', options)).nacked);
  }

  /** Moves events' ack deadlines to now + `extensionMs`. */
  async extendLease(eventIds: bigint[], extensionMs: number,
                    options: InNamespace & CallOptions = {}): Promise<number> {
    const req = create(pb.ExtendLeaseRequestSchema, {
      namespace: ns(options), eventIds, extension: duration(extensionMs, 'extension')});
    return Number((await this.invoke((_, o, i) => this.conn.unary(
      i, '/delayd.v1.Delayd/ExtendLease', pb.ExtendLeaseRequestSchema,
      pb.ExtendLeaseResponseSchema, req, o), 'safe', options)).extended);
  }

  /**
   * A raw stream of events from the current endpoint, without
   * reconnection: for watchers and tools. Workers use {@link Worker}, which
   * keeps its stream up, extends leases and acknowledges.
   */
  subscribe(options: SubscribeOptions = {}): Subscription {
    const req = create(pb.SubscribeRequestSchema, {
      namespace: ns(options),
      mode: options.watcher ? pb.SubscribeRequest_Mode.WATCHER : pb.SubscribeRequest_Mode.WORKER,
      maxInFlight: options.maxInFlight ?? 0,
      ackTimeout: options.ackTimeout === undefined ? undefined
        : duration(options.ackTimeout, 'ackTimeout'),
      keepLeases: options.keepLeases ?? false,
    });
    const i = this.conn.endpoint();
    return new Subscription((signal) => this.conn.subscribe(i, req, signal));
  }

  // ---- Policies and dead letters ----

  /** The namespace's delivery policy (durations in ms). */
  async getPolicy(options: InNamespace & CallOptions = {}): Promise<Policy> {
    const req = create(pb.GetPolicyRequestSchema, {namespace: ns(options)});
    return plain(pb.PolicySchema, await this.invoke((s, o) => s.getPolicy(req, o), 'safe',
                                                    options)) as unknown as Policy;
  }

  /**
   * Sets the policy fields given (`{maxAttempts: 3, ackTimeout: 45_000}`);
   * the others keep their values. Resolves to the policy in force.
   */
  async setPolicy(fields: Partial<Policy>,
                  options: InNamespace & CallOptions = {}): Promise<Policy> {
    const policy = create(pb.PolicySchema);
    const paths: string[] = [];
    for (const [name, value] of Object.entries(fields)) {
      const f = pb.PolicySchema.fields.find((x) => x.localName === name);
      if (f === undefined) throw new InvalidArgumentError(`no policy field '${name}'`);
      const isDuration = f.fieldKind === 'message' && name !== 'push';
      (policy as unknown as Record<string, unknown>)[name] =
        name === 'push' ? pushTarget(value as PushTarget | null | undefined)
          : isDuration ? duration(value as number, name) : value;
      paths.push(f.name);
    }
    const req = create(pb.SetPolicyRequestSchema, {
      namespace: ns(options), policy, updateMask: {paths}});
    return plain(pb.PolicySchema, await this.invoke((s, o) => s.setPolicy(req, o), 'safe',
                                                    options)) as unknown as Policy;
  }

  /**
   * Sends one test request to the namespace's push target now (or to
   * `target`, to try one before setting it) and says what came back. It
   * changes nothing, and is retried as a read is (a retry may send a second
   * test request).
   */
  async testPushTarget(target?: PushTarget,
                       options: InNamespace & CallOptions & {key?: string;
                                                             payload?: Uint8Array | string} = {}):
      Promise<PushTestResult> {
    const req = create(pb.TestPushTargetRequestSchema, {
      namespace: ns(options), key: options.key ?? '', payload: bytes(options.payload),
      target: pushTarget(target)});
    return plain(pb.TestPushTargetResponseSchema,
                 await this.invoke((s, o) => s.testPushTarget(req, o), 'safe', options)) as
      unknown as PushTestResult;
  }

  /** Pauses delivery in the namespace (timers still fire into its queue). */
  pause(options: InNamespace & CallOptions = {}): Promise<Policy> {
    return this.setPolicy({paused: true}, options);
  }

  /** Resumes delivery in the namespace. */
  resume(options: InNamespace & CallOptions = {}): Promise<Policy> {
    return this.setPolicy({paused: false}, options);
  }

  /** Every dead letter of the namespace (`event`, `error`, ...), a page at a time. */
  async *deadLetters(options: ListOptions = {}): AsyncGenerator<Plain> {
    let pageToken = '';
    do {
      const req = create(pb.ListDeadLettersRequestSchema, {
        namespace: ns(options), pageSize: options.pageSize ?? 100, pageToken});
      const r = await this.invoke((s, o) => s.listDeadLetters(req, o), 'safe', options);
      for (const d of r.deadLetters) yield plain(pb.DeadLetterSchema, d);
      pageToken = r.nextPageToken;
    } while (pageToken !== '');
  }

  /** Delivers dead letters again (attempts from zero); resolves to how many. */
  async requeueDeadLetters(eventIds: bigint[] | 'all',
                           options: InNamespace & CallOptions = {}): Promise<number> {
    const req = this.deadLettersRequest(eventIds, options);
    return Number((await this.invoke((s, o) => s.requeueDeadLetters(req, o), 'safe',
                                     options)).count);
  }

  /** Deletes dead letters for good; resolves to how many. */
  async purgeDeadLetters(eventIds: bigint[] | 'all',
                         options: InNamespace & CallOptions = {}): Promise<number> {
    const req = this.deadLettersRequest(eventIds, options);
    return Number((await this.invoke((s, o) => s.purgeDeadLetters(req, o), 'safe',
                                     options)).count);
  }

  private deadLettersRequest(ids: bigint[] | 'all', o: InNamespace) {
    return create(pb.DeadLettersRequestSchema, {
      namespace: ns(o), eventIds: ids === 'all' ? [] : ids, all: ids === 'all'});
  }

  // ---- Schedules ----

  /** Creates or replaces a recurring schedule; resolves to it. */
  async setSchedule(key: string, payload: Uint8Array | string,
                    options: ScheduleOptions): Promise<Plain> {
    const expected = options.expectedVersion ?? 0n;
    const req = create(pb.SetScheduleRequestSchema, {
      namespace: ns(options), key, payload: bytes(payload), spec: spec(options),
      ifAbsent: options.ifAbsent ?? false, expectedVersion: expected,
      catchUp: pb.CatchUp[options.catchUp ?? 'LATEST'],
      catchUpLimit: options.catchUpLimit ?? 0,
      jitter: options.jitter === undefined ? undefined : duration(options.jitter, 'jitter'),
      overlap: pb.Overlap[options.overlap ?? 'ALLOW']});
    return plain(pb.ScheduleSchema, await this.invoke(
      (s, o) => s.setSchedule(req, o),
      kindOf(options.ifAbsent === true || expected !== 0n), options));
  }

  /** The schedule `key` (NotFoundError if none). */
  async getSchedule(key: string, options: InNamespace & CallOptions = {}): Promise<Plain> {
    const req = create(pb.GetScheduleRequestSchema, {namespace: ns(options), key});
    return plain(pb.ScheduleSchema, await this.invoke((s, o) => s.getSchedule(req, o),
                                                      'safe', options));
  }

  /** Every schedule whose key starts with `prefix`, a page at a time. */
  async *listSchedules(options: ListOptions = {}): AsyncGenerator<Plain> {
    let pageToken = '';
    do {
      const req = create(pb.ListSchedulesRequestSchema, {
        namespace: ns(options), prefix: options.prefix ?? '',
        pageSize: options.pageSize ?? 100, pageToken});
      const r = await this.invoke((s, o) => s.listSchedules(req, o), 'safe', options);
      for (const x of r.schedules) yield plain(pb.ScheduleSchema, x);
      pageToken = r.nextPageToken;
    } while (pageToken !== '');
  }

  /** Deletes a schedule; resolves to its version (undefined as for removeTimer). */
  async deleteSchedule(key: string, options: RemoveOptions = {}): Promise<bigint | undefined> {
    const expected = options.expectedVersion ?? 0n;
    const req = create(pb.DeleteScheduleRequestSchema, {
      namespace: ns(options), key, expectedVersion: expected});
    const r = await this.invoke<pb.DeleteScheduleResponse | undefined>(
      (s, o) => s.deleteSchedule(req, o), kindOf(expected !== 0n), options,
      expected === 0n ? {value: undefined} : undefined);
    return r?.version;
  }

  /** Pauses a schedule: no runs until resumed. */
  pauseSchedule(key: string, options: RemoveOptions = {}): Promise<Plain> {
    return this.scheduleAction('pauseSchedule', key, options, false);
  }

  /** Resumes a paused schedule. */
  resumeSchedule(key: string, options: RemoveOptions = {}): Promise<Plain> {
    return this.scheduleAction('resumeSchedule', key, options, false);
  }

  /** Fires a run now (not retried once sent: a retry would fire another). */
  triggerSchedule(key: string, options: RemoveOptions = {}): Promise<Plain> {
    return this.scheduleAction('triggerSchedule', key, options, true);
  }

  private async scheduleAction(rpc: 'pauseSchedule' | 'resumeSchedule' | 'triggerSchedule',
                               key: string, options: RemoveOptions,
                               conditional: boolean): Promise<Plain> {
    const expected = options.expectedVersion ?? 0n;
    const req = create(pb.ScheduleActionRequestSchema, {
      namespace: ns(options), key, expectedVersion: expected});
    return plain(pb.ScheduleSchema, await this.invoke(
      (s, o) => s[rpc](req, o), kindOf(conditional || expected !== 0n), options));
  }

  /** The next `count` instants of a spec, without creating anything. */
  async previewSchedule(s: ScheduleSpec, options: InNamespace & CallOptions &
                        {after?: Date; count?: number} = {}): Promise<Date[]> {
    const req = create(pb.PreviewScheduleRequestSchema, {
      namespace: ns(options), spec: spec(s), count: options.count ?? 10,
      after: options.after ? timestampFromDate(options.after) : undefined});
    const r = await this.invoke((st, o) => st.previewSchedule(req, o), 'safe', options);
    return r.instants.map((t) => timestampDate(t));
  }

  // ---- The daemon ----

  /**
   * The daemon's figures and each namespace's (admin token), or with
   * `namespace` that one's (`namespaces[0]`).
   */
  async stats(options: InNamespace & CallOptions = {}): Promise<Plain> {
    const req = create(pb.StatsRequestSchema, {namespace: ns(options)});
    return plain(pb.StatsResponseSchema, await this.invoke((s, o) => s.stats(req, o),
                                                           'safe', options));
  }

  /** A cluster node's view of its cluster. */
  async clusterStatus(options: CallOptions = {}): Promise<Plain> {
    const req = create(pb.ClusterStatusRequestSchema);
    return plain(pb.ClusterStatusResponseSchema, await this.invoke(
      (s, o) => s.clusterStatus(req, o), 'safe', options));
  }

  /** A consistent copy of the store under the daemon's --backup-dir; its path. */
  async backup(dir: string, options: CallOptions = {}): Promise<string> {
    const req = create(pb.BackupRequestSchema, {dir});
    return (await this.invoke((s, o) => s.backup(req, o), 'conditional', options)).dir;
  }
}

/**
 * One Subscribe stream's events as they come; `cancel()` ends it, and
 * iteration then ends quietly. Iterating throws the stream's error
 * (UnavailableError when its node stops).
 */
export class Subscription implements AsyncIterable<Event> {
  private readonly abort = new AbortController();
  private onRegistered!: () => void;
  /** Resolves once the daemon has registered the stream. */
  readonly registered = new Promise<void>((resolve) => {
    this.onRegistered = resolve;
  });

  /** @internal */
  constructor(private readonly open: (signal: AbortSignal) =>
    AsyncIterable<WireResponse>) {}

  async *[Symbol.asyncIterator](): AsyncGenerator<Event> {
    for await (const batch of this.batches()) yield* batch;
  }

  /** The events a message at a time, as the daemon sent them. */
  async *batches(): AsyncGenerator<Event[]> {
    try {
      for await (const msg of this.open(this.abort.signal)) {
        this.onRegistered();
        if (msg.events.length > 0) yield msg.events;
      }
    } catch (e) {
      if (this.abort.signal.aborted) return;
      throw toDelaydError(e);
    }
  }

  /** Ends the stream. */
  cancel(): void {
    this.abort.abort();
  }
}
