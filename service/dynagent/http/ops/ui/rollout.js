// Dynagent operations page: a canary's analysis, its budget, the trail of its rollout's
// decisions, and what a run cost. Loaded after app.js, whose helpers (ago) it uses.
// Everything here is built as DOM nodes: a text that came from the service (a reason, a
// note, who decided) is set as text, never parsed as markup.
"use strict";

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(props || {})) {
    if (value == null || value === false) continue;
    if (name === "class") node.className = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child != null && child !== false) node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

function badgeEl(text, kind, title) {
  return el("span", {class: "badge " + (kind || ""), title: title || null}, text);
}

function timeEl(at) {
  // ``at``: seconds since the epoch; its "… ago" is kept true by app.js's ticker.
  if (typeof at !== "number" || !Number.isFinite(at)) return el("span", {class: "dim"}, "–");
  const d = new Date(at * 1000);
  return el("time", {datetime: d.toISOString(), "data-at": at, title: d.toLocaleString()}, ago(at));
}

function usd(x) {
  // A cost in US dollars: cents for a dollar or more, three significant digits below.
  if (typeof x !== "number" || !Number.isFinite(x)) return "–";
  if (x === 0) return "$0";
  if (Math.abs(x) < 0.000001) return "< $0.000001";
  if (Math.abs(x) >= 1) return "$" + x.toLocaleString("en-US", {minimumFractionDigits: 2, maximumFractionDigits: 2});
  return "$" + String(Number(x.toPrecision(3)));
}

function figure(value) {
  // One figure of a check, compact: whole numbers as they are, others to four digits.
  if (typeof value === "number") return Number.isInteger(value) ? String(value) : String(Number(value.toPrecision(4)));
  if (value === null || value === undefined) return "–";
  return typeof value === "object" ? JSON.stringify(value) : String(value);
}

// ---------------------------------------------------------------- analysis

const VERDICT_KIND = {pass: "ok", fail: "bad", inconclusive: "warn"};
const SOURCE_TEXT = {prometheus: "Prometheus (the fleet's figures)", replica: "this replica's figures"};

function analysisBody(a) {
  // The status's ``analysis``: {revision, verdict, source, note, inconclusive,
  // max_inconclusive, checked_at, checks: [{name, verdict, reason, figures, interval}]}.
  if (!a) return [];
  const verdict = String(a.verdict || "pending");
  const most = a.max_inconclusive == null ? "" : ` of ${figure(a.max_inconclusive)}`;
  const checks = Array.isArray(a.checks) ? a.checks : [];
  return [
    el("h2", {}, "Analysis ", badgeEl(verdict, VERDICT_KIND[verdict] || "", "the last check's verdict")),
    el("div", {class: "analysis-meta"},
      "figures from ", el("b", {class: "analysis-source"}, SOURCE_TEXT[a.source] || String(a.source || "–")),
      " · inconclusive ", el("span", {class: "num analysis-inconclusive"}, `${figure(a.inconclusive ?? 0)}${most}`), " in a row",
      " · checked ", a.checked_at ? timeEl(a.checked_at) : el("span", {class: "dim"}, "not yet"),
      " · revision ", el("span", {class: "mono"}, String(a.revision || "–"))),
    a.note ? el("div", {class: "warn-box analysis-note"}, String(a.note)) : null,
    checks.length ? checksTable(checks) : el("p", {class: "dim"}, "No check has figures yet."),
  ];
}

function checksTable(checks) {
  const rows = checks.map((c) => {
    const verdict = String(c.verdict || "");
    const figures = Object.entries(c.figures || {}).map(([k, v]) => `${k}=${figure(v)}`).join(" · ");
    // An open end (null: the band is unbounded that way, too few figures yet) is ±∞.
    const interval = Array.isArray(c.interval) && c.interval.length === 2
      ? `[${c.interval[0] == null ? "−∞" : figure(c.interval[0])}, ${c.interval[1] == null ? "∞" : figure(c.interval[1])}]` : "–";
    return el("tr", {"data-check": String(c.name || ""), class: "verdict-" + verdict},
      el("td", {class: "mono"}, String(c.name || "")),
      el("td", {}, badgeEl(verdict, VERDICT_KIND[verdict] || "")),
      el("td", {class: "mono small figures"}, figures),
      el("td", {class: "mono small interval"}, interval),
      el("td", {class: "small reason"}, String(c.reason || "")));
  });
  return el("table", {class: "small-table checks-table"},
    el("thead", {}, el("tr", {}, ["check", "verdict", "figures", "interval", "reason"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows));
}

// ---------------------------------------------------------------- budget

function budgetBody(b) {
  // The canary's ``budget``: {usd?, tokens?, per, spent_usd, spent_tokens, source, exceeded}.
  if (!b) return [];
  const limit = typeof b.usd === "number" ? usd(b.usd) : `${figure(b.tokens)} token${b.tokens === 1 ? "" : "s"}`;
  const spentShare = typeof b.usd === "number" ? b.spent_usd / b.usd : b.spent_tokens / b.tokens;
  const per = b.per === "day" ? "per day (UTC)" : "per rollout";
  const source = b.source === "prometheus" ? "the fleet's spend (Prometheus)" : "this replica's spend";
  return [
    el("div", {class: b.exceeded ? "error-box budget" : "ok-box budget"},
      el("b", {}, "Budget "), badgeEl(b.exceeded ? "exceeded" : "within", b.exceeded ? "bad" : "ok"),
      " ", el("span", {class: "budget-limit"}, `${limit} ${per}`),
      " · spent ", el("span", {class: "num budget-spent"}, `${usd(b.spent_usd)} · ${figure(b.spent_tokens ?? 0)} tokens`),
      Number.isFinite(spentShare) ? ` (${Math.round(spentShare * 100)}% of the limit)` : "",
      " · ", el("span", {class: "budget-source"}, source),
      b.note ? el("div", {class: "small budget-note"}, String(b.note)) : null),
  ];
}

// ---------------------------------------------------------------- the trail of decisions

function historyBody(h) {
  // GET /v1/agents/{name}/rollout/history: {canary: {revision, entries}|null,
  // ended: {revision, entries, outcome, at}|null}; entries oldest first.
  const out = [el("h2", {}, "Rollout history")];
  if (!h) return out.concat(el("p", {class: "dim"}, "The trail of decisions could not be read."));
  if (h.canary) {
    out.push(el("h3", {}, "Canary ", el("span", {class: "mono"}, String(h.canary.revision || ""))));
    out.push(trailTable(h.canary.entries, "canary"));
  }
  if (h.ended) {
    out.push(el("h3", {}, "Last ended rollout ", el("span", {class: "mono"}, String(h.ended.revision || "")),
      " · ", String(h.ended.outcome || ""), " ", timeEl(h.ended.at)));
    out.push(trailTable(h.ended.entries, "ended"));
  }
  if (!h.canary && !h.ended) out.push(el("p", {class: "dim"}, "No rollout yet."));
  return out;
}

const SHOWN = new Set(["at", "by", "action", "from", "to", "reason"]);

function trailTable(entries, which) {
  const list = Array.isArray(entries) ? [...entries].reverse() : [];  // newest first
  if (!list.length) return el("p", {class: "dim", "data-trail": which}, "No decisions yet.");
  const rows = list.map((e) => {
    const at = Date.parse(e.at);
    const moved = "from" in e || "to" in e ? `${figure(e.from)} → ${figure(e.to)}` : "";
    const extra = Object.entries(e).filter(([k]) => !SHOWN.has(k)).map(([k, v]) => `${k}=${figure(v)}`).join(" · ");
    return el("tr", {"data-action": String(e.action || "")},
      el("td", {}, Number.isFinite(at) ? timeEl(at / 1000) : String(e.at || "")),
      el("td", {class: "mono"}, String(e.by || "")),
      el("td", {}, String(e.action || "")),
      el("td", {class: "mono"}, moved),
      el("td", {class: "small reason"}, String(e.reason ?? ""), extra ? el("span", {class: "dim"}, (e.reason ? " · " : "") + extra) : null));
  });
  return el("table", {class: "small-table trail", "data-trail": which},
    el("thead", {}, el("tr", {}, ["when", "by", "action", "from → to", "reason"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows));
}

// ---------------------------------------------------------------- filling the agent view

function fillPart(id, data, build) {
  // Rebuilt only when what it shows changed: a live update leaves it (and a selection in
  // it) alone otherwise.
  const box = document.getElementById(id);
  if (!box) return;
  const sig = JSON.stringify(data ?? null);
  if (box.dataset.sig === sig) return;
  box.replaceChildren(...build(data));
  box.dataset.sig = sig;
}
