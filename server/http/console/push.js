// delayd's web console: a namespace's push target (its tab). The form sends
// the target whole (update mask "push"); secrets and the client key are
// never shown: the ones set are named by id and kept unless the user drops
// them.
'use strict';

const PUSH_TEXT = [
  ['url', 'URL', 'https://host/path; where each event is sent'],
  ['contentType', 'Content type', 'of the payload; default application/octet-stream'],
  ['timeout', 'Timeout', 'for one attempt (e.g. 10s, 500ms)'],
  ['maxInFlight', 'Max in flight', 'requests at once; default 16'],
  ['pauseAfterFailures', 'Pause after', 'failed requests in a row, then the namespace pauses; 0: never'],
];

function pushTab(ns, el) {
  const notice = h('div', {role: 'status'});
  const form = h('form', {class: 'policy', id: 'push', novalidate: true});
  const inputs = {};
  for (const [f, label, hint] of PUSH_TEXT) {
    inputs[f] = h('input', {id: `t-${f}`, name: f, 'aria-describedby': `th-${f}`});
    form.append(h('label', {for: `t-${f}`}, label), inputs[f],
                h('span', {class: 'hint', id: `th-${f}`}, hint));
  }
  inputs.method = h('select', {id: 't-method'}, h('option', {}, 'POST'), h('option', {}, 'PUT'));
  inputs.headers = h('textarea', {id: 't-headers', rows: 3, 'aria-describedby': 'th-headers'});
  inputs.secret = h('input', {id: 't-secret', type: 'password', autocomplete: 'off',
                              'aria-describedby': 'th-secret'});
  inputs.caPem = h('textarea', {id: 't-ca', rows: 3, 'aria-describedby': 'th-ca'});
  inputs.retryClientErrors = h('input', {id: 't-retry4xx', type: 'checkbox'});
  inputs.followRedirects = h('input', {id: 't-redirects', type: 'checkbox'});
  const kept = h('div', {id: 't-kept'});
  const row = (id, label, input, hint) => form.append(h('label', {for: id}, label), input,
    h('span', {class: 'hint', id: `th-${id.slice(2)}`}, hint));
  row('t-method', 'Method', inputs.method, 'POST or PUT');
  row('t-headers', 'Headers', inputs.headers, 'one "Name: value" a line, sent with every request');
  row('t-secret', 'New secret', inputs.secret, 'whsec_…: signs every request (Standard Webhooks)');
  form.append(h('span', {}, 'Secrets set'), kept, h('span', {class: 'hint'},
    'unchecked ones are dropped on save'));
  row('t-ca', 'CA (PEM)', inputs.caPem, 'trusted instead of the system\'s CAs');
  row('t-retry4xx', 'Retry 4xx', inputs.retryClientErrors, 'else a 4xx makes a dead letter at once');
  row('t-redirects', 'Follow redirects', inputs.followRedirects, 'up to 5');
  const result = h('div', {id: 'push-result', role: 'status'});
  form.append(h('div', {class: 'row actions'},
    h('button', {type: 'submit'}, 'Save target'),
    h('button', {type: 'button', class: 'ghost', id: 'push-test', onclick: () => test()}, 'Send test event'),
    h('button', {type: 'button', class: 'danger', id: 'push-remove', onclick: () => remove()}, 'Remove target…')));
  // Nothing can be typed or saved until the target in force is on the
  // form: a load that lands later would overwrite what was typed.
  const controls = () => form.querySelectorAll('input, select, textarea, button');
  controls().forEach((c) => { c.disabled = true; });
  form.setAttribute('aria-busy', 'true');
  let current = {};
  function fill(p) {
    current = p.push || {};
    controls().forEach((c) => { c.disabled = false; });
    form.removeAttribute('aria-busy');
    for (const [f] of PUSH_TEXT) inputs[f].value = current[f] === undefined ? '' : String(current[f]);
    inputs.method.value = current.method || 'POST';
    inputs.headers.value = (current.headers || []).map((x) => `${x.name}: ${x.value}`).join('\n');
    inputs.secret.value = '';
    inputs.caPem.value = current.caPem || '';
    inputs.retryClientErrors.checked = !!current.retryClientErrors;
    inputs.followRedirects.checked = !!current.followRedirects;
    kept.replaceChildren(...(current.secretIds || []).map((id) => h('label', {class: 'inline'},
      h('input', {type: 'checkbox', checked: true, value: id, class: 'keep'}), ` ${id}`)));
    if (!(current.secretIds || []).length) kept.append(h('span', {class: 'muted'}, 'none'));
  }
  function target() {
    const headers = [];
    for (const line of inputs.headers.value.split('\n')) {
      const at = line.indexOf(':');
      if (line.trim() && at > 0) headers.push({name: line.slice(0, at).trim(), value: line.slice(at + 1).trim()});
    }
    const t = {url: inputs.url.value.trim(), method: inputs.method.value, headers,
               contentType: inputs.contentType.value.trim(), caPem: inputs.caPem.value,
               retryClientErrors: inputs.retryClientErrors.checked,
               followRedirects: inputs.followRedirects.checked,
               secretIds: [...kept.querySelectorAll('input.keep:checked')].map((c) => c.value),
               secrets: inputs.secret.value.trim() ? [inputs.secret.value.trim()] : [],
               hasClientKey: !!current.hasClientKey, clientCertPem: current.clientCertPem || ''};
    if (inputs.timeout.value.trim()) t.timeout = toDuration(inputs.timeout.value.trim());
    if (inputs.maxInFlight.value.trim()) t.maxInFlight = Number(inputs.maxInFlight.value);
    if (inputs.pauseAfterFailures.value.trim()) t.pauseAfterFailures = Number(inputs.pauseAfterFailures.value);
    return t;
  }
  const say = (ok, text) => notice.replaceChildren(h('p', {class: `notice ${ok ? 'ok' : 'error'}`,
                                                       id: ok ? 'push-ok' : 'push-error'}, text));
  form.addEventListener('submit', async (e) => {
    e.preventDefault();
    try {
      await api('PUT', `${nsPath(ns)}/policy`, {policy: {push: target()}, updateMask: 'push'});
      fill(await api('GET', `${nsPath(ns)}/policy`));
      say(true, 'Saved: events go to the target from now on.');
    } catch (err) { say(false, err.message); }
  });
  async function test() {
    try {
      const r = await api('POST', `${nsPath(ns)}/policy:testPush`, {});
      result.replaceChildren(h('p', {class: `notice ${r.outcome === 'ack' ? 'ok' : 'error'}`},
        `Test event: ${r.outcome}` + (r.httpStatus ? `, HTTP ${r.httpStatus}` : ', no answer') +
        (r.error ? ` (${r.error})` : '') + ` in ${r.duration}.`));
    } catch (err) { result.replaceChildren(h('p', {class: 'notice error'}, err.message)); }
  }
  async function remove() {
    if (!await confirmed(`Remove the push target of "${ns}"? Its events then wait for workers.`)) return;
    try {
      await api('PUT', `${nsPath(ns)}/policy`, {policy: {}, updateMask: 'push'});
      fill(await api('GET', `${nsPath(ns)}/policy`));
      say(true, 'Removed: events wait for workers.');
    } catch (err) { say(false, err.message); }
  }
  el.append(notice, result, h('div', {class: 'panel'}, form));
  api('GET', `${nsPath(ns)}/policy`).then(fill, (e) => say(false, e.message));
}
