/**
 * What calls take and give, in JavaScript's own types: `Date` for instants,
 * milliseconds (`number`) for durations, `bigint` for versions and event
 * ids (uint64), `Uint8Array` for payloads.
 * @module
 */
import type {DescMessage, Message} from '@bufbuild/protobuf';
import {reflect} from '@bufbuild/protobuf/reflect';
import {durationMs, timestampDate} from '@bufbuild/protobuf/wkt';
import type {Duration, Timestamp} from '@bufbuild/protobuf/wkt';

import type {Event as PbEvent, Timer as PbTimer} from './gen/delayd/v1/delayd_pb.js';
import {Reason} from './gen/delayd/v1/delayd_pb.js';

/** A pending timer. */
export interface Timer {
  namespace: string;
  key: string;
  payload: Uint8Array;
  fireTime: Date;
  version: bigint;
}

/**
 * A fired timer (or a schedule's run), as delivered. Its four instants are
 * getters, made when read: a spread (`{...event}`) leaves them out.
 */
export interface Event {
  id: bigint;
  namespace: string;
  key: string;
  payload: Uint8Array;
  version: bigint;
  fireTime: Date;
  firedAt: Date;
  /** The same instants in nanoseconds since the Unix epoch. */
  fireTimeNs: bigint;
  firedAtNs: bigint;
  /** 1 on first delivery, + 1 on each redelivery; 0 in a watcher's copy. */
  attempt: number;
  /** "expired", "drained" or (watchers only) "dead_lettered". */
  reason: string;
  /** A schedule's run number (0 for a timer). */
  scheduleRun: bigint;
}

/** What SetTimer answers. */
export interface SetResult {
  version: bigint;
  fireTime: Date;
  /** Whether a pending timer was replaced. */
  replaced: boolean;
}

/** What MoveTimer answers. */
export interface MoveResult {
  version: bigint;
  fireTime: Date;
}

/** One Batch operation's result: `error` unset on success. */
export interface BatchResult {
  version: bigint;
  fireTime?: Date;
  error?: Error;
}

/** An instant as [seconds, nanoseconds] since the Unix epoch. @internal */
export type Instant = [number, number];

const instantOf = (t?: Timestamp): Instant | undefined =>
  t === undefined ? undefined : [Number(t.seconds), t.nanos];

// (As protobuf-es's timestampDate: the nanoseconds rounded to the millisecond.)
const dateAt = (t?: Instant) =>
  new Date(t === undefined ? 0 : t[0] * 1000 + Math.round(t[1] / 1_000_000));
const nanosAt = (t?: Instant) =>
  (t === undefined ? 0n : BigInt(t[0]) * 1_000_000_000n + BigInt(t[1]));

/** @internal */
export function timerOf(t: PbTimer): Timer {
  return {namespace: t.namespace, key: t.key, payload: t.payload,
          fireTime: dateAt(instantOf(t.fireTime)), version: t.version};
}

const reasons = new Map<number, string>();

function reasonOf(code: number): string {
  let reason = reasons.get(code);
  if (reason === undefined) {
    reason = (Reason[code] ?? 'UNSPECIFIED').replace(/^REASON_/, '').toLowerCase();
    reasons.set(code, reason);
  }
  return reason;
}

/**
 * An Event as read from a message. Its instants are getters, made when
 * read: two Dates and two bigints made for every event were most of what
 * reading one cost a worker (0.16–0.25 µs an event against 0.04–0.14 µs,
 * 32-event messages from memory), and a handler often reads none of them.
 * @internal
 */
export class DeliveredEvent implements Event {
  readonly reason: string;
  readonly #fireTime?: Instant;
  readonly #firedAt?: Instant;

  constructor(readonly id: bigint, readonly namespace: string, readonly key: string,
              readonly payload: Uint8Array, readonly version: bigint,
              readonly attempt: number, reason: number, readonly scheduleRun: bigint,
              fireTime?: Instant, firedAt?: Instant) {
    this.reason = reasonOf(reason);
    this.#fireTime = fireTime;
    this.#firedAt = firedAt;
  }

  get fireTime(): Date { return dateAt(this.#fireTime); }
  get firedAt(): Date { return dateAt(this.#firedAt); }
  get fireTimeNs(): bigint { return nanosAt(this.#fireTime); }
  get firedAtNs(): bigint { return nanosAt(this.#firedAt); }
}

/** @internal */
export function eventOf(e: PbEvent): Event {
  return new DeliveredEvent(e.id, e.namespace, e.key, e.payload, e.version, e.attempt,
                            e.reason, e.scheduleRun, instantOf(e.fireTime),
                            instantOf(e.firedAt));
}

/**
 * A message as a plain object in JavaScript's types: field names as the
 * generated code has them, instants as Date (undefined when unset),
 * durations in ms, enums by name, nested messages the same way.
 */
export type Plain = {[field: string]: unknown};

/** @internal */
export function plain<Desc extends DescMessage>(schema: Desc,
                                                msg: Message): Plain {
  const r = reflect(schema, msg as never);
  const out: Plain = {};
  for (const f of r.fields) {
    const value = (msg as unknown as Record<string, unknown>)[f.localName];
    out[f.localName] = convert(f as never, value);
  }
  return out;
}

function convert(f: {fieldKind: string; message?: DescMessage;
                     enum?: {values: {number: number; name: string}[]}},
                 value: unknown): unknown {
  if (f.fieldKind === 'list') {
    const item = f as unknown as {listKind: string; message?: DescMessage;
                                  enum?: {values: {number: number; name: string}[]}};
    return (value as unknown[]).map((v) => convert(
      {fieldKind: item.listKind, message: item.message, enum: item.enum}, v));
  }
  if (f.fieldKind === 'enum' && f.enum) {
    return f.enum.values.find((v) => v.number === value)?.name ?? value;
  }
  if (f.fieldKind === 'message' && f.message) {
    if (value === undefined) return undefined;
    switch (f.message.typeName) {
      case 'google.protobuf.Timestamp': return timestampDate(value as Timestamp);
      case 'google.protobuf.Duration': return durationMs(value as Duration);
      case 'delayd.v1.Event': return eventOf(value as PbEvent);
      default: return plain(f.message, value as Message);
    }
  }
  return value;
}

/** What every call takes. */
export interface CallOptions {
  /** Aborts the call (and its retries): it rejects with CancelledError. */
  signal?: AbortSignal;
}

/** The namespace a call is about ("default" when unset). */
export interface InNamespace {
  namespace?: string;
}

/** When a timer fires: exactly one of `delay` and `at`. */
export interface When {
  /** From now, in ms. */
  delay?: number;
  /** An instant. */
  at?: Date;
}

/** Options of setTimer. */
export interface SetOptions extends When, InNamespace, CallOptions {
  /** Create only: AlreadyExistsError if a timer is pending under the key. */
  ifAbsent?: boolean;
  /** A random extra delay of up to this many ms. */
  jitter?: number;
}

/** Options of moveTimer. */
export interface MoveOptions extends When, InNamespace, CallOptions {
  /** Compare-and-set: AbortedError unless the timer is at this version. */
  expectedVersion?: bigint;
}

/** Options of removeTimer and deleteSchedule. */
export interface RemoveOptions extends InNamespace, CallOptions {
  /** Compare-and-set: AbortedError unless at this version. */
  expectedVersion?: bigint;
}

/** A schedule's spec: exactly one of `cron` and `every`. */
export interface ScheduleSpec {
  /** A cron expression (five fields, or six with seconds first). */
  cron?: string;
  /** A fixed period, in ms. */
  every?: number;
  /** An IANA zone for cron ("UTC" when empty). */
  timeZone?: string;
  /** No run before this instant. */
  start?: Date;
  /** No run after this instant. */
  end?: Date;
  /** At most this many runs (0: no limit). */
  maxRuns?: bigint;
}

/** Options of setSchedule. */
export interface ScheduleOptions extends ScheduleSpec, InNamespace, CallOptions {
  /** Create only: AlreadyExistsError if one exists under the key. */
  ifAbsent?: boolean;
  /** Compare-and-set on the schedule's version. */
  expectedVersion?: bigint;
  /** Runs missed while paused or down: "LATEST" (default), "NONE" or "ALL". */
  catchUp?: 'LATEST' | 'NONE' | 'ALL';
  /** With "ALL": at most this many missed runs. */
  catchUpLimit?: number;
  /** A random extra delay of up to this many ms per run. */
  jitter?: number;
  /** A run due while the last is unacknowledged: "ALLOW" (default), "SKIP" or "BUFFER_ONE". */
  overlap?: 'ALLOW' | 'SKIP' | 'BUFFER_ONE';
}

/** A namespace's delivery policy; durations in ms. */
/**
 * A namespace's push target: the HTTP endpoint delayd calls with each of its
 * events (the proto's PushTarget says what is sent and how answers are
 * read). Durations in milliseconds. Reads leave `secrets` and
 * `clientKeyPem` empty and name them by `secretIds` and `hasClientKey`; a
 * write that names them keeps them.
 */
export interface PushTarget {
  url: string;
  method?: 'POST' | 'PUT';
  headers?: {name: string; value: string}[];
  contentType?: string;
  timeout?: number;
  secrets?: string[];
  secretIds?: string[];
  retryClientErrors?: boolean;
  followRedirects?: boolean;
  caPem?: string;
  clientCertPem?: string;
  clientKeyPem?: string;
  hasClientKey?: boolean;
  maxInFlight?: number;
  pauseAfterFailures?: number;
}

/** What a test request to a push target got (Client.testPushTarget). */
export interface PushTestResult {
  /** What a delivery would have done: 'ack', 'retry' or 'dead_letter'. */
  outcome: string;
  /** The answer's status; 0 if none came. */
  httpStatus: number;
  /** What a failed attempt keeps as its error. */
  error: string;
  /** Milliseconds. */
  duration: number;
}

export interface Policy {
  /** The push target, if the namespace has one. */
  push?: PushTarget;
  maxAttempts: number;
  initialBackoff: number;
  backoffMultiplier: number;
  maxBackoff: number;
  backoffJitter: number;
  ackTimeout: number;
  maxDispatchRate: number;
  dispatchBurst: number;
  maxInFlight: number;
  paused: boolean;
  /**
   * Milliseconds after a timer fired or was removed during which a
   * create-only set of its key is refused (`AlreadyExistsError`); unset
   * (or 0 when setting): none.
   */
  dedupWindow?: number;
}
