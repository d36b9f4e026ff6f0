// Dynagent operations page: the Evaluations view. Loaded after app.js, whose helpers
// (api, esc, badge, when, ms, pct, params, state, headers, parseEvent) it uses.
// Every text a run produced (answers, reasons, case ids) is written through esc().
"use strict";

const EVALS_PATH = (name) => `/v1/agents/${encodeURIComponent(name)}/evals`;
const CHANGE_KIND = {regressed: "bad", fixed: "ok", "same-pass": "", "same-fail": "warn"};
const evalsView = {running: new Map(), timer: 0};  // agent name -> live progress of a run this tab started

function runBadge(run) {
  const s = run.state || "running";
  const kind = s === "passed" ? "ok" : (s === "running" ? "warn" : "bad");
  return badge(s, kind, run.reason || "");
}

function gateBadge(gate) {
  if (!gate) return "";
  const kind = {passed: "ok", forced: "warn", failed: "bad", stale: "warn", pending: "warn", running: "warn"}[gate.state] || "warn";
  return badge("gate " + gate.state, kind, gate.reason || "");
}

function gateBox(name, gate) {
  // The gate of a canary (its status's ``canary.gate``): whether its suite let it take traffic.
  if (!gate) return "";
  const what = {
    pending: "waits for its suite: no live traffic until it passes",
    running: "is running its suite: no live traffic until it passes",
    passed: "passed its suite: the canary takes traffic",
    failed: "failed its suite: the rollout is paused",
    forced: "was forced past its suite",
    stale: "is out of date (a new revision of the canary, its suite, its judge or its tools): it runs again",
  }[gate.state] || "";
  const run = gate.run_id ? ` · <a href="#/evals/${encodeURIComponent(name)}/${encodeURIComponent(gate.run_id)}">the gate's run</a>` : "";
  const box = gate.state === "failed" ? "error-box" : (gate.state === "passed" ? "ok-box" : "warn-box");
  return `<div class="${box} gate" id="canary-gate" data-state="${esc(gate.state)}"><b>Gate</b> ${gateBadge(gate)} ${esc(what)}
  <div class="small">revision <span class="mono">${esc(gate.revision || "")}</span> · suite <span class="mono">${esc(gate.suite_revision || "–")}</span>${gate.judge ? ` · judge <span class="mono">${esc(gate.judge)}</span>` : ""}${gate.by ? ` · by ${esc(gate.by)}` : ""} · ${when(gate.at)}${run}</div>
  ${gate.reason ? `<div class="small gate-reason">${esc(gate.reason)}</div>` : ""}</div>`;
}

function suiteCell(suite) {
  if (!suite) return `<span class="dim">no suite</span>`;
  const refused = suite.state === "refused";
  return `${badge(suite.state, refused ? "bad" : "ok")} <span class="mono">${esc(suite.revision || "–")}</span> · ${esc(suite.cases)} cases${suite.needs_judge ? ` · ${esc(suite.needs_judge)} judged` : ""}`;
}

// ---------------------------------------------------------------- all agents' suites

function renderEvals() {
  document.title = "Evaluations · Dynagent";
  view.innerHTML = `<div class="bar"><h1>Evaluations <span id="evals-count" class="dim"></span></h1></div>
<div class="scroll"><table class="evals"><thead><tr><th>agent</th><th>suite</th><th>source</th><th>canary gate</th><th>suite error</th></tr></thead>
<tbody id="evals-rows"></tbody></table></div>`;
  updateEvalsList();
}

function updateEvalsList() {
  const body = document.getElementById("evals-rows");
  if (!body) return;
  const all = [...state.agents.values()].sort((a, b) => a.name.localeCompare(b.name));
  const withSuite = all.filter((a) => a.evals);
  document.getElementById("evals-count").textContent = `${withSuite.length} of ${all.length} agents have a suite`;
  body.innerHTML = withSuite.length ? withSuite.map((a) => `<tr data-agent="${esc(a.name)}" class="${a.evals.last_error ? "has-error" : ""}">
<td><a href="#/evals/${encodeURIComponent(a.name)}" class="name">${esc(a.name)}</a></td>
<td>${suiteCell(a.evals)}</td>
<td class="mono small">${esc(a.evals.source || "")}</td>
<td>${a.canary && a.canary.gate ? gateBadge(a.canary.gate) : `<span class="dim">–</span>`}</td>
<td>${errorCell(a.evals.last_error)}</td></tr>`).join("")
    : `<tr><td colspan="5" class="dim">${state.live ? "No agent has an evaluation suite. Publish {name}.evals.yaml beside an agent." : "loading…"}</td></tr>`;
}

// ---------------------------------------------------------------- one agent's suite and runs

async function renderAgentEvals(name) {
  document.title = "Evaluations of " + name + " · Dynagent";
  await capabilities();
  view.innerHTML = `<div class="bar"><h1><a href="#/evals">Evaluations</a> / <a href="#/agent/${encodeURIComponent(name)}">${esc(name)}</a></h1></div>
<section class="card" id="suite">loading…</section>
<section class="card"><h2>Runs</h2><div id="eval-runs">loading…</div></section>`;
  if (state.me && state.me.admin) return Promise.all([refreshSuite(name), loadRuns(name)]);
  document.getElementById("eval-runs").innerHTML = `<p class="dim">Evaluation runs need an admin key.</p>`;
  return refreshSuite(name);
}

async function refreshSuite(name) {
  let status;
  try { status = await api(`/v1/agents/${encodeURIComponent(name)}`); } catch (e) {
    const box = document.getElementById("suite");
    if (box) box.innerHTML = `<p class="error">${esc(e.message)}</p>`;
    return;
  }
  const box = document.getElementById("suite");
  if (!box || params().parts[1] !== name) return;
  if (!document.getElementById("suite-detail")) {
    box.innerHTML = `<div id="suite-detail"></div><div id="suite-run"></div><div id="eval-progress" aria-live="polite"></div>`;
  }
  document.getElementById("suite-detail").innerHTML = suiteDetail(status);
  // The form is drawn again only when what it offers changes: a live update never takes
  // the focus, or what was chosen, from someone about to run the suite.
  const offer = status.evals ? runForm(status) : "";
  const run = document.getElementById("suite-run");
  if (run.dataset.offer === offer) return;
  const form = document.getElementById("eval-form");
  const kept = form ? {variant: form.variant.value, compare: form.compare.checked, concurrency: form.concurrency.value} : null;
  run.dataset.offer = offer;
  run.innerHTML = offer;
  wireRunForm(status, kept);
}

function suiteDetail(s) {
  const suite = s.evals;
  const gate = s.canary ? gateBox(s.name, s.canary.gate) : "";
  if (!suite) return `<h2>Suite</h2><p class="dim">No suite. Publish <span class="mono">${esc(s.name)}.evals.yaml</span> beside the agent.</p>${gate}`;
  return `<h2>Suite</h2><div>${suiteCell(suite)} · loaded ${when(suite.loaded_at)}</div>
  <div class="mono small">${esc(suite.source || "")}</div>
  ${suite.last_error ? `<div class="error-box"><b>Newest version refused</b> ${when(suite.last_error.at)} ${errorCell(suite.last_error)}${suite.revision ? `<div class="small">Runs use the last good suite, ${esc(suite.revision)}.</div>` : ""}</div>` : ""}
  <div class="small">serving <span class="mono">${esc(s.revision || "–")}</span>${s.canary ? ` · canary <span class="mono">${esc(s.canary.revision)}</span>` : ""}</div>
  ${gate}`;
}

function runForm(s) {
  if (!(state.me && state.me.admin)) return `<p class="dim">Running a suite needs an admin key.</p>`;
  if (!state.caps.evals) return `<p class="dim">This service does not document evaluation runs (POST ${esc(EVALS_PATH(s.name))}).</p>`;
  const canary = !!s.canary;
  return `<form id="eval-form" class="run-form">
  <label>variant <select id="eval-variant" name="variant"><option value="stable">stable ${esc(s.revision || "")}</option>${canary ? `<option value="canary" selected>canary ${esc(s.canary.revision)}</option>` : ""}</select></label>
  <label title="run the stable on the same cases and show the difference per case"><input id="eval-compare" name="compare" type="checkbox" ${canary ? "checked" : "disabled"}> compare with the stable</label>
  <label>concurrency <input id="eval-concurrency" name="concurrency" type="number" min="1" max="64" value="8" size="3"></label>
  <button type="submit" id="eval-run">Run suite</button>
</form>`;
}

function wireRunForm(s, kept) {
  const form = document.getElementById("eval-form");
  if (!form) return;
  const variant = form.variant, compare = form.compare;
  const sync = () => { compare.disabled = variant.value !== "canary"; if (compare.disabled) compare.checked = false; };
  if (kept) {
    if ([...variant.options].some((o) => o.value === kept.variant)) variant.value = kept.variant;
    compare.checked = kept.compare;
    form.concurrency.value = kept.concurrency;
  }
  sync();
  variant.addEventListener("change", () => { sync(); if (variant.value === "canary") compare.checked = true; });
  form.addEventListener("submit", (e) => { e.preventDefault(); startRun(s.name, form); });
  document.getElementById("eval-run").disabled = evalsView.running.has(s.name);
}

async function startRun(name, form) {
  const body = {variant: form.variant.value, concurrency: Number(form.concurrency.value) || 8};
  if (form.compare.checked) body.compare = true;
  const button = document.getElementById("eval-run");
  button.disabled = true;
  const live = {done: 0, total: 0, failed: 0, id: ""};
  evalsView.running.set(name, live);
  showProgress(name, live, "starting…");
  try {
    const response = await fetch(EVALS_PATH(name), {method: "POST", headers: headers({"Content-Type": "application/json", Accept: "text/event-stream"}), body: JSON.stringify(body)});
    if (!response.ok) {
      const err = await response.json().catch(() => ({}));
      if (response.status === 401) showLogin((err.error && err.error.message) || "unknown API key");
      throw new Error((err.error && err.error.message) || response.statusText);
    }
    const record = (response.headers.get("Content-Type") || "").startsWith("text/event-stream")
      ? await followRun(name, response, live) : await response.json();
    live.id = record.id || live.id;
    showProgress(name, live, "", record);
  } catch (e) {
    showProgress(name, live, "Failed: " + e.message);
  } finally {
    evalsView.running.delete(name);
    const again = document.getElementById("eval-run");
    if (again && params().parts[1] === name) again.disabled = false;
    loadRuns(name);
  }
}

async function followRun(name, response, live) {
  // Server-sent events: ``case`` per finished case, ``done`` with the whole record.
  let record = null;
  for await (const ev of streamEvents(response)) {
    const data = JSON.parse(ev.data);
    if (ev.event === "done") { record = data; continue; }
    if (ev.event === "error") throw new Error((data.error && data.error.message) || data.message || "the run failed");
    if (ev.event !== "case") { live.id = data.id || live.id; live.total = data.total ?? live.total; continue; }
    live.done = data.done ?? live.done + 1;
    live.total = data.total ?? live.total;
    if (!data.passed) live.failed++;
    showProgress(name, live, "");
  }
  if (!record) throw new Error("the run's stream ended before its result");
  return record;
}

function showProgress(name, live, message, record) {
  const box = document.getElementById("eval-progress");
  if (!box || params().parts[1] !== name) return;
  if (message) { box.className = message.startsWith("Failed") ? "result bad" : "result pending"; box.textContent = message; return; }
  if (!record) {
    box.className = "result pending";
    box.innerHTML = `<label>running: ${esc(live.done)} of ${esc(live.total || "?")} cases${live.failed ? `, ${esc(live.failed)} failed` : ""} <progress id="eval-bar" max="${esc(live.total || 1)}" value="${esc(live.done)}"></progress></label>`;
    return;
  }
  const passed = record.state === "passed";
  box.className = "result " + (passed ? "ok" : "bad");
  box.innerHTML = `${runBadge(record)} ${esc(runSummary(record))} · <a id="eval-open" href="#/evals/${encodeURIComponent(name)}/${encodeURIComponent(record.id)}">open the run</a>`;
}

function runSummary(run) {
  const cases = run.cases || [];
  const failed = cases.length ? cases.filter((c) => !c.passed).length : null;
  const parts = [`${run.done ?? cases.length} of ${run.total} cases`];
  if (failed != null) parts.push(`${failed} failed`);
  if (run.pass_rate != null) parts.push(`pass rate ${pct(run.pass_rate)}`);
  if (run.mean_score != null) parts.push(`mean score ${Number(run.mean_score).toFixed(2)}`);
  if (run.reason) parts.push(run.reason);
  return parts.join(" · ");
}

async function loadRuns(name) {
  let data;
  try { data = await api(EVALS_PATH(name)); } catch (e) {
    const box = document.getElementById("eval-runs");
    if (box) box.innerHTML = e.status === 404 || e.status === 405 ? `<p class="dim">No runs.</p>` : `<p class="error">${esc(e.message)}</p>`;
    return;
  }
  const box = document.getElementById("eval-runs");
  if (!box || params().parts[1] !== name) return;
  const runs = data.runs || [];
  box.innerHTML = runs.length ? `<table class="eval-runs small-table"><thead><tr><th>started</th><th>result</th><th>variant</th><th>revision</th><th>suite</th><th>cases</th><th>pass rate</th><th>mean score</th><th>compare</th><th>trigger · by</th></tr></thead><tbody>
${runs.map((r) => `<tr data-run="${esc(r.id)}"><td><a href="#/evals/${encodeURIComponent(name)}/${encodeURIComponent(r.id)}">${when(r.started_at)}</a></td><td>${runBadge(r)}</td><td>${esc(r.variant)}</td><td class="mono">${esc(r.revision)}</td><td class="mono">${esc(r.suite_revision)}</td>
<td class="num">${esc(r.done)}/${esc(r.total)}</td><td class="num">${pct(r.pass_rate)}</td><td class="num">${r.mean_score == null ? "–" : esc(Number(r.mean_score).toFixed(2))}</td>
<td>${r.compare ? compareBadges(r.compare) : ""}</td><td class="small">${esc(r.trigger || "")}${r.by ? " · " + esc(r.by) : ""}</td></tr>`).join("")}</tbody></table>`
    : `<p class="dim">No runs yet.</p>`;
  if (runs.some((r) => r.state === "running")) scheduleRunsRefresh(name);
}

function scheduleRunsRefresh(name) {
  clearTimeout(evalsView.timer);
  evalsView.timer = setTimeout(() => {
    if (params().parts[0] === "evals" && params().parts[1] === name && !params().parts[2] && !document.hidden) loadRuns(name);
  }, 2000);
}

function compareBadges(compare, bare) {
  const counts = {};
  for (const c of compare.cases || []) counts[c.change] = (counts[c.change] || 0) + 1;
  const shown = ["regressed", "fixed"].filter((k) => counts[k]).map((k) => badge(`${counts[k]} ${k}`, CHANGE_KIND[k]));
  const badges = shown.join(" ") || badge("no change", "");
  return bare ? badges : `vs <span class="mono">${esc(compare.stable_revision || "")}</span> ${badges}`;
}

// ---------------------------------------------------------------- one run

async function renderEvalRun(name, id) {
  document.title = "Evaluation run · Dynagent";
  view.innerHTML = `<div class="bar"><h1><a href="#/evals">Evaluations</a> / <a href="#/evals/${encodeURIComponent(name)}">${esc(name)}</a> / <span class="mono">${esc(id)}</span></h1></div><div id="eval-run">loading…</div>`;
  await loadRun(name, id);
}

async function loadRun(name, id) {
  let run;
  try { run = await api(`${EVALS_PATH(name)}/${encodeURIComponent(id)}`); } catch (e) {
    const box = document.getElementById("eval-run");
    if (box) box.innerHTML = `<p class="error">${esc(e.message)}</p>`;
    return;
  }
  const box = document.getElementById("eval-run");
  const here = params().parts;
  if (!box || here[1] !== name || here[2] !== id) return;
  const open = new Set([...box.querySelectorAll("details[open][data-case]")].map((d) => d.dataset.case));
  box.innerHTML = runDetail(run);
  for (const d of box.querySelectorAll("details[data-case]")) if (open.has(d.dataset.case)) d.open = true;
  const only = document.getElementById("only-changes");
  if (only) only.addEventListener("change", () => { for (const row of box.querySelectorAll("tr[data-change]")) row.hidden = only.checked && !/regressed|fixed/.test(row.dataset.change); });
  if (run.state === "running") setTimeout(() => { if (!document.hidden) loadRun(name, id); }, 1000);
}

function runDetail(run) {
  const compare = run.compare || null;
  const byCase = new Map(((compare && compare.cases) || []).map((c) => [c.id, c]));
  const cases = run.cases || [];
  return `<section class="card run-summary">
  <div>${runBadge(run)} <span class="mono">${esc(run.revision)}</span> (${esc(run.variant)}) · suite <span class="mono">${esc(run.suite_revision)}</span> · ${when(run.started_at)}${run.finished_at ? " · " + ms((run.finished_at - run.started_at) * 1000) : ""}${run.trigger ? " · " + esc(run.trigger) : ""}${run.by ? " by " + esc(run.by) : ""}</div>
  <div class="run-figures">${esc(runSummary(run))}</div>
  ${(run.regressions || []).length ? `<div class="error-box"><b>Regressions</b> (passed on the stable, fail here): ${run.regressions.map((c) => `<span class="mono">${esc(c)}</span>`).join(", ")}</div>` : ""}
  ${run.judge ? `<div class="small">judge <span class="mono">${esc(run.judge)}</span> · ${esc(run.judge_tokens)} tokens${run.judge_cost != null ? " · cost " + esc(run.judge_cost) : ""} (counted apart from the agent's)</div>` : ""}
  ${compare ? `<div class="small">compared with the stable <span class="mono">${esc(compare.stable_revision)}</span> (run <a href="#/evals/${encodeURIComponent(run.agent)}/${encodeURIComponent(compare.stable_run)}" class="mono">${esc(compare.stable_run)}</a>): ${compareBadges(compare, true)} <label><input id="only-changes" type="checkbox"> only regressed and fixed cases</label></div>` : ""}
</section>
<section class="card"><h2>Cases</h2>${cases.length ? `<table class="eval-cases"><colgroup><col class="c-case"><col class="c-verdict"><col class="c-score"><col class="c-lat"><col class="c-tok"><col class="c-cost">${compare ? `<col class="c-stable"><col class="c-change">` : ""}<col></colgroup>
<thead><tr><th>case</th><th>verdict</th><th>score</th><th>latency</th><th>tokens</th><th>cost</th>${compare ? "<th>stable</th><th>change</th>" : ""}<th>answer and checks</th></tr></thead>
<tbody>${cases.map((c) => caseRow(c, byCase.get(c.id), !!compare)).join("")}</tbody></table>` : `<p class="dim">${run.state === "running" ? "No case has finished yet." : "No cases."}</p>`}</section>`;
}

function caseRow(c, diff, compared) {
  const failing = (c.checks || []).filter((k) => !k.passed);
  const change = diff ? diff.change : "";
  return `<tr data-case="${esc(c.id)}" data-change="${esc(change)}" class="${c.passed ? "" : "has-error"}">
<td class="mono case-id">${esc(c.id)}</td>
<td>${badge(c.passed ? "pass" : (c.error ? "error" : "fail"), c.passed ? "ok" : "bad")}${c.trials > 1 ? `<div class="dim small">${esc(c.passed_trials)}/${esc(c.trials)} trials</div>` : ""}</td>
<td class="num">${c.score == null ? "–" : esc(Number(c.score).toFixed(2))}</td><td class="num">${ms(c.latency_ms)}</td><td class="num">${esc(c.tokens)}</td><td class="num">${c.cost == null ? "–" : esc(c.cost)}</td>
${compared ? `<td>${diff ? `${badge(diff.stable_passed ? "pass" : "fail", diff.stable_passed ? "ok" : "bad")} <span class="num">${esc(Number(diff.stable_score).toFixed(2))}</span>` : "–"}</td><td>${diff ? badge(diff.change, CHANGE_KIND[diff.change] || "") : ""}</td>` : ""}
<td class="case-detail">${c.error ? `<div class="err">${esc(c.error)}</div>` : ""}${failing.length ? `<ul class="checks">${failing.map((k) => `<li class="err">${esc(k.reason)}</li>`).join("")}</ul>` : (c.passed ? "" : `<div class="err">${esc(c.reason || "")}</div>`)}
<details data-case="${esc(c.id)}"><summary>answer${(c.checks || []).length ? `, ${esc(c.checks.length)} check${c.checks.length > 1 ? "s" : ""}` : ""}</summary><pre class="answer">${esc(c.answer)}</pre>${(c.checks || []).length ? `<ul class="checks">${c.checks.map((k) => `<li class="${k.passed ? "" : "err"}">${k.passed ? "✓" : "✗"} ${esc(k.reason)} <span class="dim">(${esc(Number(k.score).toFixed(2))})</span></li>`).join("")}</ul>` : ""}</details></td></tr>`;
}

function routeEvals(parts) {
  if (parts[1] && parts[2]) return renderEvalRun(parts[1], parts[2]);
  if (parts[1]) return renderAgentEvals(parts[1]);
  return renderEvals();
}

function evalsFeed(parts, names, full) {
  // The live feed changed these agents: the suite and gate shown follow it.
  if (!parts[1]) updateEvalsList();
  else if (!parts[2] && (full || names.has(parts[1]))) {
    refreshSuite(parts[1]);
    // A gate that moved ran (or is running) a suite: its run joins the list.
    if (state.me && state.me.admin && !evalsView.running.has(parts[1])) loadRuns(parts[1]);
  }
}
