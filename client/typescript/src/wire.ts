/**
 * A stream's messages (delayd.v1.SubscribeResponse) decoded straight into
 * the library's Events, by hand rather than by protobuf-es's `fromBinary`.
 * Why: a worker reads every event it handles, and protobuf-es decodes by
 * reflection over the schema. With 32-event messages on this machine,
 * `fromBinary` and an Event made from its message took 0.88–1.10 µs an
 * event, about a fifth of a worker's CPU per event; protobufjs, which
 * compiles its decoders, took 0.49–0.56 µs for the decode alone; this file,
 * the Event included, 0.22–0.27 µs.
 * It follows protobuf's wire format: fields it does not know are skipped,
 * and a repeated or split field is read as protobuf reads it. A test
 * checks it against protobuf-es on random messages, and that it knows
 * every field of the three messages' schemas, so a field added to the
 * proto fails that test until it is read here.
 * @internal
 * @module
 */
import {DeliveredEvent} from './types.js';
import type {Event, Instant} from './types.js';

/** The answer to a request made on a Work stream (delayd.v1.WorkAnswer). */
export interface WireAnswer {
  ref: bigint;
  code: number;
  message: string;
  done: number;
}

/** A decoded SubscribeResponse. */
export interface WireResponse {
  events: Event[];
  answers: WireAnswer[];
}

/**
 * The field numbers this file knows, by message (checked against the
 * schemas by a test); WorkAnswer's 5 (unknown_ids) is known and skipped.
 */
export const KNOWN_FIELDS = {
  'delayd.v1.SubscribeResponse': [1, 2],
  'delayd.v1.Event': [1, 2, 3, 4, 5, 6, 7, 8, 9, 10],
  'delayd.v1.WorkAnswer': [1, 2, 3, 4, 5],
  'google.protobuf.Timestamp': [1, 2],
};

const TWO_32 = 4294967296;

class Reader {
  pos = 0;
  // The last namespace read and its bytes: a stream's events share one.
  private lastNs = '';
  private lastNsAt = -1;
  private lastNsLen = -1;

  constructor(readonly buf: Buffer, public end: number) {}

  /** A varint of up to 32 bits (int32, uint32, enum, a tag or a length). */
  u32(): number {
    const b = this.buf;
    let r = 0;
    for (let shift = 0; shift < 35; shift += 7) {
      if (this.pos >= this.end) throw new RangeError('wire: a truncated varint');
      const c = b[this.pos++];
      r |= (c & 0x7f) << shift;
      if (c < 0x80) return r;
    }
    // (An int32 that is negative takes ten bytes: its upper bits are dropped.)
    for (let i = 0; i < 5; i++) {
      if (this.pos >= this.end) throw new RangeError('wire: a truncated varint');
      if (this.buf[this.pos++] < 0x80) return r;
    }
    throw new RangeError('wire: a varint longer than ten bytes');
  }

  /** A uint64 varint, as a number if it is a safe integer, else a bigint. */
  u64(): number | bigint {
    const b = this.buf;
    let lo = 0;
    let hi = 0;
    let shift = 0;
    for (let i = 0; i < 10; i++) {
      if (this.pos >= this.end) throw new RangeError('wire: a truncated varint');
      const c = b[this.pos++];
      if (shift < 28) {
        lo |= (c & 0x7f) << shift;
      } else if (shift === 28) {
        lo |= (c & 0x0f) << 28;
        hi = (c & 0x7f) >>> 4;
      } else {
        hi |= (c & 0x7f) << (shift - 32);
      }
      shift += 7;
      if (c < 0x80) {
        lo >>>= 0;
        hi >>>= 0;
        if (hi < 0x200000) return hi * TWO_32 + lo;  // below 2^53
        return (BigInt(hi) << 32n) | BigInt(lo);
      }
    }
    throw new RangeError('wire: a varint longer than ten bytes');
  }

  big(): bigint {
    const v = this.u64();
    return typeof v === 'number' ? BigInt(v) : v;
  }

  /** An int64 (a Timestamp's seconds), as a number (exact to 2^53 s). */
  i64(): number {
    const v = this.u64();
    return typeof v === 'number' ? v : Number(BigInt.asIntN(64, v));
  }

  /** The end of a length-delimited field starting here. */
  delimited(): number {
    const len = this.u32() >>> 0;
    const end = this.pos + len;
    if (end > this.end) throw new RangeError('wire: a field longer than its message');
    return end;
  }

  string(): string {
    const end = this.delimited();
    const b = this.buf;
    let s = '';
    // Short ASCII (most keys) by hand: a call into Buffer's decoder costs
    // more than the loop below for a few dozen bytes.
    if (end - this.pos <= 64) {
      for (let i = this.pos; i < end; i++) {
        const c = b[i];
        if (c >= 0x80) {
          s = b.toString('utf8', this.pos, end);
          break;
        }
        s += String.fromCharCode(c);
      }
    } else {
      s = b.toString('utf8', this.pos, end);
    }
    this.pos = end;
    return s;
  }

  /** A namespace: the same as the last one read is not decoded again. */
  namespace(): string {
    const end = this.delimited();
    const len = end - this.pos;
    if (len === this.lastNsLen && this.same(this.lastNsAt, this.pos, len)) {
      this.pos = end;
      return this.lastNs;
    }
    this.lastNsAt = this.pos;
    this.lastNsLen = len;
    this.lastNs = this.buf.toString('utf8', this.pos, end);
    this.pos = end;
    return this.lastNs;
  }

  private same(a: number, b: number, len: number): boolean {
    const buf = this.buf;
    for (let i = 0; i < len; i++) {
      if (buf[a + i] !== buf[b + i]) return false;
    }
    return true;
  }

  bytes(): Uint8Array {
    const end = this.delimited();
    const b = new Uint8Array(this.buf.buffer, this.buf.byteOffset + this.pos, end - this.pos);
    this.pos = end;
    return b;
  }

  /** Skips a field of wire type `wt` (groups are refused). */
  skip(wt: number): void {
    switch (wt) {
      case 0: this.u64(); return;
      case 1: this.pos += 8; break;
      case 2: this.pos = this.delimited(); return;
      case 5: this.pos += 4; break;
      default: throw new RangeError(`wire: wire type ${wt} is not read`);
    }
    if (this.pos > this.end) throw new RangeError('wire: a truncated field');
  }

  /** Reads a tag: its field number times 8 plus its wire type. */
  tag(): number {
    return this.u32() >>> 0;
  }
}

/** Decodes a SubscribeResponse; throws RangeError on a malformed one. */
export function decodeResponse(buf: Buffer): WireResponse {
  const r = new Reader(buf, buf.length);
  const out: WireResponse = {events: [], answers: []};
  while (r.pos < r.end) {
    const tag = r.tag();
    if (tag === (1 << 3 | 2)) out.events.push(event(r, r.delimited()));
    else if (tag === (2 << 3 | 2)) out.answers.push(answer(r, r.delimited()));
    else r.skip(tag & 7);
  }
  return out;
}

function event(r: Reader, end: number): Event {
  const outer = r.end;
  r.end = end;
  let id = 0n;
  let namespace = '';
  let key = '';
  let payload: Uint8Array = EMPTY;
  let version = 0n;
  let fire: Instant | undefined;
  let fired: Instant | undefined;
  let attempt = 0;
  let reason = 0;
  let scheduleRun = 0n;
  while (r.pos < end) {
    const tag = r.tag();
    switch (tag) {
      case 1 << 3 | 0: id = r.big(); break;
      case 2 << 3 | 2: namespace = r.namespace(); break;
      case 3 << 3 | 2: key = r.string(); break;
      case 4 << 3 | 2: payload = r.bytes(); break;
      case 5 << 3 | 0: version = r.big(); break;
      case 6 << 3 | 2: fire = timestamp(r, r.delimited(), fire); break;
      case 7 << 3 | 2: fired = timestamp(r, r.delimited(), fired); break;
      case 8 << 3 | 0: attempt = r.u32() >>> 0; break;
      case 9 << 3 | 0: reason = r.u32(); break;
      case 10 << 3 | 0: scheduleRun = r.big(); break;
      default: r.skip(tag & 7);
    }
  }
  r.end = outer;
  return new DeliveredEvent(id, namespace, key, payload, version, attempt, reason,
                            scheduleRun, fire, fired);
}

const EMPTY = new Uint8Array(0);

/** A Timestamp (a second occurrence merges into the first). */
function timestamp(r: Reader, end: number, into?: Instant): Instant {
  const outer = r.end;
  r.end = end;
  const t: Instant = into ?? [0, 0];
  while (r.pos < end) {
    const tag = r.tag();
    if (tag === (1 << 3 | 0)) t[0] = r.i64();
    else if (tag === (2 << 3 | 0)) t[1] = r.u32();
    else r.skip(tag & 7);
  }
  r.end = outer;
  return t;
}

function answer(r: Reader, end: number): WireAnswer {
  const outer = r.end;
  r.end = end;
  const a: WireAnswer = {ref: 0n, code: 0, message: '', done: 0};
  while (r.pos < end) {
    const tag = r.tag();
    if (tag === (1 << 3 | 0)) a.ref = r.big();
    else if (tag === (2 << 3 | 0)) a.code = r.u32();
    else if (tag === (3 << 3 | 2)) a.message = r.string();
    else if (tag === (4 << 3 | 0)) a.done = r.u32() >>> 0;
    else r.skip(tag & 7);  // 5: unknown_ids, which the library does not use
  }
  r.end = outer;
  return a;
}
