// delayd's web console, part 3 of 3: signing in, the namespaces, routing.
// One page over the HTTP/JSON API (/v1), no library.
// Routes (the URL's hash): #/ the namespaces; #/ns/NAME/TAB a namespace,
// TAB one of timers, events, dead, policy. Every figure comes from the API
// when the page shows it; rates and charts come from Stats read every 2 s
// while the page is open. Text from the daemon is set as text, never as
// markup.
'use strict';

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
  const rows = new Map();  // namespace → its row
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
        {name: 'delivered/s', color: 'c3', points: r == null ? remembered.get('delivered/s') || [] : remember('delivered/s', r)},
      ]));
    updateRows(body, rows, head.length, s.namespaces || []);
  });
}

const FIELDS = ['pendingTimers', 'readyEvents', 'inFlightEvents', 'retryingEvents',
                'deadLetters', 'workers'];

// The namespaces' rows, in name order, each updated in place: a row that
// stays keeps its elements, so focus and selection in it survive the
// refresh every 2 s.
function updateRows(body, rows, columns, namespaces) {
  const seen = new Set();
  const sorted = [...namespaces].sort((a, b) => (a.namespace < b.namespace ? -1 : 1));
  body.querySelectorAll('tr.empty').forEach((r) => r.remove());
  sorted.forEach((n, i) => {
    seen.add(n.namespace);
    let r = rows.get(n.namespace);
    if (!r) {
      r = h('tr', {'data-ns': n.namespace},
        h('td', {}, h('a', {href: `#/ns/${enc(n.namespace)}/timers`}, n.namespace)),
        FIELDS.map((f) => h('td', {class: 'num', 'data-field': f})),
        h('td', {class: 'num', 'data-field': 'rate'}), h('td', {'data-field': 'chart'}),
        h('td', {'data-field': 'state'}));
      rows.set(n.namespace, r);
    }
    if (body.children[i] !== r) body.insertBefore(r, body.children[i] || null);
    const cell = (f) => r.querySelector(`td[data-field="${f}"]`);
    const set = (f, text) => { if (cell(f).textContent !== text) cell(f).textContent = text; };
    for (const f of FIELDS) set(f, fmt(n[f]));
    const nr = rate(`ns:${n.namespace}`, num(n.eventsDelivered));
    set('rate', nr == null ? '–' : nr.toFixed(1));
    const spark = remember(`ns-pending:${n.namespace}`, num(n.pendingTimers));
    const c = chart([{name: 'pending', color: 'c1', points: spark}], {spark: true});
    c.querySelector('.legend').remove();
    cell('chart').replaceChildren(c);
    const state = n.paused ? 'paused' : 'delivering';
    if (cell('state').textContent !== state) {
      cell('state').replaceChildren(h('span', {class: `pill ${n.paused ? 'paused' : 'ok'}`}, state));
    }
  });
  for (const [name, r] of rows) {
    if (!seen.has(name)) { r.remove(); rows.delete(name); }
  }
  if (!body.children.length) {
    body.append(h('tr', {class: 'empty'}, h('td', {colspan: columns, class: 'muted'},
      'No namespace is in use yet.')));
  }
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
