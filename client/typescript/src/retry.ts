/**
 * What the client shares about retrying: which failures may be retried,
 * which prove a call never reached a daemon, and the waits between tries.
 * @internal
 * @module
 */
import type {RetryPolicy} from './config.js';
import {DelaydError, OutcomeUnknownError} from './errors.js';

/** Every call is one of these (see the README, "Retries"). */
export type Kind = 'safe' | 'conditional';

// The transport's words for a call that failed before any connection was
// made: it cannot have reached a daemon.
const NOT_SENT = ['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'EHOSTUNREACH',
                  'connect ECONN'];

/** Whether `e` proves the call never reached a daemon. */
export function neverSent(e: DelaydError): boolean {
  if (e.code !== 'UNAVAILABLE') return false;
  const text = `${e.rawMessage} ${String((e.cause as {cause?: unknown})?.cause ?? '')}`;
  let cause: unknown = e.cause;
  for (let depth = 0; cause && depth < 4; depth++) {
    const code = (cause as {code?: unknown}).code;
    if (typeof code === 'string' && NOT_SENT.includes(code)) return true;
    cause = (cause as {cause?: unknown}).cause;
  }
  return NOT_SENT.some((w) => text.includes(w));
}

/** One call's tries. */
export class Attempts {
  tries = 0;
  /** An attempt was sent and its answer lost. */
  lost = false;
  private wait: number;

  constructor(private readonly policy: RetryPolicy, private readonly kind: Kind) {
    this.wait = policy.initialBackoffMs;
  }

  /** After a failed try: ms to wait before the next, or throws what the caller sees. */
  failed(e: DelaydError): number {
    this.tries++;
    // CANCELLED is not the caller's here (an aborted signal is answered
    // before this): it is a daemon stopping, whose gRPC ends the calls it
    // had not answered, or a node that forwarded the call stopping before
    // its owner's answer came. It may have been applied: an answer lost.
    if (e.code !== 'UNAVAILABLE' && e.code !== 'DEADLINE_EXCEEDED' &&
        e.code !== 'CANCELLED') throw e;
    const sent = !neverSent(e);
    if (sent && this.kind === 'conditional') {
      throw new OutcomeUnknownError(
        `the call was sent and its answer lost (${e.code}: ${e.rawMessage}); ` +
        'it may or may not have been applied: read it back', e);
    }
    this.lost ||= sent;
    if (this.tries >= this.policy.attempts) throw e;
    const w = this.wait * (0.5 + Math.random() / 2);
    this.wait = Math.min(this.wait * this.policy.multiplier, this.policy.maxBackoffMs);
    return w;
  }
}

/** Resolves after `ms`, or rejects when `signal` aborts. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(signal.reason);
    const t = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    const onAbort = () => {
      clearTimeout(t);
      reject(signal!.reason);
    };
    signal?.addEventListener('abort', onAbort, {once: true});
  });
}
