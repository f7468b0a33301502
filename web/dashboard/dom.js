// DOM and formatting helpers. Every value from the API reaches the page
// through textContent or a property: nothing here parses HTML.

export const $ = (sel, root = document) => root.querySelector(sel);
export const $$ = (sel, root = document) => [...root.querySelectorAll(sel)];

// el('tr', {class, data: {...}, on: {click}, ...props}, ...children):
// strings become text nodes.
export function el(tag, props = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (v == null) continue;
    if (k === 'class') e.className = v;
    else if (k === 'data') for (const [dk, dv] of Object.entries(v)) { if (dv != null) e.dataset[dk] = dv; }
    else if (k === 'on') for (const [ev, fn] of Object.entries(v)) e.addEventListener(ev, fn);
    else if (k === 'attrs') for (const [ak, av] of Object.entries(v)) e.setAttribute(ak, av);
    else e[k] = v;
  }
  for (const kid of kids.flat()) if (kid != null && kid !== false) e.append(kid);
  return e;
}

export const text = (v) => (v == null ? '' : String(v));
export const td = (v, cls) => el('td', { class: cls || '' }, v instanceof Node ? v : text(v));
export const badge = (label, cls) => el('span', { class: 'status s-' + String(cls || label).replace(/[^a-z0-9_-]/gi, '-'), textContent: text(label) });
export const button = (label, cls, onClick, props = {}) => el('button', { type: 'button', class: cls, textContent: label, on: { click: onClick }, ...props });
export const link = (label, href, cls) => el('a', { href, class: cls || '', textContent: text(label) });

export function ago(ms, now = Date.now()) {
  if (!ms) return '';
  const s = Math.round((now - ms) / 1000);
  if (s < 0) return 'in ' + dur(-s);
  return s < 60 ? s + 's ago' : s < 3600 ? Math.floor(s / 60) + 'm ago' : s < 86400 ? Math.floor(s / 3600) + 'h ago' : Math.floor(s / 86400) + 'd ago';
}

export function dur(sec) {
  if (!sec) return '';
  sec = Math.round(sec);
  if (sec < 60) return sec + 's';
  if (sec < 3600) return Math.floor(sec / 60) + 'm ' + (sec % 60) + 's';
  return Math.floor(sec / 3600) + 'h ' + Math.floor((sec % 3600) / 60) + 'm';
}

// when: a time as the operator reads it, with how long ago.
export function when(ms) {
  if (!ms) return '';
  const d = new Date(ms);
  const same = new Date().toDateString() === d.toDateString();
  return (same ? d.toLocaleTimeString() : d.toLocaleString()) + ' (' + ago(ms) + ')';
}

export const clock = (ms) => (ms ? new Date(ms).toLocaleTimeString() : '');

// capped returns s cut to max characters, and how much was cut.
export function capped(s, max) {
  s = text(s);
  return s.length <= max ? { text: s, cut: 0 } : { text: s.slice(0, max), cut: s.length - max };
}

export function bytes(n) {
  if (n < 1024) return n + ' B';
  if (n < 1 << 20) return (n / 1024).toFixed(1) + ' KiB';
  return (n / (1 << 20)).toFixed(1) + ' MiB';
}

// detailList renders fields of obj as a <dl>: first those of spec (in its
// order), then every other field the API sent that spec does not name
// (so a field added to the API shows up without a change here), except
// those in skip.
export function detailList(obj, spec, skip = []) {
  const dl = el('dl', { class: 'detail' });
  const seen = new Set(skip);
  for (const f of spec) {
    seen.add(f.key);
    for (const k of f.also || []) seen.add(k);
    const v = f.get ? f.get(obj) : obj[f.key];
    if (v == null || v === '' || (f.omitFalse && v === false)) continue;
    dl.append(el('dt', { textContent: f.label || f.key }), el('dd', { data: { field: f.key } }, v instanceof Node ? v : text(v)));
  }
  for (const [k, v] of Object.entries(obj)) {
    if (seen.has(k) || v == null || v === '') continue;
    dl.append(el('dt', { textContent: k }), el('dd', { data: { field: k } }, genericValue(k, v)));
  }
  return dl;
}

// genericValue formats a field the page has no rule for: times by their
// name, objects as JSON (capped).
function genericValue(k, v) {
  if (typeof v === 'number' && /(_at|_since|deadline|heartbeat|_restart)$/.test(k) && v > 1e11) return when(v);
  if (typeof v === 'object') return capped(JSON.stringify(v), 2000).text;
  return text(v);
}
