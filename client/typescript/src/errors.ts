/**
 * Errors: one class per gRPC status code a caller branches on, each a
 * {@link DelaydError} carrying the daemon's message.
 *
 * ```ts
 * try {
 *   await client.moveTimer('order-42', {delay: 1_800_000, expectedVersion: v});
 * } catch (e) {
 *   if (e instanceof AbortedError) { ... }       // the version moved on
 *   else if (e instanceof NotFoundError) { ... } // it fired or was removed
 *   else throw e;
 * }
 * ```
 * @module
 */
import {Code, ConnectError} from '@connectrpc/connect';

/** A call failed. `code` is the gRPC code's name ("NOT_FOUND"). */
export class DelaydError extends Error {
  /** The gRPC status code's name. */
  readonly code: string = 'UNKNOWN';
  /** The daemon's (or the transport's) message, as sent. */
  readonly rawMessage: string;
  /** @param message - the daemon's message; @param cause - what failed */
  constructor(message: string, options?: {cause?: unknown}) {
    super(message, options);
    this.rawMessage = message;
    this.name = new.target.name;
  }
}

/** The call was cancelled (its AbortSignal, or the daemon). */
export class CancelledError extends DelaydError { override readonly code = 'CANCELLED'; }
/** An error the daemon did not classify. */
export class UnknownError extends DelaydError { override readonly code = 'UNKNOWN'; }
/** Bad input: nothing changed. The message names the field. */
export class InvalidArgumentError extends DelaydError { override readonly code = 'INVALID_ARGUMENT'; }
/** The call's deadline passed. */
export class DeadlineExceededError extends DelaydError { override readonly code = 'DEADLINE_EXCEEDED'; }
/** No such timer, schedule or namespace. */
export class NotFoundError extends DelaydError { override readonly code = 'NOT_FOUND'; }
/** A create-only call (ifAbsent) found one under the key. */
export class AlreadyExistsError extends DelaydError { override readonly code = 'ALREADY_EXISTS'; }
/** The token may not do this. */
export class PermissionDeniedError extends DelaydError { override readonly code = 'PERMISSION_DENIED'; }
/** A limit of the daemon's (pending timers, subscribers, sizes). */
export class ResourceExhaustedError extends DelaydError { override readonly code = 'RESOURCE_EXHAUSTED'; }
/** The daemon is not in a state to do this (no backup directory, ...). */
export class FailedPreconditionError extends DelaydError { override readonly code = 'FAILED_PRECONDITION'; }
/** A compare-and-set's expected version did not match. */
export class AbortedError extends DelaydError { override readonly code = 'ABORTED'; }
/** A value out of its range. */
export class OutOfRangeError extends DelaydError { override readonly code = 'OUT_OF_RANGE'; }
/** The daemon does not know this call. */
export class UnimplementedError extends DelaydError { override readonly code = 'UNIMPLEMENTED'; }
/** The daemon failed (its store): see its log. */
export class InternalError extends DelaydError { override readonly code = 'INTERNAL'; }
/**
 * The daemon cannot answer now (shutting down, a partition moving between
 * nodes, its store away): retryable.
 */
export class UnavailableError extends DelaydError { override readonly code = 'UNAVAILABLE'; }
/** Data was lost. */
export class DataLossError extends DelaydError { override readonly code = 'DATA_LOSS'; }
/** No token, or one the daemon does not know. */
export class UnauthenticatedError extends DelaydError { override readonly code = 'UNAUTHENTICATED'; }

/**
 * A conditional call (an expected version, ifAbsent) was sent and its
 * answer lost: it may or may not have been applied, and retrying it could
 * answer wrongly. Read the timer back to learn what happened.
 */
export class OutcomeUnknownError extends UnavailableError {
  /** The error the lost answer came with. */
  readonly last: DelaydError;
  /** @param message - what happened; @param last - the error seen */
  constructor(message: string, last: DelaydError) {
    super(message, {cause: last});
    this.last = last;
  }
}

const BY_CODE: Record<number, new (m: string, o?: {cause?: unknown}) => DelaydError> = {
  [Code.Canceled]: CancelledError,
  [Code.Unknown]: UnknownError,
  [Code.InvalidArgument]: InvalidArgumentError,
  [Code.DeadlineExceeded]: DeadlineExceededError,
  [Code.NotFound]: NotFoundError,
  [Code.AlreadyExists]: AlreadyExistsError,
  [Code.PermissionDenied]: PermissionDeniedError,
  [Code.ResourceExhausted]: ResourceExhaustedError,
  [Code.FailedPrecondition]: FailedPreconditionError,
  [Code.Aborted]: AbortedError,
  [Code.OutOfRange]: OutOfRangeError,
  [Code.Unimplemented]: UnimplementedError,
  [Code.Internal]: InternalError,
  [Code.Unavailable]: UnavailableError,
  [Code.DataLoss]: DataLossError,
  [Code.Unauthenticated]: UnauthenticatedError,
};

/** The DelaydError for a gRPC code number and message (a Batch result's). */
export function errorOfCode(code: number, message: string): DelaydError {
  return new (BY_CODE[code] ?? UnknownError)(message);
}

/** The DelaydError for whatever a call threw. */
export function toDelaydError(e: unknown): DelaydError {
  if (e instanceof DelaydError) return e;
  const c = ConnectError.from(e);
  return new (BY_CODE[c.code] ?? UnknownError)(c.rawMessage, {cause: e});
}
