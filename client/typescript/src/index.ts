/**
 * delayd's client library: a {@link Client} for every call, and a
 * {@link Worker} that handles a namespace's events.
 * @packageDocumentation
 */
export {Client, Subscription} from './client.js';
export type {ListOptions, SubscribeOptions} from './client.js';
export {Batch} from './batch.js';
export {configFromEnv, DEFAULT_RETRY} from './config.js';
export type {Config, RetryPolicy} from './config.js';
export * from './errors.js';
export type * from './types.js';
export {Retry, Worker} from './worker.js';
export type {Handler, Hooks, WorkerOptions} from './worker.js';
export {VERSION} from './version.js';
