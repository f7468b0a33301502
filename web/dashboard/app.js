// Vigil dashboard: live over one EventSource (GET api/v1/events), actions
// through the admin API with the session cookie. No build step, no
// dependencies; every value reaches the page through textContent.
'use strict';
(() => {
  const TOPICS = ['system:health', 'host:*:status', 'queue:status', 'queue:*:status', 'worker:*:status', 'queue:jobs'];
  const TYPES = ['snapshot', 'worker_update', 'queue_update', 'job_update', 'host_update', 'health_update', 'action', 'reset'];
  const LOG_MAX = 200;
  const RUNNING = new Set(['starting', 'healthy', 'stopping']);
  const DONE = new Set(['done', 'error', 'aborted:shutdown', 'requeued:stale', 'toxic']);

  const state = {
    workers: new Map(), // component → worker view
    queues: new Map(), // queue → stats
    total: null,
    hosts: new Map(), // host id → host
    pools: new Map(), // queue → size
    health: null,
    jobs: new Map(), // component → current job (from job events)
    lastId: '',
  };
  let es = null;
  let retryMs = 1000;
  let clearOnSnapshot = true;

  const $ = (sel) => document.querySelector(sel);
  const el = (tag, props = {}, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(props)) {
      if (k === 'class') e.className = v;
      else if (k === 'data') for (const [dk, dv] of Object.entries(v)) e.dataset[dk] = dv;
      else if (k === 'on') for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
      else e[k] = v;
    }
    for (const kid of kids) if (kid != null) e.append(kid);
    return e;
  };
  const td = (text, cls) => el('td', { class: cls || '', textContent: text == null ? '' : String(text) });
  const badge = (text, cls) => el('span', { class: 'status s-' + (cls || text), textContent: text });

  // ---- the event stream ----

  function connect() {
    const q = new URLSearchParams();
    TOPICS.forEach((t) => q.append('topic', t));
    if (state.lastId) q.set('last_event_id', state.lastId);
    clearOnSnapshot = !state.lastId;
    es = new EventSource('api/v1/events?' + q.toString());
    setConn('connecting');
    es.onopen = () => { setConn('live'); retryMs = 1000; };
    es.onerror = () => {
      if (es.readyState === EventSource.CLOSED) {
        // An HTTP error (401, 503): the browser does not retry by itself.
        es.close();
        setConn('reconnecting');
        checkReadAuth();
        setTimeout(connect, retryMs);
        retryMs = Math.min(retryMs * 2, 15000);
      } else {
        setConn('reconnecting'); // the browser retries with Last-Event-ID
      }
    };
    for (const t of TYPES) es.addEventListener(t, onEvent);
  }

  function setConn(s) {
    const c = $('#conn');
    c.dataset.state = s;
    c.textContent = s;
  }

  function onEvent(ev) {
    let e;
    try { e = JSON.parse(ev.data); } catch { return; }
    if (ev.lastEventId) state.lastId = ev.lastEventId;
    if (ev.type === 'reset') {
      clearOnSnapshot = true;
      log(e, 'reset: ' + ((e.data && e.data.reason) || 'a fresh snapshot follows'));
      return;
    }
    if (ev.type === 'snapshot' && clearOnSnapshot) {
      clearOnSnapshot = false;
      state.workers.clear(); state.queues.clear(); state.hosts.clear(); state.jobs.clear();
      state.total = null;
    }
    apply(e, ev.type);
    if (ev.type !== 'snapshot') log(e);
    render();
  }

  function apply(e, type) {
    const topic = e.topic || '';
    const parts = topic.split(':');
    if (topic === 'system:health') {
      if (e.data) state.health = e.data;
    } else if (parts[0] === 'worker' && e.worker) {
      state.workers.set(e.worker.component, e.worker);
      if (!RUNNING.has(e.worker.status)) state.jobs.delete(e.worker.component);
    } else if (topic === 'queue:status') {
      if (e.data && (type === 'snapshot' || type === 'queue_update')) state.total = e.data;
      if (type === 'action') refreshQueues();
    } else if (parts[0] === 'queue' && parts.length === 3 && parts[2] === 'status') {
      if (e.data && (type === 'snapshot' || type === 'queue_update')) state.queues.set(parts[1], e.data);
      if (type === 'action' && e.action) {
        const s = state.queues.get(parts[1]);
        if (s && e.action.action === 'pause') s.paused = true;
        refreshQueues(); // resume may leave it paused by the global pause
      }
    } else if (topic === 'queue:jobs' && e.data && type === 'job_update') {
      const j = e.data;
      if (!j.component) return;
      if (j.state === 'processing' || j.state === 'progress') {
        state.jobs.set(j.component, j.id + (j.progress != null ? ' (' + Math.round(j.progress) + '%)' : ''));
      } else if (DONE.has(j.state) && (state.jobs.get(j.component) || '').startsWith(j.id)) {
        state.jobs.delete(j.component);
      }
    } else if (parts[0] === 'host') {
      const id = parts.slice(1, -1).join(':');
      if (type === 'snapshot' && e.data) state.hosts.set(id, e.data);
      else refreshHosts();
    }
  }

  // ---- reads that complete what events carry ----

  let hostsTimer = 0;
  function refreshHosts() {
    clearTimeout(hostsTimer);
    hostsTimer = setTimeout(async () => {
      const b = await getJSON('api/v1/hosts');
      if (b && b.hosts) { state.hosts.clear(); b.hosts.forEach((h) => state.hosts.set(h.id, h)); render(); }
    }, 200);
  }

  let queuesTimer = 0;
  function refreshQueues() {
    clearTimeout(queuesTimer);
    queuesTimer = setTimeout(async () => {
      const b = await getJSON('api/v1/queues');
      if (!b) return;
      for (const q of b.queues || []) state.queues.set(q.queue, Object.assign(state.queues.get(q.queue) || {}, q));
      render();
    }, 100);
  }

  async function refreshPools() {
    const b = await getJSON('api/v1/pools');
    if (b && b.pools) { b.pools.forEach((p) => state.pools.set(p.queue, p.size)); render(); }
  }

  // Heartbeats are not events (one per worker per interval would drown
  // the stream): their time is read every few seconds.
  async function refreshHeartbeats() {
    const b = await getJSON('api/v1/workers');
    if (!b || !b.workers) return;
    for (const w of b.workers) {
      const cur = state.workers.get(w.component);
      if (cur) { cur.last_heartbeat = w.last_heartbeat; if (w.current_job) cur.current_job = w.current_job; }
    }
    render();
  }

  async function getJSON(path) {
    try {
      const r = await fetch(path, { credentials: 'same-origin', headers: { Accept: 'application/json' } });
      return r.ok ? await r.json() : null;
    } catch { return null; }
  }

  // ---- actions (token prompt → session cookie on 401) ----

  async function act(method, path) {
    const go = () => fetch(path, { method, credentials: 'same-origin', headers: { Accept: 'application/json' } });
    let r;
    try {
      r = await go();
      if (r.status === 401) {
        if (!(await askToken('This action needs the admin token.'))) return null;
        r = await go();
      }
    } catch (err) {
      notice('request failed: ' + err);
      return null;
    }
    const body = await r.json().catch(() => ({}));
    if (!r.ok) { notice((body && (body.detail || body.title)) || r.statusText); return null; }
    notice('');
    return body;
  }

  let loginWaiters = [];
  function askToken(why) {
    const f = $('#login');
    f.hidden = false;
    $('#login-error').textContent = why || '';
    $('#token').focus();
    return new Promise((resolve) => loginWaiters.push(resolve));
  }
  function loginDone(ok) {
    $('#login').hidden = true;
    $('#token').value = '';
    const ws = loginWaiters;
    loginWaiters = [];
    ws.forEach((w) => w(ok));
  }
  async function login(ev) {
    ev.preventDefault();
    const r = await fetch('api/v1/session', {
      method: 'POST', credentials: 'same-origin',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
      body: JSON.stringify({ token: $('#token').value }),
    }).catch(() => null);
    if (!r || !r.ok) { $('#login-error').textContent = r && r.status === 401 ? 'wrong token' : 'sign-in failed'; return; }
    $('#signin').textContent = 'Signed in';
    loginDone(true);
    if (es && es.readyState === EventSource.CLOSED) connect();
  }

  async function checkReadAuth() {
    const r = await fetch('api/v1/health', { credentials: 'same-origin' }).catch(() => null);
    if (r && r.status === 401 && $('#login').hidden) askToken('This server needs the admin token to show anything.');
  }

  function notice(text) {
    const n = $('#notice');
    n.textContent = text;
    n.hidden = !text;
  }

  async function pauseQueue(q, pause) {
    const b = await act('POST', 'api/v1/queues/' + encodeURIComponent(q) + (pause ? '/pause' : '/resume'));
    if (!b) return;
    const s = state.queues.get(q) || { queue: q };
    s.paused = b.paused;
    state.queues.set(q, s);
    render();
  }

  // ---- rendering ----

  let frame = 0;
  function render() {
    if (!frame) frame = requestAnimationFrame(() => { frame = 0; draw(); });
  }

  function draw() {
    drawHealth();
    drawHosts();
    drawQueues();
    drawWorkers();
  }

  function drawHealth() {
    const h = state.health;
    const b = $('#health');
    b.textContent = h ? h.status : '…';
    b.className = 'badge s-' + (h ? h.status : 'none');
    $('#reasons').textContent = h && h.reasons ? h.reasons.join(' · ') : '';
  }

  function drawHosts() {
    const rows = [...state.hosts.values()].sort((a, b) => a.id.localeCompare(b.id)).map((h) => {
      const st = h.status || 'alive';
      return el('tr', { data: { host: h.id } },
        td(h.id), el('td', {}, badge(st)), td(h.leader ? 'leader' : ''), td(h.slots, 'num'), td(h.capacity || '∞', 'num'),
        td(h.draining ? 'draining' : ''), td(h.version), td(h.address), td(ago(h.seen_at)));
    });
    $('#hosts tbody').replaceChildren(...rows);
  }

  function drawQueues() {
    const names = new Set([...state.queues.keys(), ...state.pools.keys()]);
    const rows = [...names].sort().map((q) => {
      const s = state.queues.get(q) || { queue: q };
      const ws = [...state.workers.values()].filter((w) => w.queue_type === q);
      const healthy = ws.filter((w) => w.status === 'healthy').length;
      const size = state.pools.has(q) ? state.pools.get(q) : ws.length;
      const pause = el('button', { type: 'button', class: 'pause', textContent: 'Pause', disabled: !!s.paused, on: { click: () => pauseQueue(q, true) } });
      const resume = el('button', { type: 'button', class: 'resume', textContent: 'Resume', disabled: !s.paused, on: { click: () => pauseQueue(q, false) } });
      return el('tr', { data: { queue: q } },
        td(q), td(healthy + ' / ' + size, 'num'), td(s.pending, 'num'), td(s.running, 'num'), td(s.completed, 'num'), td(s.failed, 'num'),
        td(s.avg_job_ms ? (s.avg_job_ms / 1000).toFixed(1) + ' s' : '', 'num'), td(dur(s.eta_seconds), 'num'),
        el('td', { class: 'paused' }, badge(s.paused ? 'paused' : 'running')), el('td', {}, pause, ' ', resume));
    });
    const t = state.total;
    if (t) {
      rows.push(el('tr', { class: 'total', data: { queue: '' } },
        td('all'), td(''), td(t.pending, 'num'), td(t.running, 'num'), td(t.completed, 'num'), td(t.failed, 'num'),
        td(t.avg_job_ms ? (t.avg_job_ms / 1000).toFixed(1) + ' s' : '', 'num'), td(dur(t.eta_seconds), 'num'),
        el('td', {}, t.paused ? badge('paused') : ''), td('')));
    }
    $('#queues tbody').replaceChildren(...rows);
  }

  function drawWorkers() {
    const ws = [...state.workers.values()].sort((a, b) => a.queue_type.localeCompare(b.queue_type) || a.id - b.id);
    const rows = ws.map((w) => {
      const running = RUNNING.has(w.status);
      const job = running ? (state.jobs.get(w.component) || w.current_job || '') : '';
      const exit = w.exit_code != null ? String(w.exit_code) + (w.signal ? ' ' + w.signal : '') : '';
      const restart = el('button', { type: 'button', class: 'restart', textContent: 'Restart',
        on: { click: () => act('POST', 'api/v1/workers/' + encodeURIComponent(w.component) + '/restart') } });
      const reset = el('button', { type: 'button', class: 'reset', textContent: 'Reset', disabled: running,
        title: 'Clear the restart counters and start it again',
        on: { click: () => act('POST', 'api/v1/workers/' + encodeURIComponent(w.component) + '/reset?restart=true') } });
      return el('tr', { data: { component: w.component, status: w.status } },
        td(w.component), el('td', { class: 'status' }, badge(w.status + (w.held ? ' (held)' : ''), w.status)),
        td(w.host), td(w.pid || '', 'num pid'), td(job, 'job'), td(w.restart_count + ' / ' + w.lifetime_restarts, 'num'),
        td(exit, 'num exit'), td(running ? ago(w.last_heartbeat) : '', 'num'), td(w.reason || w.failure_reason || '', 'reason'),
        el('td', {}, restart, ' ', reset));
    });
    $('#workers tbody').replaceChildren(...rows);
  }

  function log(e, text) {
    if (!$('#show-jobs').checked && e.type === 'job_update' && e.data && !['error', 'toxic', 'requeued:stale'].includes(e.data.state)) return;
    if (e.type === 'job_update' && e.topic !== 'queue:jobs') return; // each job event comes twice
    const li = el('li', { class: 'flash' },
      el('span', { class: 't', textContent: new Date(e.timestamp || Date.now()).toLocaleTimeString() }),
      el('span', { class: 'ty', textContent: e.type }), text || summary(e));
    const list = $('#log');
    list.prepend(li);
    while (list.children.length > LOG_MAX) list.lastChild.remove();
  }

  function summary(e) {
    const w = e.worker, d = e.data || {}, a = e.action;
    if (w) return w.component + ' ' + w.status + (w.exit_code != null ? ' (exit ' + w.exit_code + ')' : '') + (w.reason ? ': ' + w.reason : '');
    if (a) return a.action + ' ' + a.target + (a.result ? ': ' + a.result : '');
    if (e.type === 'job_update') return d.queue + ' ' + d.id + ' ' + d.state + (d.error ? ': ' + d.error : '') + (d.component ? ' on ' + d.component : '');
    if (e.type === 'queue_update') return (d.queue || 'all') + ': ' + d.pending + ' pending, ' + d.running + ' running';
    if (e.type === 'health_update') return d.status + (d.reasons && d.reasons.length ? ': ' + d.reasons.join('; ') : '');
    if (e.type === 'host_update') return d.host + ' ' + d.status;
    return e.topic;
  }

  function ago(ms) {
    if (!ms) return '';
    const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
    return s < 60 ? s + 's ago' : s < 3600 ? Math.floor(s / 60) + 'm ago' : Math.floor(s / 3600) + 'h ago';
  }

  function dur(sec) {
    if (!sec) return '';
    sec = Math.round(sec);
    if (sec < 60) return sec + 's';
    if (sec < 3600) return Math.floor(sec / 60) + 'm ' + (sec % 60) + 's';
    return Math.floor(sec / 3600) + 'h ' + Math.floor((sec % 3600) / 60) + 'm';
  }

  // ---- start ----

  $('#login').addEventListener('submit', login);
  $('#login-cancel').addEventListener('click', () => loginDone(false));
  $('#signin').addEventListener('click', () => askToken(''));
  $('#pause-all').addEventListener('click', async () => { if (await act('POST', 'api/v1/pause')) refreshQueues(); });
  $('#resume-all').addEventListener('click', async () => { if (await act('POST', 'api/v1/resume')) refreshQueues(); });
  connect();
  refreshPools();
  setInterval(() => { refreshHeartbeats(); refreshHosts(); }, 5000);
  setInterval(render, 1000); // ages
})();
