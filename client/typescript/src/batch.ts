/**
 * Batch: set, move and remove operations sent in one call.
 * @module
 */
import {create} from '@bufbuild/protobuf';
import {timestampDate} from '@bufbuild/protobuf/wkt';

import type {BatchResponse, SetTimerRequest} from './gen/delayd/v1/delayd_pb.js';
import {BatchOperationSchema, BatchRequestSchema, MoveTimerRequestSchema,
        RemoveTimerRequestSchema} from './gen/delayd/v1/delayd_pb.js';
import {errorOfCode} from './errors.js';
import type {Kind} from './retry.js';
import {setRequest, when} from './requests.js';
import type {BatchResult, MoveOptions, RemoveOptions, SetOptions} from './types.js';

/** How a Batch is sent: the client's invoke, bound. @internal */
export type BatchSender = (req: ReturnType<typeof create<typeof BatchRequestSchema>>,
                           kind: Kind, signal?: AbortSignal) => Promise<BatchResponse>;

/**
 * Operations gathered for one Batch call (`client.batch()`), applied in
 * order per key. `commit()` sends them and resolves to one
 * {@link BatchResult} per operation, in order: an operation's failure is
 * in its result (`error`), not thrown.
 *
 * ```ts
 * const results = await client.batch({namespace: 'shop'})
 *   .set('order-1', 'a', {delay: 60_000})
 *   .remove('order-2')
 *   .commit();
 * ```
 */
export class Batch {
  private readonly req = create(BatchRequestSchema);
  private conditional = false;

  /** @internal */
  constructor(private readonly send: BatchSender, private readonly namespace?: string) {}

  /** Adds a SetTimer (see Client.setTimer). */
  set(key: string, payload: Uint8Array | string, options: SetOptions): this {
    const value: SetTimerRequest =
      setRequest(key, payload, {...options, namespace: options.namespace ?? this.namespace});
    this.req.operations.push(create(BatchOperationSchema, {op: {case: 'set', value}}));
    this.conditional ||= options.ifAbsent === true;
    return this;
  }

  /** Adds a MoveTimer (see Client.moveTimer). */
  move(key: string, options: MoveOptions): this {
    const value = create(MoveTimerRequestSchema, {
      namespace: options.namespace ?? this.namespace ?? '', key,
      expectedVersion: options.expectedVersion ?? 0n, when: when(options),
    });
    this.req.operations.push(create(BatchOperationSchema, {op: {case: 'move', value}}));
    this.conditional ||= (options.expectedVersion ?? 0n) !== 0n;
    return this;
  }

  /** Adds a RemoveTimer (see Client.removeTimer). */
  remove(key: string, options: RemoveOptions = {}): this {
    const value = create(RemoveTimerRequestSchema, {
      namespace: options.namespace ?? this.namespace ?? '', key,
      expectedVersion: options.expectedVersion ?? 0n,
    });
    this.req.operations.push(create(BatchOperationSchema, {op: {case: 'remove', value}}));
    this.conditional ||= (options.expectedVersion ?? 0n) !== 0n;
    return this;
  }

  /** How many operations it holds. */
  get length(): number {
    return this.req.operations.length;
  }

  /**
   * Sends the operations. Retried like a set when no operation is
   * conditional; with one (ifAbsent, an expected version) a lost answer
   * throws OutcomeUnknownError.
   */
  async commit(options: {signal?: AbortSignal} = {}): Promise<BatchResult[]> {
    const r = await this.send(this.req, this.conditional ? 'conditional' : 'safe',
                              options.signal);
    return r.results.map((res) => ({
      version: res.version,
      fireTime: res.fireTime ? timestampDate(res.fireTime) : undefined,
      error: res.code === 0 ? undefined : errorOfCode(res.code, res.message),
    }));
  }
}
