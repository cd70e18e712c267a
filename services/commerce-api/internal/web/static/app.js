// The live page: one EventSource on /api/v1/stream, the REST API for the
// first lists and for actions. No framework, no build step.
"use strict";

const TOP = 8;                 // products per list
const HISTORY = 60;            // chart points (one summary a second)
const STALE_MS = 5000;         // no frame for this long: the stream is dead

const products = new Map();    // id -> {id, name, likeCount, salesCount, viewCount, ...}
const history = [];            // {eps, stages: {name: avg ms}}
// The stages of an event's path, in order, with their chart colours (the
// legend's in style.css).
const STAGES = [
  { name: "outbox", color: "#8f7cff" },
  { name: "publish", color: "#ffb020" },
  { name: "broker", color: "#3ecf8e" },
  { name: "apply", color: "#ff6b8b" },
];
const $ = (id) => document.getElementById(id);

// ---- connection ---------------------------------------------------------

let source = null;
let lastEventId = "";
let lastFrame = 0;

function setStatus(live) {
  const el = $("status");
  el.className = "status " + (live ? "live" : "reconnecting");
  el.textContent = live ? "live" : "disconnected — reconnecting…";
}

function connect() {
  if (source) source.close();
  // A new EventSource cannot send Last-Event-ID itself; the query says it.
  const url = "/api/v1/stream" + (lastEventId ? "?lastEventId=" + encodeURIComponent(lastEventId) : "");
  source = new EventSource(url);
  lastFrame = Date.now();
  source.onopen = () => { lastFrame = Date.now(); };
  source.onerror = () => {
    setStatus(false);
    // CONNECTING: the browser retries by itself, with Last-Event-ID.
    // CLOSED (an error status such as 503): retry ourselves.
    if (source.readyState === EventSource.CLOSED) setTimeout(connect, 1000);
  };
  const seen = (e) => {
    lastFrame = Date.now();
    if (e.lastEventId) lastEventId = e.lastEventId;
    setStatus(true);
  };
  source.addEventListener("ready", (e) => { seen(e); loadTops(); });
  source.addEventListener("products", (e) => { seen(e); applyChanges(JSON.parse(e.data).products); });
  // The server could not say what changed since lastEventId cheaply (too
  // much, or an id it never handed out): start over from its top products.
  source.addEventListener("reset", (e) => {
    seen(e);
    products.clear();
    for (const p of JSON.parse(e.data).products) merge(p, false);
    render(new Set());
  });
  source.addEventListener("summary", (e) => { seen(e); showSummary(JSON.parse(e.data)); });
}

// Summaries come every second; silence means a dead connection the browser
// has not noticed (a killed server behind a proxy, a sleeping laptop).
setInterval(() => {
  if (Date.now() - lastFrame > STALE_MS) { setStatus(false); connect(); }
}, 1000);

// ---- products -----------------------------------------------------------

async function loadTops() {
  for (const sort of ["likes_desc", "sales_desc", "views_desc"]) {
    try {
      const r = await fetch(`/api/v1/products?sort=${sort}&size=${TOP}`, { headers: { Accept: "application/json" } });
      if (!r.ok) continue;
      for (const p of (await r.json()).items) merge(p, false);
    } catch (_) { /* the stream's status says it */ }
  }
  render(new Set());
}

// merge records p; it returns the fields whose value changed.
function merge(p, report) {
  const old = products.get(p.id);
  const next = Object.assign({}, old || {}, p);
  products.set(p.id, next);
  const changed = [];
  if (report && old) for (const f of ["likeCount", "salesCount", "viewCount"]) if (old[f] !== next[f]) changed.push(f);
  return changed;
}

function applyChanges(list) {
  const flash = new Set();
  for (const p of list) for (const f of merge(p, true)) flash.add(p.id + ":" + f);
  render(flash);
}

function render(flash) {
  for (const ol of document.querySelectorAll(".lists ol")) {
    const field = ol.dataset.field;
    const top = [...products.values()]
      .sort((a, b) => (b[field] || 0) - (a[field] || 0) || b.id - a.id)
      .slice(0, TOP);
    // Reuse the row of a product so that only what changed moves or flashes.
    const rows = new Map([...ol.children].map((li) => [li.dataset.id, li]));
    ol.replaceChildren(...top.map((p) => {
      let li = rows.get(String(p.id));
      if (!li) {
        li = document.createElement("li");
        li.dataset.id = p.id;
        li.innerHTML = '<span class="name"></span><span class="count"></span>';
      }
      li.querySelector(".name").textContent = `#${p.id} ${p.name || ""}`;
      const c = li.querySelector(".count");
      c.textContent = p[field] || 0;
      if (flash.has(p.id + ":" + field)) {
        c.classList.remove("flash");
        void c.offsetWidth; // restart the animation
        c.classList.add("flash");
      }
      return li;
    }));
  }
}

// ---- summary and chart --------------------------------------------------

function ms(n) { return n == null ? "–" : n < 1000 ? `${n} ms` : `${(n / 1000).toFixed(1)} s`; }

function showSummary(s) {
  $("s-backlog").textContent = s.outboxBacklog;
  $("s-oldest").textContent = s.outboxBacklog ? ms(s.oldestUnpublishedMs) : "–";
  $("s-leader").textContent = s.relayLeader ? `elected (term ${s.leaderToken})` : "none";
  $("s-failed").textContent = s.outboxFailed;
  $("s-streams").textContent = s.streams;
  const c = s.cluster;
  $("s-nodes").textContent = c ? nodesText(c.nodes) : "no cluster view";
  if (c) {
    $("s-groups").replaceChildren(...c.groups.map((g) => {
      const tr = document.createElement("tr");
      // Dead letters and the rate show once the owners reported them.
      const dlt = g.deadLetters == null ? "" : ` · ${g.deadLetters} dead letters`;
      const rate = g.eventsPerSec == null ? "" : ` · ${Math.round(g.eventsPerSec)}/s`;
      for (const v of [g.name, g.partitions, g.lag + rate + dlt]) {
        const td = document.createElement("td");
        td.textContent = v;
        tr.append(td);
      }
      return tr;
    }));
  }
  const eps = s.eventsPerSec;
  const stages = {};
  for (const st of (c && c.stages) || []) stages[st.name] = st;
  history.push({ eps, stages: Object.fromEntries(STAGES.map((st) => [st.name, stages[st.name] ? stages[st.name].avgMs : null])) });
  if (history.length > HISTORY) history.shift();
  $("chart-now").textContent = `${eps.toFixed(1)} order and view events/s · end-to-end lag ${ms(s.lagMaxMs)} (max, avg ${ms(s.lagAvgMs)})`;
  showStages(stages);
  drawChart();
}

// fine prints a stage figure in ms with the precision it has.
function fine(n) { return n == null ? "–" : n < 10 ? `${n.toFixed(2)} ms` : ms(Math.round(n)); }

function showStages(stages) {
  for (const tr of $("stages").children) {
    const st = stages[tr.dataset.stage];
    const cells = tr.children;
    cells[2].textContent = st ? fine(st.p50Ms) : "–";
    cells[3].textContent = st ? fine(st.p99Ms) : "–";
    cells[4].textContent = st ? st.events : "–";
  }
}

// nodesText counts alive nodes per service: "3 / 3 (api 1, relay 2)".
function nodesText(nodes) {
  const per = {};
  for (const n of nodes) per[n.service] = (per[n.service] || 0) + (n.alive ? 1 : 0);
  const parts = Object.entries(per).map(([svc, k]) => `${svc} ${k}`).join(", ");
  return `${nodes.filter((n) => n.alive).length} / ${nodes.length}` + (parts ? ` (${parts})` : "");
}

// stackTop is the right axis's top for the stacks whose tops are tops: the
// highest, but at most three times the median, so that a few seconds of
// backlog (a consumer group joining while events wait, a broker failing
// over) are clipped at the top edge instead of flattening every other
// second's bands for the minute the chart shows.
function stackTop(tops) {
  const sorted = tops.filter((v) => v > 0).sort((a, b) => a - b);
  if (sorted.length === 0) return 1;
  const median = sorted[Math.floor((sorted.length - 1) / 2)];
  return Math.max(1, Math.min(sorted[sorted.length - 1], 3 * median)) * 1.1;
}

function drawChart() {
  const cv = $("chart");
  const dpr = window.devicePixelRatio || 1;
  const w = cv.clientWidth, h = cv.clientHeight;
  if (cv.width !== w * dpr) { cv.width = w * dpr; cv.height = h * dpr; }
  const g = cv.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  const pad = 24, step = (w - 2 * pad) / (HISTORY - 1);
  const xOf = (i) => pad + (HISTORY - history.length + i) * step;
  g.strokeStyle = "#2a3340";
  g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = pad + (h - 2 * pad) * i / 4;
    g.beginPath(); g.moveTo(pad, y); g.lineTo(w - pad, y); g.stroke();
  }
  g.font = "11px system-ui";

  // The stages' averages, stacked (right axis): each band is a stage, the
  // top of the stack about the end to end (publish and broker overlap by
  // the produce round trip). A summary without a stage draws it as 0.
  const stacks = history.map((p) => {
    let sum = 0;
    return STAGES.map((st) => (sum += p.stages[st.name] || 0));
  });
  const msTop = stackTop(stacks.map((s) => s[s.length - 1]));
  const yMs = (v) => h - pad - (h - 2 * pad) * Math.min(v, msTop) / msTop;
  STAGES.forEach((st, k) => {
    if (history.length < 2) return;
    g.fillStyle = st.color;
    g.beginPath();
    stacks.forEach((s, i) => (i ? g.lineTo(xOf(i), yMs(s[k])) : g.moveTo(xOf(i), yMs(s[k]))));
    for (let i = stacks.length - 1; i >= 0; i--) g.lineTo(xOf(i), yMs(k ? stacks[i][k - 1] : 0));
    g.closePath();
    g.fill();
  });
  g.fillStyle = "#e6e9ee";
  g.textAlign = "right";
  g.fillText(`${msTop < 10 ? msTop.toFixed(1) : Math.round(msTop)} ms`, w - pad, pad - 8);

  // Events per second (left axis), over the bands.
  const epsTop = Math.max(1, ...history.map((p) => p.eps || 0)) * 1.1;
  g.strokeStyle = "#4fb3ff";
  g.lineWidth = 2;
  g.beginPath();
  let pen = false;
  history.forEach((p, i) => {
    if (p.eps == null) { pen = false; return; }
    const y = h - pad - (h - 2 * pad) * p.eps / epsTop;
    pen ? g.lineTo(xOf(i), y) : g.moveTo(xOf(i), y);
    pen = true;
  });
  g.stroke();
  g.fillStyle = "#4fb3ff";
  g.textAlign = "left";
  g.fillText(Math.round(epsTop) + "/s", pad, pad - 8);
}

// ---- actions ------------------------------------------------------------

// traceUrl is the trace UI's URL with {traceId} where a trace's id goes
// (GET /api/v1/config), while the server traces; "" otherwise.
let traceUrl = "";

// traceOf reads the trace id from a response's traceresponse header
// (00-<trace id>-<span id>-<flags>); "" when the request was not traced.
function traceOf(r) {
  const m = /^00-([0-9a-f]{32})-[0-9a-f]{16}-[0-9a-f]{2}$/.exec(r.headers.get("traceresponse") || "");
  return m ? m[1] : "";
}

// log adds a line to the action log, with a link to the action's trace
// when the server traced it and names a trace UI.
function log(text, bad, traceId) {
  const li = document.createElement("li");
  li.textContent = `${new Date().toLocaleTimeString()} ${text}`;
  if (traceUrl && traceId) {
    const a = document.createElement("a");
    a.className = "trace";
    a.href = traceUrl.replaceAll("{traceId}", traceId);
    a.target = "_blank";
    a.rel = "noopener";
    a.textContent = "trace";
    a.dataset.traceId = traceId;
    li.append(" ", a);
  }
  if (bad) li.className = "err";
  $("log").prepend(li);
  while ($("log").children.length > 30) $("log").lastChild.remove();
}

// ---- who acts --------------------------------------------------------------

// The server says how it learns who calls (GET /api/v1/config). Until it
// answers, and in header mode, the form sends the acting user as X-User-ID.
// In jwt mode the page reads without a token (stream, lists, views) and acts
// with a bearer token pasted into the form; the token stays in this page's
// memory only.
let authMode = "header";

async function loadConfig() {
  try {
    const r = await fetch("/api/v1/config", { headers: { Accept: "application/json" } });
    if (!r.ok) return;
    const c = await r.json();
    if (c.auth && c.auth.mode === "jwt") useTokens(c.auth);
    if (typeof c.traceUrl === "string" && /^https?:\/\//.test(c.traceUrl)) traceUrl = c.traceUrl;
  } catch (_) { /* header mode it is; the stream's status tells of a dead server */ }
}

function useTokens(a) {
  authMode = "jwt";
  $("user").disabled = true;
  $("user").value = "";
  $("user").placeholder = "the token's subject";
  $("token-label").hidden = false;
  const note = $("auth-note");
  note.hidden = false;
  note.textContent = "This server checks tokens. Reading works without one; liking, ordering and paying need a bearer token " +
    `issued by ${a.issuer} for ${a.audience} — paste it below; the acting user is its subject. ` +
    `Creating products also needs the role ${a.adminRole}.`;
}

async function call(method, path, body) {
  const headers = { Accept: "application/json" };
  if (authMode === "jwt") {
    const token = $("token").value.trim();
    if (token) headers.Authorization = "Bearer " + token;
    else if (method !== "GET") throw new Error(`${method} ${path}: writing needs a bearer token; paste one into the form`);
  } else {
    headers["X-User-ID"] = $("user").value.trim();
  }
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const r = await fetch("/api/v1" + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (_) { /* not JSON */ }
  if (!r.ok) {
    const err = new Error(`${method} ${path} → ${r.status} ${data && data.detail ? data.detail : text}`);
    err.traceId = traceOf(r);
    throw err;
  }
  log(`${method} ${path} → ${r.status}`, false, traceOf(r));
  return data;
}

const actions = {
  like: (id) => call("POST", `/products/${id}/likes`),
  unlike: (id) => call("DELETE", `/products/${id}/likes`),
  view: async (id) => merge(await call("GET", `/products/${id}`), false),
  buy: async (id) => {
    const order = await call("POST", "/orders", { items: [{ productId: id, quantity: Number($("qty").value) }] });
    await call("POST", `/orders/${order.id}/payments`);
  },
  create: async () => {
    const p = await call("POST", "/products", {
      name: $("p-name").value, price: Number($("p-price").value), stock: Number($("p-stock").value),
    });
    $("product").value = p.id;
    merge(p, false);
    render(new Set());
  },
};

$("actions").addEventListener("click", async (e) => {
  const action = e.target.dataset && e.target.dataset.action;
  if (!action) return;
  if (!$("actions").reportValidity()) return;
  try { await actions[action](Number($("product").value)); } catch (err) { log(err.message, true, err.traceId); }
});
window.addEventListener("resize", drawChart);

loadConfig();
connect();
