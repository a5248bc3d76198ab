// labeldp console: every value shown comes from the labels party's API, called with the bearer
// token typed into the login form and kept in this tab's sessionStorage only. Amounts (epsilon,
// budgets) are displayed exactly as the API gives them (String(value)), never added in floats.
// Text goes into the page through textContent only (never innerHTML).
'use strict';

(() => {
  const TOKEN_KEY = 'labeldp.console.token';
  const SVG_NS = 'http://www.w3.org/2000/svg';
  const $ = (id) => document.getElementById(id);
  const state = { role: null, datasets: [], ledgerCursors: [0], ledgerNext: null, brokenSeq: null };

  // ---- API ---------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, body) {
      const detail = body && typeof body.detail === 'string' ? body.detail : `HTTP ${status}`;
      super(detail);
      this.status = status;
      this.errors = body && Array.isArray(body.errors) ? body.errors : [];
    }
    describe() {
      const fields = this.errors
        .filter((e) => e && e.message && e.message !== this.message)
        .map((e) => `${e.field}: ${e.message}`);
      return `${this.message} (HTTP ${this.status})${fields.length ? ' — ' + fields.join('; ') : ''}`;
    }
  }

  function token() {
    return sessionStorage.getItem(TOKEN_KEY);
  }

  async function api(path, { method = 'GET', body, accept = 'application/json', bearer } = {}) {
    const headers = { Accept: accept, Authorization: `Bearer ${bearer || token() || ''}` };
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    const response = await fetch(new URL(path, document.baseURI), {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'omit',
      cache: 'no-store',
    });
    if (!response.ok) {
      let parsed = null;
      try { parsed = await response.json(); } catch (_) { parsed = null; }
      const error = new ApiError(response.status, parsed);
      if (response.status === 401 && !bearer) signOut(`Your token was refused: ${error.message}. Sign in again.`);
      throw error;
    }
    return accept === 'application/json' ? response.json() : response.text();
  }

  /** ``api(path, options)``, or null once ``fail`` has shown why (the caller then stops). */
  async function apiOrFail(path, options) {
    try {
      return await api(path, options);
    } catch (error) {
      fail(error);
      return null;
    }
  }

  const loads = {};
  // Begin loading a pane; the check returned turns false once a later load of that pane begins,
  // so a superseded response never renders (fast clicks must not end on an older page).
  function beginLoad(pane) {
    const load = (loads[pane] = (loads[pane] || 0) + 1);
    return () => loads[pane] === load;
  }

  // ---- small DOM helpers -------------------------------------------------------------------

  function el(tag, text, attrs = {}) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, value);
    return node;
  }

  function row(cells) {
    const tr = document.createElement('tr');
    for (const cell of cells) tr.append(cell instanceof Node ? cell : el('td', cell));
    return tr;
  }

  function td(content, className) {
    const cell = el('td', content instanceof Node ? undefined : content);
    if (content instanceof Node) cell.append(content);
    if (className) cell.className = className;
    return cell;
  }

  function show(text) {
    $('notice').textContent = text;
    $('notice').hidden = !text;
  }

  function fail(error) {
    show(error instanceof ApiError ? error.describe() : `Error: ${error.message || error}`);
  }

  function amount(value) {
    return value === null || value === undefined ? '—' : String(value);
  }

  function shortHash(value) {
    return value ? `${value.slice(0, 12)}…` : '—';
  }

  // Who acted: the named principal with its role, or the role of a role-only token.
  function who(record) {
    return record.actor ? `${record.actor} (${record.actor_role})` : record.actor_role;
  }

  function when(iso) {
    return iso ? iso.replace('T', ' ').replace(/\.\d+Z$/, 'Z') : '—';
  }

  function definitionList(pairs) {
    const dl = document.createElement('dl');
    for (const [term, value] of pairs) {
      dl.append(el('dt', term));
      const dd = el('dd', value instanceof Node ? undefined : value);
      if (value instanceof Node) dd.append(value);
      dl.append(dd);
    }
    return dl;
  }

  // ---- session -----------------------------------------------------------------------------

  async function signIn(event) {
    event.preventDefault();
    const input = $('token');
    const candidate = input.value.trim();
    $('login-error').hidden = true;
    if (!candidate) return;
    try {
      const who = await api('v1/whoami', { bearer: candidate });
      sessionStorage.setItem(TOKEN_KEY, candidate);
      input.value = '';
      await start(who.role, who.actor);
    } catch (error) {
      const message = error instanceof ApiError && error.status === 401
        ? 'That token was not accepted (401): check it and try again. No data is shown without a valid token.'
        : `Could not sign in: ${error instanceof ApiError ? error.describe() : error.message}`;
      $('login-error').textContent = message;
      $('login-error').hidden = false;
      input.focus();
    }
  }

  function signOut(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    state.role = null;
    for (const id of ['datasets-body', 'ledger-body', 'timeline', 'verify-problems']) $(id).replaceChildren();
    $('release-detail').replaceChildren(el('p', 'Choose a release to see its public parameters and noisy histogram.', { class: 'muted' }));
    $('preview-result').replaceChildren();
    $('verify-result').textContent = '';
    $('verify-result').className = 'verdict';
    $('ledger-csv').hidden = true;
    for (const section of document.querySelectorAll('section.view')) section.hidden = true;
    $('views').hidden = true;
    $('session').hidden = true;
    $('login').hidden = false;
    show('');
    if (message) {
      $('login-error').textContent = message;
      $('login-error').hidden = false;
    }
  }

  async function start(role, actor) {
    state.role = role;
    $('role-name').textContent = actor ? `${actor} (${role})` : role;
    $('login').hidden = true;
    $('session').hidden = false;
    $('views').hidden = false;
    for (const button of document.querySelectorAll('#views button')) {
      const roles = button.dataset.roles;
      button.hidden = Boolean(roles) && !roles.split(' ').includes(role);
    }
    const first = location.hash.slice(1) || 'datasets';
    if (first !== 'datasets') await loadDatasets(); // the other views' dataset choices
    await openView(first, false);
  }

  async function openView(name, focus = true) {
    const button = document.querySelector(`#views button[data-view="${CSS.escape(name)}"]`);
    if (!button || button.hidden) name = 'datasets';
    for (const b of document.querySelectorAll('#views button')) {
      if (b.dataset.view === name) b.setAttribute('aria-current', 'page');
      else b.removeAttribute('aria-current');
    }
    for (const section of document.querySelectorAll('section.view')) section.hidden = section.id !== `view-${name}`;
    if (location.hash !== `#${name}`) history.replaceState(null, '', `#${name}`);
    show('');
    if (name === 'datasets') await loadDatasets();
    if (name === 'releases') await loadReleases();
    if (name === 'ledger') await loadLedger();
    if (focus) {
      const heading = $(`view-${name}`).querySelector('h2');
      heading.tabIndex = -1;
      heading.focus();
    }
  }

  // ---- datasets ----------------------------------------------------------------------------

  async function loadDatasets() {
    const current = beginLoad('datasets');
    const body = await apiOrFail('v1/datasets');
    if (body === null || !current()) return;
    state.datasets = body.datasets;
    const tbody = $('datasets-body');
    tbody.replaceChildren();
    for (const item of state.datasets) {
      const tr = row([
        td(linkButton(item.name, () => openReleases(item.name), `Releases of ${item.name}`)),
        td(item.state),
        td(budgetBar(item)),
        td(amount(item.epsilon_spent), 'num'),
        td(amount(item.epsilon_left), 'num'),
        td(amount(item.epsilon_budget), 'num'),
        td(
          item.n_model_releases
            ? `${item.n_releases} + ${item.n_model_releases} model`
            : String(item.n_releases),
          'num',
        ),
        td(when(item.last_release)),
        td(`[${item.label_min}, ${item.label_max}]`),
      ]);
      tr.dataset.testid = `dataset-${item.name}`;
      tbody.append(tr);
    }
    $('datasets-empty').hidden = state.datasets.length > 0;
    fillDatasetSelects();
  }

  function linkButton(text, onClick, label) {
    const button = el('button', text, { type: 'button', class: 'linkish' });
    if (label) button.setAttribute('aria-label', label);
    button.addEventListener('click', onClick);
    return button;
  }

  function budgetBar(item) {
    // The width is drawing only; the numbers shown are the API's strings.
    const budget = Number(item.epsilon_budget);
    const spent = Number(item.epsilon_spent);
    const share = budget > 0 ? Math.min(Math.max(spent / budget, 0), 1) : 0;
    const wrap = el('div');
    const bar = el('div', undefined, {
      class: 'bar',
      role: 'img',
      'aria-label': `spent ${amount(item.epsilon_spent)} of ${amount(item.epsilon_budget)}`,
    });
    const fill = el('div', undefined, { class: share >= 1 ? 'bar-fill full' : 'bar-fill' });
    fill.style.width = `${(share * 100).toFixed(2)}%`; // CSSOM, allowed by the CSP
    bar.append(fill);
    wrap.append(bar, el('span', `${(share * 100).toFixed(1)}% used`, { class: 'bar-label' }));
    return wrap;
  }

  function fillDatasetSelects() {
    for (const select of document.querySelectorAll('select.dataset-select')) {
      const previous = select.value;
      select.replaceChildren();
      if (select.dataset.any) select.append(el('option', select.dataset.any, { value: '' }));
      for (const item of state.datasets) select.append(el('option', item.name, { value: item.name }));
      if ([...select.options].some((o) => o.value === previous)) select.value = previous;
    }
  }

  // ---- releases ----------------------------------------------------------------------------

  async function openReleases(name) {
    $('releases-dataset').value = name;
    await openView('releases');
  }

  async function loadReleases() {
    const current = beginLoad('releases');
    const name = $('releases-dataset').value;
    const list = $('timeline');
    list.replaceChildren();
    $('timeline-empty').hidden = true;
    if (!name) return;
    const path = `v1/datasets/${encodeURIComponent(name)}`;
    let labels;
    let models;
    try {
      [labels, models] = await Promise.all([api(`${path}/releases`), api(`${path}/model-releases`)]);
    } catch (error) {
      if (current()) fail(error);
      return;
    }
    if (!current()) return;
    // One timeline, newest first: label releases and model releases (ISO UTC times sort as text).
    const items = [
      ...labels.releases.map((item) => ({ ...item, kind: 'release' })),
      ...models.model_releases.map((item) => ({ ...item, kind: 'model-release' })),
    ].sort((a, b) => (a.created < b.created ? 1 : a.created > b.created ? -1 : 0));
    for (const item of items) {
      const button = el('button', undefined, { type: 'button' });
      const charged = item.delta ? `ε ${amount(item.epsilon)}, δ ${amount(item.delta)}` : `ε ${amount(item.epsilon)}`;
      const what = item.kind === 'release' ? item.mechanism : `model ${item.estimator} (${item.privacy})`;
      button.append(
        el('span', when(item.created), { class: 'when' }),
        el('strong', charged),
        document.createTextNode(` · ${what} · n ${item.n}`),
      );
      button.addEventListener('click', () => {
        for (const b of list.querySelectorAll('button')) b.removeAttribute('aria-current');
        button.setAttribute('aria-current', 'true');
        if (item.kind === 'release') showRelease(item.id);
        else showModelRelease(item);
      });
      const li = el('li');
      li.dataset.testid = `${item.kind}-${item.id}`;
      li.append(button);
      list.append(li);
    }
    $('timeline-empty').hidden = items.length > 0;
  }

  function showModelRelease(item) {
    // Everything shown is the listing's public metadata; the model message itself is the
    // publisher's and the advertiser's (GET /v1/model-releases/{id}), not the operator's.
    beginLoad('release-detail');  // a label release's detail still loading must not replace this
    const pairs = [
      ['Model release', el('code', item.id)],
      ['Dataset', item.dataset],
      ['Created (UTC)', when(item.created)],
      ['Released by', who(item)],
      ['Estimator', `${item.estimator} (${item.privacy === 'eptr' ? 'ePTR' : 'label DP'})`],
      ['ε', amount(item.epsilon)],
      ['δ', amount(item.delta)],
      ['Public features', el('code', item.features_id)],
      ['Examples (n)', String(item.n)],
      ['Message sha256', el('code', item.message_sha256)],
    ];
    $('release-detail').replaceChildren(el('h3', `Model release ${item.id}`), definitionList(pairs));
  }

  async function showRelease(id) {
    const current = beginLoad('release-detail');
    const detail = $('release-detail');
    let meta;
    let header;
    try {
      [meta, header] = await Promise.all([
        api(`v1/releases/${encodeURIComponent(id)}`),
        api(`v1/releases/${encodeURIComponent(id)}/header`),
      ]);
    } catch (error) {
      fail(error);
      return;
    }
    const listed = await api(`v1/datasets/${encodeURIComponent(meta.dataset)}/releases`)
      .then((b) => b.releases.find((r) => r.id === id))
      .catch(() => undefined);
    if (!current()) return;
    const pairs = [
      ['Release', el('code', meta.id)],
      ['Dataset', meta.dataset],
      ['Created (UTC)', when(meta.created)],
      ['Released by', listed ? who(listed) : '—'],
      ['Mechanism', meta.requested_mechanism && meta.requested_mechanism !== meta.mechanism
        ? `${meta.mechanism} (requested: ${meta.requested_mechanism})` : meta.mechanism],
      ['ε₁ (histogram, DP mean)', amount(meta.epsilon1)],
      ['ε₂ (randomizer)', amount(meta.epsilon2)],
      ['ε total', amount(meta.epsilon)],
    ];
    if (meta.delta !== undefined || header.delta !== undefined) pairs.push(['δ', amount(meta.delta ?? header.delta)]);
    pairs.push(
      ['Examples (n)', String(meta.n)],
      ['Histogram bins', header.histogram ? String(header.histogram.probs.length) : '—'],
      ['Label bounds', `[${header.label_min}, ${header.label_max}], default ${header.default_label}`],
    );
    if (header.label_mean !== null && header.label_mean !== undefined) {
      pairs.push(['DP label mean', `${header.label_mean} (ε ${amount(header.label_mean_epsilon)})`]);
    }
    pairs.push(
      ['Message sha256', el('code', meta.message_sha256)],
      ['Binary sha256', el('code', meta.binary_sha256)],
    );
    const params = el('table', undefined, { class: 'data' });
    params.append(el('caption', 'Public parameters of the mechanism (message header)'));
    for (const [key, value] of Object.entries(header.params || {})) {
      params.append(row([el('th', key, { scope: 'row' }), td(typeof value === 'object' ? JSON.stringify(value) : String(value))]));
    }
    const ledgerLink = linkButton('Ledger entries of this release', () => {
      $('ledger-filters').reset();
      $('f-release').value = id;
      openView('ledger');
    });
    detail.replaceChildren(el('h3', `Release ${id}`), definitionList(pairs));
    if (header.histogram) detail.append(histogramPlot(header));
    detail.append(params);
    if (state.role === 'operator') detail.append(ledgerLink);
  }

  function histogramPlot(header) {
    // The noisy (epsilon1-DP) histogram is public: it is part of the message header.
    const { edges, probs } = header.histogram;
    const width = 760;
    const height = 260;
    const pad = { left: 52, right: 16, top: 16, bottom: 40 };
    const lo = edges[0];
    const hi = edges[edges.length - 1];
    const top = Math.max(...probs, 1e-12);
    const x = (v) => pad.left + ((v - lo) / (hi - lo)) * (width - pad.left - pad.right);
    const y = (p) => pad.top + (1 - p / top) * (height - pad.top - pad.bottom);
    const svg = document.createElementNS(SVG_NS, 'svg');
    svg.setAttribute('viewBox', `0 0 ${width} ${height}`);
    svg.setAttribute('class', 'histogram');
    svg.setAttribute('role', 'img');
    svg.setAttribute('aria-labelledby', 'hist-title');
    const title = document.createElementNS(SVG_NS, 'title');
    title.id = 'hist-title';
    title.textContent = `Noisy label histogram: ${probs.length} bins from ${lo} to ${hi}`;
    svg.append(title);
    const add = (tag, attrs, text) => {
      const node = document.createElementNS(SVG_NS, tag);
      for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
      if (text !== undefined) node.textContent = text;
      svg.append(node);
      return node;
    };
    probs.forEach((p, i) => {
      const x0 = x(edges[i]);
      const x1 = x(edges[i + 1]);
      const rect = add('rect', { class: 'bin', x: x0, y: y(p), width: Math.max(x1 - x0 - 0.5, 0.5), height: y(0) - y(p) });
      const tip = document.createElementNS(SVG_NS, 'title');
      tip.textContent = `[${edges[i]}, ${edges[i + 1]}): ${p}`;
      rect.append(tip);
    });
    add('line', { x1: pad.left, y1: y(0), x2: width - pad.right, y2: y(0) });
    add('line', { x1: pad.left, y1: pad.top, x2: pad.left, y2: y(0) });
    add('text', { x: pad.left, y: height - 20, 'text-anchor': 'middle' }, String(lo));
    add('text', { x: width - pad.right, y: height - 20, 'text-anchor': 'end' }, String(hi));
    add('text', { x: (pad.left + width - pad.right) / 2, y: height - 6, 'text-anchor': 'middle' }, 'label value');
    add('text', { x: pad.left - 6, y: pad.top + 10, 'text-anchor': 'end' }, top.toPrecision(2));
    add('text', { x: pad.left - 6, y: y(0), 'text-anchor': 'end' }, '0');
    const figure = el('figure');
    figure.append(svg, el('figcaption', 'Noisy histogram of the labels (ε₁-DP, public in the message header); hover a bar for its probability.', { class: 'muted' }));
    return figure;
  }

  // ---- ledger ------------------------------------------------------------------------------

  function ledgerQuery() {
    const form = $('ledger-filters');
    const params = new URLSearchParams();
    for (const key of ['dataset', 'release_id', 'kind']) {
      const value = form.elements[key].value.trim();
      if (value) params.set(key, value);
    }
    for (const key of ['since', 'until']) {
      const value = form.elements[key].value;
      if (value) {
        const instant = new Date(value); // datetime-local: the browser's local time
        if (!Number.isNaN(instant.getTime())) params.set(key, instant.toISOString());
      }
    }
    return params;
  }

  async function loadLedger() {
    const current = beginLoad('ledger');
    const params = ledgerQuery();
    const cursor = state.ledgerCursors[state.ledgerCursors.length - 1];
    params.set('limit', $('f-limit').value);
    if (cursor) params.set('after', String(cursor));
    const page = await apiOrFail(`v1/ledger?${params}`);
    if (page === null || !current()) return;
    const tbody = $('ledger-body');
    tbody.replaceChildren();
    for (const entry of page.entries) {
      const tr = row([
        td(String(entry.seq), 'num'),
        td(when(entry.time)),
        td(entry.dataset),
        td(entry.release_id || '—', 'hash'),
        td(entry.kind),
        td(entry.mechanism || '—'),
        td(amount(entry.epsilon), 'num'),
        td(who(entry)),
        td(shortHash(entry.message_sha256), 'hash'),
        td(shortHash(entry.entry_hash), 'hash'),
      ]);
      tr.dataset.seq = String(entry.seq);
      tr.cells[9].title = entry.entry_hash;
      if (entry.message_sha256) tr.cells[8].title = entry.message_sha256;
      if (entry.seq === state.brokenSeq) tr.className = 'broken';
      tbody.append(tr);
    }
    state.ledgerNext = page.next_after;
    const number = state.ledgerCursors.length;
    $('ledger-page').textContent = page.entries.length
      ? `Page ${number}: entries ${page.entries[0].seq}–${page.entries[page.entries.length - 1].seq}`
      : `Page ${number}: no entry matches`;
    $('ledger-caption').textContent = `Ledger entries in chain order (head hash ${shortHash(page.head_hash)})`;
    $('ledger-prev').disabled = number <= 1;
    $('ledger-next').disabled = page.next_after === null;
  }

  async function exportCsv() {
    const params = ledgerQuery();
    params.set('format', 'csv');
    const text = await apiOrFail(`v1/ledger?${params}`, { accept: 'text/csv' });
    if (text === null) return;
    const link = $('ledger-csv');
    if (link.href.startsWith('blob:')) URL.revokeObjectURL(link.href);
    link.href = URL.createObjectURL(new Blob([text], { type: 'text/csv' }));
    const rows = Math.max(text.split('\n').filter(Boolean).length - 1, 0);
    link.textContent = `Download ledger.csv (${rows} ${rows === 1 ? 'entry' : 'entries'}, the filtered view)`;
    link.hidden = false;
    link.click();
  }

  // ---- verify ------------------------------------------------------------------------------

  async function verifyChain() {
    const current = beginLoad('verify');
    const result = $('verify-result');
    const problems = $('verify-problems');
    result.className = 'verdict';
    result.textContent = 'Verifying…';
    problems.replaceChildren();
    $('verify-show').hidden = true;
    let report;
    try {
      report = await api('v1/ledger/verify');
    } catch (error) {
      if (!current()) return;
      result.textContent = '';
      fail(error);
      return;
    }
    if (!current()) return;
    state.brokenSeq = report.first_break ? report.first_break.seq : null;
    if (report.ok) {
      result.className = 'verdict ok';
      result.textContent = `OK — the chain verifies: ${report.entries} entries, head hash ${report.head_hash}`;
      return;
    }
    result.className = 'verdict bad';
    result.textContent = report.first_break
      ? `FAILED — the chain breaks at entry seq ${report.first_break.seq}: ${report.first_break.reason}. ${report.problems.length} problem(s) found.`
      : `FAILED — ${report.problems.length} problem(s); the chain's links hold.`;
    for (const problem of report.problems) problems.append(el('li', problem));
    if (report.first_break) $('verify-show').hidden = false;
  }

  function showBrokenEntry() {
    $('ledger-filters').reset();
    state.ledgerCursors = [Math.max(state.brokenSeq - 1, 0)];
    openView('ledger').then(() => {
      const broken = document.querySelector('#ledger-body tr.broken');
      if (broken) broken.scrollIntoView({ block: 'center' });
    });
  }

  // ---- preview -----------------------------------------------------------------------------

  async function preview(event) {
    event.preventDefault();
    const current = beginLoad('preview');
    const out = $('preview-result');
    out.replaceChildren();
    const form = $('preview-form');
    const text = form.elements.epsilon.value.trim();
    if (!/^(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(text) || Number(text) <= 0) {
      out.append(el('p', 'Epsilon must be a decimal number greater than 0.', { class: 'error', role: 'alert' }));
      return;
    }
    const name = form.elements.dataset.value;
    // The epsilon goes as the decimal string typed (the API takes exact decimals): no float.
    const body = { epsilon: text, mechanism: form.elements.mechanism.value, dry_run: true };
    let plan;
    try {
      plan = await api(`v1/datasets/${encodeURIComponent(name)}/releases`, { method: 'POST', body });
    } catch (error) {
      if (!current()) return;
      out.append(el('p', `The service refused the preview: ${error instanceof ApiError ? error.describe() : error.message}`, { class: 'error', role: 'alert' }));
      return;
    }
    if (!current()) return;
    if (!plan || plan.dry_run !== true) {
      out.append(el('p', 'Unexpected answer: the service did not treat this as a dry run.', { class: 'error', role: 'alert' }));
      return;
    }
    const p = plan.plan || {};
    const b = plan.budget || {};
    out.append(
      el('h3', `A release of ε ${amount(b.requested ?? p.epsilon)} on ${plan.dataset} (n = ${plan.n})`),
    );
    if (b.fits === false) {
      const why = `It does not fit the budget: ${amount(b.spent)} of ${amount(b.budget)} is spent and this release asks for ${amount(b.requested)}.`;
      out.append(el('p', `${why} Choose a smaller epsilon, or ask the operator for a top-up.`, { class: 'error', role: 'alert' }));
    }
    out.append(
      definitionList([
        ['Budget', amount(b.budget)],
        ['Spent so far', amount(b.spent)],
        ['This release would spend', amount(b.requested)],
        ['Left after it', b.fits === false ? '— (over budget)' : amount(b.left_after)],
        ['Mechanism (requested)', p.mechanism ?? '—'],
        ['Options', p.options ? JSON.stringify(p.options) : '—'],
        ['ε₁ / ε₂', `${amount(p.epsilon1)} / ${amount(p.epsilon2)}`],
        ['Histogram ε, DP-mean ε, randomizer ε', `${amount(p.histogram_epsilon)}, ${amount(p.label_mean_epsilon)}, ${amount(p.randomizer_epsilon)}`],
        ['Bins, model dimension', `${amount(p.bins)}, ${amount(p.model_dim)}`],
      ]),
    );
    if (Array.isArray(p.explanation) && p.explanation.length) {
      const list = el('ul', undefined, { class: 'plan-explain' });
      for (const line of p.explanation) list.append(el('li', line));
      out.append(el('h3', 'Why'), list);
    }
    out.append(el('p', 'Nothing was spent.', { class: 'muted' }));
  }

  // ---- wiring ------------------------------------------------------------------------------

  document.addEventListener('DOMContentLoaded', () => {
    $('login-form').addEventListener('submit', signIn);
    $('sign-out').addEventListener('click', () => signOut());
    for (const button of document.querySelectorAll('#views button')) {
      button.addEventListener('click', () => openView(button.dataset.view));
    }
    $('datasets-refresh').addEventListener('click', loadDatasets);
    $('releases-dataset').addEventListener('change', () => {
      $('release-detail').replaceChildren(el('p', 'Choose a release to see its public parameters and noisy histogram.', { class: 'muted' }));
      loadReleases();
    });
    $('ledger-filters').addEventListener('submit', (event) => {
      event.preventDefault();
      state.ledgerCursors = [0];
      loadLedger();
    });
    $('ledger-filters').addEventListener('reset', () => {
      state.ledgerCursors = [0];
      // The Reset button reloads after the form has cleared its fields; showBrokenEntry's
      // reset (the ledger still hidden) leaves the one load to openView.
      if (!$('view-ledger').hidden) setTimeout(loadLedger, 0);
    });
    $('ledger-next').addEventListener('click', () => {
      if (state.ledgerNext === null) return;
      state.ledgerCursors.push(state.ledgerNext);
      state.ledgerNext = null; // until the page answers: a second click must not push it again
      loadLedger();
    });
    $('ledger-prev').addEventListener('click', () => {
      if (state.ledgerCursors.length > 1) state.ledgerCursors.pop();
      loadLedger();
    });
    $('ledger-export').addEventListener('click', exportCsv);
    $('verify-chain').addEventListener('click', verifyChain);
    $('verify-show').addEventListener('click', showBrokenEntry);
    $('preview-form').addEventListener('submit', preview);
    const saved = token();
    if (!saved) return;
    api('v1/whoami')
      .then((who) => start(who.role, who.actor))
      .catch((error) => {
        if (!(error instanceof ApiError && error.status === 401)) fail(error);
      });
  });
})();
