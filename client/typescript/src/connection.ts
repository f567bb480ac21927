/**
 * The connections to a daemon's endpoints and one call's way through them:
 * retries on the next endpoint with jittered backoff, the token read again
 * after UNAUTHENTICATED.
 * @internal
 * @module
 */
import {readFileSync} from 'node:fs';

import {fromBinary, toBinary} from '@bufbuild/protobuf';
import type {DescMessage, MessageShape} from '@bufbuild/protobuf';
import {Code, ConnectError, createClient} from '@connectrpc/connect';
import type {CallOptions as ConnectCallOptions, Client as ConnectClient} from '@connectrpc/connect';
import {createGrpcTransport, Http2SessionManager} from '@connectrpc/connect-node';
import * as grpc from '@grpc/grpc-js';

import {bearer, configFromEnv, isSecure} from './config.js';
import type {Config} from './config.js';
import {CancelledError, toDelaydError} from './errors.js';
import {Attempts, sleep} from './retry.js';
import type {Kind} from './retry.js';
import {Delayd, SubscribeRequestSchema, WorkRequestSchema} from './gen/delayd/v1/delayd_pb.js';
import type {SubscribeRequest, WorkRequest} from './gen/delayd/v1/delayd_pb.js';
import {decodeResponse} from './wire.js';
import type {WireResponse} from './wire.js';

/** The generated client of delayd.v1.Delayd. */
export type Stub = ConnectClient<typeof Delayd>;

/** A call made through a stub (of endpoint `i`) with the given options. */
export type Call<R> = (stub: Stub, options: ConnectCallOptions, i: number) => Promise<R>;

// Keepalive pings notice a connection gone silent (a node frozen or cut
// off) in seconds rather than at the kernel's timeout.
const PING_INTERVAL_MS = 10_000;
const PING_TIMEOUT_MS = 5_000;

/** A grpc-js failure as connect's error (which toDelaydError maps). */
export function fromGrpcJs(e: unknown): unknown {
  const err = e as Partial<grpc.ServiceError>;
  if (typeof err.code !== 'number') return e;
  return new ConnectError(err.details ?? String(e), err.code as number as Code);
}

export class Connections {
  readonly config: Config;
  private readonly stubs = new Map<number, {stub: Stub; session: Http2SessionManager}>();
  private readonly streams = new Map<number, grpc.Client>();
  private at = 0;
  private token?: string;

  constructor(config: Partial<Config>) {
    this.config = configFromEnv(config);
    this.token = bearer(this.config);
  }

  /** The stub of endpoint `i`, its connection made on first use. */
  stub(i: number): Stub {
    let s = this.stubs.get(i);
    if (s === undefined) {
      const c = this.config;
      const secure = isSecure(c);
      const url = `${secure ? 'https' : 'http'}://${c.endpoints[i]}`;
      const tls = secure ? {
        ca: c.tlsCa ? readFileSync(c.tlsCa) : undefined,
        cert: c.tlsCert ? readFileSync(c.tlsCert) : undefined,
        key: c.tlsKey ? readFileSync(c.tlsKey) : undefined,
      } : {};
      const session = new Http2SessionManager(
        url, {pingIntervalMs: PING_INTERVAL_MS, pingTimeoutMs: PING_TIMEOUT_MS}, tls);
      const transport = createGrpcTransport({
        baseUrl: url, sessionManager: session, readMaxBytes: 64 << 20,
      });
      s = {stub: createClient(Delayd, transport), session};
      this.stubs.set(i, s);
    }
    return s.stub;
  }

  /** Endpoint `i`'s @grpc/grpc-js channel, made on first use. */
  private channel(i: number): grpc.Client {
    let client = this.streams.get(i);
    if (client === undefined) {
      const c = this.config;
      const creds = isSecure(c) ? grpc.credentials.createSsl(
        c.tlsCa ? readFileSync(c.tlsCa) : null,
        c.tlsKey ? readFileSync(c.tlsKey) : null,
        c.tlsCert ? readFileSync(c.tlsCert) : null) : grpc.credentials.createInsecure();
      client = new grpc.Client(c.endpoints[i], creds, {
        'grpc.keepalive_time_ms': PING_INTERVAL_MS,
        'grpc.keepalive_timeout_ms': PING_TIMEOUT_MS,
        'grpc.keepalive_permit_without_calls': 1,
        'grpc.max_receive_message_length': 64 << 20,
      });
      this.streams.set(i, client);
    }
    return client;
  }

  /**
   * A unary call on endpoint `i`'s grpc-js channel (the one Subscribe's
   * stream uses): a worker's Ack, Nack and ExtendLease, whose round trip
   * bounds how many events a worker takes per second.
   */
  unary<I extends DescMessage, O extends DescMessage>(
      i: number, path: string, input: I, output: O, req: MessageShape<I>,
      options: ConnectCallOptions): Promise<MessageShape<O>> {
    const metadata = new grpc.Metadata();
    for (const [k, v] of Object.entries(options.headers ?? {})) metadata.set(k, v as string);
    const signal = options.signal;
    return new Promise((resolve, reject) => {
      const call = this.channel(i).makeUnaryRequest(
        path, (r: MessageShape<I>) => Buffer.from(toBinary(input, r)),
        (b: Buffer) => fromBinary(output, b), req, metadata,
        {deadline: Date.now() + (options.timeoutMs ?? this.config.timeoutMs)},
        (e, r) => {
          signal?.removeEventListener('abort', cancel);
          if (e) reject(fromGrpcJs(e));
          else resolve(r as MessageShape<O>);
        });
      const cancel = () => call.cancel();
      signal?.addEventListener('abort', cancel, {once: true});
    });
  }

  /**
   * Subscribe's stream from endpoint `i`, on @grpc/grpc-js rather than
   * connect-node: connect-es 2.3 races each read of a stream against a
   * promise that settles only when the stream ends, which keeps every
   * message read until then (connect-es issue 1524) — a worker's stream,
   * open for days, grew by about 1 KB per event. grpc-js reads a Node
   * stream, which keeps nothing once read. Unary calls stay on connect.
   */
  async *subscribe(i: number, req: SubscribeRequest,
                   signal: AbortSignal): AsyncGenerator<WireResponse> {
    const client = this.channel(i);
    const metadata = new grpc.Metadata();
    for (const [k, v] of Object.entries(this.headers())) metadata.set(k, v);
    const call = client.makeServerStreamRequest(
      '/delayd.v1.Delayd/Subscribe',
      (r: SubscribeRequest) => Buffer.from(toBinary(SubscribeRequestSchema, r)),
      decodeResponse, req, metadata);
    const cancel = () => call.cancel();
    signal.addEventListener('abort', cancel, {once: true});
    // Read by hand, not with for await: a consumer that stops reading
    // (break) leaves the stream open until `signal` aborts
    // (Subscription.cancel()), and what it was sent stays leased to it
    // until then; for await would end the call at once.
    const messages = call[Symbol.asyncIterator]();
    for (;;) {
      let next: IteratorResult<unknown>;
      try {
        next = await messages.next();
      } catch (e) {
        signal.removeEventListener('abort', cancel);
        throw fromGrpcJs(e);
      }
      if (next.done) {
        signal.removeEventListener('abort', cancel);
        return;
      }
      yield next.value as WireResponse;
    }
  }

  /**
   * A Work stream on endpoint `i`'s grpc-js channel: a worker's events in,
   * its acks, nacks and lease extensions out, each a message rather than a
   * call (on grpc-js for the reason Subscribe is).
   */
  work(i: number): grpc.ClientDuplexStream<WorkRequest, WireResponse> {
    const metadata = new grpc.Metadata();
    for (const [k, v] of Object.entries(this.headers())) metadata.set(k, v);
    return this.channel(i).makeBidiStreamRequest(
      '/delayd.v1.Delayd/Work',
      (r: WorkRequest) => Buffer.from(toBinary(WorkRequestSchema, r)),
      decodeResponse, metadata);
  }

  /** The endpoint calls go to now. */
  endpoint(): number {
    return this.at;
  }

  /** Moves on to the next endpoint, if `failed` is still the one in use. */
  rotate(failed: number): void {
    if (this.at === failed) this.at = (failed + 1) % this.config.endpoints.length;
  }

  /** The headers every call carries. */
  headers(): Record<string, string> {
    return this.token ? {authorization: `Bearer ${this.token}`} : {};
  }

  /** After UNAUTHENTICATED: reads the token file again; whether it changed. */
  private rereadToken(): boolean {
    if (!this.config.tokenFile || this.config.token) return false;
    const fresh = bearer(this.config);
    const changed = fresh !== this.token;
    this.token = fresh;
    return changed;
  }

  /**
   * Makes `call`, retried as its kind allows (see retry.ts). With
   * `notFoundAfterLoss`, a NOT_FOUND after an attempt whose answer was lost
   * resolves to that value (the lost attempt did the work).
   */
  async invoke<R>(call: Call<R>, kind: Kind, signal?: AbortSignal,
                  notFoundAfterLoss?: {value: R}): Promise<R> {
    const attempts = new Attempts(this.config.retry, kind);
    let reread = false;
    for (;;) {
      const i = this.endpoint();
      try {
        return await call(this.stub(i), {
          signal, timeoutMs: this.config.timeoutMs, headers: this.headers(),
        }, i);
      } catch (e) {
        const err = toDelaydError(e);
        if (signal?.aborted) throw new CancelledError('the call was aborted', {cause: e});
        if (err.code === 'UNAUTHENTICATED' && !reread) {
          reread = true;
          if (this.rereadToken()) continue;
        }
        if (err.code === 'NOT_FOUND' && attempts.lost && notFoundAfterLoss) {
          return notFoundAfterLoss.value;
        }
        const wait = attempts.failed(err);  // (throws what is not retried)
        this.rotate(i);
        try {
          await sleep(wait, signal);
        } catch (reason) {
          throw new CancelledError('the call was aborted', {cause: reason});
        }
      }
    }
  }

  /** Closes every connection. */
  close(): void {
    for (const {session} of this.stubs.values()) session.abort();
    this.stubs.clear();
    for (const client of this.streams.values()) client.close();
    this.streams.clear();
  }
}
