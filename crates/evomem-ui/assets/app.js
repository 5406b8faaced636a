// evomem inspector: plain JavaScript, no build step, no dependency.
// Views are routed by the URL hash; every list is fetched a page at a time
// from the JSON API next to the page (`api/...`), so nothing loads a whole
// op log. Graphs are inline SVG drawn here.
"use strict";

const state = { mode: null, runs: [], key: "", runInfo: {} };

// ---------- DOM helpers ----------
// Every element is built here, text as text nodes: nothing goes through
// innerHTML. The Content-Security-Policy allows no inline script, handler or
// style attribute, so handlers are listeners and `style` is an object of
// CSSOM properties (`{ width: "12px" }`), never a `style="..."` string.
function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "text") el.textContent = v;
    else if (k === "style") Object.assign(el.style, v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
  }
  return el;
}
const SVG = "http://www.w3.org/2000/svg";
function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    el.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
  }
  return el;
}
const main = () => document.getElementById("main");
function show(...nodes) {
  const m = main();
  m.replaceChildren(...nodes.flat().filter(Boolean));
}
function setStatus(text, isError) {
  const el = document.getElementById("status");
  el.textContent = text || "";
  el.className = isError ? "error" : "";
}
function fmt(x, digits) {
  if (x === null || x === undefined) return "";
  if (typeof x === "number") return Number.isInteger(x) ? String(x) : x.toFixed(digits === undefined ? 4 : digits);
  return String(x);
}
const enc = encodeURIComponent;

// ---------- titles and texts in place of ids ----------
// Where the data has a title (an item's, from the run's item_titles.json or
// the service's catalog) or a text (a memory's), the pages show it and keep
// the id on hover; without one they show the id, as before.
function cut(t, n) { t = String(t); return t.length > n ? t.slice(0, n - 1) + "…" : t; }
// An item: its title with `item <id>` on hover, else its id.
function itemEl(token, titles) {
  const t = titles && titles[token];
  if (token === null || token === undefined) return null;
  return t ? h("span", { class: "titled item", title: "item " + token, "data-item": token }, t)
    : h("span", { class: "item", "data-item": token }, token);
}
// A memory record: its text (cut to n) with the id and whole text on hover.
function memEl(id, text, n) {
  return text ? h("span", { class: "titled mem-text", title: id + ": " + text, "data-id": id }, cut(text, n || 80))
    : h("span", { "data-id": id }, id);
}

// ---------- API ----------
class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}
async function api(path) {
  const headers = {};
  if (state.mode === "service" && state.key) headers["Authorization"] = "Bearer " + state.key;
  const t0 = performance.now();
  const resp = await fetch("api/" + path, { headers });
  const text = await resp.text();
  let body = null;
  try { body = text ? JSON.parse(text) : null; } catch (_) { body = null; }
  if (!resp.ok) {
    const msg = body && (body.error && (body.error.message || body.error)) || (resp.status + " " + resp.statusText);
    throw new ApiError(resp.status, typeof msg === "string" ? msg : JSON.stringify(msg));
  }
  setStatus("api/" + path.split("?")[0] + " " + Math.round(performance.now() - t0) + " ms");
  return body;
}

// ---------- routing ----------
function parseHash() {
  const raw = location.hash.replace(/^#\/?/, "");
  const [path, qs] = raw.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(qs || "");
  return { parts, params };
}
function go(hash) { if (location.hash !== hash) location.hash = hash; else route(); }

let routeToken = 0;
async function route() {
  const token = ++routeToken;
  const { parts, params } = parseHash();
  try {
    const [view, ...rest] = parts;
    if (state.mode === "service") {
      // The same views over the tenant: no run or policy in the hash.
      if (!view || !state.key) return await serviceHome(params);
      if (view === "user") return await userView(null, null, rest[0], params, token);
      if (view === "decision") return await decisionView(null, null, rest[0]);
      if (view === "op") return await opView(null, null, rest[0], params);
      show(h("p", { class: "error" }, "Unknown view: " + view));
      return;
    }
    if (!view) return await homeView();
    if (view === "run") return await runView(rest[0]);
    if (view === "user") return await userView(rest[0], rest[1], rest[2], params, token);
    if (view === "decision") return await decisionView(rest[0], rest[1], rest[2]);
    if (view === "op") return await opView(rest[0], rest[1], rest[2], params);
    if (view === "compare") return await compareView(rest[0], params);
    show(h("p", { class: "error" }, "Unknown view: " + view));
  } catch (e) {
    if (token !== routeToken) return;
    if (e instanceof ApiError) {
      setStatus("error " + e.status, true);
      show(h("p", { class: "error", id: "error" }, e.message));
    } else {
      throw e;
    }
  }
}

function nav() {
  const n = document.getElementById("nav");
  if (state.mode === "service") {
    // The tenant's key, sent as `Authorization: Bearer <key>`.
    const keyIn = h("input", { type: "password", id: "api-key", placeholder: "API key (evk_…)", value: state.key });
    const use = () => {
      state.key = keyIn.value.trim();
      sessionStorage.setItem("evomem-key", state.key);
      go("#/");
    };
    keyIn.addEventListener("keydown", (e) => { if (e.key === "Enter") use(); });
    n.replaceChildren(h("span", { class: "badge" }, "service"), " ", h("a", { href: "#/" }, "users"), " ", keyIn, " ",
      h("button", { id: "svc-load", onclick: use }, "Use key"));
    return;
  }
  const links = state.runs.map((r) => h("a", { href: "#/run/" + r.id }, "run " + r.id + ": " + r.name));
  if (state.runs.length > 1) links.push(h("a", { href: "#/compare/" }, "compare"));
  n.replaceChildren(...links);
}

// Where a view's API calls and links go: a run's policy in run mode, the
// tenant in service mode (`/ui/api/...`, hashes without run and policy).
function scope(run, policy) {
  if (state.mode === "service") return { api: "", hash: "", svc: true };
  return { api: "runs/" + run + "/policies/" + enc(policy) + "/", hash: run + "/" + enc(policy) + "/", svc: false };
}

// What the views read of a policy, for the tenant (its records are of
// every family the service runs, so the views go by record kind alone).
const SERVICE_POLICY = { slug: "tenant", spec: "the tenant's live memory", has_decisions: true,
  caps: { lifecycle_timeline: [], evidence_paths: true, collaborative: false, writes_memory: true } };

async function runInfo(run) {
  if (!state.runInfo[run]) state.runInfo[run] = await api("runs/" + enc(run));
  return state.runInfo[run];
}

// ---------- home and run ----------
async function homeView() {
  if (state.runs.length === 1) return go("#/run/0");
  show(h("h2", {}, "Runs"), h("ul", {}, state.runs.map((r) =>
    h("li", {}, h("a", { href: "#/run/" + r.id }, r.name), " ", h("span", { class: "muted" }, r.path)))));
}

const METRICS = ["HR@1", "HR@5", "HR@10", "NDCG@10", "MRR"];

async function runView(run) {
  const info = await runInfo(run);
  const byslug = {};
  for (const p of info.policies) byslug[p.slug] = p;
  const rows = info.policies.map((p) => {
    const m = p.metrics || {};
    const links = [];
    if (p.has_ops && p.caps.writes_memory) links.push(h("a", { href: "#/user/" + run + "/" + enc(p.slug), class: "memory-link" }, "memory"));
    if (p.has_decisions) links.push(h("a", { href: "#/decision/" + run + "/" + enc(p.slug) + "/first" }, "decisions"));
    const badges = [];
    if (p.caps.lifecycle_timeline.length) badges.push(h("span", { class: "badge" }, "lifecycle timeline"));
    if (p.caps.evidence_paths) badges.push(h("span", { class: "badge" }, "evidence paths"));
    if (p.caps.collaborative) badges.push(h("span", { class: "badge" }, "collaborative"));
    return h("tr", { "data-policy": p.slug },
      h("td", {}, p.spec), h("td", { class: "num" }, fmt(p.n_users)),
      METRICS.map((k) => h("td", { class: "num" }, fmt(m[k]))),
      h("td", { class: "num" }, fmt(p.ops && p.ops.total)),
      h("td", {}, badges), h("td", {}, links.map((l, i) => [i ? " · " : "", l])));
  });
  const metricsTable = h("table", { id: "metrics" },
    h("tr", {}, h("th", {}, "policy"), h("th", { class: "num" }, "users"), METRICS.map((k) => h("th", { class: "num" }, k)),
      h("th", { class: "num" }, "ops"), h("th", {}, "capabilities"), h("th", {}, "inspect")), rows);

  // LLM accounting: per role from metrics.json, runtime totals from timing.json.
  const llmRows = [];
  const timing = (info.timing && info.timing.policies) || {};
  for (const p of info.policies) {
    const roles = (p.llm && p.llm.per_role) || {};
    const rt = (timing[p.slug] && timing[p.slug].llm_runtime && timing[p.slug].llm_runtime.totals) || {};
    for (const [role, r] of Object.entries(roles)) {
      llmRows.push(h("tr", {}, h("td", {}, p.slug), h("td", {}, role),
        ["runs", "calls", "offline_runs", "fallbacks", "repairs", "prompt_tokens", "completion_tokens"].map((k) => h("td", { class: "num" }, fmt(r[k]))),
        h("td", { class: "num" }, fmt(rt.backend_calls)), h("td", { class: "num" }, fmt(rt.cache_hits)), h("td", { class: "num" }, fmt(rt.latency_ms_total))));
    }
  }
  const llmTable = llmRows.length
    ? h("table", { id: "llm" }, h("tr", {}, ["policy", "role", "runs", "calls", "offline", "fallbacks", "repairs", "prompt tok", "completion tok", "backend calls", "cache hits", "latency ms"].map((k) => h("th", {}, k))), llmRows)
    : h("p", { class: "muted" }, "No LLM accounting in this run.");

  // Per-user distributions.
  const withPerUser = info.policies.filter((p) => p.has_per_user);
  const polSel = h("select", { id: "hist-policy" }, withPerUser.map((p) => h("option", { value: p.slug }, p.slug)));
  const metSel = h("select", { id: "hist-metric" }, ["MRR", "NDCG@10", "HR@1", "rank"].map((k) => h("option", { value: k }, k)));
  const histBox = h("div", { id: "histogram" });
  const drawHist = async () => {
    if (!polSel.value) return;
    const data = await api("runs/" + run + "/policies/" + enc(polSel.value) + "/per_user");
    histBox.replaceChildren(histogram(data.rows, metSel.value));
  };
  polSel.addEventListener("change", () => drawHist().catch(report));
  metSel.addEventListener("change", () => drawHist().catch(report));

  const plots = h("div", { class: "plots" },
    info.plots.map((n) => h("img", { src: "api/runs/" + run + "/plot/" + n, alt: n, title: n })),
    info.policies.filter((p) => p.has_growth).map((p) => h("img", { src: "api/runs/" + run + "/policies/" + enc(p.slug) + "/growth.svg", alt: p.slug + " growth", title: p.slug + "/growth.svg" })));

  show(
    h("h2", {}, "Run ", h("span", { id: "run-name" }, info.name), " ", h("span", { class: "muted" }, info.path)),
    h("h3", {}, "Metrics"), metricsTable,
    h("h3", {}, "Per-user distribution"), h("div", {}, "policy ", polSel, " metric ", metSel), histBox,
    h("h3", {}, "LLM accounting"), llmTable,
    h("h3", {}, "Plots"), plots,
    state.runs.length > 1 ? h("p", {}, h("a", { href: "#/compare/" }, "Compare with the other run →")) : null,
  );
  await drawHist();
}

function report(e) {
  if (e instanceof ApiError) setStatus(e.message, true);
  else throw e;
}

function histogram(rows, metric) {
  const vals = rows.map((r) => (metric === "rank" ? r.rank : r[metric])).filter((v) => typeof v === "number");
  const isRank = metric === "rank";
  const maxRank = isRank ? Math.max(1, ...vals) : 1;
  const bins = isRank ? maxRank : 10;
  const counts = new Array(bins).fill(0);
  for (const v of vals) {
    const b = isRank ? v - 1 : Math.min(bins - 1, Math.floor(v * bins));
    if (b >= 0 && b < bins) counts[b]++;
  }
  const W = 520, H = 180, pad = 30, bw = (W - 2 * pad) / bins;
  const top = Math.max(1, ...counts);
  const bars = counts.map((c, i) => {
    const bh = (H - 2 * pad) * c / top;
    const label = isRank ? String(i + 1) : (i / bins).toFixed(1);
    return s("g", {}, s("rect", { x: pad + i * bw + 1, y: H - pad - bh, width: bw - 2, height: bh, fill: "#2f6fdb" }, s("title", {}, label + ": " + c)),
      s("text", { x: pad + i * bw + bw / 2, y: H - pad + 12, "text-anchor": "middle" }, label),
      c ? s("text", { x: pad + i * bw + bw / 2, y: H - pad - bh - 3, "text-anchor": "middle" }, String(c)) : null);
  });
  const mean = vals.length ? vals.reduce((a, b) => a + b, 0) / vals.length : 0;
  return s("svg", { width: W, height: H, class: "hist", "data-n": vals.length },
    s("line", { x1: pad, y1: H - pad, x2: W - pad, y2: H - pad, stroke: "#888" }), bars,
    s("text", { x: pad, y: 14 }, metric + " over " + vals.length + " users (mean " + mean.toFixed(4) + ")"));
}

// ---------- a user's memory over time ----------
const OP_PAGE = 50;

async function userView(run, policy, user, params, token) {
  const sc = scope(run, policy);
  let pol = SERVICE_POLICY, where = "the tenant's live memory";
  if (!sc.svc) {
    const info = await runInfo(run);
    pol = info.policies.find((p) => p.slug === policy);
    if (!pol) throw new ApiError(404, "unknown policy `" + policy + "`");
    where = pol.spec + " · run " + info.name;
    setStatus("indexing the op log of " + policy + " (first time only)…");
  }
  const q = params.get("q") || "";
  const uoff = Number(params.get("uoff") || 0);
  const userHash = (u) => "#/user/" + sc.hash + enc(u);
  const users = await api(sc.api + "users?limit=200&offset=" + uoff + (q ? "&q=" + enc(q) : ""));
  if (token !== routeToken) return;
  if (!user) {
    if (!users.users.length) { show(h("p", { class: "error" }, "No user in this op log.")); return; }
    return go(userHash(users.users[0].user));
  }
  const search = h("input", { type: "text", id: "user-search", placeholder: "find user", value: q });
  search.addEventListener("change", () => go(userHash(user) + "?q=" + enc(search.value)));
  const list = h("div", { class: "userlist", id: "users" }, users.users.map((u) =>
    h("a", { href: userHash(u.user), class: u.user === user ? "current" : null, "data-user": u.user }, "user " + u.user + " ", h("span", { class: "muted" }, "(" + u.ops + ")"))));
  const more = users.total > uoff + users.users.length
    ? h("a", { href: userHash(user) + "?uoff=" + (uoff + 200) + (q ? "&q=" + enc(q) : "") }, "more users →") : null;

  const first = await api(sc.api + "users/" + enc(user) + "/ops?limit=1");
  if (token !== routeToken) return;
  const total = first.total;
  let at = params.has("at") ? Math.max(0, Math.min(total, Number(params.get("at")))) : total;

  const slider = h("input", { type: "range", id: "time-slider", min: 0, max: total, value: at, step: 1 });
  const atLabel = h("span", { id: "at-label" });
  const opList = h("div", { class: "oplist", id: "ops" });
  const opDetail = h("div", { id: "op-detail" });
  const memory = h("div", { id: "memory" });
  const decisions = h("div", { id: "user-decisions" });
  const lifecycle = new Set(pol.caps.lifecycle_timeline);
  let pageOffset = -1;

  async function loadPage(off) {
    if (off === pageOffset) return;
    pageOffset = off;
    const page = await api(sc.api + "users/" + enc(user) + "/ops?offset=" + off + "&limit=" + OP_PAGE);
    const prev = off > 0 ? h("button", { onclick: () => loadPage(Math.max(0, off - OP_PAGE)).then(mark).catch(report) }, "◀ earlier") : null;
    const next = off + OP_PAGE < total ? h("button", { onclick: () => loadPage(off + OP_PAGE).then(mark).catch(report) }, "later ▶") : null;
    opList.replaceChildren(
      h("div", {}, prev, " ops " + (off + 1) + "–" + Math.min(total, off + OP_PAGE) + " of " + total + " ", next),
      h("table", {}, h("tr", {}, ["#", "t", "label", "op", "target", "reason"].map((x) => h("th", {}, x))),
        page.ops.map((o) => h("tr", { "data-pos": o.pos, "data-seq": o.seq, class: lifecycle.has(o.label) ? "lifecycle" : null, onclick: () => setAt(o.pos + 1) },
          h("td", { class: "num" }, o.pos + 1), h("td", { class: "num" }, "t" + o.at), h("td", {}, o.label), h("td", {}, o.kind),
          h("td", { class: "target" }, memEl(o.target, o.target_text, 60)), h("td", {}, o.reason)))));
  }
  function mark() {
    for (const tr of opList.querySelectorAll("tr[data-pos]")) tr.classList.toggle("current", Number(tr.dataset.pos) === at - 1);
  }
  let pending = null;
  async function load() {
    atLabel.textContent = at + " / " + total + " ops";
    const st = await api(sc.api + "users/" + enc(user) + "/state?at=" + at);
    if (st.at !== at) return;
    atLabel.textContent = at + " / " + total + " ops" + (st.time !== null ? " · t" + st.time : "");
    await loadPage(Math.floor(Math.max(0, at - 1) / OP_PAGE) * OP_PAGE);
    mark();
    opDetail.replaceChildren(st.op ? opCard(st.op) : h("p", { class: "muted" }, "Before the user's first op."));
    memory.replaceChildren(memoryViews(st, pol));
    history.replaceState(null, "", userHash(user) + "?at=" + at + (q ? "&q=" + enc(q) : ""));
  }
  function setAt(v) {
    at = Math.max(0, Math.min(total, v));
    slider.value = String(at);
    clearTimeout(pending);
    pending = setTimeout(() => load().catch(report), 120);
  }
  slider.addEventListener("input", () => setAt(Number(slider.value)));

  show(h("div", { class: "cols" },
    h("div", {}, h("h3", {}, (sc.svc ? "" : policy + " ") + "users (" + users.total + ")"), search, list, more),
    h("div", {},
      h("h2", {}, "User ", h("span", { id: "user-name" }, user), " ", h("span", { class: "muted" }, "· " + where)),
      h("div", { class: "panel slider" }, h("button", { id: "step-back", onclick: () => setAt(at - 1) }, "◀"), slider, h("button", { id: "step-fwd", onclick: () => setAt(at + 1) }, "▶"), atLabel),
      h("div", { class: "cols2" },
        h("div", {}, h("h3", {}, "Op log"), opList, h("h3", {}, "Selected op"), opDetail),
        h("div", {}, h("h3", {}, "Memory at this point"), memory, h("h3", {}, "Decisions"), decisions)))));
  await load();
  if (pol.has_decisions) {
    const ds = await api(sc.api + "decisions?user=" + enc(user));
    decisions.replaceChildren(ds.decisions.length ? h("ul", {}, ds.decisions.map((d) =>
      h("li", {}, h("a", { href: "#/decision/" + sc.hash + d.decision_id, class: "decision-link" }, "decision " + d.decision_id), " at t" + d.at,
        d.target === null ? ", target unknown" : [", target ", itemEl(d.target, { [d.target]: d.target_title }), ", rank " + d.rank])))
      : h("p", { class: "muted" }, "No decision for this user."));
  }
}

function recordSummary(r) {
  if (!r) return h("span", { class: "muted" }, "(absent)");
  // Long values (a decision's stored context) are cut; the op JSON has them whole.
  const cut = (t) => (t.length > 160 ? t.slice(0, 159) + "…" : t);
  const fields = Object.entries(r.fields || {}).map(([k, v]) => k + "=" + cut(typeof v === "string" ? v : JSON.stringify(v))).join("; ");
  return h("div", {},
    h("div", {}, h("span", { class: "badge" }, r.kind), h("b", {}, r.text)),
    h("div", { class: "muted" }, "strength " + fmt(r.strength, 2) + " · evidence " + r.evidence + " · utility " + fmt(r.utility, 2) + " · " + r.status + " · links " + (r.links || []).length + " · t" + r.created_at + "→t" + r.updated_at),
    fields ? h("div", { class: "muted" }, fields) : null);
}

function opCard(op) {
  return h("div", { class: "panel", id: "op-card", "data-seq": op.seq },
    h("div", {}, h("b", {}, op.kind), " ", h("span", { class: "badge" }, op.label), " op #" + op.seq + " at t" + op.at + " (" + op.policy + ")"),
    h("div", {}, "reason: ", h("i", {}, op.reason || "—")),
    h("div", {}, "sources (interactions / feedback): ", op.sources.length ? op.sources.map((t) => "t" + t).join(", ") : "—"),
    op.touched.map((t) => h("div", { class: "cols2" },
      h("div", {}, h("div", { class: "muted" }, "before · " + t.id), recordSummary(t.before)),
      h("div", {}, h("div", { class: "muted" }, "after · " + t.id), recordSummary(t.after)))),
    h("details", {}, h("summary", {}, "op JSON"), h("pre", {}, JSON.stringify(op.op, null, 1))));
}

// Views by record kind (and the family's capabilities for the lifecycle).
function memoryViews(st, pol) {
  const byKind = {};
  for (const r of st.records) (byKind[r.kind] = byKind[r.kind] || []).push(r);
  const out = [h("div", { class: "muted" }, Object.entries(st.kinds).map(([k, n]) => k + " " + n).join(" · ") || "no record yet")];
  const order = ["profile", "preference_chunk", "guideline", "atom", "utility_slot", "summary", "event"];
  const kinds = Object.keys(byKind).sort((a, b) => ((order.indexOf(a) + 99) % 99) - ((order.indexOf(b) + 99) % 99));
  for (const kind of kinds) {
    const recs = byKind[kind];
    let view;
    if (kind === "profile") view = recs.map((r) => h("div", { class: "panel profile" }, r.text));
    else if (kind === "preference_chunk") view = chunkTable(recs);
    else if (kind === "atom") view = [atomGraph(recs), notesTable(recs)];
    else if (kind === "guideline") view = genericTable(recs, ["text", "utility", "status", "evidence"]);
    else if (kind === "event") view = genericTable(recs.slice(-30), ["created_at", "text", "strength"]);
    else view = genericTable(recs, ["text", "strength", "utility", "evidence"]);
    const title = { preference_chunk: "preference chunks (MARS tier)", event: "events (last 30)", profile: "profile", atom: "notes and links" }[kind] || kind;
    out.push(h("div", { class: "kind-view", "data-kind": kind }, h("h3", {}, title + " (" + recs.length + ")"), view));
  }
  if (pol.caps.lifecycle_timeline.length) out.push(h("p", { class: "muted" }, "Lifecycle labels: " + pol.caps.lifecycle_timeline.join(", ") + " (bold in the op log)."));
  return h("div", { class: "recs" }, out);
}

function chunkTable(recs) {
  const sorted = recs.slice().sort((a, b) => String(a.fields.category || "").localeCompare(String(b.fields.category || "")) || b.strength - a.strength);
  return h("table", {}, h("tr", {}, ["category", "chunk", "strength", "evidence"].map((x) => h("th", {}, x))),
    sorted.map((r) => h("tr", { "data-id": r.id }, h("td", {}, r.fields.category || ""), h("td", {}, r.text),
      h("td", {}, h("span", { class: "bar" + (r.strength < 0 ? " neg" : ""), style: { width: Math.round(Math.abs(r.strength) * 60) + "px" } }), " " + fmt(r.strength, 2)),
      h("td", { class: "num" }, r.evidence))));
}

function notesTable(recs) {
  const last = recs.slice(-40).reverse();
  return h("table", {}, h("tr", {}, ["note", "keywords / tags", "context", "links"].map((x) => h("th", {}, x))),
    last.map((r) => h("tr", { "data-id": r.id }, h("td", {}, h("div", { class: "muted" }, r.id), r.text),
      h("td", {}, [].concat(r.fields.keywords || [], r.fields.tags || []).join(", ")), h("td", {}, r.fields.context || ""), h("td", { class: "num" }, (r.links || []).length))));
}

function genericTable(recs, cols) {
  return h("table", {}, h("tr", {}, h("th", {}, "id"), cols.map((c) => h("th", {}, c))),
    recs.map((r) => h("tr", { "data-id": r.id }, h("td", { class: "muted" }, r.id), cols.map((c) => h("td", {}, fmt(r[c], 3))))));
}

// The latest notes and the notes they link to, laid out by time, with
// their links (a link's far end is `target`).
function atomGraph(recs) {
  const byId = {};
  for (const r of recs) byId[r.id] = r;
  const recent = recs.slice(-12);
  const ids = new Set(recent.map((r) => r.id));
  for (const r of recent) for (const l of r.links || []) {
    const to = l.target || l.to;
    if (ids.size < 24 && byId[to]) ids.add(to);
  }
  const last = recs.filter((r) => ids.has(r.id));
  const cols = 6, W = 560, rowH = 34, colW = W / cols;
  const pos = {};
  last.forEach((r, i) => { pos[r.id] = { x: colW / 2 + (i % cols) * colW, y: 18 + Math.floor(i / cols) * rowH }; });
  const H = 30 + Math.ceil(last.length / cols) * rowH;
  const edges = [];
  for (const r of last) for (const l of r.links || []) if (ids.has(l.target || l.to)) {
    const a = pos[r.id], b = pos[l.target || l.to];
    edges.push(s("path", { class: "edge", d: "M" + a.x + "," + a.y + " Q" + ((a.x + b.x) / 2) + "," + (Math.min(a.y, b.y) - 14) + " " + b.x + "," + b.y }, s("title", {}, l.relation || "")));
  }
  const nodes = last.map((r) => s("g", { class: "node mem" }, s("circle", { cx: pos[r.id].x, cy: pos[r.id].y, r: 6 }),
    s("text", { x: pos[r.id].x + 8, y: pos[r.id].y + 4 }, r.text ? cut(r.text, 12) : r.id.split(":").pop()), s("title", {}, r.id + ": " + r.text)));
  return s("svg", { width: W, height: H, class: "atom-graph" }, edges, nodes);
}

// ---------- a decision ----------
async function decisionView(run, policy, id) {
  const sc = scope(run, policy);
  if (id === "first" && !sc.svc) {
    const list = await api(sc.api + "decisions?limit=1");
    if (!list.decisions.length) throw new ApiError(404, "no decision in " + policy);
    return go("#/decision/" + sc.hash + list.decisions[0].decision_id);
  }
  const data = await api(sc.api + "decisions/" + enc(id));
  const d = data.decision;
  const order = d.candidates.map((c, i) => i).sort((a, b) => (d.scores[b] ?? 0) - (d.scores[a] ?? 0) || a - b);
  const cands = h("table", { id: "candidates" }, h("tr", {}, ["rank by score", "item", "score", ""].map((x) => h("th", {}, x))),
    order.map((i, k) => h("tr", { class: d.candidates[i] === d.target ? "target" : null },
      h("td", { class: "num" }, k + 1), h("td", {}, itemEl(d.candidates[i], data.titles)), h("td", { class: "num" }, fmt(d.scores[i])),
      h("td", {}, d.candidates[i] === d.target ? h("span", { class: "badge" }, "target") : null, i === data.top ? h("span", { class: "badge" }, "top") : null))));
  const entries = d.context.entries.map((e) => h("li", {}, h("span", { class: "muted" }, fmt(e.weight, 3) + " "), e.text));
  const nodeRows = Object.entries(data.nodes).map(([nid, n]) => h("tr", {},
    h("td", {}, memEl(nid, memoryText(nid, d, data), 60)), h("td", {}, n.anonymous ? h("i", {}, "another user (anonymised)") : n.namespace),
    h("td", {}, n.first_seq !== null ? h("a", { href: opHref(run, policy, n.first_seq, n), class: "op-link" }, "op #" + n.first_seq) : "—"),
    h("td", {}, n.last_seq !== null ? h("a", { href: opHref(run, policy, n.last_seq, n) }, "op #" + n.last_seq) : "—")));
  const targetText = d.target === null || d.target === undefined ? " · target unknown" : [" · target ", itemEl(d.target, data.titles), " at rank " + d.rank];
  const feedback = (data.ops || []).map((o) => h("li", {}, h("a", { href: "#/op/" + sc.hash + o.seq }, "op #" + o.seq), " " + o.kind + " (" + o.label + ") at t" + o.at));
  show(
    h("h2", {}, "Decision ", h("span", { id: "decision-id" }, d.decision_id), " · user ",
      h("a", { href: "#/user/" + sc.hash + enc(d.user) }, d.user), " · t" + d.at, targetText),
    sc.svc ? h("p", { class: "muted", id: "decision-outcome" }, "policy " + d.policy + " · feedback " + d.feedback_count +
      (d.reward !== null ? " · last reward " + fmt(d.reward, 3) : "") + (d.success !== null ? " · success " + d.success : "")) : null,
    d.context.profile ? h("p", { class: "muted" }, d.context.profile) : null,
    data.note ? h("p", { class: "muted" }, data.note) : null,
    h("h3", {}, "Evidence graph"), h("p", { class: "muted" }, "Memory nodes link to the op that wrote them; candidates on the right, the target in green." +
      (Object.keys(data.titles || {}).length ? " Hover a title or text for its id." : " The data names no item titles, so items show their ids.")),
    evidenceGraph(d, data, run, policy),
    h("div", { class: "cols2" },
      h("div", {}, h("h3", {}, "Candidates and scores"), cands),
      h("div", {}, h("h3", {}, "Memory records (first and last op)"),
        nodeRows.length ? h("table", { id: "nodes" }, h("tr", {}, ["record", "namespace", "written by", "last op"].map((x) => h("th", {}, x))), nodeRows) : h("p", { class: "muted" }, "No memory record in this decision's context."))),
    h("h3", {}, "Context the decider saw (" + d.context.entries.length + " entries)"), h("ol", { class: "entries" }, entries),
    feedback.length ? [h("h3", {}, "The decision's own ops"), h("ul", { id: "decision-ops" }, feedback)] : null);
}

// A memory's text in a decision: what the decider saw of it (its context
// entry), else what the op log says it was written with.
function memoryText(id, d, data) {
  for (const e of d.context.entries) if (e.memory === id && e.text) return e.text;
  const n = data.nodes[id];
  return n && n.text ? n.text : null;
}

// The op of a memory node; another user's note keeps its anon: label.
function opHref(run, policy, seq, node) {
  return "#/op/" + scope(run, policy).hash + seq + (node.anonymous ? "?anon=" + enc(node.id) : "");
}

// Layered layout: column k holds the k-th node of each evidence path, the
// memories the decider used (trace) sit in the first column, the
// candidates in the last.
function evidenceGraph(d, data, run, policy) {
  const layers = [];
  const place = (id, k) => {
    for (const L of layers) if (L.includes(id)) return;
    (layers[k] = layers[k] || []).push(id);
  };
  const edges = [];
  const candOf = {};
  (d.candidate_ids || []).forEach((cid, i) => { candOf[cid] = i; });
  const paths = d.context.entries.filter((e) => e.path && e.path.nodes && e.path.nodes.length).slice(0, 40);
  for (const e of paths) {
    e.path.nodes.forEach((n, k) => place(n, k));
    for (let k = 0; k + 1 < e.path.nodes.length; k++) edges.push([e.path.nodes[k], e.path.nodes[k + 1], e.path.relations[k] || ""]);
    if (e.item !== null && e.item !== undefined && candOf[e.item] !== undefined) edges.push([e.path.nodes[e.path.nodes.length - 1], "cand:" + candOf[e.item], "score " + fmt(e.weight, 3)]);
  }
  for (const e of d.context.entries) if (e.memory) place(e.memory, 0);
  const used = (d.trace.used || []).slice().sort((a, b) => b.weight - a.weight).slice(0, 12);
  for (const u of used) place(u.id, 0);
  const memLayers = layers.filter(Boolean);
  const cands = d.candidates.map((c, i) => "cand:" + i);
  memLayers.push(cands);
  const W = Math.max(640, 200 * memLayers.length), colW = W / memLayers.length, rowH = 26;
  const H = 20 + rowH * Math.max(...memLayers.map((L) => L.length));
  const pos = {};
  memLayers.forEach((L, k) => L.forEach((id, i) => { pos[id] = { x: 10 + k * colW, y: 16 + i * rowH }; }));
  const edgeEls = edges.filter(([a, b]) => pos[a] && pos[b]).map(([a, b, rel]) =>
    s("path", { class: "edge", d: "M" + (pos[a].x + 8) + "," + pos[a].y + " C" + (pos[a].x + colW / 2) + "," + pos[a].y + " " + (pos[b].x - colW / 2) + "," + pos[b].y + " " + pos[b].x + "," + pos[b].y }, s("title", {}, rel)));
  const nodeEls = [];
  for (const L of memLayers.slice(0, -1)) for (const id of L) {
    const info = data.nodes[id];
    const p = pos[id];
    const text = memoryText(id, d, data);
    const g = s("g", { class: "node mem" + (info ? " linked" : "") + (info && info.anonymous ? " anon" : ""), "data-id": id, "data-seq": info ? info.first_seq : null,
      onclick: info ? () => go(opHref(run, policy, info.first_seq, info)) : null },
      s("circle", { cx: p.x, cy: p.y, r: 7 }), s("text", { x: p.x + 11, y: p.y + 4 }, cut(text || id, 26)),
      s("title", {}, id + (text ? ": " + text : "") + (info ? " — written by op #" + info.first_seq + (info.anonymous ? " (another user's note)" : " (" + info.namespace + ")") : " — not in the op log")));
    nodeEls.push(g);
  }
  for (const id of cands) {
    const i = Number(id.slice(5)), p = pos[id];
    if (!p) continue;
    const cls = "node cand" + (d.candidates[i] === d.target ? " target" : "") + (i === data.top ? " top" : "");
    const title = (data.titles || {})[d.candidates[i]];
    nodeEls.push(s("g", { class: cls + (title ? " titled" : ""), "data-item": d.candidates[i] }, s("rect", { x: p.x, y: p.y - 9, width: 150, height: 18, rx: 4 }),
      s("text", { x: p.x + 5, y: p.y + 4 }, (title ? cut(title, 17) : "item " + d.candidates[i]) + " · " + fmt(d.scores[i], 3)),
      s("title", {}, "item " + d.candidates[i] + (title ? ": " + title : "") + " · score " + fmt(d.scores[i], 3))));
  }
  return s("svg", { width: W + 160, height: H, id: "evidence-graph" }, edgeEls, nodeEls);
}

// An op by seq: open its user's timeline at it (another user's note: the
// op alone, anonymised).
async function opView(run, policy, seq, params) {
  const sc = scope(run, policy);
  const anon = params.get("anon");
  const op = await api(sc.api + "ops/" + enc(seq) + (anon ? "?anon=" + enc(anon) : ""));
  if (!anon && op.user !== null && op.pos !== null) {
    history.replaceState(null, "", "#/op/" + sc.hash + seq);
    return go("#/user/" + sc.hash + enc(op.user) + "?at=" + (op.pos + 1));
  }
  show(h("h2", {}, "Op #" + op.seq), h("p", { class: "muted" }, op.anonymous ? "An op on another user's note: its owner and atom ids stay anonymised, as in `evomem explain`." : "namespace " + (op.namespace || "—")),
    h("div", { class: "panel", id: "op-card", "data-seq": op.seq },
      h("div", {}, h("b", {}, op.kind), " ", h("span", { class: "badge" }, op.label), " at t" + op.at),
      h("div", {}, "target " + op.target), h("div", {}, "reason: ", h("i", {}, op.reason)),
      h("div", {}, "sources: " + op.sources.map((t) => "t" + t).join(", "))));
}

// ---------- comparing two runs ----------
async function compareView(policy, params) {
  const a = await runInfo("0"), b = await runInfo("1");
  const common = a.policies.filter((p) => p.has_per_user && b.policies.some((q) => q.slug === p.slug && q.has_per_user)).map((p) => p.slug);
  if (!policy) {
    if (!common.length) throw new ApiError(404, "the two runs share no policy with per_user.jsonl");
    return go("#/compare/" + enc(common[0]));
  }
  const metric = params.get("metric") || "MRR";
  const data = await api("compare?a=0&b=1&policy=" + enc(policy) + "&metric=" + enc(metric) + "&limit=100");
  const polSel = h("select", { id: "cmp-policy" }, common.map((p) => h("option", { value: p, selected: p === policy }, p)));
  const metSel = h("select", { id: "cmp-metric" }, ["MRR", "NDCG@10", "HR@1", "HR@10", "rank"].map((k) => h("option", { value: k, selected: k === metric }, k)));
  const change = () => go("#/compare/" + enc(polSel.value) + "?metric=" + enc(metSel.value));
  polSel.addEventListener("change", change);
  metSel.addEventListener("change", change);
  const rows = data.rows.map((r) => h("tr", {},
    h("td", {}, r.user), h("td", { class: "num" }, fmt(r.a)), h("td", { class: "num" }, fmt(r.b)),
    h("td", { class: "num " + (r.delta > 0 ? "delta-pos" : r.delta < 0 ? "delta-neg" : "") }, (r.delta > 0 ? "+" : "") + fmt(r.delta)),
    h("td", {}, h("a", { href: "#/decision/0/" + enc(policy) + "/" + r.decision_a }, "decision in " + a.name)),
    h("td", {}, h("a", { href: "#/decision/1/" + enc(policy) + "/" + r.decision_b }, "decision in " + b.name))));
  show(h("h2", {}, "Compare ", a.name, " → ", b.name),
    h("div", {}, "policy ", polSel, " metric ", metSel),
    h("p", { id: "compare-summary" }, data.users + " users, " + data.changed + " changed; mean " + metric + " " + fmt(data.mean_a) + " → " + fmt(data.mean_b)),
    deltaChart(data.rows),
    h("table", { id: "compare" }, h("tr", {}, ["user", a.name, b.name, "delta", "", ""].map((x) => h("th", {}, x))), rows));
}

function deltaChart(rows) {
  const top = rows.slice(0, 40), W = 600, H = 120, mid = H / 2;
  const m = Math.max(1e-9, ...top.map((r) => Math.abs(r.delta)));
  const bw = (W - 20) / Math.max(1, top.length);
  return s("svg", { width: W, height: H }, s("line", { x1: 10, x2: W - 10, y1: mid, y2: mid, stroke: "#888" }),
    top.map((r, i) => { const bh = (mid - 6) * Math.abs(r.delta) / m; return s("rect", { x: 10 + i * bw + 1, width: Math.max(1, bw - 2), y: r.delta >= 0 ? mid - bh : mid, height: bh, fill: r.delta >= 0 ? "#1f8a4c" : "#c0392b" }, s("title", {}, "user " + r.user + ": " + fmt(r.delta))); }));
}

// ---------- service mode: a tenant's live memory ----------
// The key goes in the form of the header; the user list is the op log's
// users; the user, decision and op views are run mode's, over `/ui/api`.
async function serviceHome(params) {
  if (!state.key) {
    show(h("h2", {}, "A tenant's live memory"), h("p", { class: "muted", id: "svc-hint" }, "Enter the tenant's API key above."));
    return;
  }
  const q = params.get("q") || "";
  const uoff = Number(params.get("uoff") || 0);
  const users = await api("users?limit=200&offset=" + uoff + (q ? "&q=" + enc(q) : ""));
  const search = h("input", { type: "text", id: "user-search", placeholder: "find user", value: q });
  search.addEventListener("change", () => go("#/?q=" + enc(search.value)));
  show(h("h2", {}, "Users of the tenant (" + users.total + ")"),
    h("p", { class: "muted" }, users.log_ops + " ops in the tenant's log"), search,
    users.users.length ? h("div", { class: "userlist", id: "users" }, users.users.map((u) =>
      h("a", { href: "#/user/" + enc(u.user), "data-user": u.user }, "user " + u.user + " ", h("span", { class: "muted" }, "(" + u.ops + " ops)"))))
      : h("p", { class: "muted" }, "No user in the op log yet."),
    users.total > uoff + users.users.length ? h("a", { href: "#/?uoff=" + (uoff + 200) + (q ? "&q=" + enc(q) : "") }, "more users →") : null);
}

// ---------- start ----------
async function start() {
  const mode = await api("mode");
  state.mode = mode.mode;
  state.runs = mode.runs || [];
  if (state.mode === "service") state.key = sessionStorage.getItem("evomem-key") || "";
  nav();
  window.addEventListener("hashchange", () => route().catch(report));
  await route();
}
start().catch((e) => {
  setStatus(e.message, true);
  if (!(e instanceof ApiError)) throw e;
});
