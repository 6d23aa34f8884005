// Parley local web chat. No build step, no dependencies.
// Every piece of text from the user or the LLM reaches the page through
// textContent / createTextNode only: markdown is parsed into DOM nodes here,
// never into an HTML string, so nothing in a message can inject markup.
"use strict";

const $ = (id) => document.getElementById(id);
const list = $("messages");
const byId = new Map();
let last = "0-0";
let source = null;

// ---------------------------------------------------------------- markdown
function inline(text, parent) {
  // **bold**, *italic* / _italic_, `code`, [label](http…)
  const re = /(`[^`\n]+`)|(\*\*[^*\n]+\*\*)|(\[[^\]\n]+\]\((https?:\/\/[^)\s]+)\))|(\*[^*\n]+\*)|(\b_[^_\n]+_\b)/;
  while (text.length) {
    const m = re.exec(text);
    if (!m) { parent.appendChild(document.createTextNode(text)); return; }
    if (m.index) parent.appendChild(document.createTextNode(text.slice(0, m.index)));
    const tok = m[0];
    let el;
    if (m[1]) { el = document.createElement("code"); el.textContent = tok.slice(1, -1); }
    else if (m[2]) { el = document.createElement("strong"); inline(tok.slice(2, -2), el); }
    else if (m[3]) {
      el = document.createElement("a");
      el.href = m[4]; el.rel = "noopener noreferrer nofollow"; el.target = "_blank";
      el.textContent = tok.slice(1, tok.indexOf("]("));
    }
    else { el = document.createElement("em"); inline(tok.slice(1, -1), el); }
    parent.appendChild(el);
    text = text.slice(m.index + tok.length);
  }
}

function renderMarkdown(src, into) {
  into.replaceChildren();
  const lines = String(src).split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    if (line.startsWith("```")) {
      const pre = document.createElement("pre");
      const code = document.createElement("code");
      const body = [];
      i++;
      while (i < lines.length && !lines[i].startsWith("```")) body.push(lines[i++]);
      i++;
      code.textContent = body.join("\n");
      pre.appendChild(code); into.appendChild(pre);
      continue;
    }
    if (/^\s*([-*]|\d+\.)\s+/.test(line)) {
      const ordered = /^\s*\d+\./.test(line);
      const ul = document.createElement(ordered ? "ol" : "ul");
      while (i < lines.length && /^\s*([-*]|\d+\.)\s+/.test(lines[i])) {
        const li = document.createElement("li");
        inline(lines[i].replace(/^\s*([-*]|\d+\.)\s+/, ""), li);
        ul.appendChild(li); i++;
      }
      into.appendChild(ul);
      continue;
    }
    if (!line.trim()) { i++; continue; }
    const para = [];
    while (i < lines.length && lines[i].trim() && !lines[i].startsWith("```") && !/^\s*([-*]|\d+\.)\s+/.test(lines[i])) para.push(lines[i++]);
    const h = /^(#{1,6})\s+(.*)$/.exec(para[0]);
    const p = document.createElement(h ? "h" + Math.min(h[1].length + 2, 6) : "p");
    para.forEach((l, k) => {
      if (k) p.appendChild(document.createElement("br"));
      inline(h && k === 0 ? h[2] : l, p);
    });
    into.appendChild(p);
  }
}

// ---------------------------------------------------------------- messages
function upsert(m) {
  let li = byId.get(m.id);
  if (!li) {
    li = document.createElement("li");
    li.className = "msg";
    li.appendChild(document.createElement("div"));
    list.appendChild(li);
    if (m.id) byId.set(m.id, li);
  }
  const body = li.firstChild;
  if (m.kind === "user") {
    li.className = "msg user";
    body.textContent = m.tx;
  } else {
    li.className = "msg bot" + (m.n ? " notice" : "");
    renderMarkdown(m.tx || "", body);
  }
  li.querySelector(".buttons")?.remove();
  if (m.b && m.b.length) {
    const row = document.createElement("div");
    row.className = "buttons";
    row.setAttribute("role", "group");
    row.setAttribute("aria-label", "Choose");
    for (const [label, payload, style] of m.b) {
      const b = document.createElement("button");
      b.type = "button"; b.textContent = label; b.className = style || "secondary";
      b.setAttribute("aria-label", label);
      b.addEventListener("click", () => press(payload, row));
      row.appendChild(b);
    }
    li.appendChild(row);
  }
  li.scrollIntoView({ block: "end" });
}

function showError(text) {
  const li = document.createElement("li");
  li.className = "msg error"; li.setAttribute("role", "alert");
  li.textContent = text;
  list.appendChild(li); li.scrollIntoView({ block: "end" });
}

function handle(ev) {
  if (ev.t === "typing") { $("typing").hidden = false; return; }
  if (ev.t === "done") { $("typing").hidden = true; return; }
  const m = ev.m || {};
  if (ev.t === "user") upsert({ kind: "user", id: ev.id, tx: m.tx });
  else if (ev.t === "message" || ev.t === "edit") upsert({ kind: "bot", id: ev.id, ...m });
}

// ---------------------------------------------------------------- network
async function api(path, body) {
  const r = await fetch(path, {
    method: body === undefined ? "GET" : "POST",
    headers: body === undefined ? {} : { "Content-Type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
  });
  let data = {};
  try { data = await r.json(); } catch (_) {}
  if (!r.ok) throw new Error(data.error || ("HTTP " + r.status));
  return data;
}

async function press(payload, row) {
  row.querySelectorAll("button").forEach((b) => (b.disabled = true));
  try { await api("/api/actions", { token: payload }); }
  catch (e) { showError("Could not send your choice: " + e.message); row.querySelectorAll("button").forEach((b) => (b.disabled = false)); }
}

function connect() {
  if (source) source.close();
  source = new EventSource("/api/events?after=" + encodeURIComponent(last));
  source.onopen = () => ($("status").textContent = "connected");
  source.onerror = () => ($("status").textContent = "reconnecting…");
  source.onmessage = (e) => {
    if (e.lastEventId) last = e.lastEventId;
    try { handle(JSON.parse(e.data)); } catch (_) {}
  };
}

async function loadHistory() {
  const h = await api("/api/history");
  list.replaceChildren(); byId.clear();
  for (const m of h.messages) upsert(m.kind === "user" ? { kind: "user", id: m.id, tx: m.tx } : { kind: "bot", ...m });
  last = h.last || "0-0";
}

async function start() {
  const me = await api("/api/me");
  if (me.needs_token) { $("login").hidden = false; $("composer").hidden = true; $("token").focus(); return; }
  $("login").hidden = true; $("composer").hidden = false;
  await loadHistory();
  connect();
  $("input").focus();
}

$("composer").addEventListener("submit", async (e) => {
  e.preventDefault();
  const input = $("input");
  const text = input.value;
  if (!text.trim()) return;
  input.value = "";
  try { await api("/api/messages", { text }); }
  catch (err) { showError("Not sent: " + err.message); input.value = text; }
});
$("input").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("composer").requestSubmit(); }
});
$("login").addEventListener("submit", async (e) => {
  e.preventDefault();
  try { await api("/api/login", { token: $("token").value }); $("login-error").textContent = ""; start(); }
  catch (err) { $("login-error").textContent = err.message; }
});

start().catch((e) => showError("Could not start: " + e.message));
