// delayd's web console, part 2 of 3: a namespace's page and its tabs (the
// push target's is in push.js).
'use strict';

// ---- A namespace ---------------------------------------------------------

const TABS = [['timers', 'Timers'], ['events', 'Live events'],
              ['dead', 'Dead letters'], ['policy', 'Policy'], ['push', 'Push target']];

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
  ({timers: timersTab, events: eventsTab, dead: deadTab, policy: policyTab, push: pushTab}[tab] ||
   timersTab)(ns, content);
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
      card('Set / fired / acked', `${fmt(n.timersSet)} / ${fmt(num(n.timersExpired) + num(n.timersDrained))} / ${fmt(n.eventsAcked)}`),
      ...(num(n.pushFailuresInARow) ? [card('Push failing', `${fmt(n.pushFailuresInARow)} in a row`, 'bad',
                                             n.pushLastError)] : []));
    graph.replaceChildren(chart([
      {name: 'pending', color: 'c1', points: remember(`ns-pending:${ns}`, num(n.pendingTimers))},
      {name: 'ready + in flight', color: 'c2', points: remember(`ns-busy:${ns}`, num(n.readyEvents) + num(n.inFlightEvents))},
      {name: 'delivered/s', color: 'c3', points: r == null ? [] : remember(`ns-rate:${ns}`, r)},
    ]));
  });
}

async function setPaused(ns, paused, notice) {
  try {
    // Only `paused` changes (the update mask): the rest stays in force.
    await api('PUT', `${nsPath(ns)}/policy`, {policy: {paused}, updateMask: 'paused'});
    notice.replaceChildren(h('p', {class: 'notice ok'}, paused ? 'Paused: events wait until resumed.' : 'Resumed.'));
    const b = document.getElementById('pause');
    b.dataset.paused = String(paused);
    b.textContent = paused ? 'Resume' : 'Pause';
  } catch (e) { notice.replaceChildren(h('p', {class: 'notice error'}, e.message)); }
}

// Timers: search by key prefix, a page at a time.
function timersTab(ns, el) {
  const tokens = [''];  // page tokens, for going back
  const prefix = h('input', {id: 'prefix', placeholder: 'key prefix', 'aria-label': 'Key prefix', type: 'search'});
  const body = h('tbody');
  const info = h('span', {class: 'muted', id: 'page-info', role: 'status'});
  // (Buttons, not the form's submits: a click is a page, not a search.)
  const prev = h('button', {type: 'button', id: 'prev', class: 'ghost', disabled: true,
                            onclick: () => { tokens.pop(); tokens.pop(); load(); }}, '← Previous');
  const next = h('button', {type: 'button', id: 'next', class: 'ghost', disabled: true,
                            onclick: () => load()}, 'Next →');
  let asked = 0;  // only the latest request's answer is shown
  async function load() {
    const token = tokens[tokens.length - 1];
    const q = `pageSize=${PAGE}&keyPrefix=${enc(prefix.value)}${token ? `&pageToken=${enc(token)}` : ''}`;
    const mine = ++asked;
    prev.disabled = next.disabled = true;
    try {
      const r = await api('GET', `${nsPath(ns)}/timers?${q}`);
      if (mine !== asked) return;
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
      info.dataset.page = tokens.length;
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
    all.checked = false;
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
  const all = h('input', {type: 'checkbox', id: 'select-all', 'aria-label': 'Select every dead letter shown',
    onchange: () => body.querySelectorAll('input[type=checkbox]').forEach((c) => { c.checked = all.checked; })});
  el.append(h('div', {class: 'row'},
    h('button', {id: 'requeue', onclick: () => act('requeue', false)}, 'Requeue selected…'),
    h('button', {class: 'danger', id: 'purge', onclick: () => act('purge', false)}, 'Purge selected…'),
    h('button', {class: 'ghost', onclick: () => act('requeue', true)}, 'Requeue all…'),
    h('button', {class: 'ghost', onclick: () => act('purge', true)}, 'Purge all…')),
  notice, h('div', {class: 'panel'}, h('table', {id: 'dead'}, h('thead', {}, h('tr', {},
    h('th', {}, all),
    ['Event', 'Key', 'Attempts', 'Last error', 'Payload'].map((c) => h('th', {}, c)))), body)));
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
  ['dedupWindow', 'Dedup window', 'duration',
   'a create-only set of a key that fired or was removed is refused this long; 0s: none'],
];
const snake = (f) => f.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`);
// A field of policy `p` as the form shows it.
const shown = (p, f, kind) => (kind === 'duration' ? (p[f] || '0s') : String(p[f] ?? 0));

function policyTab(ns, el) {
  const notice = h('div', {role: 'status'});
  const form = h('form', {class: 'policy', id: 'policy', novalidate: true});
  let current = {};
  const inputs = {};
  const errors = {};  // each field's error, right below it
  for (const [f, label, kind, hint] of POLICY_FIELDS) {
    inputs[f] = h('input', {id: `p-${f}`, name: f, inputmode: kind === 'number' ? 'decimal' : 'text',
                            'aria-describedby': `h-${f} e-${f}`});
    errors[f] = h('span', {class: 'field-error error', id: `e-${f}`, hidden: true});
    form.append(h('label', {for: `p-${f}`}, label), inputs[f], h('span', {class: 'hint', id: `h-${f}`}, hint),
                errors[f]);
  }
  const clearErrors = () => {
    for (const [f] of POLICY_FIELDS) {
      inputs[f].removeAttribute('aria-invalid');
      errors[f].hidden = true;
      errors[f].textContent = '';
    }
  };
  form.append(h('div', {class: 'row actions'}, h('button', {type: 'submit'}, 'Save policy'),
    h('button', {type: 'button', class: 'ghost', onclick: () => fill(current)}, 'Undo changes')));
  // Nothing can be saved until the policy in force is on the form: a
  // save from an empty form would set every field to 0.
  const controls = () => form.querySelectorAll('input, button');
  controls().forEach((c) => { c.disabled = true; });
  form.setAttribute('aria-busy', 'true');
  function fill(p) {
    current = p;
    controls().forEach((c) => { c.disabled = false; });
    form.removeAttribute('aria-busy');
    for (const [f, , kind] of POLICY_FIELDS) inputs[f].value = shown(p, f, kind);
    clearErrors();
  }
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    // Only the fields the user changed are sent, named in the update mask:
    // what others changed meanwhile (a pause, say) stays in force.
    const policy = {};
    const changed = [];
    clearErrors();
    for (const [f, , kind] of POLICY_FIELDS) {
      const v = inputs[f].value.trim();
      if (v === shown(current, f, kind)) continue;
      policy[f] = kind === 'duration' ? toDuration(v) : (v === '' ? 0 : Number.isNaN(Number(v)) ? v : Number(v));
      changed.push(f);
    }
    if (changed.length === 0) {
      notice.replaceChildren(h('p', {class: 'notice ok'}, 'Nothing changed.'));
      return;
    }
    try {
      await api('PUT', `${nsPath(ns)}/policy`, {policy, updateMask: changed.join(',')});
      fill(await api('GET', `${nsPath(ns)}/policy`));
      notice.replaceChildren(h('p', {class: 'notice ok'}, 'Saved: the policy is in force.'));
    } catch (err) {
      // An error about a field shows below that field (and the field is
      // focused); any other above the form.
      const bad = POLICY_FIELDS.find(([f]) => err.message.includes(snake(f)) || err.message.includes(f));
      if (bad) {
        const f = bad[0];
        errors[f].textContent = err.message;
        errors[f].hidden = false;
        inputs[f].setAttribute('aria-invalid', 'true');
        inputs[f].focus();
        notice.replaceChildren();
      } else {
        notice.replaceChildren(h('p', {class: 'notice error', id: 'policy-error'}, err.message));
      }
    }
  });
  el.append(notice, h('div', {class: 'panel'}, form));
  api('GET', `${nsPath(ns)}/policy`).then(fill, (e) =>
    notice.replaceChildren(h('p', {class: 'notice error'}, e.message)));
}
