/**
 * Where the daemon is and how to reach it: the same environment variables
 * delayctl reads, meaning the same thing.
 *
 * - `DELAYD_ENDPOINT`: host:port, or several separated by commas (the
 *   nodes of a cluster; calls rotate through them when one cannot answer).
 *   Default 127.0.0.1:7070.
 * - `DELAYD_TOKEN`, or `DELAYD_TOKEN_FILE` (its first line; read again after
 *   an UNAUTHENTICATED answer): a bearer token sent with every call.
 * - `DELAYD_TLS` ("1", "true"): TLS, the server checked against the
 *   system's CAs; `DELAYD_TLS_CA`: a PEM file of CAs to check it against
 *   (implies TLS); `DELAYD_TLS_CLIENT_CERT` and `DELAYD_TLS_CLIENT_KEY`: a
 *   client certificate and its key for mutual TLS.
 * @module
 */
import {readFileSync} from 'node:fs';

/** How calls are retried (see the README, "Retries"). */
export interface RetryPolicy {
  /** Tries in all, the first included (default 6). */
  attempts: number;
  /** The first wait, in ms (default 50); each next one times `multiplier`. */
  initialBackoffMs: number;
  /** The longest wait, in ms (default 2000). */
  maxBackoffMs: number;
  /** Default 2. */
  multiplier: number;
}

/** A client's configuration. */
export interface Config {
  /** host:port of each node; calls start at the first. */
  endpoints: string[];
  /** A bearer token. */
  token?: string;
  /** A file whose first line is the token (read when `token` is unset). */
  tokenFile?: string;
  /** TLS with the system's CAs (also implied by tlsCa and tlsCert). */
  tls: boolean;
  /** A PEM file of CAs to check the server against. */
  tlsCa?: string;
  /** A client certificate (PEM file) for mutual TLS, with tlsKey. */
  tlsCert?: string;
  /** The client certificate's private key (PEM file). */
  tlsKey?: string;
  /** How long each attempt of a unary call may take, in ms (default 10000). */
  timeoutMs: number;
  /** How calls are retried. */
  retry: RetryPolicy;
}

/** The default retry policy. */
export const DEFAULT_RETRY: RetryPolicy = {
  attempts: 6, initialBackoffMs: 50, maxBackoffMs: 2000, multiplier: 2,
};

/**
 * The configuration the DELAYD_* variables give, with `overrides` on top.
 * @param overrides - fields of Config that win over the environment
 * @param env - the environment (default: process.env)
 */
export function configFromEnv(overrides: Partial<Config> = {},
                              env: NodeJS.ProcessEnv = process.env): Config {
  const truthy = (v?: string) => ['1', 'true', 'yes'].includes((v ?? '').toLowerCase());
  const c: Config = {
    endpoints: (env.DELAYD_ENDPOINT || '127.0.0.1:7070')
      .split(',').map((e) => e.trim()).filter((e) => e !== ''),
    token: env.DELAYD_TOKEN || undefined,
    tokenFile: env.DELAYD_TOKEN_FILE || undefined,
    tls: truthy(env.DELAYD_TLS),
    tlsCa: env.DELAYD_TLS_CA || undefined,
    tlsCert: env.DELAYD_TLS_CLIENT_CERT || undefined,
    tlsKey: env.DELAYD_TLS_CLIENT_KEY || undefined,
    timeoutMs: 10_000,
    retry: {...DEFAULT_RETRY},
    ...overrides,
  };
  if (c.endpoints.length === 0) throw new Error('no endpoint');
  return c;
}

/** Whether `c` asks for TLS. */
export function isSecure(c: Config): boolean {
  return c.tls || c.tlsCa !== undefined || c.tlsCert !== undefined;
}

/** The token to send: `token`, else the token file's first line. */
export function bearer(c: Config): string | undefined {
  if (c.token) return c.token;
  if (c.tokenFile) {
    return readFileSync(c.tokenFile, 'utf8').split('\n')[0].trim() || undefined;
  }
  return undefined;
}
