// delayd's web console, part 1 of 3: what the pages share (loaded first).
// The console is one page over the HTTP/JSON API (/v1), no library; see
// console.js for its routes. Text from the daemon is set as text, never as
// markup.
'use strict';

const POLL_MS = 2000;
const HISTORY = 150;  // points a chart keeps: 5 minutes at 2 s
const PAGE = 50;

// ---- Small helpers -------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === false || v == null) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = v;
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c == null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}
const num = (v) => Number(v || 0);
const fmt = (v) => num(v).toLocaleString('en-US');
const enc = encodeURIComponent;

function seconds(d) {  // a proto3 JSON Duration ("0.0005s") in seconds
  return d ? parseFloat(d) : 0;
}
function fmtSeconds(s) {
  if (!s) return '–';
  if (s < 1e-3) return `${(s * 1e6).toFixed(0)} µs`;
  if (s < 1) return `${(s * 1e3).toFixed(s < 0.01 ? 2 : 1)} ms`;
  if (s < 120) return `${s.toFixed(1)} s`;
  if (s < 7200) return `${(s / 60).toFixed(1)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}
function fmtTime(ts) {
  if (!ts) return '–';
  const d = new Date(ts);
  const rel = (d - Date.now()) / 1000;
  const when = rel >= 0 ? `in ${fmtSeconds(rel)}` : `${fmtSeconds(-rel)} ago`;
  return `${ts.replace('T', ' ').replace(/\.\d+Z$/, 'Z')} (${when})`;
}
// "15m", "1.5h", "500ms", "30" (seconds) → "900s"; anything else is sent
// as typed, for the daemon to refuse with its own message.
function toDuration(text) {
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h)?\s*$/.exec(text);
  if (!m) return text.trim();
  const scale = {ms: 1e-3, s: 1, m: 60, min: 60, h: 3600}[m[2] || 's'];
  return `${+(parseFloat(m[1]) * scale).toFixed(9)}s`;
}
// A payload (base64) as a short preview: text if it reads as UTF-8, hex
// otherwise; with its size.
function preview(b64) {
  const bin = atob(b64 || '');
  const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
  let text;
  try {
    text = new TextDecoder('utf-8', {fatal: true}).decode(bytes.slice(0, 96));
    if (/[\u0000-\u0008\u000e-\u001f]/.test(text)) throw new Error('binary');
  } catch {
    text = Array.from(bytes.slice(0, 32), (b) => b.toString(16).padStart(2, '0')).join(' ');
  }
  if (bytes.length > 96) text += '…';
  return {text, size: bytes.length};
}
function sizeText(n) {
  return n < 1024 ? `${n} B` : `${(n / 1024).toFixed(1)} KiB`;
}

// ---- The API -------------------------------------------------------------

class ApiError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || `HTTP ${status}`);
    this.status = status;
    this.code = e.status || '';  // the gRPC code's name
  }
}

async function api(method, path, body) {
  const headers = {};
  const token = sessionStorage.getItem('delayd-token');
  if (token) headers.Authorization = `Bearer ${token}`;
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const json = await res.json().catch(() => null);
  if (!res.ok) {
    const err = new ApiError(res.status, json);
    if (res.status === 401) askToken(err.message);
    throw err;
  }
  return json;
}
const nsPath = (ns) => `/v1/namespaces/${enc(ns)}`;

// ---- Page state ----------------------------------------------------------

let pageTimer = null;    // the polling of the page shown
let pageAbort = null;    // ends the page's watch, if any
const remembered = new Map();  // series name → [{t, v}]

function remember(name, value) {
  let s = remembered.get(name);
  if (!s) remembered.set(name, (s = []));
  s.push({t: Date.now(), v: value});
  if (s.length > HISTORY) s.shift();
  return s;
}
// Per-second rate of a growing total, from its last two readings.
function rate(name, total) {
  const s = remember(`total:${name}`, total);
  if (s.length < 2) return null;
  const a = s[s.length - 2], b = s[s.length - 1];
  return Math.max(0, (b.v - a.v) / ((b.t - a.t) / 1000));
}

function leavePage() {
  clearTimeout(pageTimer);
  pageTimer = null;
  if (pageAbort) pageAbort.abort();
  pageAbort = null;
}
function poll(fn) {
  const tick = async () => {
    try {
      await fn();
      live(`updated ${new Date().toLocaleTimeString()}`);
    } catch (e) {
      live(e.status === 401 ? '' : `error: ${e.message}`);
      if (e.status === 401) return;
    }
    pageTimer = setTimeout(tick, POLL_MS);
  };
  tick();
}
function live(text) { document.getElementById('live').textContent = text; }

const main = () => document.getElementById('main');
function show(...nodes) {
  main().replaceChildren(...nodes);
}

// ---- Charts --------------------------------------------------------------

// A line chart of one or more series ({name, color, points: [{t, v}]}).
// A sparkline (`spark`): 120 × 24 px, no axes or labels.
function chart(series, {spark = false, unit = ''} = {}) {
  const ns = 'http://www.w3.org/2000/svg';
  const W = spark ? 120 : 1200, H = spark ? 24 : 150, pad = spark ? 0 : 40;
  const svg = document.createElementNS(ns, 'svg');
  svg.setAttribute('viewBox', `0 0 ${W} ${H}`);
  svg.setAttribute('class', spark ? 'spark' : 'chart');
  svg.setAttribute('role', 'img');
  const all = series.flatMap((s) => s.points);
  const max = Math.max(1, ...all.map((p) => p.v));
  const t1 = Date.now(), t0 = t1 - HISTORY * POLL_MS;
  const x = (t) => pad + ((t - t0) / (t1 - t0)) * (W - pad - 4);
  const y = spark ? (v) => H - 2 - (v / max) * (H - 4)
                  : (v) => H - 18 - (v / max) * (H - 28);
  const line = (x1, y1, x2, y2) => {
    const l = document.createElementNS(ns, 'line');
    Object.entries({x1, y1, x2, y2, class: 'axis'}).forEach(([k, v]) => l.setAttribute(k, v));
    svg.append(l);
  };
  if (!spark) {
    line(pad, y(0), W, y(0));
    line(pad, y(max), W, y(max));
  }
  const label = (text, lx, ly) => {
    const t = document.createElementNS(ns, 'text');
    t.setAttribute('x', lx);
    t.setAttribute('y', ly);
    t.textContent = text;
    svg.append(t);
  };
  if (!spark) {
    label(`${fmt(Math.round(max))}${unit}`, 2, y(max) + 4);
    label('0', 2, y(0) + 4);
    label('5 min ago', pad, H - 2);
    label('now', W - 28, H - 2);
  }
  for (const s of series) {
    if (s.points.length < 2) continue;
    const p = document.createElementNS(ns, 'polyline');
    p.setAttribute('class', `line ${s.color}`);
    p.setAttribute('vector-effect', 'non-scaling-stroke');
    p.setAttribute('points', s.points.map((q) => `${x(q.t)},${y(q.v)}`).join(' '));
    svg.append(p);
  }
  svg.setAttribute('aria-label', series.map((s) => {
    const last = s.points[s.points.length - 1];
    return `${s.name}: ${last ? fmt(Math.round(last.v)) : 'no data'}`;
  }).join(', '));
  const legend = h('div', {class: 'legend'}, series.map((s) =>
    h('span', {}, h('i', {class: s.color}), s.name)));
  return h('div', {}, legend, svg);
}

// A figure; `title`, if any, is shown on hover (e.g. the last error).
function card(label, value, cls, title) {
  return h('div', {class: `card ${cls || ''}`, 'data-figure': label, title: title || false},
           h('div', {class: 'label'}, label), h('div', {class: 'value'}, value));
}


function confirmed(text) {
  const d = document.getElementById('confirm');
  document.getElementById('confirm-text').textContent = text;
  d.returnValue = '';
  d.showModal();
  return new Promise((resolve) => d.addEventListener('close',
    () => resolve(d.returnValue === 'ok'), {once: true}));
}
