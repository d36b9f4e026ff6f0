// Dynagent operations page. Plain JavaScript, no dependencies, no build step.
// The API key lives in sessionStorage and travels only as "Authorization: Bearer".
"use strict";

const KEY_STORE = "dynagent.key";
const state = {
  me: null,           // GET /v1/whoami
  agents: new Map(),  // name -> status (without revisions)
  series: new Map(),  // name -> {step, end, variants}
  degraded: {},
  caps: {pause: null, resume: null, mcp: null, evals: null},
  live: false,
  painted: false,
};
const view = document.getElementById("view");

// ---------------------------------------------------------------- helpers

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g, (c) => (
    {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
}

function key() { return sessionStorage.getItem(KEY_STORE) || ""; }

function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (key()) h.Authorization = "Bearer " + key();
  return h;
}

class ApiError extends Error {
  constructor(status, type, message) { super(message); this.status = status; this.type = type; }
}

async function api(path, options) {
  const opts = Object.assign({}, options || {});
  opts.headers = headers(opts.headers);
  if (opts.json !== undefined) {
    opts.headers["Content-Type"] = "application/json";
    opts.body = JSON.stringify(opts.json);
    delete opts.json;
  }
  const response = await fetch(path, opts);
  const text = await response.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (e) { body = null; }
  if (!response.ok) {
    const err = (body && body.error) || {};
    if (response.status === 401) showLogin(err.message || "unknown API key");
    throw new ApiError(response.status, err.type || "http_error", err.message || response.statusText);
  }
  return body;
}

function ago(at) {
  if (!at) return "";
  const s = Math.max(0, Date.now() / 1000 - at);
  if (s < 60) return Math.round(s) + " s ago";
  if (s < 3600) return Math.round(s / 60) + " min ago";
  if (s < 86400) return Math.round(s / 3600) + " h ago";
  return Math.round(s / 86400) + " d ago";
}

function when(at) {
  if (!at) return "";
  const d = new Date(at * 1000);
  return `<time datetime="${d.toISOString()}" data-at="${esc(at)}" title="${esc(d.toLocaleString())}">${esc(ago(at))}</time>`;
}

function pct(x) { return x == null ? "–" : (x * 100).toFixed(x < 0.1 && x > 0 ? 1 : 0) + "%"; }
function ms(x) {
  if (x == null) return "–";
  if (x >= 1000) return (x / 1000).toFixed(2) + " s";
  return (x < 10 ? Number(x).toFixed(x < 1 ? 2 : 1) : Math.round(x)) + " ms";
}

function badge(text, kind, title) {
  return `<span class="badge ${esc(kind || "")}"${title ? ` title="${esc(title)}"` : ""}>${esc(text)}</span>`;
}

function params() {
  const hash = location.hash.replace(/^#/, "") || "/agents";
  const [path, query] = hash.split("?");
  return {parts: path.split("/").filter(Boolean).map(decodeURIComponent), query: new URLSearchParams(query || "")};
}

function confirmAction(text, askReason) {
  // Resolves to null when cancelled, else {reason} (what was typed, when a reason is asked).
  const dialog = document.getElementById("confirm");
  const reason = document.getElementById("confirm-reason");
  document.getElementById("confirm-text").textContent = text;
  document.getElementById("confirm-reason-row").hidden = !askReason;
  reason.value = "";
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok" ? {reason: reason.value.trim()} : null), {once: true});
    dialog.returnValue = "cancel";
    dialog.showModal();
  });
}

// ---------------------------------------------------------------- status fields

function sourceCell(source) {
  if (!source) return "–";
  let where = source.location || "";
  if (source.kind === "nacos" && source.group) where = `${source.group} / ${source.data_id || ""}`;
  else if (source.kind === "file") where = where.split("/").slice(-2).join("/");
  const badges = [badge(source.kind, "kind")];
  if (source.gray) badges.push(badge("gray", "warn", "Nacos served a gray (beta) version: " + (typeof source.gray === "object" ? JSON.stringify(source.gray) : String(source.gray))));
  if (source.from === "snapshot") badges.push(badge("snapshot", "warn", "served from the on-disk snapshot"));
  const st = typeof source.state === "object" && source.state ? source.state.state : source.state;
  if (st && st !== "live") badges.push(badge(st, st === "disconnected" ? "bad" : "warn", source.since ? "since " + new Date(source.since * 1000).toLocaleString() : ""));
  const md5 = source.md5 ? ` <span class="dim mono" title="md5">${esc(String(source.md5).slice(0, 8))}</span>` : "";
  return `${badges.join(" ")} <span class="mono" title="${esc(source.location || "")}">${esc(where)}</span>${md5}`;
}

function errorPosition(error) {
  if (!error) return "";
  if (error.line != null) return `line ${error.line}${error.column != null ? ", column " + error.column : ""}`;
  const m = /line (\d+),? column (\d+)/.exec(error.message || "");
  return m ? `line ${m[1]}, column ${m[2]}` : "";
}

function errorCell(error) {
  if (!error) return "";
  const pos = errorPosition(error);
  const path = error.path ? `<span class="mono">${esc(error.path)}</span>: ` : "";
  return `<div class="err clamp" title="${esc(error.message)}">${pos ? `<b class="pos">${esc(pos)}</b> ` : ""}${path}${esc(error.message)}</div>`;
}

function stateBadge(status) {
  const s = status.state || "unknown";
  const kind = s === "serving" ? "ok" : (s === "failed" || s === "refused" ? "bad" : "warn");
  return badge(s, kind) + (status.last_error && s === "serving" ? " " + badge("refused change", "bad", status.last_error.message) : "");
}

function rollout(canary) {
  // Rollout fields another part of the service adds: ``steps`` as a list of weights or as
  // {weights, step, since, healthy_requests, after, auto_promote}; a pause as ``paused`` or
  // as a pull recorded in the document (``pulled.by`` / ``pulled.recorded``).
  const r = Object.assign({}, canary.rollout || {}, canary);
  let steps = r.steps, step = r.step ?? r.current_step, progress = null;
  if (steps && !Array.isArray(steps) && typeof steps === "object") {
    progress = steps;
    step = steps.step ?? step;
    steps = steps.weights;
  }
  const pulled = canary.state === "pulled" || canary.state === "paused";
  return {steps, step, progress, paused: r.paused || (pulled ? canary.pulled || {} : null)};
}

function heldBy(gate) {
  // Why a serving canary takes none of its weight: its gate, until its suite passed.
  return gate && gate.state !== "passed" && gate.state !== "forced"
    ? `its gate is ${gate.state}: no live traffic until its suite passes` : "";
}

function canaryCell(canary) {
  if (!canary) return `<span class="dim">–</span>`;
  const r = rollout(canary);
  const held = canary.state === "serving" ? heldBy(canary.gate) : "";
  const parts = [`<b>${esc(canary.weight)}%</b>`];
  if (Array.isArray(r.steps)) parts.push(`<span class="dim">step ${esc((r.step ?? 0) + 1)}/${esc(r.steps.length)}</span>`);
  if (canary.state === "pulled") parts.push(badge("pulled", "bad", canary.pulled ? canary.pulled.reason : ""));
  else if (r.paused) parts.push(badge("paused", "warn", r.paused.reason || ""));
  else if (held) parts.push(badge("held", "warn", held));
  else if (canary.state) parts.push(badge(canary.state === "serving" ? "guard ok" : canary.state, canary.state === "serving" ? "ok" : "warn"));
  if (r.progress && r.progress.awaiting_approval && canary.state === "serving") parts.push(badge("awaiting approval", "warn", "the next step waits for dynagent rollout approve"));
  if (canary.budget && canary.budget.exceeded) parts.push(badge("over budget", "bad", "its spend exceeded rollout.budget"));
  if (canary.gate && canary.gate.state !== "passed") parts.push(gateBadge(canary.gate));
  parts.push(`<span class="mono dim">${esc(canary.revision)}</span>`);
  return parts.join(" ");
}

function trafficCell(t) {
  if (!t) return `<span class="dim">–</span>`;
  const rate = t.recent_error_rate;
  const cls = rate > 0.2 ? "bad" : (rate > 0 ? "warn" : "");
  return `<span class="num" title="requests">${esc(t.requests)}</span> · <span class="num ${cls}" title="recent error rate">${pct(rate)}</span> · <span class="num" title="p95 latency">${ms(t.p95_ms)}</span>`;
}

function sparkline(series, width, height) {
  // One bar per 30 s: stable below, canary stacked on top, a red cap for errors.
  width = width || 120; height = height || 24;
  if (!series || !series.variants) return "";
  // Slots that ended since the series arrived slide out to the left (by this browser's
  // clock only: the server's may differ).
  const late = series.received ? Math.max(0, Math.floor((Date.now() / 1000 - series.received) / series.step)) : 0;
  const slide = (values) => late ? values.slice(Math.min(late, values.length)).concat(new Array(Math.min(late, values.length)).fill(0)) : values;
  const st = slide((series.variants.stable || {}).requests || []);
  const ca = slide((series.variants.canary || {}).requests || []);
  const er = [slide((series.variants.stable || {}).errors || []), slide((series.variants.canary || {}).errors || [])];
  const n = Math.max(st.length, ca.length);
  if (!n) return "";
  const max = Math.max(1, ...st.map((v, i) => v + (ca[i] || 0)), ...ca);
  const bw = width / n, scale = (height - 2) / max;
  const bars = [];
  for (let i = 0; i < n; i++) {
    const s = st[i] || 0, c = ca[i] || 0, e = (er[0][i] || 0) + (er[1][i] || 0);
    if (!s && !c) continue;
    const x = (i * bw).toFixed(1), w = Math.max(1, bw - 1).toFixed(1);
    const hs = s * scale, hc = c * scale;
    bars.push(`<rect class="spark-stable" x="${x}" y="${(height - hs).toFixed(1)}" width="${w}" height="${hs.toFixed(1)}"/>`);
    if (c) bars.push(`<rect class="spark-canary" x="${x}" y="${(height - hs - hc).toFixed(1)}" width="${w}" height="${hc.toFixed(1)}"/>`);
    if (e) bars.push(`<rect class="spark-err" x="${x}" y="${(height - hs - hc).toFixed(1)}" width="${w}" height="${Math.max(1.5, e * scale).toFixed(1)}"/>`);
  }
  const tip = `last 15 min: ${st.reduce((a, b) => a + b, 0)} stable, ${ca.reduce((a, b) => a + b, 0)} canary runs`;
  return `<svg class="spark" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-label="${esc(tip)}"><title>${esc(tip)}</title><line class="spark-base" x1="0" x2="${width}" y1="${height - 0.5}" y2="${height - 0.5}"/>${bars.join("")}</svg>`;
}

// ---------------------------------------------------------------- live feed

function setLive(on, text) {
  state.live = on;
  const el = document.getElementById("live");
  el.textContent = text || (on ? "live" : "offline");
  el.className = "live " + (on ? "on" : "off");
}

function applyFeed(kind, payload) {
  if (kind === "snapshot") { performance.mark("feed-snapshot"); state.agents.clear(); state.series.clear(); }
  for (const status of payload.agents || []) state.agents.set(status.name, status);
  for (const [name, s] of Object.entries(payload.series || {})) state.series.set(name, Object.assign(s, {received: Date.now() / 1000}));
  for (const name of payload.removed || []) { state.agents.delete(name); state.series.delete(name); }
  state.degraded = payload.degraded || {};
  const changed = new Set([...(payload.agents || []).map((a) => a.name), ...(payload.removed || [])]);
  onFeed(kind, changed);
}

async function watch() {
  let delay = 500;
  for (;;) {
    try {
      const response = await fetch("/v1/watch/agents", {headers: headers()});
      if (response.status === 401) { showLogin("unknown API key"); return; }
      if (!response.ok) throw new Error("watch answered " + response.status);
      setLive(true);
      delay = 500;
      const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        buffer += value;
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const block = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const ev = parseEvent(block);
          if (ev && ev.data) applyFeed(ev.event, JSON.parse(ev.data));
        }
      }
    } catch (e) {
      setLive(false, "reconnecting…");
    }
    await new Promise((r) => setTimeout(r, delay));
    delay = Math.min(delay * 2, 5000);
  }
}

// Each server-sent event of a streamed response, as ``parseEvent`` reads it.
async function* streamEvents(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buffer += value;
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const ev = parseEvent(buffer.slice(0, cut));
      buffer = buffer.slice(cut + 2);
      if (ev) yield ev;
    }
  }
}

function parseEvent(block) {
  let event = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("event: ")) event = line.slice(7);
    else if (line.startsWith("data: ")) data.push(line.slice(6));
  }
  return data.length ? {event, data: data.join("\n")} : null;
}

let feedFrame = 0;
let pendingChanged = new Set();
let pendingFull = false;
function onFeed(kind, changed) {
  if (kind === "snapshot") pendingFull = true;
  for (const n of changed) pendingChanged.add(n);
  if (feedFrame) return;
  feedFrame = requestAnimationFrame(() => {
    feedFrame = 0;
    const names = pendingChanged, full = pendingFull;
    pendingChanged = new Set(); pendingFull = false;
    const route = params();
    if (route.parts[0] === "agents" || !route.parts.length) updateAgentsView(full ? null : names);
    else if (route.parts[0] === "agent" && names.has(route.parts[1])) refreshAgent(route.parts[1]);
    else if (route.parts[0] === "play" && full) renderPlayground();
    else if (route.parts[0] === "evals") evalsFeed(route.parts, names, full);
  });
}

// ---------------------------------------------------------------- agents view

function agentRow(status) {
  const t = status.traffic || {};
  return `<tr data-agent="${esc(status.name)}" class="${status.last_error ? "has-error" : ""}">
<td><a href="#/agent/${encodeURIComponent(status.name)}" class="name">${esc(status.name)}</a>${status.description ? `<div class="dim small">${esc(status.description)}</div>` : ""}</td>
<td class="state-cell">${stateBadge(status)}</td>
<td class="mono">${esc(status.revision || "–")}</td>
<td class="source">${sourceCell(status.source)}<div class="dim small">${esc(status.factory || "–")} · loaded ${when(status.loaded_at)}</div></td>
<td class="error-cell">${errorCell(status.last_error)}</td>
<td class="canary-cell">${canaryCell(status.canary)}</td>
<td class="traffic" data-variant="stable">${trafficCell(t.stable)}</td>
<td class="traffic" data-variant="canary">${status.canary || t.canary ? trafficCell(t.canary) : `<span class="dim">–</span>`}</td>
<td>${sparkline(state.series.get(status.name))}</td>
</tr>`;
}

function filteredAgents() {
  const q = (document.getElementById("filter") || {}).value || "";
  const problems = (document.getElementById("problems") || {}).checked;
  const all = [...state.agents.values()].sort((a, b) => a.name.localeCompare(b.name));
  return all.filter((a) => (!q || a.name.includes(q)) &&
    (!problems || a.last_error || a.state !== "serving" || (a.canary && a.canary.state !== "serving")));
}

function renderAgents() {
  document.title = "Agents · Dynagent";
  view.innerHTML = `<div class="bar"><h1>Agents <span id="count" class="dim"></span></h1>
<input id="filter" type="search" placeholder="filter by name" aria-label="filter by name">
<label class="small"><input id="problems" type="checkbox"> only problems</label>
<span id="degraded"></span></div>
<div class="scroll"><table class="agents"><colgroup><col class="c-name"><col class="c-state"><col class="c-rev"><col class="c-source"><col class="c-error"><col class="c-canary"><col class="c-traffic"><col class="c-traffic"><col class="c-spark"></colgroup><thead><tr><th>agent</th><th>state</th><th>revision</th><th>source · factory · loaded</th><th>last error</th><th>canary</th>
<th title="requests · recent error rate · p95">stable req · err · p95</th><th title="requests · recent error rate · p95">canary req · err · p95</th><th>15 min</th></tr></thead>
<tbody id="agent-rows"></tbody></table></div>`;
  document.getElementById("filter").addEventListener("input", () => updateAgentsView(null));
  document.getElementById("problems").addEventListener("change", () => updateAgentsView(null));
  updateAgentsView(null);
}

function updateAgentsView(names) {
  const body = document.getElementById("agent-rows");
  if (!body) return;
  const list = filteredAgents();
  document.getElementById("count").textContent = `${list.length} of ${state.agents.size}`;
  const deg = Object.entries(state.degraded);
  document.getElementById("degraded").innerHTML = deg.map(([s, why]) => badge("degraded: " + s, "bad", why)).join(" ");
  if (names && names.size < 100) {
    const visible = new Set(list.map((a) => a.name));
    let structural = false;
    for (const name of names) {
      const row = body.querySelector(`tr[data-agent="${CSS.escape(name)}"]`);
      const status = state.agents.get(name);
      if (row && status && visible.has(name)) row.outerHTML = agentRow(status);
      else if (row || (status && visible.has(name))) structural = true;
    }
    if (!structural) return;
  }
  const generation = ++renderGeneration;
  body.innerHTML = list.length ? list.slice(0, FIRST_ROWS).map(agentRow).join("") :
    `<tr><td colspan="11" class="dim">${state.agents.size ? "no agent matches" : (state.live ? "no agents" : "loading…")}</td></tr>`;
  markPainted();
  appendRows(body, list, FIRST_ROWS, generation);
}

// A screenful first, the rest in the next frame: 1,000 rows in one go would hold the
// first paint back by the layout of all of them, and chunks per frame lay the growing
// table out again each time (slower to finish than one append).
const FIRST_ROWS = 60;
const CHUNK_ROWS = 5000;
let renderGeneration = 0;
function appendRows(body, list, from, generation) {
  if (from >= list.length) {
    // Stamped a frame later: once every row has been laid out and drawn.
    requestAnimationFrame(() => {
      if (list.length && !document.body.dataset.agentsComplete) document.body.dataset.agentsComplete = String(performance.now());
    });
    return;
  }
  requestAnimationFrame(() => {
    if (generation !== renderGeneration || !body.isConnected) return;
    body.insertAdjacentHTML("beforeend", list.slice(from, from + CHUNK_ROWS).map(agentRow).join(""));
    appendRows(body, list, from + CHUNK_ROWS, generation);
  });
}

function markPainted() {
  if (state.painted || !state.agents.size) return;
  state.painted = true;
  // The frame after the one that drew the rows: the agents view is on screen.
  requestAnimationFrame(() => {
    performance.mark("agents-painted");
    document.body.dataset.agentsPainted = String(performance.now());
  });
}

// ---------------------------------------------------------------- one agent

const agentView = {status: null, painted: new Map()};  // the status shown; part -> what it shows

async function renderAgent(name) {
  document.title = name + " · Dynagent";
  await capabilities();
  view.innerHTML = `<div class="bar"><h1><a href="#/agents">Agents</a> / ${esc(name)}</h1></div><div id="agent">loading…</div>`;
  agentView.painted = new Map();
  await refreshAgent(name);
}

// One read at a time; an update that arrives meanwhile is read after it (never dropped).
let agentRefresh = null, agentWanted = null, agentAgain = false;
function refreshAgent(name) {
  agentWanted = name;
  agentAgain = true;
  agentRefresh = agentRefresh || (async () => {
    try {
      while (agentAgain) { agentAgain = false; await loadAgent(agentWanted); }
    } finally { agentRefresh = null; }
  })();
  return agentRefresh;
}

async function loadAgent(name) {
  const path = `/v1/agents/${encodeURIComponent(name)}`;
  try {
    const [status, series, history] = await Promise.all([
      api(path), api(`${path}/series`).catch(() => null), api(`${path}/rollout/history`).catch(() => null),
    ]);
    const box = document.getElementById("agent");
    if (!box || params().parts[0] !== "agent" || params().parts[1] !== name) return;
    agentView.status = status;
    paintAgent(box, agentParts(status, series));
    fillPart("canary-budget", status.canary && status.canary.budget, budgetBody);
    fillPart("analysis-panel", status.analysis, analysisBody);
    fillPart("history-panel", history, historyBody);
    loadParts(status);
  } catch (e) {
    const box = document.getElementById("agent");
    if (box) box.innerHTML = `<p class="error">${esc(e.message)}</p>`;
    agentView.painted = new Map();
  }
}

function steady(html) {
  // What a part shows, less the "… ago" of its times (the ticker keeps those true).
  return html.replace(/(<time\b[^>]*>)[^<]*(<\/time>)/g, "$1$2");
}

function paintAgent(box, parts) {
  // A part is drawn again only when what it shows changed: a live update never replaces a
  // button under a click in flight, nor takes the focus or a choice away.
  const keys = parts.map(([key]) => key);
  const changed = new Set();
  const keep = captureSelection();
  if ([...box.children].map((c) => c.dataset.part).join() !== keys.join()) {
    box.innerHTML = parts.map(([, html]) => html).join("");
    agentView.painted = new Map(parts.map(([key, html]) => [key, steady(html)]));
    keys.forEach((key) => changed.add(key));
  } else {
    parts.forEach(([key, html], i) => {
      const shown = steady(html);
      if (agentView.painted.get(key) === shown) return;
      agentView.painted.set(key, shown);
      box.children[i].outerHTML = html;
      changed.add(key);
    });
  }
  restoreSelection(keep, changed);
  if (changed.has("actions")) wireActions();
  if (changed.has("revisions")) wireRevisions();
}

function captureSelection() {
  const a = document.querySelector('input[name="diff-a"]:checked');
  const b = document.querySelector('input[name="diff-b"]:checked');
  const rb = document.getElementById("rollback-to");
  const diff = document.getElementById("diff");
  const result = document.getElementById("action-result");
  return {a: a && a.value, b: b && b.value, rb: rb && rb.value, diff: diff && diff.innerHTML, result: result && result.outerHTML};
}

function restoreSelection(keep, changed) {
  if (changed.has("revisions")) {
    for (const [field, value] of [["diff-a", keep.a], ["diff-b", keep.b]]) {
      const input = value && document.querySelector(`input[name="${field}"][value="${CSS.escape(value)}"]`);
      if (input) input.checked = true;
    }
    if (keep.diff) document.getElementById("diff").innerHTML = keep.diff;
  }
  if (changed.has("actions")) {
    const rb = document.getElementById("rollback-to");
    if (rb && keep.rb && [...rb.options].some((o) => o.value === keep.rb)) rb.value = keep.rb;
    if (keep.result) document.getElementById("action-result").outerHTML = keep.result;
  }
}

function agentParts(s, series) {
  // The agent view as parts, each [key, html]; the analysis, the budget and the history are
  // filled in afterwards as DOM nodes (rollout.js).
  const admin = state.me && state.me.admin;
  const revs = s.revisions || [];
  const revKey = (r) => `${r.revision}|${r.variant}`;
  // Earlier stable revisions only, newest first: a revision that only ran as a canary (the
  // canary's own, typically) is not a rollback target; promoting is the canary's own button.
  const stableRevs = revs.filter((r, i) => r.variant === "stable" && r.revision !== s.revision
    && revs.findIndex((o) => o.variant === "stable" && o.revision === r.revision) === i);
  const loaded = (at) => at ? new Date(at * 1000).toLocaleString() : "";
  return [
    ["summary", `<section class="card summary" data-part="summary">
  <div>${stateBadge(s)} <span class="mono">${esc(s.revision || "–")}</span> · ${esc(s.factory || "")} · loaded ${when(s.loaded_at)}</div>
  <div class="dim">${esc(s.description || "")}</div>
  <div>${sourceCell(s.source)}</div>
  ${s.last_error ? `<div class="error-box"><b>Last error</b> ${when(s.last_error.at)} ${errorCell(s.last_error)}</div>` : ""}
  <div class="links"><a href="#/traces?agent=${encodeURIComponent(s.name)}">recent runs</a> · <a href="#/play?agent=${encodeURIComponent(s.name)}">try it</a> · <a href="#/evals/${encodeURIComponent(s.name)}" id="agent-evals">evaluations</a>${s.evals ? " " + suiteCell(s.evals) : ""}</div>
</section>`],
    ["traffic", `<section class="card" data-part="traffic"><h2>Traffic</h2>${trafficTable(s)}<h3>Requests per 30 s, last 15 minutes <span class="legend-stable">stable</span> <span class="legend-canary">canary</span> <span class="legend-err">errors</span></h3>${sparkline(series, 600, 60)}</section>`],
    ["canary", s.canary ? canaryPanel(s, series) : `<section class="card" data-part="canary"><h2>Canary</h2><p class="dim">No canary. Publish <span class="mono">${esc(s.name)}.canary.yaml</span> to start one.</p></section>`],
    ["analysis", `<section class="card" id="analysis-panel" data-part="analysis"${s.analysis ? "" : " hidden"}></section>`],
    ["history", `<section class="card" id="history-panel" data-part="history"></section>`],
    ["actions", `<section class="card" id="actions" data-part="actions"><h2>Actions</h2>
  ${admin ? `<div class="actions">
    ${s.canary ? `<button id="promote" type="button">Promote canary ${esc(s.canary.revision)}</button>` : ""}
    ${pauseButton(s)}
    ${stableRevs.length ? `<label>Roll back to <select id="rollback-to">${stableRevs.map((r) => `<option value="${esc(r.revision)}">${esc(r.revision)} (stable, ${esc(loaded(r.loaded_at))})</option>`).join("")}</select></label> <button id="rollback" type="button">Roll back</button>` : ""}
  </div>` : `<p class="dim">Promote, roll back and pause need an admin key.</p>`}
  <div id="action-result"></div>
</section>`],
    ["revisions", `<section class="card" data-part="revisions"><h2>Revisions</h2>
  <table class="revs"><thead><tr><th>A</th><th>B</th><th>revision</th><th>variant</th><th>loaded</th><th>factory</th><th>source</th></tr></thead><tbody>
  ${revs.map((r, i) => `<tr><td><input type="radio" name="diff-a" value="${esc(revKey(r))}" ${i === 1 || (revs.length === 1 && i === 0) ? "checked" : ""} aria-label="compare from ${esc(r.revision)}"></td>
  <td><input type="radio" name="diff-b" value="${esc(revKey(r))}" ${i === 0 ? "checked" : ""} aria-label="compare to ${esc(r.revision)}"></td>
  <td class="mono">${esc(r.revision)}${r.revision === s.revision && r.variant === "stable" ? " " + badge("serving", "ok") : ""}${s.canary && r.revision === s.canary.revision && r.variant === "canary" ? " " + badge("canary", "warn") : ""}</td>
  <td>${esc(r.variant)}</td><td>${when(r.loaded_at)}</td><td>${esc(r.factory)}</td><td>${sourceCell(r.source)}</td></tr>`).join("")}
  </tbody></table>
  <button id="compare" type="button" ${revs.length ? "" : "disabled"}>Compare A → B</button>
  <div id="diff"></div>
</section>`],
    ["parts", `<section class="card" data-part="parts"><h2>Tools, MCP servers and sub-agents</h2><div id="parts" class="dim">loading…</div></section>`],
  ];
}

function trafficTable(s) {
  const t = s.traffic || {};
  const rows = Object.entries(t).map(([variant, v]) => `<tr><td>${esc(variant)}</td><td class="num">${esc(v.requests)}</td><td class="num">${esc(v.errors)}</td><td class="num">${pct(v.recent_error_rate)}</td><td class="num">${ms(v.p50_ms)}</td><td class="num">${ms(v.p95_ms)}</td></tr>`);
  return rows.length ? `<table class="small-table"><thead><tr><th>variant</th><th>requests</th><th>errors</th><th>recent error rate</th><th>p50</th><th>p95</th></tr></thead><tbody>${rows.join("")}</tbody></table>`
    : `<p class="dim">No runs yet.</p>`;
}

function canaryPanel(s, series) {
  const c = s.canary, g = c.guard || {}, t = s.traffic || {};
  const cs = t.canary || {}, ss = t.stable || {};
  const r = rollout(c);
  const floor = (g.latency_floor_ms ?? 0);
  const ratio = cs.p95_ms != null && ss.p95_ms != null ? cs.p95_ms / Math.max(ss.p95_ms, floor || 0.0001) : null;
  const checks = [
    ["recent error rate", pct(cs.recent_error_rate), "≤ " + pct(g.max_error_rate), cs.recent_error_rate != null && g.max_error_rate != null && cs.recent_error_rate > g.max_error_rate],
    ["p95 vs stable", ratio == null ? "–" : ratio.toFixed(2) + "×", "≤ " + (g.max_latency_ratio ?? "–") + "× (floor " + ms(floor) + ")", ratio != null && ratio > g.max_latency_ratio],
    ["requests seen", String(cs.requests ?? 0), "guard acts from " + (g.min_requests ?? "–"), false],
  ];
  return `<section class="card canary" id="canary-panel" data-part="canary"><h2>Canary ${esc(c.revision)}</h2>
  <div>${canaryCell(c)} · sticky key <span class="mono">${esc(c.sticky_key || "")}</span> · since ${when(c.loaded_at)}</div>
  <div id="canary-budget"></div>
  ${Array.isArray(r.steps) ? `<div class="steps">${r.steps.map((w, i) => `<span class="step ${i === r.step ? "current" : (i < r.step ? "done" : "")}">${esc(w)}%</span>`).join("")}</div>` : ""}
  ${c.state === "pulled" && c.pulled ? `<div class="error-box"><b>Pulled${c.pulled.by ? " by " + esc(c.pulled.by) : " by the guard"}</b> ${when(c.pulled.at)}: ${esc(c.pulled.reason)}${c.pulled.recorded ? " (recorded in its definition: every replica keeps it)" : ""}</div>` : ""}
  ${r.progress ? `<div class="small">step since ${when(r.progress.since)} · ${esc(r.progress.healthy_requests ?? "–")} healthy requests${r.progress.after ? " · next step after " + esc(JSON.stringify(r.progress.after)) : ""}${r.progress.auto_promote ? " · promotes itself after the last step" : ""}</div>` : ""}
  ${r.progress && r.progress.awaiting_approval ? `<div class="warn-box approval"><b>Awaiting approval</b>: the next step waits for <span class="mono">dynagent rollout approve ${esc(s.name)}</span> (an admin)</div>` : ""}
  ${r.progress && r.progress.approved ? `<div class="small approval">approved by ${esc(r.progress.approved.by)} at ${esc(r.progress.approved.at)} for <span class="mono">${esc(r.progress.approved.revision)}</span></div>` : ""}
  ${gateBox(s.name, c.gate)}
  ${r.paused && c.state !== "pulled" ? `<div class="warn-box"><b>Paused</b> ${esc(r.paused.by || "")} ${when(r.paused.at)}: ${esc(r.paused.reason || "")}</div>` : ""}
  <table class="small-table guard"><thead><tr><th>guard check</th><th>measured</th><th>threshold</th></tr></thead><tbody>
  ${checks.map(([n, m, th, bad]) => `<tr class="${bad ? "bad" : ""}"><td>${esc(n)}</td><td class="num">${esc(m)}</td><td>${esc(th)}</td></tr>`).join("")}
  </tbody></table>
  <h3>Split over time (share of requests on the canary, per 30 s)</h3>${splitChart(series)}
</section>`;
}

function splitChart(series) {
  if (!series || !series.variants || !series.variants.canary) return `<p class="dim">No canary traffic in the last 15 minutes.</p>`;
  const st = (series.variants.stable || {requests: []}).requests;
  const ca = series.variants.canary.requests;  // as of the agent view's last refresh
  const n = ca.length, w = 600, h = 60, bw = w / n;
  const bars = ca.map((c, i) => {
    const total = c + (st[i] || 0);
    if (!total) return "";
    const share = c / total;
    return `<rect class="split-stable" x="${(i * bw).toFixed(1)}" y="0" width="${(bw - 1).toFixed(1)}" height="${(h * (1 - share)).toFixed(1)}"><title>${c}/${total}</title></rect><rect class="split-canary" x="${(i * bw).toFixed(1)}" y="${(h * (1 - share)).toFixed(1)}" width="${(bw - 1).toFixed(1)}" height="${(h * share).toFixed(1)}"><title>${c} of ${total} on the canary</title></rect>`;
  });
  return `<svg class="split" viewBox="0 0 ${w} ${h}" width="${w}" height="${h}">${bars.join("")}</svg>`;
}

function pauseButton(s) {
  if (!s.canary) return "";
  const paused = rollout(s.canary).paused;
  if (paused && state.caps.resume) return `<button id="resume" type="button">Resume rollout</button>`;
  if (!paused && state.caps.pause) return `<button id="pause" type="button">Pause rollout</button>`;
  return "";
}

function onClick(id, fn) {
  const button = document.getElementById(id);
  if (button) button.addEventListener("click", () => fn(agentView.status));  // the status shown now
}

function wireActions() {
  const path = (s) => `/v1/agents/${encodeURIComponent(s.name)}`;
  onClick("promote", (s) => act(`Promote canary ${s.canary.revision} of ${s.name} to stable? It replaces ${s.revision} for every caller.`,
    () => api(`${path(s)}/promote`, {method: "POST"}), s.name));
  onClick("rollback", (s) => {
    const to = document.getElementById("rollback-to").value;
    act(`Roll ${s.name} back to revision ${to}? It replaces ${s.revision} for every caller.`,
      () => api(`${path(s)}/rollback`, {method: "POST", json: {to}}), s.name);
  });
  onClick("pause", (s) => act(`Pause the rollout of ${s.name}? Canary ${s.canary.revision} leaves traffic on every replica; ${s.revision} answers every caller until it is resumed.`,
    (answer) => api(state.caps.pause.replace("{name}", encodeURIComponent(s.name)), answer.reason ? {method: "POST", json: {reason: answer.reason}} : {method: "POST"}),
    s.name, {askReason: true, done: (st) => `Done: canary ${st.canary ? st.canary.revision : s.canary.revision} of ${st.name} paused; ${st.revision} answers every caller.`}));
  onClick("resume", (s) => act(`Resume the rollout of ${s.name}? Canary ${s.canary.revision} takes ${s.canary.weight}% of the traffic again.`,
    () => api(state.caps.resume.replace("{name}", encodeURIComponent(s.name)), {method: "POST"}),
    s.name, {done: (st) => st.canary ? `Done: canary ${st.canary.revision} of ${st.name} is back in traffic at ${st.canary.weight}%.` : `Done: ${st.name} now serves ${st.revision}, no canary.`}));
}

function wireRevisions() {
  onClick("compare", (s) => compare(s.name));
}

function servesText(status) {
  return `Done: ${status.name} now serves ${status.revision}${status.canary ? " (canary " + status.canary.revision + ")" : ", no canary"}.`;
}

async function act(question, call, name, options) {
  // options: askReason (the dialog asks for one, passed to call), done (status -> text).
  const opts = options || {};
  const answer = await confirmAction(question, opts.askReason);
  if (!answer) return;
  const box = document.getElementById("action-result");
  box.className = "result pending";
  box.textContent = "working…";
  try {
    const status = await call(answer);
    const now = document.getElementById("action-result");
    now.className = "result ok";
    now.textContent = (opts.done || servesText)(status);
  } catch (e) {
    const now = document.getElementById("action-result");
    now.className = "result bad";
    now.textContent = `Failed (${e.status || ""} ${e.type || ""}): ${e.message}`;
  }
  refreshAgent(name);
}

const definitions = new Map();  // a revision's definition never changes: fetched once
function definition(name, revKey) {
  const cacheKey = `${name}|${revKey}`;
  if (!definitions.has(cacheKey)) {
    const [revision, variant] = revKey.split("|");
    const loading = api(`/v1/agents/${encodeURIComponent(name)}/revisions/${encodeURIComponent(revision)}?variant=${encodeURIComponent(variant)}`);
    loading.catch(() => definitions.delete(cacheKey));
    definitions.set(cacheKey, loading);
  }
  return definitions.get(cacheKey);
}

async function compare(name) {
  const a = document.querySelector('input[name="diff-a"]:checked');
  const b = document.querySelector('input[name="diff-b"]:checked');
  const out = document.getElementById("diff");
  if (!a || !b) { out.textContent = "pick two revisions"; return; }
  try {
    const [da, db] = await Promise.all([definition(name, a.value), definition(name, b.value)]);
    out.innerHTML = `<div class="diff-head mono">--- ${esc(da.revision)} (${esc(da.variant)})<br>+++ ${esc(db.revision)} (${esc(db.variant)})</div>` + renderDiff(lineDiff(da.text.split("\n"), db.text.split("\n")));
  } catch (e) {
    out.innerHTML = `<p class="error">${esc(e.message)}</p>`;
  }
}

function lineDiff(a, b) {
  // Longest common subsequence of lines; definitions are short (bounded anyway).
  a = a.slice(0, 3000); b = b.slice(0, 3000);
  const n = a.length, m = b.length, w = m + 1;
  const L = new Uint16Array((n + 1) * w);
  for (let i = n - 1; i >= 0; i--)
    for (let j = m - 1; j >= 0; j--)
      L[i * w + j] = a[i] === b[j] ? L[(i + 1) * w + j + 1] + 1 : Math.max(L[(i + 1) * w + j], L[i * w + j + 1]);
  const out = [];
  let i = 0, j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) { out.push([" ", a[i]]); i++; j++; }
    else if (L[(i + 1) * w + j] >= L[i * w + j + 1]) out.push(["-", a[i++]]);
    else out.push(["+", b[j++]]);
  }
  while (i < n) out.push(["-", a[i++]]);
  while (j < m) out.push(["+", b[j++]]);
  return out;
}

function renderDiff(lines) {
  if (!lines.some(([k]) => k !== " ")) return `<p class="dim">The two definitions are the same.</p>`;
  const keep = lines.map(([k], i) => k !== " " || lines.slice(Math.max(0, i - 3), i + 4).some(([kk]) => kk !== " "));
  const html = [];
  let skipped = 0;
  lines.forEach(([k, text], i) => {
    if (!keep[i]) { skipped++; return; }
    if (skipped) { html.push(`<div class="diff-skip">… ${skipped} unchanged line(s)</div>`); skipped = 0; }
    const cls = k === "+" ? "add" : (k === "-" ? "del" : "same");
    html.push(`<div class="diff-line ${cls}"><span class="sign">${k}</span>${esc(text)}</div>`);
  });
  if (skipped) html.push(`<div class="diff-skip">… ${skipped} unchanged line(s)</div>`);
  return `<pre class="diff">${html.join("")}</pre>`;
}

async function loadParts(s) {
  const box = document.getElementById("parts");
  if (!box) return;
  const extra = partsFromStatus(s);
  let tools = [];
  if (s.revision) {
    try {
      const d = await definition(s.name, `${s.revision}|stable`);
      tools = (d.definition.tools || []).map(toolPart);
    } catch (e) { /* a failed agent has no definition to show */ }
  }
  if (state.caps.mcp) {
    // MCP servers with their state, where the service lists them (GET /v1/mcp/servers).
    try {
      const listed = await api(state.caps.mcp);
      for (const server of listed.servers || []) {
        if (!(server.agents || []).includes(s.name)) continue;
        const toolNames = (server.tools || []).join(", ");
        extra.push({name: server.server || server.name || "", kind: "MCP server" + (server.transport ? " (" + server.transport + ")" : ""), state: String(server.state || ""),
          details: [toolNames && (server.tools.length + " tools: " + toolNames), server.last_error].filter(Boolean).join(" · ")});
      }
    } catch (e) { /* the parts from the definition still show */ }
  }
  const out = document.getElementById("parts");
  if (!out) return;
  // When the status itself lists the tools with their state, it is the better source.
  const reported = Array.isArray(s.tools) && s.tools.some((t) => t && typeof t === "object")
    ? s.tools.map((t) => Object.assign(toolPart(t), {state: String(t.state || t.status || "")})) : null;
  const rows = [...(reported || tools), ...extra];
  const html = rows.length ? `<table class="small-table"><thead><tr><th>name</th><th>kind</th><th>state</th><th>details</th></tr></thead><tbody>${rows.map((r) =>
    `<tr><td class="mono">${esc(r.name)}</td><td>${esc(r.kind)}</td><td>${r.state ? badge(r.state, /connected|serving|ok|ready|live/.test(r.state) && !/dis/.test(r.state) ? "ok" : "bad") : ""}</td><td class="small">${esc(r.details || "")}</td></tr>`).join("")}</tbody></table>`
    : `<p class="dim">No tools.</p>`;
  if (out.dataset.shown === html) return;  // unchanged: left as it is (and as selected)
  out.className = "";
  out.innerHTML = html;
  out.dataset.shown = html;
}

function toolPart(entry) {
  if (typeof entry === "string") return {name: entry, kind: "tool", state: "", details: ""};
  const kind = entry.type || "tool";
  let details = "";
  if (kind === "http") details = `${entry.method || "GET"} ${entry.url || ""}`;
  if (kind === "mcp") details = entry.url || (entry.nacos ? "Nacos MCP registry: " + JSON.stringify(entry.nacos) : "") || (entry.server ? "stdio server " + entry.server : "");
  if (kind === "agent") {
    const sub = state.agents.get(entry.agent || entry.name);
    return {name: entry.name, kind: "sub-agent", state: sub ? sub.state : (entry.a2a ? "" : "unknown"), details: entry.description || (entry.a2a ? "A2A " + JSON.stringify(entry.a2a) : "")};
  }
  return {name: entry.name || "", kind, state: "", details};
}

function partsFromStatus(s) {
  // MCP servers and tools as other parts of the service report them in the status, when they do.
  const rows = [];
  for (const field of ["mcp_servers", "mcp", "sub_agents"]) {
    const value = s[field];
    if (!value) continue;
    const items = Array.isArray(value) ? value : Object.entries(value).map(([name, v]) => Object.assign({name}, typeof v === "object" ? v : {state: v}));
    for (const item of items) {
      const st = item.state || item.status || (item.connected === true ? "connected" : item.connected === false ? "disconnected" : "");
      const tools = Array.isArray(item.tools) ? item.tools.length + " tools" : "";
      rows.push({name: item.name || item.server || "", kind: field === "sub_agents" ? "sub-agent" : "MCP server", state: String(st || ""), details: [tools, item.last_error && (item.last_error.message || item.last_error)].filter(Boolean).join(" · ")});
    }
  }
  return rows;
}

// ---------------------------------------------------------------- traces

let tracesTimer = 0;
async function renderTraces() {
  document.title = "Traces · Dynagent";
  const q = params().query;
  const names = [...state.agents.keys()].sort();
  view.innerHTML = `<div class="bar"><h1>Recent runs</h1>
<form id="trace-filter" class="filters">
  <label>agent <select name="agent"><option value="">any</option>${names.map((n) => `<option ${q.get("agent") === n ? "selected" : ""}>${esc(n)}</option>`).join("")}</select></label>
  <label>variant <select name="variant"><option value="">any</option>${["stable", "canary"].map((v) => `<option ${q.get("variant") === v ? "selected" : ""}>${v}</option>`).join("")}</select></label>
  <label>status <select name="status"><option value="">any</option>${["ok", "error"].map((v) => `<option ${q.get("status") === v ? "selected" : ""}>${v}</option>`).join("")}</select></label>
  <label>session <input name="session_id" value="${esc(q.get("session_id") || "")}" size="14"></label>
  <button type="submit">Filter</button>
</form></div><div id="traces">loading…</div>`;
  document.getElementById("trace-filter").addEventListener("submit", (e) => {
    e.preventDefault();
    const f = new URLSearchParams();
    for (const [k, v] of new FormData(e.target)) if (v) f.set(k, v);
    location.hash = "#/traces" + (f.toString() ? "?" + f : "");
  });
  await loadTraces();
  clearInterval(tracesTimer);
  tracesTimer = setInterval(() => { if (params().parts[0] === "traces" && !document.hidden) loadTraces(); else clearInterval(tracesTimer); }, 2000);
}

async function loadTraces() {
  const q = params().query;
  const f = new URLSearchParams();
  for (const k of ["agent", "variant", "status", "session_id"]) if (q.get(k)) f.set(k, q.get(k));
  f.set("limit", "200");
  try {
    const data = await api("/v1/traces?" + f);
    const box = document.getElementById("traces");
    if (!box) return;
    box.innerHTML = data.traces.length ? `<table class="traces"><thead><tr><th>when</th><th>agent</th><th>variant</th><th>revision</th><th>status</th><th>duration</th><th>model calls</th><th>tool calls</th><th>tokens</th><th title="what the run cost, by models.prices">cost</th><th>by</th><th>session</th><th>input</th></tr></thead><tbody>
${data.traces.map((t) => `<tr class="${t.status !== "ok" ? "has-error" : ""}" data-trace="${esc(t.trace_id)}"><td><a href="#/trace/${encodeURIComponent(t.trace_id)}">${when(t.started_at)}</a></td><td>${esc(t.agent)}</td><td>${esc(t.variant)}</td><td class="mono">${esc(t.revision)}</td>
<td>${badge(t.status, t.status === "ok" ? "ok" : "bad", t.error ? t.error.type + ": " + t.error.message : "")}</td><td class="num">${ms(t.duration_ms)}</td><td class="num">${esc(t.steps)}</td><td class="num">${esc(t.tool_calls)}</td><td class="num">${t.usage ? esc(t.usage.total_tokens) : "–"}</td><td class="num cost">${esc(usd(t.cost_usd))}</td>
<td class="mono small">${esc(t.owner || "")}</td><td class="mono small">${esc(t.session_id || "")}</td><td class="small">${esc(t.input)}</td></tr>`).join("")}</tbody></table>`
      : `<p class="dim">No recent runs match.</p>`;
  } catch (e) {
    const box = document.getElementById("traces");
    if (box) box.innerHTML = `<p class="error">${esc(e.message)}</p>`;
  }
}

function spansOf(events) {
  const t0 = (events.find((e) => e.type === "run_started") || events[0] || {at: 0}).at;
  const spans = [];
  const calls = new Map();
  const requests = new Map();
  for (const e of events) {
    if (e.type === "model_request") requests.set(e.step, e);
    else if (e.type === "model_response") {
      const start = e.at - e.duration_ms / 1000;
      spans.push({kind: "model", label: `model ${e.model} · step ${e.step}`, start: start - t0, ms: e.duration_ms, event: e, request: requests.get(e.step)});
    } else if (e.type === "tool_call") calls.set(e.call_id, e);
    else if (e.type === "tool_result") {
      const start = e.at - e.duration_ms / 1000;
      spans.push({kind: "tool", label: `tool ${e.name}`, start: start - t0, ms: e.duration_ms, event: e, call: calls.get(e.call_id), error: e.is_error});
    } else if (e.type === "error") spans.push({kind: "error", label: `error ${e.error_type}`, start: e.at - t0, ms: 0, event: e, error: true});
  }
  return {t0, spans};
}

function timelineRows(events, total) {
  const {spans} = spansOf(events);
  return spans.map((s, i) => {
    const detail = s.kind === "model"
      ? `<div>tokens: in ${esc(s.event.usage.input_tokens)} · out ${esc(s.event.usage.output_tokens)}${s.request ? ` · ${esc(s.request.messages)} messages sent` : ""}</div>${s.event.content ? `<pre>${esc(s.event.content)}</pre>` : ""}${(s.event.tool_calls || []).length ? `<div>asked for: ${s.event.tool_calls.map((c) => `<span class="mono">${esc(c.name)}</span>`).join(", ")}</div>` : ""}`
      : s.kind === "tool"
        ? `<div>arguments</div><pre>${esc(s.call ? s.call.arguments : "")}</pre><div>${s.error ? "<b>error</b>" : "result"}</div><pre>${esc(s.event.output)}</pre>`
        : `<pre>${esc(s.event.message)}</pre>`;
    return `<div class="span ${s.kind}${s.error ? " error" : ""}" data-kind="${s.kind}" data-index="${i}">
  <div class="span-label">${esc(s.label)}</div>
  <div class="span-track"><div class="span-bar" data-start="${(s.start * 1000 / total * 100).toFixed(3)}" data-width="${(s.ms / total * 100).toFixed(3)}"></div></div>
  <div class="span-ms num">${ms(s.ms)}</div>
  <details><summary>details</summary>${detail}</details></div>`;
  });
}

function nestedRuns(trace) {
  // Runs of agents this run called as tools, where the service records them (``nested``).
  const runs = Array.isArray(trace.nested) ? trace.nested : [];
  if (!runs.length) return "";
  return `<section class="card nested"><h2>Agents it called</h2>${runs.map((run) => {
    const events = run.events || [];
    const end = [...events].reverse().find((e) => e.type === "run_finished");
    const total = Math.max(1, end ? end.duration_ms : 1);
    return `<h3><a href="#/agent/${encodeURIComponent(run.agent || "")}">${esc(run.agent || "")}</a> <span class="mono">${esc(run.revision || "")}</span> ${esc(run.variant || "")}${run.depth != null ? " · depth " + esc(run.depth) : ""} · ${ms(end && end.duration_ms)}</h3><div class="timeline">${timelineRows(events, total).join("")}</div>`;
  }).join("")}</section>`;
}

async function renderTrace(id) {
  document.title = "Trace · Dynagent";
  view.innerHTML = `<div class="bar"><h1><a href="#/traces">Runs</a> / <span class="mono">${esc(id)}</span></h1></div><div id="trace">loading…</div>`;
  let trace;
  try { trace = await api(`/v1/traces/${encodeURIComponent(id)}`); } catch (e) {
    document.getElementById("trace").innerHTML = `<p class="error">${esc(e.message)}</p>`; return;
  }
  const events = trace.events || [];
  const {spans} = spansOf(events);
  const started = events.find((e) => e.type === "run_started") || {};
  const finished = [...events].reverse().find((e) => e.type === "run_finished");
  const final = [...events].reverse().find((e) => e.type === "final_output");
  const total = Math.max(1, finished ? finished.duration_ms : Math.max(...spans.map((s) => s.start * 1000 + s.ms), 1));
  const rows = timelineRows(events, total);
  document.getElementById("trace").innerHTML = `<section class="card">
  <div>${badge(finished ? finished.status : "unfinished", finished && finished.status === "ok" ? "ok" : "bad")} <a href="#/agent/${encodeURIComponent(trace.agent)}">${esc(trace.agent)}</a> · <span class="mono">${esc(trace.revision)}</span> · ${esc(trace.variant)} · ${when(started.at)} · ${ms(finished && finished.duration_ms)}
  ${finished ? ` · tokens ${esc(finished.usage.total_tokens)} (in ${esc(finished.usage.input_tokens)}, out ${esc(finished.usage.output_tokens)})` : ""}${finished && typeof finished.cost_usd === "number" ? ` · cost <span class="num run-cost">${esc(usd(finished.cost_usd))}</span>` : ""}${started.session_id ? ` · session <span class="mono">${esc(started.session_id)}</span>` : ""}${trace.owner ? ` · by <span class="mono">${esc(trace.owner)}</span>` : ""}</div>
  <div class="small">input: <span class="mono">${esc(typeof started.input === "string" ? started.input : JSON.stringify(started.input))}</span></div>
</section>
<section class="card"><h2>Timeline</h2><div class="timeline">${rows.join("") || `<p class="dim">No model or tool calls recorded.</p>`}</div></section>
${nestedRuns(trace)}
${final ? `<section class="card"><h2>Final output</h2><pre>${esc(typeof final.output === "string" ? final.output : JSON.stringify(final.output, null, 2))}</pre></section>` : ""}`;
  for (const bar of document.querySelectorAll(".span-bar")) {
    bar.style.left = bar.dataset.start + "%";
    bar.style.width = `max(2px, ${bar.dataset.width}%)`;
  }
}

// ---------------------------------------------------------------- playground

function renderPlayground() {
  document.title = "Playground · Dynagent";
  const chosen = params().query.get("agent") || (document.getElementById("play-agent") || {}).value || "";
  const names = [...state.agents.keys()].sort();
  const form = document.getElementById("play-form");
  if (form) {  // the list of agents changed: keep what was typed
    const select = document.getElementById("play-agent");
    const current = select.value;
    select.innerHTML = names.map((n) => `<option ${n === current ? "selected" : ""}>${esc(n)}</option>`).join("");
    return;
  }
  view.innerHTML = `<div class="bar"><h1>Playground</h1></div>
<form id="play-form" class="card play">
  <label>agent <select id="play-agent" name="agent">${names.map((n) => `<option ${n === chosen ? "selected" : ""}>${esc(n)}</option>`).join("")}</select></label>
  <label>variant <select id="play-variant" name="variant"><option value="">as routed</option><option>stable</option><option>canary</option></select></label>
  <label>session <input id="play-session" name="session" placeholder="optional session id" size="18"></label>
  <label class="wide">input <textarea id="play-input" name="input" rows="3" required>What is 17 * 23?</textarea></label>
  <label class="wide">variables <textarea id="play-vars" name="vars" rows="2" placeholder="name=value, one per line"></textarea></label>
  <button type="submit" id="play-run">Run</button>
</form>
<section class="card"><h2>Events</h2><div id="play-meta"></div><ol id="play-events" class="events"></ol><h3>Output</h3><pre id="play-output"></pre></section>`;
  document.getElementById("play-form").addEventListener("submit", (e) => { e.preventDefault(); runPlayground(); });
}

function eventLine(e) {
  switch (e.type) {
    case "run_started": return `${esc(e.agent)} ${esc(e.revision)} (${esc(e.variant)})`;
    case "model_request": return `${esc(e.model)}, ${esc(e.messages)} messages`;
    case "model_response": return `${ms(e.duration_ms)}, ${esc(e.usage.total_tokens)} tokens${e.tool_calls.length ? ", asks for " + e.tool_calls.map((c) => esc(c.name)).join(", ") : ""}`;
    case "tool_call": return `<span class="mono">${esc(e.name)}</span>(${esc(e.arguments)})`;
    case "tool_result": return `<span class="mono">${esc(e.name)}</span> → ${esc(e.output)} (${ms(e.duration_ms)})`;
    case "final_output": return esc(typeof e.output === "string" ? e.output : JSON.stringify(e.output));
    case "error": return `${esc(e.error_type)}: ${esc(e.message)}`;
    case "run_finished": return `${esc(e.status)} in ${ms(e.duration_ms)}, ${esc(e.usage.total_tokens)} tokens${typeof e.cost_usd === "number" ? ", " + esc(usd(e.cost_usd)) : ""}`;
    default: return "";
  }
}

async function runPlayground() {
  const agent = document.getElementById("play-agent").value;
  const variant = document.getElementById("play-variant").value;
  const session = document.getElementById("play-session").value.trim();
  const variables = {};
  for (const line of document.getElementById("play-vars").value.split("\n")) {
    const at = line.indexOf("=");
    if (at > 0) variables[line.slice(0, at).trim()] = line.slice(at + 1).trim();
  }
  const body = {input: document.getElementById("play-input").value, variables, stream: true};
  if (session) body.session_id = session;
  const list = document.getElementById("play-events"), out = document.getElementById("play-output"), meta = document.getElementById("play-meta");
  list.innerHTML = ""; out.textContent = ""; meta.innerHTML = "running…";
  const extra = {"Content-Type": "application/json"};
  if (variant) extra["X-Agent-Variant"] = variant;
  let traceId = "";
  try {
    const response = await fetch(`/v1/agents/${encodeURIComponent(agent)}/invoke`, {method: "POST", headers: headers(extra), body: JSON.stringify(body)});
    if (!response.ok) {
      const err = await response.json().catch(() => ({}));
      throw new Error((err.error && err.error.message) || response.statusText);
    }
    traceId = response.headers.get("X-Trace-Id") || "";
    for await (const ev of streamEvents(response)) {
      const e = JSON.parse(ev.data);
      traceId = traceId || e.trace_id;
      if (e.type === "model_delta") { out.textContent += e.text; continue; }
      if (e.type === "final_output") out.textContent = typeof e.output === "string" ? e.output : JSON.stringify(e.output, null, 2);
      const li = document.createElement("li");
      li.className = "ev " + e.type + (e.type === "error" || e.is_error ? " error" : "");
      li.dataset.type = e.type;
      li.innerHTML = `<b>${esc(e.type)}</b> <span class="dim">step ${esc(e.step)}</span> ${eventLine(e)}`;
      list.appendChild(li);
    }
    meta.innerHTML = traceId ? `<a id="play-trace" href="#/trace/${encodeURIComponent(traceId)}">open the trace ${esc(traceId)}</a>` : "";
  } catch (e) {
    meta.innerHTML = `<p class="error">${esc(e.message)}</p>`;
  }
}

// ---------------------------------------------------------------- shell

function route() {
  const {parts} = params();
  for (const a of document.querySelectorAll("[data-nav]")) a.classList.toggle("active", a.dataset.nav === (parts[0] === "agent" ? "agents" : parts[0] === "trace" ? "traces" : parts[0]));
  if (parts[0] === "evals") return routeEvals(parts);
  if (parts[0] === "agent" && parts[1]) return renderAgent(parts[1]);
  if (parts[0] === "traces") return renderTraces();
  if (parts[0] === "trace" && parts[1]) return renderTrace(parts[1]);
  if (parts[0] === "play") return renderPlayground();
  return renderAgents();
}

function showLogin(message) {
  sessionStorage.removeItem(KEY_STORE);
  document.getElementById("login").hidden = false;
  view.hidden = true;
  const err = document.getElementById("login-error");
  err.hidden = !message || !state.triedKey;
  err.textContent = message || "";
  document.getElementById("key").focus();
}

async function start() {
  try {
    state.me = await api("/v1/whoami");
  } catch (e) {
    if (e.status !== 401) { view.innerHTML = `<p class="error">${esc(e.message)}</p>`; }
    return;
  }
  document.getElementById("login").hidden = true;
  view.hidden = false;
  document.getElementById("who").innerHTML = state.me.auth
    ? `${esc(state.me.name)} ${state.me.admin ? badge("admin", "ok") : ""}${state.me.agents ? badge(state.me.agents.length + " agents", "", state.me.agents.join(", ")) : ""}` : badge("auth off", "warn");
  document.getElementById("signout").hidden = !state.me.auth;
  route();
  watch();
}

let capsLoaded = null;
function capabilities() {
  // Read once, when an agent view first needs it (not on the first paint's path).
  capsLoaded = capsLoaded || loadCapabilities();
  return capsLoaded;
}

async function loadCapabilities() {
  // Pause, resume and evaluation runs are offered where the service documents them.
  try {
    const doc = await (await fetch("/openapi.json")).json();
    for (const [path, item] of Object.entries(doc.paths || {})) {
      if (item.get && /\/mcp\/servers$/.test(path)) state.caps.mcp = path;
      if (item.post && /\/agents\/\{name\}\/evals$/.test(path)) state.caps.evals = path;
      if (!item.post || !path.includes("{name}")) continue;
      if (/pause$/.test(path)) state.caps.pause = path;
      if (/resume$/.test(path)) state.caps.resume = path;
    }
  } catch (e) { /* no buttons then */ }
}

document.getElementById("login-form").addEventListener("submit", (e) => {
  e.preventDefault();
  state.triedKey = true;
  definitions.clear();  // what one key read is not shown to the next
  state.agents.clear();
  state.series.clear();
  sessionStorage.setItem(KEY_STORE, document.getElementById("key").value.trim());
  document.getElementById("key").value = "";
  start();
});
document.getElementById("confirm-reason").addEventListener("keydown", (e) => {
  // Enter in the reason confirms (the form's first button, and so its default, is Cancel).
  if (e.key === "Enter") { e.preventDefault(); document.getElementById("confirm").close("ok"); }
});
document.getElementById("signout").addEventListener("click", () => { sessionStorage.removeItem(KEY_STORE); location.reload(); });
window.addEventListener("hashchange", () => { if (state.me) route(); });
setInterval(() => {  // "12 s ago" keeps telling the truth without a re-render
  if (document.hidden) return;
  for (const t of document.querySelectorAll("time[data-at]")) t.textContent = ago(Number(t.dataset.at));
}, 15000);
// Once every deferred script has run (evals.js too): an answer that arrived earlier would
// otherwise draw a view whose functions are not defined yet.
document.addEventListener("DOMContentLoaded", start, {once: true});
