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
let latestStore = null;    // the version on disk, as last announced

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
    el("span", { text: p.kind === "write" ? "a write permission" : "a command" }),
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
  const always = p.allowAlways.length
    ? `Allow always — stores ${p.allowAlways.join(", ")}`
    : "Allow always — nothing can be stored";
  const actions = el("div", { class: "actions" },
    el("button", { type: "button", class: "allow-once", text: p.runsHere ? "Run here once (o)" : "Allow once (o)" }),
    el("button", { type: "button", class: "allow-always", text: always + " (a)",
                   title: p.allowAlways.join("\n"), disabled: !p.allowAlways.length }),
    el("button", { type: "button", class: "deny", text: "Deny (d)" }));
  actions.querySelector(".allow-once").addEventListener("click", (e) => { e.stopPropagation(); answer(p, "allow-once"); });
  actions.querySelector(".allow-always").addEventListener("click", (e) => { e.stopPropagation(); answer(p, "allow-always"); });
  actions.querySelector(".deny").addEventListener("click", (e) => { e.stopPropagation(); answer(p, "deny"); });
  card.append(actions);
  return card;
}

async function answer(p, what) {
  if (p.phase !== "waiting") return;
  if (what === "allow-always" && !p.allowAlways.length) {
    notice("Nothing can be stored for this request: use Allow once.", true);
    return;
  }
  const r = await post("api/answer", { key: p.key, digest: p.digest, answer: what });
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
  const what = { o: "allow-once", a: "allow-always", d: "deny" }[e.key];
  if (what && i >= 0) { e.preventDefault(); answer(pending[i], what); }
});

// ── Allowlists and settings ────────────────────────────────────────────────────────

const CHOICES = {
  security: ["deny", "allowlist", "full"],
  ask: ["off", "on-miss", "always"],
  askFallback: ["deny", "allowlist", "full"],
};

function editorDirty() {
  return [...document.querySelectorAll(".pattern-input, .new-agent-input")].some((i) => i.value.trim());
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

function agentCard(a) {
  const card = el("div", { class: "card agent", "data-agent": a.id });
  card.append(el("h3", { text: `agent ${a.shown}` },
    a.inConfig ? el("span", { class: "tag", text: "config.toml" }) : null,
    a.inFile ? el("span", { class: "tag", text: "exec-approvals.json" }) : null));
  card.append(settingsRow(a.id, a.settings));
  const table = el("table", { class: "allowlist" },
    el("thead", {}, el("tr", {}, ...["pattern", "last used", "last command", "last resolved path", ""]
      .map((h) => el("th", { text: h })))));
  const body = el("tbody");
  if (!a.allowlist.length) {
    body.append(el("tr", {}, el("td", { colspan: "5", class: "empty", text: "No allowlist entries." })));
  }
  for (const entry of a.allowlist) {
    const remove = el("button", { type: "button", class: "remove-pattern", text: "Remove" });
    const row = el("tr", { "data-pattern": entry.pattern },
      el("td", { class: "pattern", text: entry.shown }),
      el("td", { class: "last-used", text: entry.lastUsedAt ? new Date(entry.lastUsedAt).toLocaleString() : "never" }),
      el("td", { class: "last-command", text: entry.lastUsedCommand || "" }),
      el("td", { class: "last-path", text: entry.lastResolvedPath || "" }),
      el("td", {}, remove));
    remove.addEventListener("click", () =>
      edit({ op: "remove-pattern", base: consoleHash, agent: a.id, pattern: entry.pattern }, err));
    body.append(row);
  }
  table.append(body);
  card.append(table);
  const input = el("input", { class: "pattern-input", name: "pattern", autocomplete: "off",
                              placeholder: "/usr/bin/rg, ~/bin/*, **/bin/tool or a bare name" });
  const err = el("span", { class: "inline-error", "aria-live": "polite" });
  const form = el("form", { class: "row add-form" }, input,
    el("button", { type: "submit", class: "add-pattern", text: "Add to allowlist" }), err);
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    edit({ op: "add-pattern", base: consoleHash, agent: a.id, pattern: input.value }, err, input);
  });
  card.append(form);
  card.append(el("details", { class: "policy" }, el("summary", { text: "Effective policy (as policy explain shows it)" }),
    el("pre", { text: a.policy })));
  return card;
}

// Send an edit based on the version shown; on success the input it came from is
// cleared (before the reload, which keeps what is typed elsewhere) and the view reloads.
async function edit(body, errBox, input = null) {
  errBox.textContent = "";
  const r = await post("api/edit", body);
  if (r.ok) {
    if (input) input.value = "";
    notice("Saved.");
    await loadConsole();
    return true;
  }
  errBox.textContent = r.data.error || `refused (${r.status})`;
  if (r.data.conflict) {
    errBox.classList.add("conflict");
    $("#store-banner").hidden = false;
  }
  return false;
}

function renderConsole(c) {
  const typed = {};
  for (const card of document.querySelectorAll(".agent")) {
    const v = $(".pattern-input", card).value;
    if (v) typed[card.dataset.agent] = v;
  }
  consoleHash = c.hash;
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
    defaults.append(card);
  }
  const agents = $("#agents");
  agents.replaceChildren(...c.agents.map(agentCard));
  for (const card of agents.querySelectorAll(".agent")) {
    if (typed[card.dataset.agent]) $(".pattern-input", card).value = typed[card.dataset.agent];
  }
  $("#agent-ids").replaceChildren(...c.agents.map((a) => el("option", { value: a.id })));
}

async function loadConsole() {
  const response = await fetch("api/state", { credentials: "same-origin" });
  if (!response.ok) { notice(`cannot load the state (${response.status})`, true); return; }
  const state = await response.json();
  renderConsole(state.console);
  latestStore = state.store;
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
    if (state.store !== latestStore) {
      latestStore = state.store;
      if (consoleHash === null || (state.store !== consoleHash && !editorDirty())) await loadConsole();
      else if (state.store !== consoleHash) $("#store-banner").hidden = false;
    }
  });
}

connect();
