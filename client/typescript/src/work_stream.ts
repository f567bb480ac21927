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
import {eventOf} from './types.js';
import type {Event} from './types.js';

type Answer = {resolve: (done: number) => void; reject: (e: DelaydError) => void};

/** One Work stream, from the endpoint it was opened on, without reconnection. */
export class WorkStream {
  private readonly call: grpc.ClientDuplexStream<pb.WorkRequest, pb.SubscribeResponse>;
  private readonly awaiting = new Map<bigint, Answer>();
  private nextRef = 1n;
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
   * message as it comes (no promise per message: a generator's cost a
   * message was 6 µs here); rejects with how the stream ended.
   */
  async read(onEvents: (events: Event[]) => void): Promise<void> {
    let error: DelaydError | undefined;
    try {
      for await (const m of this.call as AsyncIterable<pb.SubscribeResponse>) {
        this.onRegistered();
        for (const a of m.answers) this.answered(a);
        if (m.events.length > 0) onEvents(m.events.map(eventOf));
      }
    } catch (e) {
      error = toDelaydError(fromGrpcJs(e));
    } finally {
      this.end(error ?? new UnavailableError('the stream ended'));
    }
    if (error !== undefined) throw error;
  }

  /** Acknowledges events; resolves to how many were outstanding. */
  ack(eventIds: bigint[], namespace: string): Promise<number> {
    return this.request({case: 'ack', value: create(pb.AckRequestSchema, {namespace, eventIds})});
  }

  /** Says events failed (see Client.nack). */
  nack(eventIds: bigint[], namespace: string, error: string,
       retryAfterMs?: number): Promise<number> {
    return this.request({case: 'nack', value: create(pb.NackRequestSchema, {
      namespace, eventIds, error: error.slice(0, 1024),
      retryAfter: retryAfterMs === undefined ? undefined : duration(retryAfterMs, 'retryAfter'),
    })});
  }

  /** Moves events' ack deadlines to now + `extensionMs`. */
  extendLease(eventIds: bigint[], extensionMs: number, namespace: string): Promise<number> {
    return this.request({case: 'extendLease', value: create(pb.ExtendLeaseRequestSchema, {
      namespace, eventIds, extension: duration(extensionMs, 'extension')})});
  }

  /** Ends the stream; requests not yet answered fail (UNAVAILABLE). */
  cancel(): void {
    this.call.cancel();
    this.end(new UnavailableError('the stream was cancelled'));
  }

  private request(request: pb.WorkRequest['request']): Promise<number> {
    if (this.ended) return Promise.reject(new UnavailableError('the stream ended'));
    const ref = this.nextRef++;
    const answer = new Promise<number>((resolve, reject) => {
      this.awaiting.set(ref, {resolve, reject});
    });
    this.call.write(create(pb.WorkRequestSchema, {request, ref}));
    return answer;
  }

  private answered(a: pb.WorkAnswer): void {
    const waiter = this.awaiting.get(a.ref);
    if (waiter === undefined) return;
    this.awaiting.delete(a.ref);
    if (a.code === 0) waiter.resolve(a.done);
    else waiter.reject(errorOfCode(a.code, a.message));
  }

  private end(error: DelaydError): void {
    this.ended = true;
    for (const waiter of this.awaiting.values()) waiter.reject(error);
    this.awaiting.clear();
  }
}
