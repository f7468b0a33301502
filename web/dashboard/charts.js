// Charts of the last 15 minutes: jobs done and failed per second per
// queue, and worker crashes per queue, counted from events (job_update on
// queue:jobs, worker_update on worker:*:status) — first those the stream
// still holds (GET api/v1/events/history), then the live ones. Drawn by
// uPlot (vendor/uplot, a global script).

export const WINDOW_MS = 15 * 60 * 1000;
export const BUCKET_MS = 5000;
const BUCKETS = WINDOW_MS / BUCKET_MS;
const COLORS = ['#2e90fa', '#12b76a', '#f79009', '#7a5af8', '#ee46bc', '#0e9384', '#f04438', '#667085'];

// Rates counts events in buckets of BUCKET_MS, by kind and queue. Each
// stream id is counted once (history and the live stream overlap).
export class Rates {
  constructor() {
    this.buckets = new Map(); // bucket start ms → {done: Map, failed: Map, crashes: Map}
    this.seen = new Map(); // stream id → timestamp
    this.status = new Map(); // component → last status seen
    this.from = Date.now(); // the counts are complete from here on
  }

  // add takes one event ({id, topic, type, timestamp, worker, data}); it
  // returns whether it counted it.
  add(e) {
    if (!e || !e.timestamp || e.type === 'snapshot') return false;
    if (e.id) {
      if (this.seen.has(e.id)) return false;
      this.seen.set(e.id, e.timestamp);
    }
    let kind = null, q = null;
    if (e.type === 'job_update' && e.topic === 'queue:jobs' && e.data) {
      q = e.data.queue;
      if (e.data.state === 'done') kind = 'done';
      else if (e.data.state === 'error' || e.data.state === 'toxic') kind = 'failed';
    } else if (e.type === 'worker_update' && e.worker) {
      const w = e.worker;
      const before = this.status.get(w.component);
      this.status.set(w.component, w.status);
      if (w.status === 'crashed' && before !== 'crashed') { kind = 'crashes'; q = w.queue_type; }
    }
    if (!kind || !q) return false;
    const t = e.timestamp - (e.timestamp % BUCKET_MS);
    if (t < Date.now() - WINDOW_MS - BUCKET_MS) return false;
    let b = this.buckets.get(t);
    if (!b) { b = { done: new Map(), failed: new Map(), crashes: new Map() }; this.buckets.set(t, b); }
    b[kind].set(q, (b[kind].get(q) || 0) + 1);
    return true;
  }

  prune(now = Date.now()) {
    const old = now - WINDOW_MS - BUCKET_MS;
    for (const t of this.buckets.keys()) if (t < old) this.buckets.delete(t);
    for (const [id, ts] of this.seen) if (ts < old) this.seen.delete(id);
  }

  // data returns uPlot's columns for kind: [times (s), one array per
  // queue]; done and failed are per second, crashes per bucket. Also the
  // total count in the window.
  data(kind, queues, now = Date.now()) {
    const end = now - (now % BUCKET_MS);
    const xs = [], ys = queues.map(() => []);
    let total = 0;
    for (let i = BUCKETS - 1; i >= 0; i--) {
      const t = end - i * BUCKET_MS;
      xs.push(t / 1000);
      const b = this.buckets.get(t);
      queues.forEach((q, j) => {
        const n = b ? b[kind].get(q) || 0 : 0;
        total += n;
        // Before the counts are complete the value is unknown, not 0.
        ys[j].push(t + BUCKET_MS <= this.from ? null : kind === 'crashes' ? n : n / (BUCKET_MS / 1000));
      });
    }
    return { cols: [xs, ...ys], total };
  }
}

// Chart is one uPlot chart of one kind, with a series per queue.
export class Chart {
  constructor(host, kind, title, unit) {
    this.host = host;
    this.kind = kind;
    this.title = title;
    this.unit = unit;
    this.queues = [];
    this.plot = null;
  }

  update(rates, queues) {
    const { cols, total } = rates.data(this.kind, queues);
    this.host.dataset.total = String(total);
    if (!this.plot || queues.join() !== this.queues.join()) this.build(queues, cols);
    else this.plot.setData(cols);
  }

  build(queues, cols) {
    if (this.plot) this.plot.destroy();
    this.queues = queues.slice();
    const bars = this.kind === 'crashes' && globalThis.uPlot.paths.bars ? globalThis.uPlot.paths.bars({ size: [0.8, 8] }) : undefined;
    const opts = {
      title: this.title,
      width: this.width(),
      height: 170,
      cursor: { drag: { x: false, y: false } },
      legend: { live: false },
      scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(this.kind === 'crashes' ? 2 : 1, max * 1.1)] } },
      axes: [{}, { label: this.unit, size: 50 }],
      series: [{}, ...queues.map((q, i) => ({
        label: q,
        stroke: COLORS[i % COLORS.length],
        fill: this.kind === 'crashes' ? COLORS[i % COLORS.length] + '99' : undefined,
        width: 1.5,
        paths: bars,
        points: { show: this.kind !== 'crashes', size: 3 },
        spanGaps: false,
        value: (u, v) => (v == null ? '–' : this.kind === 'crashes' ? String(v) : v.toFixed(2)),
      }))],
    };
    this.host.replaceChildren();
    this.plot = new globalThis.uPlot(opts, cols, this.host);
  }

  width() { return Math.max(260, this.host.clientWidth || 400); }

  resize() { if (this.plot) this.plot.setSize({ width: this.width(), height: 170 }); }
}
