// delayd's web console: one page over the HTTP/JSON API (/v1), no library.
// Routes (the URL's hash): #/ the namespaces; #/ns/NAME/TAB a namespace,
// TAB one of timers, events, dead, policy. Every figure comes from the API
// when the page shows it; rates and charts come from Stats read every 2 s
// while the page is open. Text from the daemon is set as text, never as
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
const history = new Map();  // series name → [{t, v}]

function remember(name, value) {
  let s = history.get(name);
  if (!s) history.set(name, (s = []));
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

function card(label, value, cls) {
  return h('div', {class: `card ${cls || ''}`, 'data-figure': label},
           h('div', {class: 'label'}, label), h('div', {class: 'value'}, value));
}

// ---- Signing in ----------------------------------------------------------

function askToken(why) {
  leavePage();
  const input = h('input', {type: 'password', id: 'token', autocomplete: 'off',
                            'aria-label': 'Token', required: true});
  const form = h('form', {class: 'panel signin', onsubmit: (e) => {
    e.preventDefault();
    sessionStorage.setItem('delayd-token', input.value.trim());
    route();
  }},
  h('h1', {}, 'This daemon asks for a token'),
  h('p', {class: 'muted'}, 'It is kept in this tab only (session storage) and sent as ',
    h('code', {}, 'Authorization: Bearer'), '.'),
  sessionStorage.getItem('delayd-token') ? h('p', {class: 'error'}, why) : null,
  h('div', {class: 'row'}, input, h('button', {type: 'submit'}, 'Sign in')));
  show(form);
  sessionStorage.removeItem('delayd-token');
  input.focus();
}

// ---- The namespaces ------------------------------------------------------

async function overview() {
  document.getElementById('crumbs').replaceChildren('Namespaces');
  const cards = h('div', {class: 'cards'});
  const charts = h('div', {class: 'panel'});
  const body = h('tbody');
  const head = ['Namespace', 'Pending', 'Ready', 'In flight', 'Retrying', 'Dead',
                'Workers', 'Delivered/s', 'Last 5 min', 'State'];
  const table = h('table', {id: 'namespaces'}, h('thead', {}, h('tr', {},
    head.map((c, i) => h('th', {class: i > 0 && i < 8 ? 'num' : ''}, c)))), body);
  const open = h('form', {class: 'row', onsubmit: (e) => {
    e.preventDefault();
    const v = e.target.elements.ns.value.trim();
    if (v) location.hash = `#/ns/${enc(v)}/timers`;
  }}, h('input', {name: 'ns', placeholder: 'namespace', 'aria-label': 'Open a namespace'}),
  h('button', {type: 'submit', class: 'ghost'}, 'Open'));
  const note = h('div');
  show(h('h1', {}, 'Namespaces'), note, cards, charts,
       h('div', {class: 'panel'}, table), open);
  poll(async () => {
    let s;
    try {
      s = await api('GET', '/v1/stats');
    } catch (e) {
      if (e.code !== 'PERMISSION_DENIED') throw e;
      note.replaceChildren(h('p', {class: 'notice'},
        'This token may not read the daemon-wide figures: open a namespace by name.'));
      return;
    }
    const delivered = (s.namespaces || []).reduce((a, n) => a + num(n.eventsDelivered), 0);
    const r = rate('all', delivered);
    cards.replaceChildren(
      card('Pending timers', fmt(s.pendingTimers)),
      card('Ready events', fmt(s.readyEvents)),
      card('In flight', fmt(s.inFlightEvents)),
      card('Retrying', fmt(s.retryingEvents)),
      card('Dead letters', fmt(s.deadLetters), num(s.deadLetters) ? 'bad' : ''),
      card('Workers', fmt(s.workers)),
      card('Firing late p50 / p99', `${fmtSeconds(seconds(s.firingLateness?.p50))} / ${fmtSeconds(seconds(s.firingLateness?.p99))}`),
      card('Delivery late p50 / p99', `${fmtSeconds(seconds(s.deliveryLateness?.p50))} / ${fmtSeconds(seconds(s.deliveryLateness?.p99))}`),
      card('Store', s.durable ? 'durable' : 'in memory', num(s.storeErrors) ? 'bad' : ''));
    charts.replaceChildren(
      h('h2', {}, 'Pending and ready, and deliveries per second'),
      chart([
        {name: 'pending', color: 'c1', points: remember('pending', num(s.pendingTimers))},
        {name: 'ready', color: 'c2', points: remember('ready', num(s.readyEvents))},
        {name: 'delivered/s', color: 'c3', points: r == null ? history.get('delivered/s') || [] : remember('delivered/s', r)},
      ]));
    body.replaceChildren(...(s.namespaces || []).map((n) => {
      const nr = rate(`ns:${n.namespace}`, num(n.eventsDelivered));
      const spark = remember(`ns-pending:${n.namespace}`, num(n.pendingTimers));
      const c = chart([{name: 'pending', color: 'c1', points: spark}], {spark: true});
      c.querySelector('.legend').remove();
      return h('tr', {'data-ns': n.namespace},
        h('td', {}, h('a', {href: `#/ns/${enc(n.namespace)}/timers`}, n.namespace)),
        ['pendingTimers', 'readyEvents', 'inFlightEvents', 'retryingEvents',
         'deadLetters', 'workers'].map((f) => h('td', {class: 'num', 'data-field': f}, fmt(n[f]))),
        h('td', {class: 'num'}, nr == null ? '–' : nr.toFixed(1)),
        h('td', {}, c),
        h('td', {}, n.paused ? h('span', {class: 'pill paused'}, 'paused')
                             : h('span', {class: 'pill ok'}, 'delivering')));
    }));
    if (!body.children.length) {
      body.append(h('tr', {}, h('td', {colspan: head.length, class: 'muted'},
        'No namespace is in use yet.')));
    }
  });
}

// ---- A namespace ---------------------------------------------------------

const TABS = [['timers', 'Timers'], ['events', 'Live events'],
              ['dead', 'Dead letters'], ['policy', 'Policy']];

function namespacePage(ns, tab) {
  document.getElementById('crumbs').replaceChildren(
    h('a', {href: '#/'}, 'Namespaces'), ' / ', ns);
  const cards = h('div', {class: 'cards'});
  const graph = h('div', {class: 'panel'});
  const state = h('span');
  const notice = h('div', {role: 'status'});
  const pause = h('button', {class: 'ghost', id: 'pause', onclick: () => setPaused(ns, pause.dataset.paused !== 'true', notice)}, 'Pause');
  const drain = h('button', {class: 'danger', id: 'drain', onclick: async () => {
    if (!await confirmed(`Fire every pending timer of "${ns}" now? Their events go to the workers at once.`)) return;
    try {
      const r = await api('POST', `${nsPath(ns)}:drain`, {});
      notice.replaceChildren(h('p', {class: 'notice ok'}, `Drained ${fmt(r.drained)} timers.`));
    } catch (e) { notice.replaceChildren(h('p', {class: 'notice error'}, e.message)); }
  }}, 'Drain…');
  const tabs = h('nav', {class: 'tabs', 'aria-label': 'Namespace views'}, TABS.map(([id, name]) =>
    h('a', {href: `#/ns/${enc(ns)}/${id}`, 'aria-current': id === tab ? 'page' : false}, name)));
  const content = h('section', {id: `tab-${tab}`});
  show(h('h1', {}, ns, state, h('span', {class: 'spacer'}), pause, drain), notice,
       cards, graph, tabs, content);
  ({timers: timersTab, events: eventsTab, dead: deadTab, policy: policyTab}[tab] || timersTab)(ns, content);
  poll(async () => {
    const s = await api('GET', `${nsPath(ns)}/stats`);
    const n = (s.namespaces || [])[0] || {};
    const r = rate(`ns:${ns}`, num(n.eventsDelivered));
    pause.dataset.paused = n.paused ? 'true' : 'false';
    pause.textContent = n.paused ? 'Resume' : 'Pause';
    state.replaceChildren(n.paused ? h('span', {class: 'pill paused'}, 'paused')
                                   : h('span', {class: 'pill ok'}, 'delivering'));
    cards.replaceChildren(
      card('Pending timers', fmt(n.pendingTimers)), card('Ready', fmt(n.readyEvents)),
      card('In flight', fmt(n.inFlightEvents)), card('Retrying', fmt(n.retryingEvents)),
      card('Dead letters', fmt(n.deadLetters), num(n.deadLetters) ? 'bad' : ''),
      card('Workers', fmt(n.workers)), card('Delivered/s', r == null ? '–' : r.toFixed(1)),
      card('Set / fired / acked', `${fmt(n.timersSet)} / ${fmt(num(n.timersExpired) + num(n.timersDrained))} / ${fmt(n.eventsAcked)}`));
    graph.replaceChildren(chart([
      {name: 'pending', color: 'c1', points: remember(`ns-pending:${ns}`, num(n.pendingTimers))},
      {name: 'ready + in flight', color: 'c2', points: remember(`ns-busy:${ns}`, num(n.readyEvents) + num(n.inFlightEvents))},
      {name: 'delivered/s', color: 'c3', points: r == null ? [] : remember(`ns-rate:${ns}`, r)},
    ]));
  });
}

async function setPaused(ns, paused, notice) {
  try {
    const policy = await api('GET', `${nsPath(ns)}/policy`);
    policy.paused = paused;
    await api('PUT', `${nsPath(ns)}/policy`, {policy});
    notice.replaceChildren(h('p', {class: 'notice ok'}, paused ? 'Paused: events wait until resumed.' : 'Resumed.'));
    const b = document.getElementById('pause');
    b.dataset.paused = String(paused);
    b.textContent = paused ? 'Resume' : 'Pause';
  } catch (e) { notice.replaceChildren(h('p', {class: 'notice error'}, e.message)); }
}

function confirmed(text) {
  const d = document.getElementById('confirm');
  document.getElementById('confirm-text').textContent = text;
  d.returnValue = '';
  d.showModal();
  return new Promise((resolve) => d.addEventListener('close',
    () => resolve(d.returnValue === 'ok'), {once: true}));
}

// Timers: search by key prefix, a page at a time.
function timersTab(ns, el) {
  const tokens = [''];  // page tokens, for going back
  const prefix = h('input', {id: 'prefix', placeholder: 'key prefix', 'aria-label': 'Key prefix', type: 'search'});
  const body = h('tbody');
  const info = h('span', {class: 'muted'});
  const prev = h('button', {class: 'ghost', disabled: true, onclick: () => { tokens.pop(); tokens.pop(); load(); }}, '← Previous');
  const next = h('button', {class: 'ghost', disabled: true, onclick: () => load()}, 'Next →');
  async function load() {
    const token = tokens[tokens.length - 1];
    const q = `pageSize=${PAGE}&keyPrefix=${enc(prefix.value)}${token ? `&pageToken=${enc(token)}` : ''}`;
    try {
      const r = await api('GET', `${nsPath(ns)}/timers?${q}`);
      const timers = r.timers || [];
      body.replaceChildren(...timers.map((t) => {
        const p = preview(t.payload);
        return h('tr', {},
          h('td', {class: 'mono wrap'}, t.key), h('td', {}, fmtTime(t.fireTime)),
          h('td', {class: 'num mono'}, t.version),
          h('td', {class: 'mono wrap'}, p.text), h('td', {class: 'num'}, sizeText(p.size)));
      }));
      if (!timers.length) body.append(h('tr', {}, h('td', {colspan: 5, class: 'muted'}, 'No pending timer matches.')));
      info.textContent = `page ${tokens.length}, ${timers.length} timers`;
      prev.disabled = tokens.length < 2;
      next.disabled = !r.nextPageToken;
      if (r.nextPageToken) tokens.push(r.nextPageToken);
      else tokens.push(null);
    } catch (e) { info.textContent = e.message; }
  }
  const search = h('form', {class: 'row', role: 'search', onsubmit: (e) => {
    e.preventDefault();
    tokens.splice(0, tokens.length, '');
    load();
  }}, prefix, h('button', {type: 'submit'}, 'Search'), prev, next, info);
  el.append(search, h('div', {class: 'panel'}, h('table', {id: 'timers'},
    h('thead', {}, h('tr', {}, ['Key', 'Fire time', 'Version', 'Payload', 'Size'].map((c, i) =>
      h('th', {class: i === 2 || i === 4 ? 'num' : ''}, c)))), body)));
  load();
}

// Live events: the namespace's watch (Server-Sent Events), read with fetch
// so that the token goes in a header.
function eventsTab(ns, el) {
  const body = h('tbody');
  const status = h('span', {class: 'muted', id: 'watch-status'}, 'connecting…');
  el.append(h('div', {class: 'row'}, status), h('div', {class: 'panel'}, h('table', {id: 'events'},
    h('thead', {}, h('tr', {}, ['Id', 'Kind', 'Key', 'Version', 'Attempt', 'Fire time', 'Late by', 'Payload'].map((c) => h('th', {}, c)))),
    body)));
  const abort = new AbortController();
  pageAbort = abort;
  const add = (kind, e) => {
    const late = e.firedAt && e.fireTime ? (new Date(e.firedAt) - new Date(e.fireTime)) / 1000 : 0;
    body.prepend(h('tr', {}, h('td', {class: 'mono'}, e.id), h('td', {}, kind),
      h('td', {class: 'mono wrap'}, e.key), h('td', {class: 'mono'}, e.version),
      h('td', {class: 'num'}, e.attempt || 0), h('td', {}, fmtTime(e.fireTime)),
      h('td', {}, fmtSeconds(Math.max(late, 0))), h('td', {class: 'mono wrap'}, preview(e.payload).text)));
    while (body.children.length > 200) body.lastChild.remove();
  };
  (async () => {
    const headers = {Accept: 'text/event-stream'};
    const token = sessionStorage.getItem('delayd-token');
    if (token) headers.Authorization = `Bearer ${token}`;
    try {
      const res = await fetch(`${nsPath(ns)}/events?watch=1`, {headers, signal: abort.signal});
      if (!res.ok) throw new ApiError(res.status, await res.json().catch(() => null));
      status.textContent = 'watching: new events appear at the top';
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let buf = '';
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buf += decoder.decode(value, {stream: true});
        let cut;
        while ((cut = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          let kind = 'message', data = '';
          for (const line of block.split('\n')) {
            if (line.startsWith('event:')) kind = line.slice(6).trim();
            else if (line.startsWith('data:')) data += line.slice(5).trim();
          }
          if (data) add(kind, JSON.parse(data));
        }
      }
      status.textContent = 'the watch ended';
    } catch (e) {
      if (e.name !== 'AbortError') status.textContent = `the watch failed: ${e.message}`;
    }
  })();
}

// Dead letters: a page, each with its last error; requeue or purge some or
// all, after a confirmation.
function deadTab(ns, el) {
  const body = h('tbody');
  const notice = h('div', {role: 'status'});
  const selected = () => [...body.querySelectorAll('input:checked')].map((c) => c.value);
  async function act(verb, all) {
    const ids = selected();
    if (!all && !ids.length) {
      notice.replaceChildren(h('p', {class: 'notice error'}, 'Select dead letters first.'));
      return;
    }
    const what = all ? `every dead letter of "${ns}"` : `${ids.length} dead letter(s)`;
    const text = verb === 'purge' ? `Delete ${what} for good?` : `Deliver ${what} again, from attempt 1?`;
    if (!await confirmed(text)) return;
    try {
      const r = await api('POST', `${nsPath(ns)}/deadLetters:${verb}`, all ? {all: true} : {eventIds: ids});
      notice.replaceChildren(h('p', {class: 'notice ok'}, `${verb === 'purge' ? 'Purged' : 'Requeued'} ${fmt(r.count)}.`));
    } catch (e) { notice.replaceChildren(h('p', {class: 'notice error'}, e.message)); }
    load();
  }
  async function load() {
    try {
      const r = await api('GET', `${nsPath(ns)}/deadLetters?pageSize=${PAGE}`);
      const letters = r.deadLetters || [];
      body.replaceChildren(...letters.map((d) => {
        const e = d.event || {};
        return h('tr', {'data-id': e.id},
          h('td', {}, h('input', {type: 'checkbox', value: e.id, 'aria-label': `Select ${e.key}`})),
          h('td', {class: 'mono'}, e.id), h('td', {class: 'mono wrap'}, e.key),
          h('td', {class: 'num'}, e.attempt || 0), h('td', {class: 'wrap'}, d.error || '–'),
          h('td', {class: 'mono wrap'}, preview(e.payload).text));
      }));
      if (!letters.length) body.append(h('tr', {}, h('td', {colspan: 6, class: 'muted'}, 'No dead letters.')));
    } catch (e) { notice.replaceChildren(h('p', {class: 'notice error'}, e.message)); }
  }
  el.append(h('div', {class: 'row'},
    h('button', {id: 'requeue', onclick: () => act('requeue', false)}, 'Requeue selected…'),
    h('button', {class: 'danger', id: 'purge', onclick: () => act('purge', false)}, 'Purge selected…'),
    h('button', {class: 'ghost', onclick: () => act('requeue', true)}, 'Requeue all…'),
    h('button', {class: 'ghost', onclick: () => act('purge', true)}, 'Purge all…')),
  notice, h('div', {class: 'panel'}, h('table', {id: 'dead'}, h('thead', {}, h('tr', {},
    ['', 'Event', 'Key', 'Attempts', 'Last error', 'Payload'].map((c) => h('th', {}, c)))), body)));
  load();
}

// The policy, as a form; the daemon's validation messages name the field.
const POLICY_FIELDS = [
  ['maxAttempts', 'Max attempts', 'number', '0: unlimited; then the event becomes a dead letter'],
  ['initialBackoff', 'Initial backoff', 'duration', 'wait before the 2nd attempt (e.g. 1s, 500ms)'],
  ['backoffMultiplier', 'Backoff multiplier', 'number', 'each later wait is this times the one before'],
  ['maxBackoff', 'Max backoff', 'duration', 'the longest wait (e.g. 10m)'],
  ['backoffJitter', 'Backoff jitter', 'number', 'fraction of a wait cut at random, 0..1'],
  ['ackTimeout', 'Ack timeout', 'duration', 'a delivery not acknowledged by then is retried'],
  ['maxDispatchRate', 'Max dispatch rate', 'number', 'events per second; 0: no limit'],
  ['dispatchBurst', 'Dispatch burst', 'number', 'events at once after a quiet spell'],
  ['maxInFlight', 'Max in flight', 'number', 'unacknowledged events across workers; 0: no limit'],
];
const snake = (f) => f.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);

function policyTab(ns, el) {
  const notice = h('div', {role: 'status'});
  const form = h('form', {class: 'policy', id: 'policy', novalidate: true});
  let current = {};
  const inputs = {};
  for (const [f, label, kind, hint] of POLICY_FIELDS) {
    inputs[f] = h('input', {id: `p-${f}`, name: f, inputmode: kind === 'number' ? 'decimal' : 'text', 'aria-describedby': `h-${f}`});
    form.append(h('label', {for: `p-${f}`}, label), inputs[f], h('span', {class: 'hint', id: `h-${f}`}, hint));
  }
  form.append(h('div', {class: 'row actions'}, h('button', {type: 'submit'}, 'Save policy'),
    h('button', {type: 'button', class: 'ghost', onclick: () => fill(current)}, 'Undo changes')));
  function fill(p) {
    current = p;
    for (const [f, , kind] of POLICY_FIELDS) {
      inputs[f].value = kind === 'duration' ? (p[f] || '0s') : String(p[f] ?? 0);
      inputs[f].removeAttribute('aria-invalid');
    }
  }
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    const policy = {paused: !!current.paused};
    for (const [f, , kind] of POLICY_FIELDS) {
      const v = inputs[f].value.trim();
      policy[f] = kind === 'duration' ? toDuration(v) : (v === '' ? 0 : Number.isNaN(Number(v)) ? v : Number(v));
      inputs[f].removeAttribute('aria-invalid');
    }
    try {
      await api('PUT', `${nsPath(ns)}/policy`, {policy});
      fill(await api('GET', `${nsPath(ns)}/policy`));
      notice.replaceChildren(h('p', {class: 'notice ok'}, 'Saved: the policy is in force.'));
    } catch (err) {
      notice.replaceChildren(h('p', {class: 'notice error', id: 'policy-error'}, err.message));
      const bad = POLICY_FIELDS.find(([f]) => err.message.includes(snake(f)) || err.message.includes(f));
      if (bad) { inputs[bad[0]].setAttribute('aria-invalid', 'true'); inputs[bad[0]].focus(); }
    }
  });
  el.append(notice, h('div', {class: 'panel'}, form));
  api('GET', `${nsPath(ns)}/policy`).then(fill, (e) =>
    notice.replaceChildren(h('p', {class: 'notice error'}, e.message)));
}

// ---- Routing, theme ------------------------------------------------------

function route() {
  leavePage();
  const parts = location.hash.replace(/^#\/?/, '').split('/');
  document.getElementById('signout').hidden = !sessionStorage.getItem('delayd-token');
  if (parts[0] === 'ns' && parts[1]) {
    namespacePage(decodeURIComponent(parts[1]), parts[2] || 'timers');
  } else {
    overview();
  }
  main().focus();
}

function setTheme(theme) {
  document.documentElement.dataset.theme = theme;
  localStorage.setItem('delayd-theme', theme);
}

window.addEventListener('hashchange', route);
document.addEventListener('DOMContentLoaded', () => {
  const saved = localStorage.getItem('delayd-theme');
  setTheme(saved || (matchMedia('(prefers-color-scheme: dark)').matches ? 'dark' : 'light'));
  document.getElementById('theme').addEventListener('click', () =>
    setTheme(document.documentElement.dataset.theme === 'dark' ? 'light' : 'dark'));
  document.getElementById('signout').addEventListener('click', () => {
    sessionStorage.removeItem('delayd-token');
    route();
  });
  route();
});
