// pgqueue dashboard: polls /api/state, renders tables and SVG charts, posts actions.
// No framework and no CDN: everything the page needs is served by `pgq dashboard`.
// The page runs under a strict Content-Security-Policy: no inline script or style, so styles are
// set through the CSSOM (el(tag, { style: { prop: value } })), never as a style attribute.
"use strict";

const CSRF = document.querySelector('meta[name="csrf-token"]').content;
const COLORS = ["#2f6fdf", "#2c8a4b", "#d9822b", "#8e44ad", "#c7362f", "#16a2b8", "#7f8c8d"];
const THROUGHPUT_MINUTES = 60; // the finished-per-minute chart: the hour ending now
const HISTORY = 150; // depth samples kept (5 minutes at one every 2 s)
const depthHistory = new Map(); // queue -> [[time ms, ready]]
let readOnly = document.querySelector('meta[name="read-only"]').content === "true";

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "onclick") node.addEventListener("click", value);
    else if (key === "style") Object.assign(node.style, value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(child ?? ""));
  }
  return node;
}

function seconds(value) {
  if (value === null || value === undefined) return "";
  const s = Math.max(0, Math.round(value));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
  return Math.floor(s / 3600) + "h " + Math.floor((s % 3600) / 60) + "m";
}

// What a handler reported with ctx.progress(): a fraction, or an object ({done, of} shown as
// "40/100", anything else as its JSON, shortened).
function progress(value) {
  if (value === null || value === undefined) return "";
  if (typeof value === "number") return Math.round(value * 100) + "%";
  if (typeof value === "object" && "done" in value && "of" in value) {
    return `${value.done}/${value.of}`;
  }
  const text = JSON.stringify(value);
  return text.length > 60 ? text.slice(0, 57) + "..." : text;
}

// The one way the page shows a time: its day, the time to the second and the zone offset, in
// the browser's zone ("2026-12-06 14:03:07+01:00", as `pgq` prints times).
function stamp(value) {
  const d = value instanceof Date ? value : new Date(value);
  if (Number.isNaN(d.getTime())) return String(value ?? "");
  const two = (n) => String(Math.abs(n)).padStart(2, "0");
  const offset = -d.getTimezoneOffset();
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ` +
    `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}` +
    `${offset < 0 ? "-" : "+"}${two(Math.trunc(offset / 60))}:${two(offset % 60)}`;
}

// A time as a <time> element (machine-readable datetime, the stamp as its text); "" for none.
function when(iso) {
  return iso ? el("time", { datetime: iso }, stamp(iso)) : "";
}

// A job id as a link to its page.
function jobId(id) {
  return el("a", { href: `#/jobs/${id}` }, String(id));
}

function num(value, col) {
  return el("td", { class: "num", "data-col": col }, String(value));
}

function button(label, action, body) {
  if (readOnly) return "";
  return el("button", { "data-action": action, onclick: () => act(action, body) }, label);
}

const rendered = new Map(); // table id -> JSON of the rows it shows

function fill(id, rows, render, emptyText) {
  // Unchanged rows are left alone, so an opened traceback or a hovered button survives polls.
  const key = JSON.stringify(rows) + readOnly;
  if (rendered.get(id) === key) return;
  rendered.set(id, key);
  const body = document.querySelector(`#${id} tbody`);
  const cols = document.querySelectorAll(`#${id} thead th`).length;
  body.replaceChildren(
    ...(rows.length ? rows.map(render) : [el("tr", {}, el("td", { colspan: cols, class: "empty" }, emptyText))])
  );
}

async function act(action, body) {
  const message = document.getElementById("message");
  const response = await fetch(`/api/${action}`, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": CSRF },
    body: JSON.stringify(body),
  });
  message.textContent = response.ok
    ? `${action}: done`
    : `${action} failed: ${await response.text()}`;
  await refresh();
  if (currentView() !== "overview") await route();
}

// Rates are counts over a window the page states (jobs finished since its start, to now), not a
// per-minute average of complete minutes that reads 0.2 right after 40 jobs finished.
const RATE_MINUTES = 5;

function recentCounts(state) {
  const start = minuteOf(Date.parse(state.now)) - (RATE_MINUTES - 1) * 60000;
  const counts = new Map();
  for (const row of state.throughput) {
    if (Date.parse(row.minute) < start) continue;
    const c = counts.get(row.queue) || { done: 0, failed: 0 };
    c.done += row.succeeded;
    c.failed += row.retried + row.dead;
    counts.set(row.queue, c);
  }
  return { start, counts };
}

function minuteOf(ms) {
  return Math.floor(ms / 60000) * 60000;
}

function renderQueues(state) {
  const { start, counts } = recentCounts(state);
  // A queue whose jobs all finished in the current minute is not yet in queue_stats (its
  // per-minute figures count complete minutes): it is shown, with what it finished.
  const idle = { ready: 0, scheduled: 0, running: 0, dead: 0, oldest_ready_age: null, paused: false };
  const known = new Set(state.queues.map((q) => q.queue));
  const queues = [...state.queues, ...[...counts.keys()].filter((name) => !known.has(name))
    .map((name) => ({ ...idle, queue: name }))]
    .map((q) => ({ ...q, ...(counts.get(q.queue) || { done: 0, failed: 0 }) }));
  document.getElementById("rate-window").replaceChildren(
    "done and failed: jobs finished since ", when(new Date(start).toISOString()),
    `, the last ${RATE_MINUTES} minutes (to now)`);
  fill("queues", queues, (q) =>
    el("tr", { "data-queue": q.queue },
      el("td", {}, q.queue),
      num(q.ready, "ready"), num(q.scheduled, "scheduled"), num(q.running, "running"),
      num(q.dead, "dead"),
      el("td", { "data-col": "oldest_ready_age" }, seconds(q.oldest_ready_age)),
      num(q.done, "done"), num(q.failed, "failed"),
      el("td", { class: q.paused ? "paused" : "" }, q.paused ? "paused" : "active"),
      el("td", {}, q.paused ? button("resume", "resume", { queue: q.queue })
                            : button("pause", "pause", { queue: q.queue }))),
    "no queues yet");
}

function renderRunning(running) {
  fill("running", running, (j) =>
    el("tr", { "data-job": j.id },
      el("td", {}, jobId(j.id)), el("td", {}, j.queue), el("td", {}, j.task),
      el("td", {}, `${j.attempt}/${j.max_attempts}`),
      el("td", {}, j.host ? `${j.host}:${j.pid}` : String(j.worker_id || "").slice(0, 8)),
      el("td", {}, seconds(j.running_for)), el("td", {}, seconds(j.lease_left)),
      el("td", { class: "progress" }, progress(j.progress)),
      el("td", {}, j.cancel_requested ? "cancelling…" : button("cancel", "cancel", { id: j.id }))),
    "nothing running");
}

function renderWaiting(waiting) {
  fill("waiting", waiting, (j) =>
    el("tr", { "data-job": j.id },
      el("td", {}, jobId(j.id)), el("td", {}, j.queue), el("td", {}, j.task),
      el("td", {}, `${j.attempts}/${j.max_attempts}`), el("td", {}, when(j.run_at)),
      el("td", { class: "error" }, j.last_error || ""),
      el("td", {}, button("retry now", "retry", { id: j.id }), " ",
                   button("cancel", "cancel", { id: j.id }))),
    "nothing scheduled");
}

function renderWorkers(workers) {
  fill("workers", workers, (w) =>
    el("tr", { "data-worker": w.id },
      el("td", {}, w.id.slice(0, 8)), el("td", {}, w.host), el("td", {}, String(w.pid)),
      el("td", {}, w.queues.join(",")),
      el("td", { class: w.status === "lost" ? "lost" : "" }, w.status),
      el("td", {}, when(w.started_at)), el("td", {}, when(w.last_seen)),
      num(w.jobs_held, "jobs_held"), num(w.jobs_succeeded, "jobs_succeeded"),
      num(w.jobs_dead, "jobs_dead")),
    "no workers running");
}

function bytes(value) {
  if (value < 1024 * 1024) return Math.round(value / 1024) + " kB";
  return (value / (1024 * 1024)).toFixed(1) + " MB";
}

// What holds back VACUUM (pgqueue.horizon) and pgqueue's tables' dead rows and sizes.
function renderHorizon(horizon) {
  const warning = document.getElementById("horizon-warning");
  warning.hidden = !horizon.warning;
  warning.textContent = horizon.warning ? "warning: " + horizon.warning : "";
  const bloat = document.getElementById("bloat-warning");
  bloat.hidden = !horizon.bloat_warning;
  bloat.textContent = horizon.bloat_warning ? "warning: " + horizon.bloat_warning : "";
  document.getElementById("horizon-age").textContent = horizon.holders.length
    ? `oldest snapshot: ${seconds(horizon.oldest_snapshot_age_seconds)}, ` +
      `xmin age ${horizon.oldest_xmin_age.toLocaleString()} transactions`
    : "no open snapshot holds back VACUUM";
  fill("horizon", horizon.holders, (h) =>
    el("tr", { "data-pid": h.pid ?? "", "data-holder": h.holder },
      el("td", {}, h.holder + (h.catalog_only ? " (catalogs only)" : "")),
      el("td", {}, h.pid === null ? "" : String(h.pid)), el("td", {}, h.name ?? ""),
      el("td", {}, h.role ?? ""), el("td", {}, h.state ?? ""),
      el("td", { "data-col": "age" }, seconds(h.age_seconds)),
      num(h.xmin_age ?? "", "xmin_age")),
    "nothing holds the horizon");
  fill("tables", horizon.tables, (t) =>
    el("tr", { "data-table": t.table_name },
      el("td", {}, t.table_name), num(t.live_tuples, "live_tuples"),
      num(t.dead_tuples, "dead_tuples"), num(bytes(t.table_bytes), "table_bytes"),
      num(bytes(t.index_bytes), "index_bytes"),
      num(t.estimated_table_bytes === null ? ""
        : `${bytes(t.estimated_table_bytes)} + ${bytes(t.estimated_index_bytes)}`, "rebuilt"),
      el("td", {}, when(t.last_vacuum))),
    "no tables");
}

function renderFailures(failures) {
  fill("failures", failures, (f) =>
    el("tr", { "data-queue": f.queue, "data-task": f.task },
      el("td", {}, f.queue), el("td", {}, f.task), num(f.retried, "retried"), num(f.dead, "dead"),
      el("td", { class: "error" }, f.error_class ? `${f.error_class}: ${f.last_error}`
        // Counted, but no job keeps the error any more: it succeeded on a later attempt (or was
        // cancelled or purged) and took its errors with it.
        : el("span", { class: "empty" }, "error not kept: the job has since succeeded or gone")),
      el("td", {}, when(f.failed_at))),
    "no failures in the last hour");
}

function renderDead(dead) {
  fill("dead", dead, (d) =>
    el("tr", { "data-dead": d.id },
      el("td", {}, jobId(d.id)), el("td", {}, d.queue), el("td", {}, d.task),
      el("td", {}, `${d.attempts}/${d.max_attempts}`),
      el("td", { class: "error" },
        el("details", {},
          el("summary", {}, `${d.error_class || ""}: ${d.last_error || d.reason}`),
          el("pre", {}, d.traceback || "(no traceback)"))),
      el("td", {}, when(d.dead_at)),
      el("td", {}, button("replay", "replay", { id: d.id }))),
    "no dead letters");
}

// axis: {start, end, startLabel, endLabel} fixes the x axis (else it spans the points).
function lineChart(svgId, legendId, series, axis) {
  const svg = document.getElementById(svgId);
  const W = 600, H = 180, L = 40, R = 10, T = 10, B = 22;
  const points = series.flatMap((s) => s.points);
  const xs = points.map((p) => p[0]);
  const xMin = axis.start ?? Math.min(...xs);
  const xMax = axis.end ?? Math.max(...xs, xMin + 1);
  const yMax = Math.max(1, ...points.map((p) => p[1]));
  const x = (v) => L + ((v - xMin) / (xMax - xMin)) * (W - L - R);
  const y = (v) => H - B - (v / yMax) * (H - T - B);
  const ns = "http://www.w3.org/2000/svg";
  const make = (tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  };
  const nodes = [
    make("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, stroke: "#ccc" }),
    make("line", { x1: L, y1: T, x2: L, y2: H - B, stroke: "#ccc" }),
    make("text", { x: L - 4, y: T + 8, "text-anchor": "end" }, String(yMax)),
    make("text", { x: L - 4, y: H - B, "text-anchor": "end" }, "0"),
    make("text", { x: W - R, y: H - 6, "text-anchor": "end", "data-axis": "end" }, axis.endLabel),
  ];
  if (points.length || axis.start !== undefined) {
    nodes.push(make("text", { x: L, y: H - 6, "data-axis": "start" },
      axis.startLabel ?? stamp(new Date(xMin))));
  }
  series.forEach((s, i) => {
    if (!s.points.length) return;
    const d = s.points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
    nodes.push(make("polyline", {
      points: d, fill: "none", stroke: COLORS[i % COLORS.length], "stroke-width": 2,
      "data-series": s.name,
    }));
  });
  svg.replaceChildren(...nodes);
  document.getElementById(legendId).replaceChildren(...series.map((s, i) =>
    el("span", {}, el("i", { style: { background: COLORS[i % COLORS.length] } }), s.name)));
}

function renderCharts(state) {
  const now = Date.now();
  for (const q of state.queues) {
    const history = depthHistory.get(q.queue) || [];
    history.push([now, q.ready]);
    depthHistory.set(q.queue, history.slice(-HISTORY));
  }
  lineChart("depth-chart", "depth-legend",
    [...depthHistory].map(([name, points]) => ({ name, points })), { endLabel: "now" });
  // The hour ending now, one point a minute: a minute nobody finished a job in is a zero (the
  // counts are exact), not a straight line from the minute before to the minute after.
  const last = minuteOf(Date.parse(state.now));
  const first = last - (THROUGHPUT_MINUTES - 1) * 60000;
  const byQueue = new Map();
  for (const row of state.throughput) {
    const at = Date.parse(row.minute);
    if (at < first || at > last) continue;
    if (!byQueue.has(row.queue)) byQueue.set(row.queue, new Array(THROUGHPUT_MINUTES).fill(0));
    byQueue.get(row.queue)[(at - first) / 60000] += row.succeeded;
  }
  lineChart("throughput-chart", "throughput-legend",
    [...byQueue].map(([name, counts]) => ({
      name, points: counts.map((count, i) => [first + i * 60000, count]),
    })),
    { start: first, end: last, startLabel: `${THROUGHPUT_MINUTES - 1} min ago`, endLabel: "now" });
}

async function refresh() {
  try {
    const response = await fetch("/api/state", { credentials: "same-origin" });
    if (!response.ok) throw new Error(`HTTP ${response.status}`);
    const state = await response.json();
    readOnly = state.read_only;
    document.getElementById("mode").textContent = readOnly ? "read-only" : "";
    renderQueues(state);
    renderRunning(state.running);
    renderWaiting(state.waiting);
    renderWorkers(state.workers);
    renderHorizon(state.horizon);
    renderFailures(state.failures);
    renderDead(state.dead);
    renderCharts(state);
    document.getElementById("updated").textContent = "updated " + stamp(new Date());
    document.body.dataset.loaded = "true";
  } catch (error) {
    document.getElementById("updated").textContent = "update failed: " + error.message;
  }
}

// ---- Search (#/search?filters) and the job page (#/jobs/ID) --------------------------------

const TIME_FIELDS = new Set(["since", "until", "finished_since", "finished_until"]);
const VIEWS = ["overview", "search-view", "job-view"];

function currentView() {
  return VIEWS.find((id) => !document.getElementById(id).hidden);
}

function showView(id) {
  for (const view of VIEWS) document.getElementById(view).hidden = view !== id;
}

function hashParts() {
  const [path, query = ""] = (location.hash || "#/").slice(1).split("?");
  return [path, new URLSearchParams(query)];
}

async function route() {
  const [path, params] = hashParts();
  if (path.startsWith("/jobs/")) {
    showView("job-view");
    await loadJob(path.slice("/jobs/".length));
  } else if (path === "/search") {
    showView("search-view");
    await runSearch(params);
  } else {
    showView("overview");
  }
}

function localInput(iso) {
  // An ISO time as a datetime-local input shows it: the browser's local time, no zone.
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return "";
  return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 19);
}

function fillForm(params) {
  const form = document.getElementById("search-form");
  for (const input of form.elements) {
    if (!input.name) continue;
    const value = params.get(input.name) || "";
    input.value = TIME_FIELDS.has(input.name) && value ? localInput(value) : value;
  }
}

function submitSearch(event) {
  event.preventDefault();
  const params = new URLSearchParams();
  for (const [name, value] of new FormData(event.target)) {
    if (!value) continue;
    params.set(name, TIME_FIELDS.has(name) ? new Date(value).toISOString() : value);
  }
  const hash = "#/search?" + params;
  if (location.hash === hash) route();
  else location.hash = hash;
}

async function runSearch(params) {
  fillForm(params);
  const status = document.getElementById("search-status");
  const next = document.getElementById("search-next");
  const first = document.getElementById("search-first");
  status.textContent = "searching…";
  document.body.dataset.searched = "false";
  const response = await fetch("/api/search?" + params, { credentials: "same-origin" });
  if (!response.ok) {
    status.textContent = `search failed: ${await response.text()}`;
    document.getElementById("results").querySelector("tbody").replaceChildren();
    next.hidden = true;
    document.body.dataset.searched = "true";
    return;
  }
  const page = await response.json();
  rendered.delete("results");
  fill("results", page.jobs, (j) =>
    el("tr", { "data-job": j.id, "data-state": j.state },
      el("td", {}, jobId(j.id)),
      el("td", {}, j.state), el("td", {}, j.queue), el("td", {}, j.task),
      el("td", {}, `${j.attempts}/${j.max_attempts}`),
      el("td", {}, when(j.created_at)), el("td", {}, when(j.finished_at)),
      el("td", { class: "tags" }, (j.tags || []).join(", ")),
      el("td", { class: "error" }, j.error_class ? `${j.error_class}: ${j.last_error}` : (j.last_error || ""))),
    "no jobs match");
  status.textContent = `${page.jobs.length} job(s)` + (page.cursor ? ", more on the next page" : "");
  next.hidden = !page.cursor;
  next.dataset.cursor = page.cursor || "";
  first.hidden = !params.get("after");
  document.body.dataset.searched = "true";
}

function pageLink(after) {
  const [, params] = hashParts();
  if (after) params.set("after", after);
  else params.delete("after");
  location.hash = "#/search?" + params;
}

const TIME_COLUMNS = new Set(["created_at", "run_at", "started_at", "finished_at", "dead_at",
  "keep_until", "lease_expires_at", "wake_at"]);

const JOB_FIELDS = [
  "place", "state", "queue", "task", "priority", "attempts", "max_attempts", "created_at",
  "run_at", "started_at", "finished_at", "dead_at", "keep_until", "worker_id",
  "lease_expires_at", "cancel_requested", "idempotency_key", "concurrency_key", "reason",
];

function jobLink(n) {
  return el("li", { "data-neighbour": n.id },
    el("a", { href: `#/jobs/${n.id}` }, `#${n.id}`), ` ${n.name ? n.name + " · " : ""}${n.task || "?"} (${n.state})`);
}

// The columns of a job's durable steps (pgqueue.job_step_status), as pgq jobs show lists them.
const STEP_COLUMNS = ["seq", "name", "kind", "state", "attempts", "finished_at", "duration",
  "result_size", "error", "wake_at", "event"];

async function loadJob(id) {
  const title = document.getElementById("job-title");
  document.body.dataset.job = "";
  const response = await fetch(`/api/jobs/${encodeURIComponent(id)}`, { credentials: "same-origin" });
  const parts = ["job-fields", "job-args", "job-meta", "job-tags", "job-result", "job-errors",
    "job-workflow", "job-steps", "job-actions"];
  if (!response.ok) {
    title.textContent = `job ${id}: ${await response.text()}`;
    for (const part of parts) {
      const node = document.getElementById(part);
      (node.tagName === "TABLE" ? node.querySelector("tbody") : node).replaceChildren();
    }
    document.body.dataset.job = id;
    return;
  }
  const job = await response.json();
  title.textContent = `job ${job.id}: ${job.task} (${job.state})`;
  document.getElementById("job-fields").querySelector("tbody").replaceChildren(
    ...JOB_FIELDS.filter((f) => job[f] !== undefined && job[f] !== null).map((f) =>
      el("tr", { "data-field": f }, el("th", {}, f),
        el("td", {}, TIME_COLUMNS.has(f) ? when(job[f]) : String(job[f])))));
  document.getElementById("job-args").textContent = JSON.stringify(job.args, null, 2);
  document.getElementById("job-meta").textContent = job.meta ? JSON.stringify(job.meta, null, 2) : "none";
  document.getElementById("job-tags").replaceChildren(
    ...(job.tags && job.tags.length
      ? job.tags.map((tag) => el("a", { class: "tag", href: "#/search?" + new URLSearchParams({ tag }) }, tag))
      : [el("span", { class: "empty" }, "no tags")]));
  document.getElementById("job-result").replaceChildren(
    ...(job.result !== undefined && job.result !== null
      ? [el("h3", {}, "Result"), el("pre", { id: "job-result-value" }, JSON.stringify(job.result, null, 2))]
      : []));
  const errors = job.errors || [];
  document.getElementById("job-errors").replaceChildren(
    ...(errors.length ? errors.flatMap((e) => [
      // Replayed from the dead letters: attempts count from 1 again after this line.
      ...(e.replayed ? [el("div", { class: "replay" }, "replayed ",
        e.replayed_at ? when(e.replayed_at) : "(time not recorded)",
        " from the dead letters: attempts count again from 1")] : []),
      el("div", { class: "attempt", "data-attempt": e.attempt },
        el("strong", {}, `attempt ${e.attempt}: ${e.error || ""}: ${e.message || ""}`),
        el("span", { class: "empty" }, " ", when(e.at),
          ` ${e.worker_id ? "worker " + String(e.worker_id).slice(0, 8) : ""}`
          + (e.trace ? ` trace ${e.trace}` : "")),
        el("pre", { class: "traceback" }, e.traceback || "(no traceback)"))])
      : [el("p", { class: "empty" }, "no failed attempts")]));
  const wf = job.workflow;
  document.getElementById("job-workflow").replaceChildren(
    ...(wf ? [
      el("p", {}, `workflow ${wf.id}${wf.name ? " (" + wf.name + ")" : ""}` +
        `${wf.node_name ? ", step " + wf.node_name : ""}${wf.role === "on_failure" ? ", its on_failure step" : ""}`),
      el("h3", {}, "Waits for"),
      el("ul", { id: "job-parents" }, ...(wf.parents.length ? wf.parents.map(jobLink) : [el("li", { class: "empty" }, "nothing")])),
      el("h3", {}, "Then runs"),
      el("ul", { id: "job-dependents" }, ...(wf.dependents.length ? wf.dependents.map(jobLink) : [el("li", { class: "empty" }, "nothing")])),
    ] : [el("p", { class: "empty" }, "not part of a workflow")]));
  // Durable jobs: what a parked job waits for, and its steps in the order they ran.
  const parked = job.parked;
  const steps = job.steps || [];
  document.getElementById("job-steps").replaceChildren(
    ...(parked ? [el("p", { id: "job-parked" }, parked.kind === "sleep"
      ? "sleeping until " : `waiting for event ${JSON.stringify(parked.event)} until `, when(parked.until))] : []),
    ...(steps.length ? [el("table", { id: "job-step-rows" },
      el("thead", {}, el("tr", {}, ...STEP_COLUMNS.map((c) => el("th", {}, c)))),
      el("tbody", {}, ...steps.map((s) => el("tr", { "data-seq": s.seq },
        ...STEP_COLUMNS.map((c) => el("td", {}, s[c] === null || s[c] === undefined ? ""
          : TIME_COLUMNS.has(c) ? when(s[c]) : String(s[c])))))))]
      : [el("p", { class: "empty" }, "no durable steps")]));
  const labels = { cancel: "cancel", retry: "retry now", replay: "replay" };
  document.getElementById("job-actions").replaceChildren(
    ...job.actions.map((a) => button(labels[a] || a, a, { id: job.id })));
  document.body.dataset.job = String(job.id);
}

document.getElementById("search-form").addEventListener("submit", submitSearch);
document.getElementById("search-next").addEventListener("click", (e) => pageLink(e.target.dataset.cursor));
document.getElementById("search-first").addEventListener("click", () => pageLink(null));
window.addEventListener("hashchange", route);

route();
refresh();
setInterval(refresh, 2000);
