// What the page shows of each kind of record: the columns of its tables
// and the fields of its detail views. To show a field the API gains (a
// job's progress, stage or result, a worker's pause, a queue's paused_by),
// add one entry here; a detail view also lists, after these, every field
// the API sent that is not named here.
import { el, text, badge, when, ago, clock, dur, link } from './dom.js';

// Worker statuses (docs/workers.md "Worker statuses"), in the order the filters list them.
export const WORKER_STATUSES = ['starting', 'healthy', 'recovering', 'stopping', 'stopped', 'crashed', 'failed'];
export const RUNNING = new Set(['starting', 'healthy', 'recovering', 'stopping']);

// Job states of asynq, in the order of the jobs view's tabs, with the
// count of queue statistics that says how many there are (null: unknown).
export const JOB_STATES = [
  { state: 'pending', count: 'pending' },
  { state: 'active', count: 'running' },
  { state: 'scheduled', count: 'scheduled' },
  { state: 'retry', count: 'retry' },
  { state: 'archived', count: 'archived' },
  { state: 'completed', count: 'completed' },
  { state: 'aggregating', count: 'aggregating' },
];

export const workerHref = (c) => '#/workers/' + encodeURIComponent(c);
export const jobHref = (q, id) => '#/jobs/' + encodeURIComponent(q) + '/' + encodeURIComponent(id);

const exitText = (w) => (w.exit_code != null ? String(w.exit_code) + (w.signal ? ' ' + w.signal : '') : '');
const workerStatus = (w) => (w.paused
  ? el('span', { title: 'paused by ' + (w.paused_by || '?') + (w.pause_reason ? ': ' + w.pause_reason : '') },
    badge(w.status + (w.held ? ' (held)' : ''), w.status), ' ', badge('paused', 'paused'))
  : badge(w.status + (w.held ? ' (held)' : ''), w.status));

// Columns of the workers table. get(w, ctx) returns text or a node; ctx
// has now and the worker's current job from job events.
export const WORKER_COLUMNS = [
  { label: 'worker', cls: 'id', get: (w) => link(w.component, workerHref(w.component)) },
  { label: 'status', cls: 'wstatus', get: workerStatus },
  { label: 'host', get: (w) => w.host },
  { label: 'pid', cls: 'num pid', get: (w) => w.pid || '' },
  { label: 'current job', cls: 'job', get: (w, ctx) => ctx.job },
  { label: 'restarts', cls: 'num', get: (w) => w.restart_count + ' / ' + w.lifetime_restarts, title: 'consecutive / since the last reset' },
  { label: 'exit', cls: 'num exit', get: exitText },
  { label: 'heartbeat', cls: 'num', get: (w, ctx) => (RUNNING.has(w.status) ? ago(w.last_heartbeat, ctx.now) : '') },
  { label: 'reason', cls: 'reason', get: (w) => w.reason || w.failure_reason || '' },
];

// Fields of a worker's detail (its record).
export const WORKER_FIELDS = [
  { key: 'component', label: 'worker' },
  { key: 'status', get: workerStatus, also: ['held'] },
  { key: 'reason' },
  { key: 'host' },
  { key: 'pid' },
  { key: 'current_job', label: 'current job' },
  { key: 'started_at', label: 'started', get: (w) => when(w.started_at) },
  { key: 'healthy_since', label: 'healthy since', get: (w) => when(w.healthy_since) },
  { key: 'recovering_until', label: 'recovering until', get: (w) => when(w.recovering_until) },
  { key: 'last_heartbeat', label: 'last heartbeat', get: (w) => when(w.last_heartbeat) },
  { key: 'exit_code', label: 'last exit', get: exitText, also: ['signal'] },
  { key: 'updated_at', label: 'record updated', get: (w) => when(w.updated_at) },
  { key: 'created_at', label: 'registered', get: (w) => when(w.created_at) },
  { key: 'version' },
  { key: 'stats', label: 'counters', get: (w) => (w.stats ? Object.entries(w.stats).sort(([a], [b]) => a.localeCompare(b)).map(([k, v]) => k + ' ' + v).join(', ') : '') },
  { key: 'id', label: 'slot' },
  { key: 'queue_type', label: 'queue' },
];

// Fields of a worker's restart history (the rest of its record).
export const RESTART_FIELDS = [
  { key: 'restart_count', label: 'consecutive restarts' },
  { key: 'lifetime_restarts', label: 'restarts since the last reset' },
  { key: 'last_restart', label: 'last counted restart', get: (w) => when(w.last_restart) },
  { key: 'recent_crashes', label: 'crash window', get: (w) => (w.recent_crashes && w.recent_crashes.length ? w.recent_crashes.length + ' counted: ' + w.recent_crashes.map(clock).join(', ') : 'empty') },
  { key: 'failed_at', label: 'failed', get: (w) => when(w.failed_at) },
  { key: 'failure_reason', label: 'why failed' },
];

// Columns of a worker's past statuses (worker_update events).
export const WORKER_EVENT_COLUMNS = [
  { label: 'time', get: (e) => clock(e.timestamp), title: (e) => new Date(e.timestamp).toLocaleString() },
  { label: 'status', get: (e) => (e.worker ? workerStatus(e.worker) : e.action ? 'action: ' + e.action.action : e.type) },
  { label: 'exit', cls: 'num', get: (e) => (e.worker && e.worker.status !== 'starting' && e.worker.status !== 'healthy' ? exitText(e.worker) : '') },
  { label: 'reason', cls: 'reason', get: (e) => (e.worker ? e.worker.reason || e.worker.failure_reason || '' : e.action ? e.action.result || '' : '') },
  { label: 'pid', cls: 'num', get: (e) => (e.worker && e.worker.pid) || '' },
  { label: 'host', get: (e) => (e.worker && e.worker.host) || '' },
  { label: 'restarts', cls: 'num', get: (e) => (e.worker ? e.worker.restart_count + ' / ' + e.worker.lifetime_restarts : '') },
];

const attempts = (j) => j.retried + ' / ' + j.max_retry;
const jobLink = (j) => link(j.id, jobHref(j.queue, j.id));
const payloadPreview = (j) => {
  const s = j.payload !== undefined ? JSON.stringify(j.payload) : j.payload_base64 ? 'base64:' + j.payload_base64 : '';
  return s.length > 80 ? s.slice(0, 80) + '…' : s;
};
const jobError = (j) => j.toxic_reason || j.last_error || '';

// Columns of the jobs table: the common ones, then by state.
export const JOB_COLUMNS = {
  common: [
    { label: 'id', cls: 'id', get: jobLink },
    { label: 'type', get: (j) => j.type },
    { label: 'payload', cls: 'payload', get: payloadPreview },
  ],
  pending: [
    { label: 'enqueued', get: (j) => ago(j.next_process_at) },
    { label: 'attempts', cls: 'num', get: attempts },
    { label: 'crashes', cls: 'num', get: (j) => j.crashes || '' },
  ],
  active: [
    { label: 'attempts', cls: 'num', get: attempts },
    { label: 'crashes', cls: 'num', get: (j) => j.crashes || '' },
    { label: 'deadline', get: (j) => clock(j.deadline) },
    { label: '', get: (j) => (j.orphaned ? badge('orphaned', 'lost') : '') },
  ],
  scheduled: [
    { label: 'runs', get: (j) => when(j.next_process_at) },
    { label: 'attempts', cls: 'num', get: attempts },
  ],
  retry: [
    { label: 'next attempt', get: (j) => when(j.next_process_at) },
    { label: 'attempts', cls: 'num', get: attempts },
    { label: 'crashes', cls: 'num', get: (j) => j.crashes || '' },
    { label: 'error', cls: 'reason', get: jobError },
  ],
  archived: [
    { label: 'failed', get: (j) => ago(j.last_failed_at) },
    { label: 'attempts', cls: 'num', get: attempts },
    { label: 'error', cls: 'reason', get: (j) => (j.toxic ? el('span', {}, badge('toxic', 'failed'), ' ', text(jobError(j))) : jobError(j)) },
  ],
  completed: [
    { label: 'completed', get: (j) => ago(j.completed_at) },
    { label: 'attempts', cls: 'num', get: attempts },
  ],
};

// Fields of a job's detail; payload and last_error have sections of their own.
export const JOB_FIELDS = [
  { key: 'id' },
  { key: 'queue' },
  { key: 'type' },
  { key: 'state', get: (j) => badge(j.state, j.state === 'archived' ? 'failed' : j.state === 'active' ? 'running' : j.state) },
  { key: 'retried', label: 'retries', get: (j) => j.retried + ' of ' + j.max_retry + ' used', also: ['max_retry'] },
  { key: 'crashes', label: 'crashes', get: (j) => String(j.crashes || 0) + (j.crashes ? ' (workers died running it)' : '') },
  { key: 'toxic', get: (j) => (j.toxic ? badge('toxic', 'failed') : null), also: ['toxic_reason'] },
  { key: 'next_process_at', label: 'due', get: (j) => when(j.next_process_at) },
  { key: 'last_failed_at', label: 'last failure', get: (j) => when(j.last_failed_at) },
  { key: 'completed_at', label: 'completed', get: (j) => when(j.completed_at) },
  { key: 'timeout_seconds', label: 'timeout', get: (j) => dur(j.timeout_seconds) },
  { key: 'deadline', get: (j) => when(j.deadline) },
  { key: 'orphaned', omitFalse: true, get: (j) => (j.orphaned ? 'yes: its worker is gone; asynq recovers it after the lease' : null) },
];

// Columns of a job's events (job_update events and actions on it).
export const JOB_EVENT_COLUMNS = [
  { label: 'time', get: (e) => clock(e.timestamp), title: (e) => new Date(e.timestamp).toLocaleString() },
  { label: 'event', get: (e) => (e.action ? 'action: ' + e.action.action : (e.data && e.data.state) || e.type) },
  { label: 'worker', get: (e) => (e.data && e.data.component ? link(e.data.component, workerHref(e.data.component)) : '') },
  { label: 'attempt', cls: 'num', get: (e) => (e.data && e.data.max_retry != null && !e.action ? e.data.retried + ' / ' + e.data.max_retry : '') },
  { label: 'took', cls: 'num', get: (e) => (e.data && e.data.duration_ms ? (e.data.duration_ms / 1000).toFixed(2) + ' s' : '') },
  { label: 'detail', cls: 'reason', get: (e) => (e.action ? e.action.result || '' : e.data ? [e.data.code, e.data.error, e.data.progress != null ? Math.round(e.data.progress) + '%' : '', e.data.crashes ? e.data.crashes + ' crashes' : ''].filter(Boolean).join(' · ') : '') },
];

// Columns of the hosts table (cluster view); actions are added by the view.
export const HOST_COLUMNS = [
  { label: 'host', cls: 'id', get: (h) => h.id },
  { label: 'status', get: (h) => badge(h.status || 'alive') },
  { label: 'leader', get: (h) => (h.leader ? 'leader' : '') },
  { label: 'slots', cls: 'num', get: (h) => h.slots },
  { label: 'capacity', cls: 'num', get: (h) => h.capacity || '∞' },
  { label: 'draining', cls: 'draining', get: (h) => (h.draining ? badge('draining', 'stopping') : '') },
  { label: 'version', get: (h) => h.version },
  { label: 'address', get: (h) => h.address },
  { label: 'seen', get: (h, ctx) => ago(h.seen_at, ctx.now) },
];

// Columns of the queues table (overview), from queue statistics s.
export const QUEUE_COLUMNS = [
  { label: 'pending', cls: 'num', get: (s) => s.pending },
  { label: 'running', cls: 'num', get: (s) => s.running },
  { label: 'scheduled', cls: 'num', get: (s) => s.scheduled },
  { label: 'retry', cls: 'num', get: (s) => s.retry },
  { label: 'archived', cls: 'num', get: (s) => s.archived },
  { label: 'completed', cls: 'num', get: (s) => s.completed, title: "completed jobs asynq still keeps (each for its retention); not a total" },
  { label: 'aggregating', cls: 'num', get: (s) => s.aggregating, title: 'jobs waiting in groups for their aggregator (hover: the groups)', cellTitle: (s) => (s.groups || []).map((g) => g.name + ': ' + g.size).join(', ') },
  { label: 'processed total', cls: 'num', get: (s) => s.processed_total, title: 'attempts processed since the queue began, successful or not' },
  { label: 'failed total', cls: 'num', get: (s) => s.failed_total, title: 'attempts that failed since the queue began, retried ones included' },
  { label: 'avg job', cls: 'num', get: (s) => (s.avg_job_ms ? (s.avg_job_ms / 1000).toFixed(1) + ' s' : '') },
  { label: 'ETA', cls: 'num', get: (s) => dur(s.eta_seconds) },
];

// Columns of the schedules table; the pause/resume and run-now buttons
// are added by the view. ctx has now.
const fireTime = (ms, now) => (ms ? clock(ms) + ' (' + (Math.abs(ms - now) < 1000 ? 'now' : ago(ms, now)) + ')' : '');
export const SCHEDULE_COLUMNS = [
  { label: 'schedule', cls: 'id', get: (s) => s.name },
  { label: 'spec', cls: 'spec', get: (s) => s.spec },
  { label: 'queue', get: (s) => link(s.queue, '#/jobs/' + encodeURIComponent(s.queue)) },
  { label: 'type', get: (s) => s.type },
  { label: 'state', cls: 'sstate', get: (s) => badge(s.paused ? 'paused' : 'active', s.paused ? 'stopped' : 'healthy') },
  { label: 'next fire', cls: 'next', get: (s, ctx) => fireTime(s.next_fire, ctx.now), title: (s) => (s.next_fire ? new Date(s.next_fire).toLocaleString() : '') },
  { label: 'last fire', cls: 'last', get: (s, ctx) => fireTime(s.last_fire, ctx.now), title: (s) => (s.last_fire ? 'tick of ' + new Date(s.last_fire).toLocaleString() : '') },
  { label: 'last task', cls: 'task', get: (s) => (s.last_task ? link(s.last_task, jobHref(s.queue, s.last_task)) : '') },
  { label: 'fires', cls: 'num fires', get: (s) => s.fires, title: 'tasks enqueued (ticks and triggers)' },
  { label: 'skipped', cls: 'num', get: (s) => s.skipped, title: 'ticks skipped by the catch-up policy or the unique option' },
  { label: 'catch-up', get: (s) => s.catch_up, title: 'what a new leader does with missed ticks: none, last or all' },
  { label: 'from', get: (s) => s.source, title: 'config: a configuration file; api: the admin API' },
];

// row renders one table row from columns.
export function cells(cols, obj, ctx = {}) {
  return cols.map((c) => {
    const v = c.get(obj, ctx);
    const cell = el('td', { class: c.cls || '' }, v instanceof Node ? v : text(v));
    if (typeof c.title === 'function') cell.title = c.title(obj);
    if (typeof c.cellTitle === 'function') cell.title = c.cellTitle(obj);
    return cell;
  });
}

export function headRow(cols, extra = []) {
  return el('tr', {}, cols.map((c) => el('th', { textContent: c.label, title: typeof c.title === 'string' ? c.title : '' })), extra.map((x) => el('th', { textContent: x })));
}
