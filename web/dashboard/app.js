// Vigil dashboard: live over one EventSource (GET api/v1/events), reads
// and actions through the admin API with the session cookie. Views are
// chosen by the URL's hash (#/workers?status=crashed, #/jobs/tag?state=
// archived, #/jobs/tag/<id>, …), so every view can be linked to. No build
// step; every value reaches the page through textContent (dom.js).
import { $, $$, el, td, badge, button, link, text, ago, when, clock, capped, bytes, detailList } from './dom.js';
import {
  WORKER_STATUSES, RUNNING, JOB_STATES, WORKER_COLUMNS, WORKER_FIELDS, RESTART_FIELDS, WORKER_EVENT_COLUMNS,
  JOB_COLUMNS, JOB_FIELDS, JOB_EVENT_COLUMNS, HOST_COLUMNS, QUEUE_COLUMNS, SCHEDULE_COLUMNS, cells, headRow, workerHref, jobHref,
} from './fields.js';
import { Rates, Chart, WINDOW_MS } from './charts.js';

performance.mark('vigil-start'); // for the benchmark (e2e/thousand_test.go)

const TOPICS = ['system:health', 'host:*:status', 'queue:status', 'queue:*:status', 'worker:*:status', 'queue:jobs', 'schedule:*'];
const TYPES = ['snapshot', 'worker_update', 'worker_removed', 'queue_update', 'job_update', 'host_update', 'health_update', 'action', 'reset', 'schedule_fired', 'schedule_missed'];
const LOG_MAX = 200;
const WORKERS_PAGE = 100;
const PAYLOAD_MAX = 64 * 1024; // characters of a payload the job view shows
const JOB_DONE = new Set(['done', 'error', 'aborted:shutdown', 'requeued:stale', 'requeued:stranded', 'toxic']);

const state = {
  workers: new Map(), // component → worker (API shape)
  queues: new Map(), // queue → statistics
  total: null,
  hosts: new Map(), // host id → host
  pools: new Map(), // queue → pool {queue, size, counts}
  health: null,
  jobs: new Map(), // component → its current job, from job events
  schedules: new Map(), // name → schedule
  lastId: '',
};
let rates = new Rates();
let es = null;
let retryMs = 1000;
let clearOnSnapshot = true;

// ---------------------------------------------------------------- API

async function getJSON(path) {
  try {
    const r = await fetch(path, { credentials: 'same-origin', headers: { Accept: 'application/json' } });
    if (r.status === 401) checkReadAuth();
    return r.ok ? await r.json() : null;
  } catch { return null; }
}

// act runs an action; on 401 it asks for the token (a session cookie) and
// tries again. It returns the answer's body ({} when empty), or null after
// showing why it failed.
async function act(method, path, body) {
  const go = () => fetch(path, {
    method, credentials: 'same-origin',
    headers: body ? { Accept: 'application/json', 'Content-Type': 'application/json' } : { Accept: 'application/json' },
    body: body ? JSON.stringify(body) : undefined,
  });
  let r;
  try {
    r = await go();
    if (r.status === 401) {
      if (!(await askToken('This action needs the admin token.'))) return null;
      r = await go();
    }
  } catch (err) {
    notice('request failed: ' + err, 'error');
    return null;
  }
  const b = r.status === 204 ? {} : await r.json().catch(() => ({}));
  if (!r.ok) { notice((b && (b.detail || b.title)) || r.statusText, 'error'); return null; }
  notice(b.message || '', 'ok');
  return b;
}

let loginWaiters = [];
function askToken(why) {
  $('#login').hidden = false;
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
  if (!backfill.started && current.name === 'overview') loadHistory();
  route();
}

let authAsked = false;
async function checkReadAuth() {
  if (authAsked) return;
  authAsked = true;
  const r = await fetch('api/v1/health', { credentials: 'same-origin' }).catch(() => null);
  authAsked = false;
  if (r && r.status === 401 && $('#login').hidden) askToken('This server needs the admin token to show anything.');
}

let noticeTimer = 0;
function notice(msg, kind) {
  const n = $('#notice');
  clearTimeout(noticeTimer);
  n.textContent = msg;
  n.dataset.kind = kind || 'error';
  n.hidden = !msg;
  if (msg && kind === 'ok') noticeTimer = setTimeout(() => { n.hidden = true; }, 6000);
}

// confirmAction asks before something destructive.
function confirmAction(what, detail) {
  const d = $('#confirm');
  $('#confirm-text').textContent = what;
  $('#confirm-detail').textContent = detail || '';
  d.returnValue = '';
  d.showModal();
  $('#confirm-cancel').focus();
  return new Promise((resolve) => d.addEventListener('close', () => resolve(d.returnValue === 'ok'), { once: true }));
}

const enc = encodeURIComponent;

// ---------------------------------------------------------------- the event stream

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

let firstEvent = true;
function onEvent(ev) {
  if (firstEvent) { firstEvent = false; performance.mark('vigil-first-event'); }
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
    state.workers.clear(); state.queues.clear(); state.hosts.clear(); state.jobs.clear(); state.schedules.clear();
    state.total = null;
    refreshPools();
  }
  apply(e, ev.type);
  if (ev.type !== 'snapshot' && !e.stale) {
    e.id = ev.lastEventId;
    chartEvent(e);
    log(e);
    current.onEvent?.(e);
  }
  render();
}

function apply(e, type) {
  const topic = e.topic || '';
  const parts = topic.split(':');
  if (topic === 'system:health') {
    if (e.data) state.health = e.data;
  } else if (parts[0] === 'worker' && e.worker && type === 'worker_removed') {
    state.workers.delete(e.worker.component); // a slot beyond its shrunk pool, gone for good
    state.jobs.delete(e.worker.component);
  } else if (parts[0] === 'worker' && e.worker) {
    const prev = state.workers.get(e.worker.component);
    if (prev && olderView(e.worker, prev)) { e.stale = true; return; }
    // A newer status with an older current job (written before a change
    // of it the page has, from a job event): the broker gives it the newer
    // job live, not in a catch-up from the stream.
    if (prev && sameProcess(e.worker, prev) && (e.worker.current_seq || 0) < (prev.current_seq || 0)) {
      e.worker.current_job = prev.current_job; e.worker.current_seq = prev.current_seq;
    }
    // Only its current job changed (the broker's worker_update of a job's
    // start or end): not a new status.
    e.jobOnly = !!prev && type === 'worker_update' && prev.rev === e.worker.rev && prev.status === e.worker.status;
    if (prev && e.worker.paused === undefined) copyPause(prev, e.worker);
    state.workers.set(e.worker.component, e.worker);
    if (!RUNNING.has(e.worker.status)) state.jobs.delete(e.worker.component);
  } else if (parts[0] === 'worker' && type === 'action' && e.action && ['pause', 'resume'].includes(e.action.action)) {
    refreshWorker(e.action.target); // paused or resumed from another page, host or vigil ctl
  } else if (topic === 'queue:status') {
    if (e.data && (type === 'snapshot' || type === 'queue_update')) state.total = e.data;
    if (type === 'action') refreshQueues();
  } else if (parts[0] === 'queue' && parts.length === 3 && parts[2] === 'status') {
    if (e.data && (type === 'snapshot' || type === 'queue_update')) state.queues.set(parts[1], e.data);
    if (type === 'action' && e.action) {
      const s = state.queues.get(parts[1]);
      if (s && e.action.action === 'pause') s.paused = true;
      refreshQueues(); // resume may leave it paused by the global pause
      if (e.action.action === 'pool_size' || e.action.action === 'rolling_restart') refreshPools();
    }
  } else if (topic === 'queue:jobs' && e.data && type === 'job_update') {
    const j = e.data;
    if (!j.component) return;
    // A start or end that changed its worker's current job says so: the
    // worker_update that follows it live is not replayed after a catch-up.
    const w = state.workers.get(j.component);
    if (w && j.worker_seq && w.pid === j.pid && j.worker_seq > (w.current_seq || 0)) { w.current_job = j.worker_job || ''; w.current_seq = j.worker_seq; }
    if (j.state === 'processing' || j.state === 'progress') {
      state.jobs.set(j.component, { queue: j.queue, id: j.id, progress: j.progress });
    } else if (JOB_DONE.has(j.state) && (state.jobs.get(j.component) || {}).id === j.id) {
      state.jobs.delete(j.component);
    }
  } else if (parts[0] === 'host') {
    const id = parts.slice(1, -1).join(':');
    if (type === 'snapshot' && e.data) state.hosts.set(id, e.data);
    else refreshHosts();
  } else if (parts[0] === 'schedule') {
    if (type === 'snapshot' && e.data) state.schedules.set(e.data.name, e.data);
    else refreshSchedules(); // fired, missed, or changed by an operator
  }
}

// ---------------------------------------------------------------- reads that complete what events carry

const debounce = (fn, ms) => {
  let t = 0;
  return (...a) => { clearTimeout(t); t = setTimeout(() => fn(...a), ms); };
};

// throttle runs fn ms after the first call, once for all calls meanwhile
// (a busy queue still gets its list read every ms).
const throttle = (fn, ms) => {
  let t = 0;
  return () => { if (!t) t = setTimeout(() => { t = 0; fn(); }, ms); };
};

const refreshHosts = debounce(async () => {
  const b = await getJSON('api/v1/hosts');
  if (b && b.hosts) { state.hosts.clear(); b.hosts.forEach((h) => state.hosts.set(h.id, h)); render(); }
}, 200);

const refreshQueues = debounce(async () => {
  const b = await getJSON('api/v1/queues');
  if (!b) return;
  for (const q of b.queues || []) state.queues.set(q.queue, Object.assign(state.queues.get(q.queue) || {}, q));
  if (b.total) state.total = Object.assign(state.total || {}, b.total);
  render();
}, 100);

const refreshSchedules = debounce(async () => {
  const b = await getJSON('api/v1/schedules');
  if (b && b.schedules) { state.schedules.clear(); b.schedules.forEach((x) => state.schedules.set(x.name, x)); render(); }
}, 150);

async function refreshPools() {
  const b = await getJSON('api/v1/pools');
  if (b && b.pools) { state.pools.clear(); b.pools.forEach((p) => state.pools.set(p.queue, p)); render(); }
}

// olderView says whether worker view w is older than cur: a lower rev (the
// record's revision), or the same rev and process with an older current
// job (current_seq). A snapshot or a read can be newer than an event that
// was written before it and comes after it.
function olderView(w, cur) {
  const r = w.rev || 0, c = cur.rev || 0;
  if (r !== c) return r < c;
  return w.pid === cur.pid && (w.current_seq || 0) < (cur.current_seq || 0);
}

// sameProcess says whether two views of a worker are of one process (a
// restarted container's worker may have its predecessor's pid).
function sameProcess(a, b) {
  return !!a.pid && a.pid === b.pid && a.started_at === b.started_at;
}

// An operator's pause of a worker is the admin API's, not the
// supervisor's: its events and snapshots leave it out, the API's reads
// bring it.
const PAUSE_FIELDS = ['paused', 'paused_by', 'paused_at', 'pause_reason'];
function copyPause(from, to) { for (const f of PAUSE_FIELDS) { if (from[f] === undefined) delete to[f]; else to[f] = from[f]; } }

async function refreshWorker(c) {
  const w = await getJSON('api/v1/workers/' + enc(c));
  if (w) { state.workers.set(c, w); render(); }
}

// Heartbeats are not events (one per worker per interval would drown the
// stream): the views that show them read them every few seconds.
async function refreshHeartbeats() {
  const b = await getJSON('api/v1/workers');
  if (!b || !b.workers) return;
  for (const w of b.workers) {
    const cur = state.workers.get(w.component);
    if (cur) {
      cur.last_heartbeat = w.last_heartbeat;
      if (w.pid === cur.pid && (w.current_seq || 0) > (cur.current_seq || 0)) { cur.current_job = w.current_job; cur.current_seq = w.current_seq; }
      copyPause(w, cur);
    } else state.workers.set(w.component, w);
  }
  render();
}

// history reads past events of some topics (GET api/v1/events/history).
async function eventHistory(topics, opts = {}) {
  const q = new URLSearchParams();
  topics.forEach((t) => q.append('topic', t));
  for (const [k, v] of Object.entries(opts)) if (v) q.set(k, v);
  return getJSON('api/v1/events/history?' + q.toString());
}

// ---------------------------------------------------------------- charts

const charts = { done: null, failed: null, crashes: null };
// live are the events the charts count that came since the page loaded
// (the last 15 minutes of them); backfill, once the overview is first
// shown, what the stream held before.
const live = [];
const backfill = { started: false, loaded: false };

function chartEvent(e) {
  if (!(e.type === 'worker_update' || (e.type === 'job_update' && e.topic === 'queue:jobs' && e.data && ['done', 'error', 'toxic'].includes(e.data.state)))) return;
  live.push(e);
  rates.add(e);
}

// loadHistory counts the last 15 minutes the stream still holds: the
// counts are rebuilt from those, then the live events, in order (a crash
// is counted once, from the status before it).
async function loadHistory() {
  backfill.started = true;
  const since = Date.now() - WINDOW_MS;
  let before = '', from = null, older = [];
  for (let pages = 0; pages < 10; pages++) {
    const h = await eventHistory(['queue:jobs', 'worker:*:status'], { since, before, limit: 1000 });
    if (!h) { backfill.started = false; return; }
    older = h.events.concat(older); // pages come newest first, each oldest first
    from = h.from;
    if (!h.more) break;
    before = h.next_before;
  }
  const r = new Rates();
  r.from = Math.min(rates.from, from);
  for (const e of older) r.add(e);
  for (const e of live) r.add(e);
  rates = r;
  backfill.loaded = true;
  drawCharts();
}

function chartQueues() {
  return [...new Set([...state.pools.keys(), ...state.queues.keys()])].sort();
}

function drawCharts() {
  if (current.name !== 'overview' || !globalThis.uPlot) return;
  if (!charts.done) {
    charts.done = new Chart($('#chart-done'), 'done', 'Jobs done', 'per second');
    charts.failed = new Chart($('#chart-failed'), 'failed', 'Jobs failed', 'per second');
    charts.crashes = new Chart($('#chart-crashes'), 'crashes', 'Worker crashes', 'per 5 s');
  }
  const qs = chartQueues();
  for (const c of [charts.done, charts.failed, charts.crashes]) c.update(rates, qs);
  const from = rates.from;
  $('#charts-note').textContent = from > Date.now() - WINDOW_MS + 10000
    ? 'counted since ' + clock(from) + ' (the event stream keeps its last ~10,000 events)' : '';
}

// ---------------------------------------------------------------- views

// Each view: name, enter(args, params) when it is shown, draw() on every
// render while shown, onEvent(e) for live events, leave().
const views = {};
let current = { name: '' };

function parseHash() {
  const h = location.hash.replace(/^#\/?/, '');
  const [path, query] = h.split('?');
  const segs = path.split('/').filter(Boolean).map(decodeURIComponent);
  return { segs, params: new URLSearchParams(query || '') };
}

function route() {
  const { segs, params } = parseHash();
  let name = 'overview', args = [];
  if (segs[0] === 'workers') { name = segs[1] ? 'worker' : 'workers'; args = segs.slice(1); }
  else if (segs[0] === 'jobs') { name = segs[2] ? 'job' : 'jobs'; args = segs.slice(1); }
  else if (segs[0] === 'cluster') name = 'cluster';
  else if (segs[0] === 'schedules') name = 'schedules';
  if (current.leave) current.leave();
  current = views[name];
  for (const v of $$('[data-view]')) v.hidden = v.dataset.view !== name;
  const tab = name === 'worker' ? 'workers' : name === 'job' ? 'jobs' : name;
  for (const a of $$('#tabs a')) a.classList.toggle('active', a.dataset.tab === tab);
  current.enter?.(args, params);
  draw();
}

// setParams changes the current view's query without a new history entry.
function setParams(params) {
  const { segs } = parseHash();
  const q = params.toString();
  window.history.replaceState(null, '', '#/' + segs.map(enc).join('/') + (q ? '?' + q : ''));
  current.enter?.(parseHash().segs.slice(1), params);
  draw();
}

let frame = 0, lastDraw = 0;
// render draws at most ten times a second: a busy stream does not redraw
// a hundred rows per event.
function render() {
  if (frame) return;
  const wait = Math.max(0, 100 - (performance.now() - lastDraw));
  frame = setTimeout(() => requestAnimationFrame(() => { frame = 0; lastDraw = performance.now(); draw(); }), wait);
}

function draw() {
  drawHeader();
  current.draw?.();
}

function drawHeader() {
  const h = state.health;
  const b = $('#health');
  b.textContent = h ? h.status : '…';
  b.className = 'badge s-' + (h ? h.status : 'none');
  $('#reasons').textContent = h && h.reasons ? h.reasons.join(' · ') : '';
  let bad = 0;
  for (const w of state.workers.values()) if (w.status === 'crashed' || w.status === 'failed') bad++;
  $('#worker-count').textContent = state.workers.size ? String(state.workers.size) + (bad ? ' · ' + bad + ' down' : '') : '';
}

// ---- overview: charts, queues, the event log

views.overview = {
  name: 'overview',
  enter() {
    if (!backfill.started) loadHistory();
    setTimeout(drawCharts, 0);
  },
  draw() { drawQueues(); },
};

async function pauseQueue(q, pause) {
  const b = await act('POST', 'api/v1/queues/' + enc(q) + (pause ? '/pause' : '/resume'));
  if (!b) return;
  const s = state.queues.get(q) || { queue: q };
  s.paused = b.paused;
  state.queues.set(q, s);
  render();
}

function poolCounts(q) {
  const p = state.pools.get(q);
  let healthy = 0, n = 0;
  for (const w of state.workers.values()) {
    if (w.queue_type !== q) continue;
    n++;
    if (w.status === 'healthy') healthy++;
  }
  return { healthy, size: p ? p.size : n };
}

// pauseTitle says who paused a queue, when and why (asynq's own key is
// the truth; Vigil's record says the rest).
function pauseTitle(s) {
  if (!s.paused) return '';
  const parts = ['paused by ' + (s.paused_by === 'asynq' ? "asynq's tools" : (s.paused_who || 'vigil'))];
  if (s.paused_at) parts.push('since ' + new Date(s.paused_at).toLocaleString());
  if (s.pause_scopes) parts.push('(' + s.pause_scopes.join(', ') + ' pause)');
  if (s.pause_reason) parts.push('— ' + s.pause_reason);
  return parts.join(' ');
}

function drawQueues() {
  const t = $('#queues');
  if (!t.tHead.rows.length) t.tHead.append(headRow([{ label: 'queue' }, { label: 'workers', title: 'healthy / pool size' }, ...QUEUE_COLUMNS, { label: 'state' }], ['']));
  const rows = chartQueues().map((q) => {
    const s = state.queues.get(q) || { queue: q };
    const c = poolCounts(q);
    return el('tr', { data: { queue: q } },
      el('td', {}, link(q, '#/jobs/' + enc(q))), td(c.healthy + ' / ' + c.size, 'num'), cells(QUEUE_COLUMNS, s),
      el('td', { class: 'paused', title: pauseTitle(s) }, badge(s.paused ? 'paused' + (s.paused_by ? ' (' + s.paused_by + ')' : '') : 'running', s.paused ? 'paused' : 'running')),
      el('td', {},
        button('Pause', 'pause', () => pauseQueue(q, true), { disabled: !!s.paused }), ' ',
        button('Resume', 'resume', () => pauseQueue(q, false), { disabled: !s.paused })));
  });
  const tot = state.total;
  if (tot) {
    rows.push(el('tr', { class: 'total', data: { queue: '' } },
      td('all'), td(''), cells(QUEUE_COLUMNS, tot), el('td', {}, tot.paused ? badge('paused') : ''), td('')));
  }
  t.tBodies[0].replaceChildren(...rows);
}

function log(e, msg) {
  if (!$('#show-jobs').checked && e.type === 'job_update' && e.data && !['error', 'toxic', 'requeued:stale', 'requeued:stranded'].includes(e.data.state)) return;
  if (!$('#show-jobs').checked && e.jobOnly) return; // a worker's current job: its job's event says it
  if (e.type === 'job_update' && e.topic !== 'queue:jobs') return; // each job event comes twice
  if (!$('#show-jobs').checked && e.type === 'schedule_fired') return; // a job of its own follows
  const li = el('li', { class: 'flash' },
    el('span', { class: 't', textContent: new Date(e.timestamp || Date.now()).toLocaleTimeString() }),
    el('span', { class: 'ty', textContent: e.type }), msg || summary(e));
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
  if (e.type === 'schedule_fired') return d.schedule + (d.manual ? ' run by hand' : ' tick ' + clock(d.tick)) + ': ' + (d.result === 'enqueued' ? d.task_id : d.result) + (d.host ? ' by ' + d.host : '');
  if (e.type === 'schedule_missed') return d.schedule + ': ' + d.missed + ' ticks missed (catch-up ' + d.policy + '): ' + d.fired + ' fired, ' + d.skipped + ' skipped';
  return e.topic;
}

// ---- workers: filtered, paged

const workersView = views.workers = {
  name: 'workers',
  params: new URLSearchParams(),
  enter(_, params) {
    this.params = params;
    $('#worker-filter').elements.q.value = params.get('q') || '';
    // Fresh heartbeat times; at the page's start the snapshot brings them.
    if (state.workers.size) refreshHeartbeats();
  },
  draw() { drawWorkers(this.params); },
};

// workerJob is the worker's current job, live from its worker_updates,
// with the progress its job's events report.
function workerJob(w) {
  if (!RUNNING.has(w.status)) return '';
  const id = w.current_job || '';
  const j = state.jobs.get(w.component);
  if (j && j.id === id && j.progress != null) return id + ' (' + Math.round(j.progress) + '%)';
  return id;
}

function fillSelect(sel, values) {
  const want = ['', ...values];
  const have = [...sel.options].map((o) => o.value);
  if (want.join('\n') !== have.join('\n')) sel.replaceChildren(...want.map((x) => el('option', { value: x, textContent: x || 'any' })));
}

// The workers by queue, then slot: the order is kept until a worker comes
// or goes (records change on every event, their order does not).
let sortedIds = [], sortedOf = -1, workersVersion = 0;
function workersSorted() {
  if (sortedOf !== workersVersion || sortedIds.length !== state.workers.size) {
    sortedIds = [...state.workers.values()].sort((a, b) => a.queue_type.localeCompare(b.queue_type) || a.id - b.id).map((w) => w.component);
    sortedOf = workersVersion;
  }
  return sortedIds.map((c) => state.workers.get(c)).filter(Boolean);
}

function drawWorkers(params) {
  const f = $('#worker-filter');
  const all = workersSorted();
  const hosts = new Set(state.hosts.keys());
  for (const w of all) if (w.host) hosts.add(w.host);
  fillSelect(f.elements.status, WORKER_STATUSES);
  fillSelect(f.elements.queue, chartQueues());
  fillSelect(f.elements.host, [...hosts].sort());
  for (const k of ['status', 'queue', 'host']) f.elements[k].value = params.get(k) || '';

  const st = params.get('status') || '', q = params.get('queue') || '', host = params.get('host') || '';
  const needle = (params.get('q') || '').toLowerCase();
  const counts = new Map();
  const shown = [];
  for (const w of all) {
    if ((q && w.queue_type !== q) || (host && w.host !== host)) continue;
    if (needle && ![w.component, w.pid, w.reason, w.failure_reason, w.current_job, (state.jobs.get(w.component) || {}).id].some((x) => x && String(x).toLowerCase().includes(needle))) continue;
    counts.set(w.status, (counts.get(w.status) || 0) + 1);
    if (!st || w.status === st) shown.push(w);
  }
  $('#status-chips').replaceChildren(...WORKER_STATUSES.filter((s) => counts.get(s)).map((s) => {
    const p = new URLSearchParams(params);
    if (st === s) p.delete('status'); else p.set('status', s);
    p.delete('page');
    return el('a', { href: '#/workers' + (p.toString() ? '?' + p : ''), class: 'chip' + (st === s ? ' on' : '') }, badge(s + ' ' + counts.get(s), s));
  }));

  const pages = Math.max(1, Math.ceil(shown.length / WORKERS_PAGE));
  const page = Math.min(pages, Math.max(1, Number(params.get('page')) || 1));
  const slice = shown.slice((page - 1) * WORKERS_PAGE, page * WORKERS_PAGE);
  const t = $('#workers');
  if (!t.tHead.rows.length) t.tHead.append(headRow(WORKER_COLUMNS, ['']));
  const now = Date.now();
  t.tBodies[0].replaceChildren(...slice.map((w) => {
    const running = RUNNING.has(w.status);
    return el('tr', { data: { component: w.component, status: w.status } },
      cells(WORKER_COLUMNS, w, { now, job: workerJob(w) }),
      el('td', { class: 'actions' },
        button('Restart', 'restart', () => workerAction(w.component, 'restart')), ' ',
        w.paused
          ? button('Resume', 'resume', () => workerPause(w.component, false), { title: 'It takes tasks again' })
          : button('Pause', 'pause', () => workerPause(w.component, true), { disabled: !running, title: 'It takes no new task, keeps beating and finishes what it runs' }), ' ',
        button('Reset', 'reset', () => workerAction(w.component, 'reset'), { disabled: running, title: 'Clear the restart counters and start it again' })));
  }));
  pager($('#workers-pager'), page, pages, shown.length, WORKERS_PAGE, (p) => {
    const np = new URLSearchParams(params);
    if (p > 1) np.set('page', p); else np.delete('page');
    setParams(np);
  });
}

function pager(host, page, pages, total, size, go) {
  const from = total ? (page - 1) * size + 1 : 0, to = Math.min(total, page * size);
  host.replaceChildren(
    button('‹ Previous', 'prev', () => go(page - 1), { disabled: page <= 1 }), ' ',
    el('span', { class: 'muted', textContent: total == null ? 'page ' + page : from + '–' + to + ' of ' + total + (pages > 1 ? ' (page ' + page + ' of ' + pages + ')' : '') }), ' ',
    button('Next ›', 'next', () => go(page + 1), { disabled: page >= pages }));
}

function onFilter() {
  const f = $('#worker-filter');
  const p = new URLSearchParams();
  for (const k of ['status', 'queue', 'host', 'q']) if (f.elements[k].value) p.set(k, f.elements[k].value);
  setParams(p);
}

const WORKER_ACTIONS = {
  restart: { path: 'restart', ask: 'Restart %s?', detail: 'It stops gracefully (its running jobs finish or go back to the queue) and starts again at once; not counted as a crash.' },
  stop: { path: 'stop', ask: 'Stop %s and hold it stopped?', detail: 'It is not started again until an operator restarts it.' },
  reset: { path: 'reset?restart=true', ask: 'Reset %s?', detail: 'Its restart counters and crash window are cleared and it starts again.' },
};

async function workerPause(c, pause) {
  const b = await act('POST', 'api/v1/workers/' + enc(c) + '/' + (pause ? 'pause' : 'resume'));
  if (b && b.worker) { state.workers.set(c, b.worker); workersVersion++; render(); }
}

async function workerAction(c, action) {
  const a = WORKER_ACTIONS[action];
  if (!(await confirmAction(a.ask.replace('%s', c), a.detail))) return;
  const b = await act('POST', 'api/v1/workers/' + enc(c) + '/' + a.path);
  if (b && b.worker) { state.workers.set(c, b.worker); workersVersion++; render(); }
}

// ---- one worker: record, restart history, past statuses, output

views.worker = {
  name: 'worker',
  enter([c]) {
    this.c = c;
    this.history = null;
    this.logs = null;
    $('#worker-title').textContent = c;
    $('#worker-logs').textContent = '';
    $('#logs-note').textContent = '';
    $('#worker-history').tBodies[0].replaceChildren();
    if (!state.workers.has(c)) getJSON('api/v1/workers/' + enc(c)).then((w) => { if (w) { state.workers.set(c, w); render(); } else this.missing = true; });
    this.loadHistory();
    this.loadLogs();
    this.timer = setInterval(() => {
      if ($('#logs-follow').checked) this.loadLogs();
      getJSON('api/v1/workers/' + enc(c)).then((w) => { if (w && this.c === c) { state.workers.set(c, w); render(); } }); // its heartbeat
    }, 2000);
  },
  leave() { clearInterval(this.timer); },
  loadHistory: debounce(async function () {
    const c = views.worker.c, id = c.split(':');
    const h = await eventHistory(['worker:' + id[1] + ':' + id[2] + ':status'], { limit: 100 });
    if (h && views.worker.c === c) { views.worker.history = h.events.reverse(); render(); }
  }, 300),
  async loadLogs() {
    const c = this.c;
    const b = await getJSON('api/v1/workers/' + enc(c) + '/logs');
    if (!b || this.c !== c) return;
    const pre = $('#worker-logs');
    const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
    const w = state.workers.get(c);
    pre.textContent = b.lines.join('\n');
    $('#logs-note').textContent = b.lines.length ? b.lines.length + ' lines' : 'none kept here' + (w && w.host ? ' (its output is kept by host ' + w.host + ')' : '');
    if (atEnd) pre.scrollTop = pre.scrollHeight;
  },
  onEvent(e) { if (e.worker && e.worker.component === this.c && !e.jobOnly) this.loadHistory(); },
  draw() {
    const w = state.workers.get(this.c);
    if (!w) { $('#worker-record').replaceChildren(this.missing ? 'No such worker.' : 'loading…'); return; }
    const running = RUNNING.has(w.status);
    $('#worker-record').replaceChildren(detailList(w, WORKER_FIELDS, RESTART_FIELDS.map((f) => f.key)));
    $('#worker-restarts').replaceChildren(detailList(w, RESTART_FIELDS, Object.keys(w)));
    $('#worker-stop').disabled = !running;
    const wp = $('#worker-pause');
    wp.textContent = w.paused ? 'Resume' : 'Pause';
    wp.className = w.paused ? 'resume' : 'pause';
    wp.disabled = !w.paused && !running;
    $('#worker-reset').disabled = running;
    $('#worker-reset').title = running ? 'Stop it first: a running worker is not reset' : 'Clear the restart counters and start it again';
    const t = $('#worker-history');
    if (!t.tHead.rows.length) t.tHead.append(headRow(WORKER_EVENT_COLUMNS));
    if (this.history) {
      t.tBodies[0].replaceChildren(...(this.history.length ? this.history.map((e) => el('tr', { data: { status: e.worker ? e.worker.status : e.type } }, cells(WORKER_EVENT_COLUMNS, e)))
        : [el('tr', {}, el('td', { colSpan: WORKER_EVENT_COLUMNS.length, class: 'muted', textContent: 'none in the stream' }))]));
    }
  },
};

// ---- jobs of a queue, by state, paged

views.jobs = {
  name: 'jobs',
  enter([q], params) {
    this.q = q;
    if (!q) return; // draw picks the first queue once they are known
    this.st = params.get('state') || 'pending';
    this.page = Math.max(1, Number(params.get('page')) || 1);
    this.size = Math.min(500, Math.max(1, Number(params.get('size')) || 20));
    this.list = null;
    this.load();
  },
  async load() {
    const { q, st, page, size } = this;
    const b = await getJSON('api/v1/queues/' + enc(q) + '/jobs?state=' + st + '&page=' + page + '&page_size=' + size);
    if (this.q !== q || this.st !== st || this.page !== page) return;
    this.list = b ? b.jobs : [];
    this.failed = !b;
    render();
  },
  reload: throttle(() => views.jobs.load(), 1500),
  onEvent(e) {
    if (e.type === 'job_update' && e.topic === 'queue:jobs' && e.data && e.data.queue === this.q && e.data.state !== 'progress') this.reload();
    if (e.type === 'action' && e.topic && e.topic.startsWith('job:' + this.q + ':')) this.reload();
  },
  draw() {
    const qs = chartQueues();
    if (!this.q) { if (qs.length) location.replace('#/jobs/' + enc(qs[0])); return; }
    $('#job-queues').replaceChildren(...qs.map((q) => link(q, '#/jobs/' + enc(q) + '?state=' + this.st, q === this.q ? 'active' : '')));
    const s = state.queues.get(this.q) || {};
    $('#job-states').replaceChildren(...JOB_STATES.map(({ state: st, count }) => {
      const a = link(st, '#/jobs/' + enc(this.q) + '?state=' + st, st === this.st ? 'active' : '');
      a.dataset.state = st;
      if (count && s[count] != null) a.append(' ', el('span', { class: 'count', textContent: String(s[count]) }));
      return a;
    }));
    const cols = [...JOB_COLUMNS.common, ...(JOB_COLUMNS[this.st] || [])];
    const t = $('#jobs');
    t.tHead.replaceChildren(headRow(cols, ['']));
    if (!this.list) { t.tBodies[0].replaceChildren(el('tr', {}, el('td', { colSpan: cols.length + 1, class: 'muted', textContent: 'loading…' }))); return; }
    t.tBodies[0].replaceChildren(...(this.list.length ? this.list.map((j) => el('tr', { data: { id: j.id, state: j.state } }, cells(cols, j), el('td', { class: 'actions' }, jobButtons(j, () => this.load()))))
      : [el('tr', {}, el('td', { colSpan: cols.length + 1, class: 'muted', textContent: this.failed ? 'could not read the jobs' : 'no ' + this.st + ' jobs' + (this.page > 1 ? ' on this page' : '') }))]));
    const known = JOB_STATES.find((x) => x.state === this.st).count;
    // The count comes with the statistics (every few seconds): the list
    // itself may already know more.
    const seen = (this.page - 1) * this.size + this.list.length;
    const total = known && s[known] != null ? Math.max(s[known], seen) : null;
    const more = this.list.length === this.size;
    const pages = total != null ? Math.max(1, Math.ceil(total / this.size), this.page + (more ? 1 : 0)) : more ? this.page + 1 : this.page;
    pager($('#jobs-pager'), this.page, pages, total, this.size, (p) => {
      const np = new URLSearchParams({ state: this.st });
      if (p > 1) np.set('page', p);
      if (this.size !== 20) np.set('size', this.size);
      location.hash = '#/jobs/' + enc(this.q) + '?' + np;
    });
  },
};

// jobButtons are the actions a job's state allows.
function jobButtons(j, after) {
  const out = [];
  if (['scheduled', 'retry', 'archived'].includes(j.state)) out.push(button('Retry', 'retry', () => jobAction(j, 'retry', after)));
  if (['pending', 'scheduled', 'retry', 'active'].includes(j.state)) out.push(button('Cancel', 'cancel', () => jobAction(j, 'cancel', after)));
  if (j.state !== 'active') out.push(button('Delete', 'delete danger', () => jobAction(j, 'delete', after)));
  return out.flatMap((b, i) => (i ? [' ', b] : [b]));
}

const JOB_ACTIONS = {
  retry: { method: 'POST', path: '/retry' },
  cancel: {
    method: 'POST', path: '/cancel', ask: 'Cancel job %s?',
    detail: (j) => (j.state === 'active' ? 'Its handler is asked to stop (best effort).' : 'It is archived and will not run unless retried.'),
  },
  delete: { method: 'DELETE', path: '', ask: 'Delete job %s?', detail: () => 'It is removed from Redis for good.' },
};

async function jobAction(j, action, after) {
  const a = JOB_ACTIONS[action];
  if (a.ask && !(await confirmAction(a.ask.replace('%s', j.id) + ' (queue ' + j.queue + ', ' + j.state + ')', a.detail(j)))) return;
  const b = await act(a.method, 'api/v1/jobs/' + enc(j.queue) + '/' + enc(j.id) + a.path);
  if (b && action === 'delete' && !b.message) notice('job ' + j.id + ' deleted', 'ok');
  if (b) after(action, b);
}

// ---- one job: record, error, payload, events

views.job = {
  name: 'job',
  enter([q, id]) {
    this.q = q;
    this.id = id;
    this.job = null;
    this.missing = false;
    this.events = null;
    $('#job-title').textContent = q + ' › ' + id;
    $('#job-back').href = '#/jobs/' + enc(q);
    this.load();
  },
  async load() {
    const { q, id } = this;
    const [j, h] = await Promise.all([getJSON('api/v1/jobs/' + enc(q) + '/' + enc(id)), eventHistory(['job:' + q + ':' + id], { limit: 200 })]);
    if (this.q !== q || this.id !== id) return;
    this.job = j;
    this.missing = !j;
    if (h) this.events = h.events;
    render();
  },
  reload: debounce(() => views.job.load(), 400),
  onEvent(e) {
    if ((e.type === 'job_update' && e.topic === 'queue:jobs' && e.data && e.data.id === this.id && e.data.queue === this.q)
      || (e.type === 'action' && e.topic === 'job:' + this.q + ':' + this.id)) this.reload();
  },
  draw() {
    const j = this.job;
    const rec = $('#job-record');
    for (const b of ['#job-retry', '#job-cancel', '#job-delete']) $(b).hidden = true;
    if (!j) {
      rec.replaceChildren(this.missing ? 'No such job in queue ' + this.q + ' (deleted, or completed and past its retention).' : 'loading…');
      $('#job-error').textContent = $('#job-payload').textContent = $('#job-payload-note').textContent = '';
    } else {
      rec.replaceChildren(detailList(j, JOB_FIELDS, ['payload', 'payload_base64', 'last_error']));
      $('#job-back').href = '#/jobs/' + enc(this.q) + '?state=' + enc(j.state);
      $('#job-retry').hidden = !['scheduled', 'retry', 'archived'].includes(j.state);
      $('#job-cancel').hidden = !['pending', 'scheduled', 'retry', 'active'].includes(j.state);
      $('#job-delete').hidden = j.state === 'active';
      $('#job-error').textContent = j.last_error || '(none)';
      let raw, what;
      if (j.payload !== undefined) { raw = JSON.stringify(j.payload, null, 2); what = 'JSON'; }
      else if (j.payload_base64) { raw = j.payload_base64; what = 'not JSON: base64'; }
      else { raw = ''; what = 'empty'; }
      const c = capped(raw, PAYLOAD_MAX);
      $('#job-payload').textContent = c.text;
      $('#job-payload-note').textContent = what + (raw ? ', ' + bytes(raw.length) : '') + (c.cut ? ' — showing the first ' + bytes(PAYLOAD_MAX) + ', ' + c.cut + ' characters more' : '');
    }
    const t = $('#job-events');
    if (!t.tHead.rows.length) t.tHead.append(headRow(JOB_EVENT_COLUMNS));
    if (this.events) {
      t.tBodies[0].replaceChildren(...(this.events.length ? this.events.map((e) => el('tr', { data: { state: (e.data && e.data.state) || e.type } }, cells(JOB_EVENT_COLUMNS, e)))
        : [el('tr', {}, el('td', { colSpan: JOB_EVENT_COLUMNS.length, class: 'muted', textContent: 'none in the stream' }))]));
    }
  },
};

function jobViewAction(action) {
  const v = views.job;
  if (!v.job) return;
  jobAction(v.job, action, (done) => {
    if (done === 'delete') location.hash = '#/jobs/' + enc(v.q) + '?state=' + v.job.state;
    else v.load();
  });
}

// ---- hosts and pools

views.cluster = {
  name: 'cluster',
  enter() { refreshHosts(); refreshPools(); this.timer = setInterval(() => { refreshHosts(); refreshPools(); }, 5000); },
  leave() { clearInterval(this.timer); },
  draw() { drawHosts(); drawPools(); },
};

async function drain(h, on) {
  if (on && !(await confirmAction('Drain host ' + h.id + '?', 'Its workers stop gracefully and their slots move to other hosts; it claims none until undrained.'))) return;
  if (await act('POST', 'api/v1/hosts/' + enc(h.id) + (on ? '/drain' : '/undrain'))) refreshHosts();
}

function drawHosts() {
  const t = $('#hosts');
  if (!t.tHead.rows.length) t.tHead.append(headRow(HOST_COLUMNS, ['']));
  const now = Date.now();
  t.tBodies[0].replaceChildren(...[...state.hosts.values()].sort((a, b) => a.id.localeCompare(b.id)).map((h) =>
    el('tr', { data: { host: h.id, draining: h.draining ? 'true' : 'false' } }, cells(HOST_COLUMNS, h, { now }),
      el('td', { class: 'actions' }, h.draining ? button('Undrain', 'undrain', () => drain(h, false)) : button('Drain', 'drain', () => drain(h, true), { disabled: h.status === 'lost' })))));
}

async function resize(q, input) {
  const p = state.pools.get(q);
  const n = Number(input.value);
  if (!Number.isInteger(n) || n < 0) { notice('size must be a whole number ≥ 0', 'error'); return; }
  if (p && n < p.size && !(await confirmAction('Shrink pool ' + q + ' from ' + p.size + ' to ' + n + ' workers?', 'The workers in the highest slots stop gracefully.'))) return;
  const b = await act('PUT', 'api/v1/pools/' + enc(q), { size: n });
  if (b && b.queue) { state.pools.set(q, b); render(); }
}

async function rollingRestart(q) {
  if (!(await confirmAction('Rolling restart of pool ' + q + '?', 'Its workers restart one at a time, each waiting for the previous one to be healthy.'))) return;
  await act('POST', 'api/v1/pools/' + enc(q) + '/restart');
}

function drawPools() {
  const tb = $('#pools').tBodies[0];
  const qs = [...state.pools.keys()].sort();
  // Keep rows (and a size being typed) while the pools stay the same.
  if (tb.dataset.queues !== qs.join()) {
    tb.dataset.queues = qs.join();
    tb.replaceChildren(...qs.map((q) => {
      const input = el('input', { type: 'number', min: '0', class: 'size', value: String(state.pools.get(q).size), attrs: { 'aria-label': 'new size of ' + q } });
      return el('tr', { data: { queue: q } }, el('td', {}, link(q, '#/workers?queue=' + enc(q))), td('', 'num size'), td('', 'counts'),
        el('td', {}, input, ' ', button('Set size', 'resize', () => resize(q, input))),
        el('td', {}, button('Rolling restart', 'rollout', () => rollingRestart(q))));
    }));
  }
  for (const tr of tb.rows) {
    const p = state.pools.get(tr.dataset.queue);
    if (!p) continue;
    tr.cells[1].textContent = String(p.size);
    tr.cells[2].replaceChildren(...Object.entries(p.counts || {}).sort().flatMap(([s, n]) => [badge(s + ' ' + n, s), ' ']));
  }
}

// ---- schedules

views.schedules = {
  name: 'schedules',
  enter() { refreshSchedules(); },
  draw() { drawSchedules(); },
};

async function scheduleAction(x, action) {
  const b = await act('POST', 'api/v1/schedules/' + enc(x.name) + '/' + action);
  if (!b || !b.schedule) return;
  state.schedules.set(b.schedule.name, b.schedule);
  render();
}

function drawSchedules() {
  const t = $('#schedules');
  if (!t.tHead.rows.length) t.tHead.append(headRow(SCHEDULE_COLUMNS, ['']));
  const names = [...state.schedules.keys()].sort();
  $('#schedules-empty').hidden = names.length > 0;
  const tb = t.tBodies[0];
  // Keep rows (and their buttons, which may be under the pointer) while
  // the schedules stay the same; their cells change every second.
  if (tb.dataset.names !== names.join()) {
    tb.dataset.names = names.join();
    tb.replaceChildren(...names.map((n) => el('tr', { data: { schedule: n } },
      SCHEDULE_COLUMNS.map((c) => td('', c.cls)),
      el('td', { class: 'actions' },
        button('Pause', 'pause', () => { const x = state.schedules.get(n); if (x) scheduleAction(x, x.paused ? 'resume' : 'pause'); }), ' ',
        button('Run now', 'trigger', () => { const x = state.schedules.get(n); if (x) scheduleAction(x, 'trigger'); })))));
  }
  const now = Date.now();
  for (const tr of tb.rows) {
    const x = state.schedules.get(tr.dataset.schedule);
    if (!x) continue;
    tr.dataset.paused = x.paused ? 'true' : 'false';
    cells(SCHEDULE_COLUMNS, x, { now }).forEach((c, i) => {
      tr.cells[i].replaceChildren(...c.childNodes);
      tr.cells[i].title = c.title;
    });
    const pause = tr.querySelector('button.pause, button.resume');
    pause.textContent = x.paused ? 'Resume' : 'Pause';
    pause.className = x.paused ? 'resume' : 'pause';
  }
}

// ---------------------------------------------------------------- start

$('#login').addEventListener('submit', login);
$('#login-cancel').addEventListener('click', () => loginDone(false));
$('#signin').addEventListener('click', () => askToken(''));
$('#pause-all').addEventListener('click', async () => { if (await act('POST', 'api/v1/pause')) refreshQueues(); });
$('#resume-all').addEventListener('click', async () => { if (await act('POST', 'api/v1/resume')) refreshQueues(); });
$('#worker-filter').addEventListener('change', onFilter);
$('#worker-filter').addEventListener('submit', (e) => { e.preventDefault(); onFilter(); });
$('#worker-filter').elements.q.addEventListener('input', debounce(onFilter, 250));
$('#worker-restart').addEventListener('click', () => workerAction(views.worker.c, 'restart'));
$('#worker-stop').addEventListener('click', () => workerAction(views.worker.c, 'stop'));
$('#worker-pause').addEventListener('click', () => { const w = state.workers.get(views.worker.c); workerPause(views.worker.c, !(w && w.paused)); });
$('#worker-reset').addEventListener('click', () => workerAction(views.worker.c, 'reset'));
$('#job-retry').addEventListener('click', () => jobViewAction('retry'));
$('#job-cancel').addEventListener('click', () => jobViewAction('cancel'));
$('#job-delete').addEventListener('click', () => jobViewAction('delete'));
window.addEventListener('hashchange', route);
window.addEventListener('resize', debounce(() => { for (const c of [charts.done, charts.failed, charts.crashes]) c?.resize(); }, 150));

// Workers change on events: the sorted list is rebuilt when needed.
const setWorker = state.workers.set.bind(state.workers);
state.workers.set = (k, v) => { if (!state.workers.has(k)) workersVersion++; return setWorker(k, v); };
const clearWorkers = state.workers.clear.bind(state.workers);
state.workers.clear = () => { workersVersion++; clearWorkers(); };
const deleteWorker = state.workers.delete.bind(state.workers);
state.workers.delete = (k) => { if (state.workers.has(k)) workersVersion++; return deleteWorker(k); };

route();
connect();
refreshPools();
setInterval(() => {
  rates.prune();
  while (live.length && live[0].timestamp < Date.now() - WINDOW_MS - 10000) live.shift();
  if (current.name === 'overview') drawCharts();
  if ((current.name === 'workers' || current.name === 'schedules') && document.visibilityState === 'visible') render();
}, 1000);
setInterval(() => { if (current.name === 'workers') refreshHeartbeats(); }, 5000);
