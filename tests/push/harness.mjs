// What the push tests share: a delayd started and stopped by PID, its
// HTTP/JSON API, receivers on 127.0.0.1, and waiting on a condition with a
// deadline.
import { spawn, execFile, execFileSync } from 'node:child_process';
import { promisify } from 'node:util';
import http from 'node:http';
import https from 'node:https';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

export const DELAYD = process.argv[2];
export const DELAYCTL = process.argv[3];

// A fresh directory, removed with its contents when the process exits.
export function tempDir(prefix) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

// Resolves once `check()` is truthy (polled), or throws after `ms`.
export async function waitFor(what, check, ms = 10000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await check();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

// A delayd on OS-picked ports; `args` added to its command line.
export class Daemon {
  constructor(dataDir, args = []) {
    this.dataDir = dataDir;
    this.args = args;
    this.log = '';
  }

  async start() {
    this.log = '';
    const store = this.dataDir ? ['--data-dir', this.dataDir] : ['--in-memory'];
    this.proc = spawn(DELAYD, [
      '--listen', '127.0.0.1:0', '--http-listen', '127.0.0.1:0',
      '--partitions', '2', ...store, ...this.args,
    ], { stdio: ['ignore', 'pipe', 'pipe'] });
    const take = (d) => { this.log += d.toString(); };
    this.proc.stdout.on('data', take);
    this.proc.stderr.on('data', take);
    this.exited = new Promise((r) => this.proc.on('exit', (code, sig) => r({ code, sig })));
    await waitFor('delayd to start', () => {
      const http = /HTTP\/JSON API on http:\/\/\S+ \(port (\d+)/.exec(this.log);
      const grpc = /listening on \S+ port (\d+)/.exec(this.log);
      if (this.proc.exitCode !== null) throw new Error(`delayd exited: ${this.log}`);
      if (!http || !grpc) return false;
      this.httpPort = Number(http[1]);
      this.grpcPort = Number(grpc[1]);
      return true;
    });
  }

  async kill(signal = 'SIGTERM') {
    if (this.proc.exitCode !== null || this.proc.signalCode !== null) return;
    this.proc.kill(signal);
    await this.exited;
  }

  // One HTTP/JSON call: its status and parsed body.
  async api(method, route, body) {
    const res = await fetch(`http://127.0.0.1:${this.httpPort}/v1${route}`, {
      method,
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, body: text ? JSON.parse(text) : {} };
  }

  async ok(method, route, body) {
    const r = await this.api(method, route, body);
    if (r.status !== 200) {
      throw new Error(`${method} ${route}: ${r.status} ${JSON.stringify(r.body)}`);
    }
    return r.body;
  }

  setPolicy(ns, policy) {
    return this.ok('PUT', `/namespaces/${ns}/policy`, { policy });
  }

  setTimer(ns, key, payload, delay = '0.05s') {
    return this.ok('PUT', `/namespaces/${ns}/timers/${encodeURIComponent(key)}`, {
      payload: Buffer.from(payload).toString('base64'), delay,
    });
  }

  stats(ns) {
    return this.ok('GET', `/namespaces/${ns}/stats`).then((s) => s.namespaces?.[0] ?? {});
  }

  async deadLetters(ns) {
    const r = await this.ok('GET', `/namespaces/${ns}/deadLetters`);
    return r.deadLetters ?? [];
  }

  // delayctl's output (asynchronous: the receivers run in this process).
  async delayctl(args) {
    try {
      const { stdout } = await promisify(execFile)(DELAYCTL,
        ['--endpoint', `127.0.0.1:${this.grpcPort}`, ...args], { encoding: 'utf8' });
      return stdout;
    } catch (e) {
      e.message += `\n${e.stderr}`;
      throw e;
    }
  }
}

// An HTTP or HTTPS server on 127.0.0.1 whose answer to each request is
// chosen by the handler registered for its path; it records every request
// (method, path, headers, body) and every connection.
export class Receiver {
  constructor(tls) {
    this.requests = [];
    this.connections = 0;
    this.handlers = new Map();
    const handle = (req, res) => {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        const r = {
          method: req.method, path: req.url, headers: req.headers,
          body: Buffer.concat(chunks), at: Date.now(),
          cert: req.socket.getPeerCertificate?.()?.subject?.CN,
        };
        this.requests.push(r);
        const h = this.handlers.get(req.url) ?? ((_, out) => { out.writeHead(404); out.end('no handler'); });
        h(r, res);
      });
    };
    this.server = tls ? https.createServer(tls, handle) : http.createServer(handle);
    this.server.keepAliveTimeout = 30000;
    this.server.on('connection', () => { this.connections += 1; });
    this.server.on('secureConnection', () => {});
  }

  async listen() {
    await new Promise((r) => this.server.listen(0, '127.0.0.1', r));
    this.port = this.server.address().port;
    return this;
  }

  on(p, handler) { this.handlers.set(p, handler); }

  at(p) { return this.requests.filter((r) => r.path === p); }

  close() {
    this.server.closeAllConnections?.();
    return new Promise((r) => this.server.close(r));
  }
}

// A CA, a server certificate for 127.0.0.1 and a client certificate, made
// with openssl into `dir`.
export function makeCerts(dir) {
  const run = (...args) => execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  const ca = (name) => run('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2',
    '-subj', `/CN=${name}`, '-keyout', `${name}.key`, '-out', `${name}.pem`);
  ca('ca');
  ca('other-ca');
  const leaf = (name, ext) => {
    run('req', '-newkey', 'rsa:2048', '-nodes', '-subj', `/CN=${name}`,
      '-keyout', `${name}.key`, '-out', `${name}.csr`);
    fs.writeFileSync(path.join(dir, `${name}.ext`), ext);
    run('x509', '-req', '-in', `${name}.csr`, '-CA', 'ca.pem', '-CAkey', 'ca.key',
      '-CAcreateserial', '-days', '2', '-extfile', `${name}.ext`, '-out', `${name}.pem`);
  };
  leaf('server', 'subjectAltName=IP:127.0.0.1\n');
  leaf('client', 'extendedKeyUsage=clientAuth\n');
  const read = (f) => fs.readFileSync(path.join(dir, f), 'utf8');
  return {
    ca: read('ca.pem'), otherCa: read('other-ca.pem'),
    serverCert: read('server.pem'), serverKey: read('server.key'),
    clientCert: read('client.pem'), clientKey: read('client.key'),
  };
}
