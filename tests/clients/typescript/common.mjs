// What the TypeScript library's tests share: the built library (DELAYD_LIB)
// and its modules, bounded waits for a condition, a client opened before a
// file's tests and closed after them (useClient), fresh namespaces, and the
// README's worker example as written.
import {readFileSync} from 'node:fs';
import {join} from 'node:path';
import {after, before} from 'node:test';

export const LIB = process.env.DELAYD_LIB;
export const d = await import(join(LIB, 'dist/esm/index.js'));
export const {Attempts} = await import(join(LIB, 'dist/esm/retry.js'));
export const {WorkStream} = await import(join(LIB, 'dist/esm/work_stream.js'));
export const {Done} = await import(join(LIB, 'dist/esm/done.js'));
export const wire = await import(join(LIB, 'dist/esm/wire.js'));
export const {eventOf} = await import(join(LIB, 'dist/esm/types.js'));
export const pb = await import(join(LIB, 'dist/esm/gen/delayd/v1/delayd_pb.js'));
export const protobuf = await import(join(LIB, 'node_modules/@bufbuild/protobuf/dist/esm/index.js'));
export const wkt = await import(join(LIB, 'node_modules/@bufbuild/protobuf/dist/esm/wkt/index.js'));

/** Polls `cond` until it is truthy, bounded by `ms`. */
export async function eventually(cond, what, ms = 10_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));  // (polls a condition, bounded)
  }
}

/** The client of a file's tests, once useClient() has opened it. */
export let client;
/** Opens `client` before the calling file's tests and closes it after. */
export function useClient() {
  before(() => { client = new d.Client(); });
  after(() => client.close());
}

let counter = 0;
/** A fresh namespace, kept alive by a far timer. */
export async function namespace() {
  const ns = `ts-${process.pid}-${++counter}`;
  await client.setTimer('~anchor', '', {delay: 3_600_000, namespace: ns});
  return ns;
}
export const nsStats = async (ns) => (await client.stats({namespace: ns})).namespaces[0];

/** The worker example of the library's README, as written. */
export function readmeExample() {
  const text = readFileSync(join(LIB, 'README.md'), 'utf8');
  const start = text.indexOf('```js\n', text.indexOf('## A worker')) + 6;
  return text.slice(start, text.indexOf('```', start));
}
