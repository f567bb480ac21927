/**
 * A worker's Work stream: its events in, and on the same stream its acks,
 * nacks and lease extensions, each answered by the daemon under the `ref`
 * it was sent with.
 * @internal
 * @module
 */
import {create} from '@bufbuild/protobuf';
import type * as grpc from '@grpc/grpc-js';

import {fromGrpcJs} from './connection.js';
import type {Connections} from './connection.js';
import {errorOfCode, toDelaydError, UnavailableError} from './errors.js';
import type {DelaydError} from './errors.js';
import * as pb from './gen/delayd/v1/delayd_pb.js';
import {duration} from './requests.js';
import type {Event} from './types.js';
import type {WireAnswer, WireResponse} from './wire.js';

/**
 * Called once with a request's outcome: how many ids were done, or the
 * error (the request's own, or UNAVAILABLE if the stream ended first).
 */
export type Answer = (error: DelaydError | undefined, done: number) => void;

/** One Work stream, from the endpoint it was opened on, without reconnection. */
export class WorkStream {
  private readonly call: grpc.ClientDuplexStream<pb.WorkRequest, WireResponse>;
  // By ref: numbers, since a Map's look-up of a bigint key costs more, and
  // a stream sends fewer than 2^53 requests.
  private readonly awaiting = new Map<number, Answer>();
  private nextRef = 1;
  private ended = false;
  private onRegistered!: () => void;
  /** Resolves once the daemon has registered the stream. */
  readonly registered = new Promise<void>((resolve) => {
    this.onRegistered = resolve;
  });

  constructor(conn: Connections, i: number, subscribe: pb.SubscribeRequest) {
    this.call = conn.work(i);
    // (A failed write ends the call, which read() reports.)
    this.call.on('error', () => {});
    this.call.write(create(pb.WorkRequestSchema,
                           {request: {case: 'subscribe', value: subscribe}}));
  }

  /**
   * Reads the stream until it ends, giving `onEvents` the events of each
   * message as it comes; rejects with how the stream ended. Read by the
   * stream's 'data' events, not by `for await`: the async iterator's promise
   * and turn of the microtask queue for each message cost a worker 4–11 % of
   * its rate (a message is a round trip's worth of events, and the daemon
   * sends the next once they are acked). The daemon bounds what it sends (a
   * worker's events in flight; the answers to at most 16 requests), so
   * reading without pausing holds no more than that.
   */
  async read(onEvents: (events: Event[]) => void): Promise<void> {
    let error: DelaydError | undefined;
    try {
      await new Promise<void>((resolve, reject) => {
        this.call.on('data', (m: WireResponse) => {
          try {
            this.onRegistered();
            for (const a of m.answers) this.answered(a);
            if (m.events.length > 0) onEvents(m.events);
          } catch (e) {
            // (Thrown in an emitter's listener it would be the process's
            // uncaught exception: it ends this stream instead.)
            this.call.cancel();
            reject(e);
          }
        });
        this.call.on('error', reject);
        this.call.on('end', resolve);
        this.call.on('close', resolve);  // (after 'error' or 'end', if any)
      });
    } catch (e) {
      error = toDelaydError(fromGrpcJs(e));
    } finally {
      this.end(error ?? new UnavailableError('the stream ended'));
    }
    if (error !== undefined) throw error;
  }

  /**
   * Acknowledges events; `answer` gets how many were outstanding. (A
   * callback rather than a promise: a worker sends one a message and
   * awaits none of them, so a promise and its reactions would be made for
   * each message for nothing.)
   */
  ack(eventIds: bigint[], namespace: string, answer: Answer): void {
    this.send({case: 'ack', value: create(pb.AckRequestSchema, {namespace, eventIds})}, answer);
  }

  /** Says events failed (see Client.nack). */
  nack(eventIds: bigint[], namespace: string, error: string, retryAfterMs: number | undefined,
       answer: Answer): void {
    this.send({case: 'nack', value: create(pb.NackRequestSchema, {
      namespace, eventIds, error: error.slice(0, 1024),
      retryAfter: retryAfterMs === undefined ? undefined : duration(retryAfterMs, 'retryAfter'),
    })}, answer);
  }

  /** Moves events' ack deadlines to now + `extensionMs`; resolves to how many. */
  extendLease(eventIds: bigint[], extensionMs: number, namespace: string): Promise<number> {
    return new Promise((resolve, reject) => {
      this.send({case: 'extendLease', value: create(pb.ExtendLeaseRequestSchema, {
        namespace, eventIds, extension: duration(extensionMs, 'extension')})},
      (error, done) => (error === undefined ? resolve(done) : reject(error)));
    });
  }

  /** Ends the stream; requests not yet answered fail (UNAVAILABLE). */
  cancel(): void {
    this.call.cancel();
    this.end(new UnavailableError('the stream was cancelled'));
  }

  private send(request: pb.WorkRequest['request'], answer: Answer): void {
    if (this.ended) {
      answer(new UnavailableError('the stream ended'), 0);
      return;
    }
    const ref = this.nextRef++;
    this.awaiting.set(ref, answer);
    this.call.write(create(pb.WorkRequestSchema, {request, ref: BigInt(ref)}));
  }

  private answered(a: WireAnswer): void {
    const ref = Number(a.ref);
    const answer = this.awaiting.get(ref);
    if (answer === undefined) return;
    this.awaiting.delete(ref);
    if (a.code === 0) answer(undefined, a.done);
    else answer(errorOfCode(a.code, a.message), 0);
  }

  private end(error: DelaydError): void {
    this.ended = true;
    const awaiting = [...this.awaiting.values()];
    this.awaiting.clear();
    for (const answer of awaiting) answer(error, 0);
  }
}
