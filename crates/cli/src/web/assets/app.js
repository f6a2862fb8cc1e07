// The web approver's page: plain JavaScript, no framework, no build step. Everything the
// server sends from an agent is already escaped (approvals::display); it is still only
// ever put on the page as text (textContent), never as HTML. URLs are relative: the
// page lives under a secret path (see web/auth.rs).
"use strict";

const CSRF = document.querySelector('meta[name="warden-csrf"]').content;
const $ = (sel, root = document) => root.querySelector(sel);

let pending = [];          // requests waiting or running
let selectedKey = null;    // the request keyboard shortcuts act on
let consoleHash = null;    // the version of exec-approvals.json the editor shows
let configHash = null;     // the version of config.toml the node bindings show
let nodesHash = null;      // the node registry the node bindings show
let nodes = null;          // the node section (null: no node, no node controls)
let latestFiles = null;    // the versions on disk, as last announced

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") node.textContent = v;
    else if (k === "class") node.className = v;
    else if (k.startsWith("data-")) node.setAttribute(k, v);
    else if (k === "disabled" || k === "hidden") node[k] = Boolean(v);
    else node.setAttribute(k, v);
  }
  for (const c of children) if (c) node.append(c);
  return node;
}

let noticeTimer = null;
function notice(text, bad = false) {
  const n = $("#notice");
  n.textContent = text;
  n.className = bad ? "notice bad" : "notice";
  n.hidden = !text;
  clearTimeout(noticeTimer);
  // Confirmations fade; refusals stay until the next message.
  if (!bad) noticeTimer = setTimeout(() => { n.hidden = true; }, 6000);
}

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    credentials: "same-origin",
    headers: { "Content-Type": "application/json", "X-Warden-CSRF": CSRF },
    body: JSON.stringify(body),
  });
  let data = {};
  try { data = await response.json(); } catch (_) { data = { error: response.statusText }; }
  return { ok: response.ok, status: response.status, data };
}

// ── Pending requests ────────────────────────────────────────────────────────────────

function renderPending(list) {
  pending = list;
  const box = $("#pending");
  box.replaceChildren();
  $("#pending-count").textContent = list.length ? `(${list.length})` : "";
  if (!list.length) {
    box.append(el("p", { class: "empty", text: "No pending requests." }));
    selectedKey = null;
    return;
  }
  if (!list.some((p) => p.key === selectedKey)) selectedKey = list[0].key;
  for (const p of list) box.append(requestCard(p));
}

function requestCard(p) {
  const card = el("div", { class: "request" + (p.key === selectedKey ? " selected" : ""),
                           "data-key": String(p.key), "data-id": p.id });
  card.addEventListener("click", () => { selectedKey = p.key; renderPending(pending); });
  card.append(el("div", { class: "meta" },
    el("span", { text: `agent ${p.agent}` }),
    el("span", { text: `session ${p.session}` }),
    el("span", { text: `host ${p.host}` }),
    el("span", { text: { write: "a write permission", connection: "a network connection" }[p.kind] || "a command" }),
    el("span", { text: new Date(p.receivedMs).toLocaleTimeString() })));
  if (p.runsHere) {
    card.append(el("div", { class: "runs-here",
      text: `If you allow it, ${p.runsHere} runs this command ITSELF — with this approver's ` +
            "permissions, not the requester's — and sends the output back." }));
  }
  card.append(el("pre", { class: "prompt-text", text: p.text }));
  if (p.phase === "running") {
    card.append(el("p", { class: "phase", text: "Allowed — running here…" }));
    return card;
  }
  const once = el("button", { type: "button", class: "allow-once", text: p.runsHere ? "Run here once (o)" : "Allow once (o)" });
  once.addEventListener("click", (e) => { e.stopPropagation(); answer(p, "allow-once"); });
  const actions = el("div", { class: "actions" }, once);
  // One button per scope "allow always" may store, the preselected one first (key a);
  // each names exactly the rules it stores. With several, key N chooses scope N, as
  // numbered in the prompt's text.
  const several = p.allowAlways.length > 1;
  for (const o of p.allowAlways) {
    const key = o.preselected ? "a" : String(o.index + 1);
    const scope = several ? `, ${o.scope}` : "";
    const button = el("button", { type: "button",
      class: "allow-always" + (o.preselected ? " preselected" : ""),
      "data-option": String(o.index), "data-scope": o.scope,
      text: `Allow always${o.preselected ? "" : scope} — stores ${o.rules.join(", ")} (${key})`,
      title: `${o.scope}${o.preselected ? " (preselected)" : ""}:\n${o.rules.join("\n")}` });
    button.addEventListener("click", (e) => { e.stopPropagation(); answer(p, "allow-always", o); });
    actions.append(button);
  }
  if (!p.allowAlways.length) {
    actions.append(el("button", { type: "button", class: "allow-always",
                                  text: "Allow always — nothing can be stored (a)", disabled: true }));
  }
  const deny = el("button", { type: "button", class: "deny", text: "Deny (d)" });
  deny.addEventListener("click", (e) => { e.stopPropagation(); answer(p, "deny"); });
  actions.append(deny);
  card.append(actions);
  return card;
}

// Answer `p`; with allow-always, `option` is the scope chosen (one of p.allowAlways).
async function answer(p, what, option = null) {
  if (p.phase !== "waiting") return;
  if (what === "allow-always" && !option) {
    notice("Nothing can be stored for this request: use Allow once.", true);
    return;
  }
  const body = { key: p.key, digest: p.digest, answer: what };
  if (option) body.allowAlwaysOption = option.index;
  const r = await post("api/answer", body);
  if (r.ok) notice(`${p.id}: ${r.data.answer}${r.data.note ? " — " + r.data.note : ""}`);
  else notice(r.data.error || `answer refused (${r.status})`, true);
}

function renderRecent(list) {
  const box = $("#recent");
  box.replaceChildren();
  for (const r of list) {
    const item = el("li", { class: `outcome-${r.outcome}` },
      el("strong", { text: r.outcome }),
      document.createTextNode(` ${r.id} (agent ${r.agent})`),
      r.note ? document.createTextNode(` — ${r.note}`) : null);
    if (r.ran) {
      item.append(el("div", { class: "ran", text: `ran here: ${r.ran.summary}` }));
      if (r.ran.stdout) item.append(el("pre", { class: "ran-stdout", text: r.ran.stdout }));
      if (r.ran.stderr) item.append(el("pre", { class: "ran-stderr", text: r.ran.stderr }));
    }
    box.append(item);
  }
}

document.addEventListener("keydown", (e) => {
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const tag = (e.target.tagName || "").toLowerCase();
  if (tag === "input" || tag === "select" || tag === "textarea") return;
  const i = pending.findIndex((p) => p.key === selectedKey);
  if (e.key === "j" || e.key === "k") {
    if (!pending.length) return;
    const next = e.key === "j" ? Math.min(i + 1, pending.length - 1) : Math.max(i - 1, 0);
    selectedKey = pending[next].key;
    renderPending(pending);
    return;
  }
  if (i < 0) return;
  const p = pending[i];
  if (e.key === "a") { e.preventDefault(); answer(p, "allow-always", p.allowAlways[0] || null); return; }
  if (/^[1-9]$/.test(e.key)) {
    const option = p.allowAlways.find((o) => o.index === Number(e.key) - 1);
    if (option) { e.preventDefault(); answer(p, "allow-always", option); }
    return;
  }
  const what = { o: "allow-once", d: "deny" }[e.key];
  if (what) { e.preventDefault(); answer(p, what); }
});

// ── Allowlists and settings ────────────────────────────────────────────────────────

const CHOICES = {
  security: ["deny", "allowlist", "full"],
  ask: ["off", "on-miss", "always"],
  askFallback: ["deny", "allowlist", "full"],
};

function editorDirty() {
  return [...document.querySelectorAll(".pattern-input, .args-input, .flags-input, .new-agent-input")]
    .some((i) => i.value.trim());
}

function settingsRow(agent, settings) {
  const row = el("div", { class: "settings row" });
  const selects = {};
  for (const [name, values] of Object.entries(CHOICES)) {
    const current = settings[name];
    const inherited = agent === null ? `unset (= ${settings.effective[name]})`
                                     : `inherit (= ${current ? "defaults" : settings.effective[name]})`;
    const select = el("select", { class: `set-${name}`, "data-setting": name },
      el("option", { value: "", text: inherited }),
      ...values.map((v) => el("option", { value: v, text: v })));
    select.value = current || "";
    selects[name] = select;
    row.append(el("label", { text: `${name} ` }, select));
  }
  const err = el("span", { class: "inline-error" });
  row.append(err);
  for (const select of Object.values(selects)) {
    select.addEventListener("change", async () => {
      const body = { op: "settings", base: consoleHash, agent };
      for (const [name, s] of Object.entries(selects)) body[name] = s.value || null;
      await edit(body, err);
    });
  }
  return row;
}

// The node binding of an agent (or, agent null, the host-wide default): what applies and
// where it is set, a select of the paired nodes (or none / inherit) and Clear. Edits are
// based on the version of config.toml shown.
function bindingRow(agent, b) {
  const where = b.source === "agent" ? "set for this agent"
              : b.source === "global" ? (agent === null ? "set host-wide" : "inherited from the host-wide default")
              : "";
  const current = b.effective ? `${b.effective} (${where}) — ${b.note}` : b.note;
  const inherit = agent === null ? "none"
                : `none / inherit (${nodes.defaults.effective ? `= ${nodes.defaults.effective}` : "no default"})`;
  const select = el("select", { class: "set-node", "data-setting": "node" },
    el("option", { value: "", text: inherit }),
    ...nodes.choices.map((n) => el("option", { value: n.id, text: n.label })));
  if (b.set && !nodes.choices.some((n) => n.id === b.set)) {
    select.append(el("option", { value: b.set, text: `${b.set} (as written; not a paired node's id)` }));
  }
  select.value = b.set || "";
  const clear = el("button", { type: "button", class: "clear-node", text: "Clear", disabled: !b.set,
                               title: "Remove tools.exec.node at this level from config.toml" });
  const err = el("span", { class: "inline-error", "aria-live": "polite" });
  if (nodes.readOnly) { select.disabled = true; clear.disabled = true; err.textContent = nodes.readOnly; }
  const row = el("div", { class: "node-binding row", "data-agent": agent === null ? "" : agent },
    el("label", { text: "node binding " }, select), clear,
    el("span", { class: "binding-current", text: current }), err);
  select.addEventListener("change", () =>
    edit({ op: "node-binding", base: configHash, agent, node: select.value || null }, err));
  clear.addEventListener("click", () =>
    edit({ op: "node-binding", base: configHash, agent, node: null }, err));
  return row;
}

function agentCard(a) {
  const card = el("div", { class: "card agent", "data-agent": a.id });
  card.append(el("h3", { text: `agent ${a.shown}` },
    a.inConfig ? el("span", { class: "tag", text: "config.toml" }) : null,
    a.inFile ? el("span", { class: "tag", text: "exec-approvals.json" }) : null));
  card.append(settingsRow(a.id, a.settings));
  if (nodes && a.binding) card.append(bindingRow(a.id, a.binding));
  const table = el("table", { class: "allowlist" },
    el("thead", {}, el("tr", {}, ...["entry", "last used", "last command", "last resolved path", ""]
      .map((h) => el("th", { text: h })))));
  const body = el("tbody");
  if (!a.allowlist.length) {
    body.append(el("tr", {}, el("td", { colspan: "5", class: "empty", text: "No allowlist entries." })));
  }
  for (const entry of a.allowlist) {
    const remove = el("button", { type: "button", class: "remove-pattern", text: "Remove" });
    const row = el("tr", { "data-pattern": entry.pattern, "data-rule": entry.description },
      el("td", { class: "pattern", text: entry.description,
                 title: entry.examples ? `${entry.examples} load-time example(s)` : "" }),
      el("td", { class: "last-used", text: entry.lastUsedAt ? new Date(entry.lastUsedAt).toLocaleString() : "never" }),
      el("td", { class: "last-command", text: entry.lastUsedCommand || "" }),
      el("td", { class: "last-path", text: entry.lastResolvedPath || "" }),
      el("td", {}, remove));
    remove.addEventListener("click", () =>
      edit({ op: "remove-rule", base: consoleHash, agent: a.id, rule: entry.rule }, err));
    body.append(row);
  }
  table.append(body);
  card.append(table);
  // The hosts "allow always" on a connection question stored (egressAllow).
  if (a.egressAllow.length) {
    const hosts = el("ul", { class: "egress-allow" });
    for (const e of a.egressAllow) {
      const remove = el("button", { type: "button", class: "remove-egress", text: "Remove" });
      remove.addEventListener("click", () =>
        edit({ op: "remove-egress", base: consoleHash, agent: a.id, rule: e.rule }, err));
      hosts.append(el("li", { "data-rule": e.rule }, el("code", { text: e.shown }), " ", remove));
    }
    card.append(el("p", { class: "egress-title",
      text: "Hosts its sandboxed runs reach through Warden's proxy besides [sandbox.egress] (egressAllow):" }), hosts);
  }
  const input = el("input", { class: "pattern-input", name: "pattern", autocomplete: "off",
                              placeholder: "/usr/bin/rg, ~/bin/*, **/bin/tool or a bare name" });
  const args = el("input", { class: "args-input", name: "args", autocomplete: "off",
                             placeholder: "arguments (optional): status *",
                             title: "Argument patterns, one per word after the program, separated by spaces " +
                                    "(* any characters, ? one, \\ escapes). Empty: any arguments." });
  const exact = el("input", { type: "checkbox", class: "exact-input", name: "exact" });
  const flags = el("input", { class: "flags-input", name: "flags", autocomplete: "off",
                              placeholder: "allowed flags (optional): -c alias.*, -exec",
                              title: "Profile hits this entry allows by name, separated by commas." });
  const err = el("span", { class: "inline-error", "aria-live": "polite" });
  const form = el("form", { class: "row add-form" }, input, args,
    el("label", { class: "exact", text: "exactly " }, exact), flags,
    el("button", { type: "submit", class: "add-pattern", text: "Add to allowlist" }), err);
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const body = { op: "add-pattern", base: consoleHash, agent: a.id, pattern: input.value,
                   args: args.value.split(/\s+/).filter(Boolean), exact: exact.checked,
                   allowFlags: flags.value.split(",").map((f) => f.trim()).filter(Boolean) };
    await edit(body, err, [input, args, flags, exact]);
  });
  card.append(form);
  card.append(el("details", { class: "policy" }, el("summary", { text: "Effective policy (as policy explain shows it)" }),
    el("pre", { text: a.policy })));
  return card;
}

// Send an edit based on the version shown; on success the inputs it came from are
// cleared (before the reload, which keeps what is typed elsewhere) and the view reloads.
async function edit(body, errBox, inputs = []) {
  errBox.textContent = "";
  const r = await post("api/edit", body);
  if (r.ok) {
    for (const i of [].concat(inputs)) {
      if (i.type === "checkbox") i.checked = false; else i.value = "";
    }
    notice("Saved.");
    await loadConsole();
    return true;
  }
  errBox.textContent = r.data.error || `refused (${r.status})`;
  if (r.data.conflict) {
    errBox.classList.add("conflict");
    showBanner([body.op === "node-binding" ? "config.toml" : "exec-approvals.json"]);
  }
  return false;
}

function showBanner(files) {
  $("#store-banner-text").textContent = `${files.join(" and ")} changed on disk since this view ` +
    "was loaded (another program edited it). Edits made here are checked against the version you see.";
  $("#store-banner").hidden = false;
}

// The files whose version on disk (as announced) is not the one the console shows.
function staleFiles(state) {
  const stale = [];
  if (state.store !== consoleHash) stale.push("exec-approvals.json");
  if (state.config !== configHash) stale.push("config.toml");
  if (state.nodes !== nodesHash) stale.push("nodes.json");
  return stale;
}

function renderConsole(c) {
  // What is typed in the add forms survives the reload.
  const FIELDS = [".pattern-input", ".args-input", ".flags-input", ".exact-input"];
  const typed = {};
  for (const card of document.querySelectorAll(".agent")) {
    typed[card.dataset.agent] = FIELDS.map((f) => {
      const i = $(f, card);
      return i.type === "checkbox" ? i.checked : i.value;
    });
  }
  consoleHash = c.hash;
  configHash = c.configHash;
  nodesHash = c.nodesHash;
  nodes = c.nodes || null;
  $("#store-path").textContent = c.path;
  $("#store-banner").hidden = true;
  const error = $("#console-error");
  error.hidden = !(c.error || c.configError);
  error.textContent = [c.error, c.configError && `config.toml: ${c.configError}`].filter(Boolean).join("\n");
  const defaults = $("#defaults");
  defaults.replaceChildren();
  if (c.defaults) {
    const card = el("div", { class: "card defaults", "data-agent": "" },
      el("h3", { text: "host-wide defaults" }),
      el("p", { class: "hint", text: "The ceiling every agent inherits; unset means the strict default." }),
      settingsRow(null, c.defaults));
    if (nodes) {
      card.append(el("p", { class: "hint", text:
        `Node binding (tools.exec.node in ${c.configPath}): an agent bound to a node may use only that node. ` +
        "Only paired nodes can be chosen." +
        (nodes.notPaired.length ? ` Not paired: ${nodes.notPaired.join(", ")}.` : "") }));
      card.append(bindingRow(null, nodes.defaults));
    }
    defaults.append(card);
  }
  const agents = $("#agents");
  agents.replaceChildren(...c.agents.map(agentCard));
  for (const card of agents.querySelectorAll(".agent")) {
    const kept = typed[card.dataset.agent];
    if (!kept) continue;
    FIELDS.forEach((f, n) => {
      const i = $(f, card);
      if (i.type === "checkbox") i.checked = kept[n]; else i.value = kept[n];
    });
  }
  $("#agent-ids").replaceChildren(...c.agents.map((a) => el("option", { value: a.id })));
}

async function loadConsole() {
  const response = await fetch("api/state", { credentials: "same-origin" });
  if (!response.ok) { notice(`cannot load the state (${response.status})`, true); return; }
  const state = await response.json();
  renderConsole(state.console);
}

$("#reload").addEventListener("click", () => loadConsole());

$("#new-agent").addEventListener("submit", async (e) => {
  e.preventDefault();
  const input = $(".new-agent-input");
  await edit({ op: "create-agent", base: consoleHash, agent: input.value }, $("#new-agent .inline-error"), input);
});

// ── Explain ────────────────────────────────────────────────────────────────────────

$("#explain-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const f = e.target;
  const out = $("#explain-out");
  const r = await post("api/explain", { agent: f.agent.value, host: f.host.value, command: f.command.value });
  out.hidden = false;
  out.textContent = r.ok ? `${r.data.text}\n(exit code ${r.data.exitCode})` : r.data.error || `refused (${r.status})`;
  out.classList.toggle("error", !r.ok);
});

// ── Live runs ──────────────────────────────────────────────────────────────────────
// Asked of the gateway (through this approver) every RUNS_PERIOD while the page is
// visible; what a run wrote arrives already made printable and is shown as text only.

const RUNS_PERIOD = 2000;
let selectedRun = null;

function runRow(r) {
  const row = el("tr", { class: "run" + (r.runId === selectedRun ? " selected" : ""), "data-run": r.runId },
    el("td", { text: r.runId }),
    el("td", { text: r.agent }),
    el("td", { text: r.host }),
    el("td", { class: "state", text: r.status }),
    el("td", { class: "command", text: r.command }));
  const kill = el("button", { type: "button", class: "deny kill", text: "Kill",
                              disabled: r.state === "ended" });
  kill.addEventListener("click", async (e) => {
    e.stopPropagation();
    kill.disabled = true;
    const done = await post("api/runs/kill", { run: r.runId });
    if (done.ok) notice(`run ${r.runId}: ${done.data.killed ? "killed" : "had already ended"}`);
    else notice(done.data.error || `kill refused (${done.status})`, true);
    await loadRuns();
  });
  row.append(el("td", {}, kill));
  row.addEventListener("click", () => { selectedRun = r.runId; loadRuns(); });
  return row;
}

async function loadTail() {
  if (!selectedRun) { $("#run-tail-box").hidden = true; return; }
  const r = await post("api/runs/tail", { run: selectedRun });
  $("#run-tail-box").hidden = false;
  $("#run-tail-id").textContent = selectedRun;
  $("#run-tail").textContent = r.ok ? (r.data.output || "(no output yet)") : (r.data.error || `refused (${r.status})`);
}

async function loadRuns() {
  let response;
  try { response = await fetch("api/runs", { credentials: "same-origin" }); } catch (_) { return; }
  const data = await response.json().catch(() => ({}));
  const body = $("#runs tbody");
  const note = $("#runs-note");
  if (!response.ok) {
    body.replaceChildren();
    $("#runs").hidden = true;
    $("#runs-count").textContent = "";
    note.textContent = data.error || `cannot list runs (${response.status})`;
    note.hidden = false;
    return;
  }
  const runs = data.runs || [];
  $("#runs-count").textContent = runs.length ? `(${runs.length})` : "";
  note.textContent = "No live runs.";
  note.hidden = runs.length > 0;
  $("#runs").hidden = runs.length === 0;
  if (!runs.some((r) => r.runId === selectedRun)) selectedRun = null;
  body.replaceChildren(...runs.map(runRow));
  await loadTail();
}

setInterval(() => { if (!document.hidden) loadRuns(); }, RUNS_PERIOD);
loadRuns();

// ── History ────────────────────────────────────────────────────────────────────────
// The record, read with `warden log`'s filters; every text arrives made printable and
// is shown as text only.

let historyRecords = [];

function historyFilters() {
  const f = $("#history-form");
  const out = {};
  for (const name of ["agent", "host", "node", "decision", "kind", "run", "since", "until"]) {
    out[name] = f[name].value;
  }
  return out;
}

function historyRow(r, index) {
  const text = r.command || r.change || r.rule || "";
  const outcome = r.outcome ? `${r.outcome}${r.exitCode !== undefined ? ` (exit ${r.exitCode})` : ""}` : (r.reason || "");
  const row = el("tr", { class: "record", "data-seq": String(r.seq) },
    el("td", { text: r.time || "" }),
    el("td", { text: r.origin || "" }),
    el("td", { class: "kind", text: r.kind || "" }),
    el("td", { text: r.agent || "" }),
    el("td", { text: r.node ? `${r.host} ${r.node}` : (r.host || "") }),
    el("td", { class: "decision", text: r.decision || "" }),
    el("td", { class: "command", text }),
    el("td", { class: "outcome", text: outcome }));
  row.addEventListener("click", () => showRecord(index));
  return row;
}

function showRecord(index) {
  const r = historyRecords[index];
  if (!r) return;
  $("#history-detail-box").hidden = false;
  $("#history-detail-seq").textContent = `#${r.seq}`;
  $("#history-detail").textContent = JSON.stringify(r, null, 2);
  const run = $("#history-run");
  run.hidden = !r.runId;
  run.dataset.run = r.runId || "";
}

async function loadHistory() {
  const r = await post("api/history", historyFilters());
  const note = $("#history-note");
  const body = $("#history tbody");
  if (!r.ok) {
    historyRecords = [];
    body.replaceChildren();
    $("#history").hidden = true;
    $("#history-count").textContent = "";
    note.textContent = r.data.error || `cannot read the record (${r.status})`;
    note.className = "error";
    note.hidden = false;
    return;
  }
  historyRecords = r.data.records || [];
  const matched = r.data.matched || 0;
  $("#history-count").textContent = matched ? `(${matched})` : "";
  note.className = "empty";
  note.textContent = matched > historyRecords.length
    ? `The newest ${historyRecords.length} of ${matched} matching records.`
    : (matched ? "" : "No record matches.");
  note.hidden = !note.textContent;
  $("#history").hidden = historyRecords.length === 0;
  body.replaceChildren(...historyRecords.map(historyRow));
}

$("#history-form").addEventListener("submit", (e) => { e.preventDefault(); loadHistory(); });
$("#history-run").addEventListener("click", (e) => {
  const f = $("#history-form");
  for (const name of ["agent", "host", "node", "decision", "kind", "since", "until"]) f[name].value = "";
  f.run.value = e.target.dataset.run;
  loadHistory();
});
loadHistory();

// ── Real time ──────────────────────────────────────────────────────────────────────

function connect() {
  const events = new EventSource("api/events");
  events.addEventListener("open", () => { $("#status").textContent = "live"; $("#status").className = "status live"; });
  events.addEventListener("error", () => { $("#status").textContent = "disconnected — retrying"; $("#status").className = "status down"; });
  events.addEventListener("state", async (e) => {
    const state = JSON.parse(e.data);
    $("#socket").textContent = state.socket;
    renderPending(state.pending);
    renderRecent(state.recent);
    // exec-approvals.json, config.toml or the node registry changed: reload the console
    // unless something is being typed in it (then say so, and offer Reload).
    const files = `${state.store}\n${state.config}\n${state.nodes}`;
    if (files !== latestFiles) {
      latestFiles = files;
      const stale = staleFiles(state);
      if (consoleHash === null || (stale.length && !editorDirty())) await loadConsole();
      else if (stale.length) showBanner(stale);
    }
  });
}

connect();
