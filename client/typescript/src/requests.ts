/**
 * Requests built from the library's options, shared by Client and Batch.
 * @internal
 * @module
 */
import {create} from '@bufbuild/protobuf';
import {durationFromMs, timestampFromDate} from '@bufbuild/protobuf/wkt';
import type {Duration, Timestamp} from '@bufbuild/protobuf/wkt';

import type {PushTarget as PbPushTarget, ScheduleSpec as PbSpec, SetTimerRequest}
  from './gen/delayd/v1/delayd_pb.js';
import {PushTargetSchema, ScheduleSpecSchema, SetTimerRequestSchema}
  from './gen/delayd/v1/delayd_pb.js';
import {InvalidArgumentError} from './errors.js';
import type {PushTarget, ScheduleSpec, SetOptions, When} from './types.js';

/** A payload as bytes: a string is sent as UTF-8. */
export function bytes(payload: Uint8Array | string | undefined): Uint8Array {
  if (payload === undefined) return new Uint8Array();
  return typeof payload === 'string' ? new TextEncoder().encode(payload) : payload;
}

/** A duration in ms as a Duration; a bad number is refused here. */
export function duration(ms: number, what: string): Duration {
  if (!Number.isFinite(ms)) throw new InvalidArgumentError(`${what}: not a number`);
  return durationFromMs(ms);
}

/** A push target as the request's message (unset if null: none). */
export function pushTarget(t: PushTarget | null | undefined): PbPushTarget | undefined {
  if (t === null || t === undefined) return undefined;
  const {timeout, ...rest} = t;
  return create(PushTargetSchema, {
    ...rest, timeout: timeout === undefined ? undefined : duration(timeout, 'timeout')});
}

/** The oneof `when` of a set or move. */
export function when(w: When):
    {case: 'delay'; value: Duration} | {case: 'fireTime'; value: Timestamp} {
  if ((w.delay === undefined) === (w.at === undefined)) {
    throw new InvalidArgumentError('give exactly one of delay and at');
  }
  if (w.delay !== undefined) return {case: 'delay', value: duration(w.delay, 'delay')};
  return {case: 'fireTime', value: timestampFromDate(w.at!)};
}

/** A SetTimerRequest. */
export function setRequest(key: string, payload: Uint8Array | string,
                           o: SetOptions): SetTimerRequest {
  return create(SetTimerRequestSchema, {
    namespace: o.namespace ?? '', key, payload: bytes(payload),
    ifAbsent: o.ifAbsent ?? false, when: when(o),
    jitter: o.jitter === undefined ? undefined : duration(o.jitter, 'jitter'),
  });
}

/** A ScheduleSpec. */
export function spec(s: ScheduleSpec): PbSpec {
  if ((s.cron === undefined) === (s.every === undefined)) {
    throw new InvalidArgumentError('give exactly one of cron and every');
  }
  return create(ScheduleSpecSchema, {
    kind: s.cron !== undefined ? {case: 'cron', value: s.cron}
                               : {case: 'every', value: duration(s.every!, 'every')},
    timeZone: s.timeZone ?? '',
    startTime: s.start ? timestampFromDate(s.start) : undefined,
    endTime: s.end ? timestampFromDate(s.end) : undefined,
    maxRuns: s.maxRuns ?? 0n,
  });
}
