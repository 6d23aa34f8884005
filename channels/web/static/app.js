// Parley local web chat. No build step, no dependencies.
// Every piece of text from the user or the LLM reaches the page through
// textContent / createTextNode only: markdown is parsed into DOM nodes here,
// never into an HTML string, so nothing in a message can inject markup.
// The server's Content-Security-Policy forbids inline script on top of that.
"use strict";

const $ = (id) => document.getElementById(id);
const list = $("messages");
const byId = new Map();
let last = "0-0";       // last stream entry seen: the SSE resumes after it
let thread = "";        // the conversation this page shows (or is switching to)
let shown = "";         // the conversation whose messages the list holds
let source = null;
let retryTimer = 0;

// ---------------------------------------------------------------- markdown
const SAFE_URL = /^https?:\/\/[^\s<>"]+$/i;

// The inline patterns, in the order they are tried at one position. Each part stops at
// its own delimiter (an _italic_ may hold `code` with '_' in it; **bold** holds *italic*
// and `code` with '*' in it, but never a bare '**'), and what a part may hold
// splits into its pieces only one way, so no pattern rescans a long line from every
// start, nor backtracks through the ways to split it: linear on thousands of '_', '*',
// '~', '[' or '`'.
// A backslash before ASCII punctuation makes it literal (CommonMark): the escape is a
// token of its own, so an escaped delimiter never opens a span, and a closing '*' / '_'
// / '**' / '~~' right after a backslash is escaped, so it never closes one. Elsewhere
// (inside `code`, before a letter) the backslash is plain text.
// Flanking, as far as a single regex allows (CommonMark): an opening '*' / '**' / '~~'
// is followed by no space, a closing one preceded by no space; and a closing '*' / '**'
// right after punctuation must be followed by a space, punctuation other than '*', or
// the end, so in "f(*args, **kwargs) then g(**opts)" the '(**' does not close (it is an
// opener). An _italic_ is never inside a word (snake_case_name).
// No lookbehind (Safari before 16.4 cannot even parse one, and the whole script would
// fail there): an _italic_ captures the character before its '_' (group 8) instead,
// which must not be a letter, digit, '_' or '\' (the start of the text counts as none).
// CLOSE in a pattern below: the last character before a closing '*' / '**' / '***': no
// space, '*', '`' or '\'; punctuation only if the run of '*' it closes with is followed
// by a space, punctuation other than '*', or the end. Punctuation after the run may be
// Unicode too (CommonMark): '，' '。' '—' '…' '’' and the like, as ranges (\uXXXX, no
// 'u' flag) of Latin-1, General Punctuation, CJK and full-width punctuation, so
// "**Warning!**，请注意" and "**Note:**—do this" are bold.
const CLOSE = /(?:[^*`\s\\!-\/:-@\[-`{-~]|(?![*`\\])[!-\/:-@\[-`{-~](?=\*+(?:[\s!-)+-\/:-@\[-`{-~\u00a1-\u00bf\u2010-\u2027\u2030-\u205e\u3000-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65]|$)))/;
const INLINE = new RegExp([
  // 1 `code`, or ``code`` that may hold a single '`' (never two: the first '``' closes)
  /(``(?:[^`\n]|`(?!`))+``|`[^`\n]+`)/,
  // 2 ***both***, 3 **bold**: pieces are `code`, a '`' that no other closes, a character
  // other than '*' and '`', or (in bold) a '*' that is not part of '**'; the last one
  // before the closing '***' / '**' is `code`, a lone '`' or CLOSE
  /(\*\*\*(?=[^*\s])(?:`[^`\n]+`|`(?![^`\n]*`)|[^*`\n])*?(?:`[^`\n]+`|`(?![^`\n]*`)|CLOSE)\*\*\*)/,
  /(\*\*(?=[^*\s]|\*[^*\s])(?:`[^`\n]+`|`(?![^`\n]*`)|[^*`\n]|\*(?!\*))*?(?:`[^`\n]+`|`(?![^`\n]*`)|CLOSE)\*\*)/,
  // 4 [label](5 url) and 10 a bare link: a URL may hold one level of balanced (...)
  // (https://en.wikipedia.org/wiki/Foo_(bar)); a '(' starts a group that must close
  // before the next '(' or ')', so each character is read one way (linear)
  /(\[[^[\]\n]+\]\((https?:\/\/(?:[^()\s]|\([^()\s]*\))+)\))/,
  /(\*(?=[^*\s])[^*\n]*?CLOSE\*|\*CLOSE\*)/,                               // 6 *italic*
  // 7 _italic_, after 8 (no letter, digit, '_' or '\'): 9 the span itself
  /((^|[^A-Za-z0-9_\\])(_(?=\S)(?:`[^`\n]+`|[^\n_`])*?(?:`[^`\n]+`|[^\s_`\\])_(?![A-Za-z0-9_])))/,
  /(https?:\/\/(?:[^\s<>()"]|\([^\s<>()"]*\))*(?:[^\s<>()".,;:!?']|\([^\s<>()"]*\)))/,
  /(\\[!-\/:-@\[-`{-~])/,                                               // 11 an escape
  // 12 ~~strike~~ (GFM): its pieces as in bold, with '~' for '*'
  /(~~(?=[^~\s])(?:`[^`\n]+`|`(?![^`\n]*`)|[^~`\n]|~(?!~))*?(?:`[^`\n]+`|`(?![^`\n]*`)|[^~`\s\\])~~)/,
].map((r) => r.source.split("CLOSE").join(CLOSE.source)).join("|"));

// A link's label is markdown too ([`config.py`](…), [**the guide**](…)): it is rendered
// into the <a> with links off (inLink), so a bare URL or a [x](…) in it stays text and
// a link never holds another.
function inline(text, parent, inLink) {
  // **bold**, *italic* / _italic_, ***both***, ~~strike~~, `code`, [label](http…), bare
  // http(s) links
  while (text.length) {
    const m = INLINE.exec(text);
    if (!m) { parent.appendChild(document.createTextNode(text)); return; }
    let at = m.index, tok = m[0];
    if (m[8] !== undefined) { at += m[8].length; tok = m[9]; }  // _italic_: not its prefix
    if (at) parent.appendChild(document.createTextNode(text.slice(0, at)));
    let el;
    if (m[1]) {
      el = document.createElement("code");
      let c = tok.startsWith("``") ? tok.slice(2, -2) : tok.slice(1, -1);
      // one space at each end goes, if both have one (CommonMark): `` `x` `` is `x`
      if (c.length > 2 && c[0] === " " && c[c.length - 1] === " " && c.trim()) c = c.slice(1, -1);
      el.textContent = c;
    }
    else if (m[2]) {
      el = document.createElement("em");
      el.appendChild(document.createElement("strong"));
      inline(tok.slice(3, -3), el.firstChild, inLink);
    }
    else if (m[3]) { el = document.createElement("strong"); inline(tok.slice(2, -2), el, inLink); }
    else if (m[4] && !inLink) {
      el = anchor(m[5]);  // null: not a plain http(s) URL, so the label alone
      inline(tok.slice(1, tok.indexOf("](")), el || parent, true);
    }
    else if (m[10] && !inLink) {
      el = anchor(tok);
      if (el) el.textContent = tok;
      else el = document.createTextNode(tok);
    }
    else if (m[4] || m[10]) el = document.createTextNode(tok);  // in a label: text
    else if (m[11]) el = document.createTextNode(tok[1]);
    else if (m[12]) { el = document.createElement("del"); inline(tok.slice(2, -2), el, inLink); }
    else { el = document.createElement("em"); inline(tok.slice(1, -1), el, inLink); }
    if (el) parent.appendChild(el);
    text = text.slice(at + tok.length);
  }
}

// An <a> for a plain http(s) URL (opens in a new tab, no referrer), else null.
function anchor(url) {
  if (!SAFE_URL.test(url)) return null;
  const a = document.createElement("a");
  a.href = url; a.rel = "noopener noreferrer nofollow"; a.target = "_blank";
  return a;
}

const LIST_ITEM = /^\s*([-*+]|\d+[.)])\s+/;
const FENCE = /^\s*(`{3,}|~{3,})/;  // opens a code block; the run of ` or ~ is kept
// A fence closes only on a line of the same character, at least as long as the opening
// run, with nothing else on it (CommonMark): a ```` block can hold a ``` block whole.
const closesFence = (line, open) => {
  const t = line.trim();
  return t.length >= open.length && t === open[0].repeat(t.length);
};
const MAX_QUOTE_DEPTH = 8;  // deeper '>' levels show as text (no recursion without end)
const HEADING = /^(#{1,6})\s+(.*)$/;  // always a block of its own, even mid-paragraph
const MAX_LIST_DEPTH = 8;  // deeper indented items stay in the deepest list
const RULE = /^ {0,3}([-*_])(?:[ \t]*\1){2,}[ \t]*$/;  // ---, ***, _ _ _: a thematic break
// A GFM table: a header row, then a delimiter row (|---|:--:|) with as many cells;
// rows end at the first line without a '|'. A '|' inside `code` or after '\' is text.
const TABLE_DELIM = /^\s*(?:\|\s*)?:?-+:?\s*(?:\|\s*:?-+:?\s*)*(?:\|\s*)?$/;
const MAX_TABLE_COLUMNS = 20;

function cells(line) {
  const out = [];
  let cur = "", code = false;
  const t = line.trim().replace(/^\|/, "");
  for (let k = 0; k < t.length; k++) {
    const ch = t[k];
    if (ch === "\\" && t[k + 1] === "|") { cur += "|"; k++; continue; }
    if (ch === "`") code = !code;
    if (ch === "|" && !code) { out.push(cur.trim()); cur = ""; continue; }
    cur += ch;
  }
  if (cur.trim() || !/\|\s*$/.test(t)) out.push(cur.trim());
  return out;
}

// Whether lines[i] and lines[i + 1] start a table.
function tableAt(lines, i) {
  // the delimiter row has a '|' too: "text |" over "---" is a paragraph and a rule
  if (i + 1 >= lines.length || !lines[i].includes("|") || !lines[i + 1].includes("|")
      || !TABLE_DELIM.test(lines[i + 1])) {
    return false;
  }
  const n = cells(lines[i]).length;
  return n === cells(lines[i + 1]).length && n <= MAX_TABLE_COLUMNS;
}

// The table at lines[i] (tableAt): renders it, returns the next line.
function renderTable(lines, i, into) {
  const head = cells(lines[i]), delim = cells(lines[i + 1]);
  const align = delim.map((d) => (d.startsWith(":") && d.endsWith(":") ? "center"
    : d.endsWith(":") ? "right" : d.startsWith(":") ? "left" : ""));
  const table = document.createElement("table");
  const row = (values, tag, parent) => {
    const tr = document.createElement("tr");
    head.forEach((_, k) => {
      const td = document.createElement(tag);
      if (align[k]) td.style.textAlign = align[k];
      inline(values[k] || "", td);
      tr.appendChild(td);
    });
    parent.appendChild(tr);
  };
  const thead = document.createElement("thead");
  row(head, "th", thead);
  table.appendChild(thead);
  i += 2;
  const tbody = document.createElement("tbody");
  // rows end at a blank line, a line without '|', or another block (GFM)
  while (i < lines.length && lines[i].trim() && lines[i].includes("|") && !FENCE.test(lines[i])
         && !HEADING.test(lines[i]) && !LIST_ITEM.test(lines[i]) && !lines[i].startsWith(">")) {
    row(cells(lines[i++]), "td", tbody);
  }
  if (tbody.firstChild) table.appendChild(tbody);
  const wrap = document.createElement("div");  // a wide table scrolls, not the page
  wrap.className = "table"; wrap.tabIndex = 0;
  wrap.appendChild(table);
  into.appendChild(wrap);
  return i;
}

// The width of a line's indentation (a tab counts 4), and the line without its first
// n columns of it (CommonMark: up to n, so a line indented less loses what it has).
const indentOf = (line) => /^[ \t]*/.exec(line)[0].replace(/\t/g, "    ").length;
const dedent = (line, n) => {
  const ws = /^[ \t]*/.exec(line)[0];
  return ws.replace(/\t/g, "    ").slice(n) + line.slice(ws.length);
};
const isItem = (line) => LIST_ITEM.test(line) && !RULE.test(line);
// A block element inside a list item: text after one starts a paragraph of its own.
const BLOCK = /^(P|UL|OL|PRE|BLOCKQUOTE|DIV|HR|H[1-6])$/;

// A list, from lines[i]: an item indented at least two more than the one above goes
// in a list inside it; one indented less goes back out to the list whose items start
// where it does (or the nearest one further in). An item of the other kind (- or 1.)
// starts a list of its own at its level. Blank lines between items keep the list
// going (a "loose" list is still one list); a line indented past an item's marker
// belongs to that item: a continuation of its text, or blocks of their own (a code
// block, a quote, a paragraph after a blank line) rendered without that indentation,
// so code copied from a step keeps only its own. Returns the next line.
function renderList(lines, i, into, depth) {
  const levels = [];  // {indent, ordered, list, item}: the lists open, outermost first
  let closed = null;  // the level most recently left: an item at its depth goes back in
  let gap = false;    // a blank line since the last item or continuation
  const open = (ordered, line, parent) => {
    const list = document.createElement(ordered ? "ol" : "ul");
    if (ordered) list.start = parseInt(line, 10) || 1;
    parent.appendChild(list);
    return list;
  };
  // lines[j] is blank: the first line after the blank ones, or lines.length
  const afterBlank = (j) => { while (j < lines.length && !lines[j].trim()) j++; return j; };
  while (i < lines.length) {
    const line = lines[i];
    if (!line.trim()) {
      const j = afterBlank(i);
      if (j < lines.length && (isItem(lines[j]) || indentOf(lines[j]) > levels[0].indent)) {
        i = j; gap = true;
        continue;
      }
      break;
    }
    if (!isItem(line)) {
      const indent = indentOf(line);
      if (indent <= levels[0].indent) break;  // not indented past the marker: not the list's
      // the item of the innermost list whose marker this line is indented past
      while (levels.length > 1 && levels[levels.length - 1].indent >= indent) levels.pop();
      closed = null;
      const top = levels[levels.length - 1];
      const chunk = [];
      let least = Infinity;  // the indentation all its lines share
      while (i < lines.length) {
        const l = lines[i];
        if (!l.trim()) {
          const j = afterBlank(i);
          if (j >= lines.length || isItem(lines[j]) || indentOf(lines[j]) <= top.indent) break;
          while (i < j) { chunk.push(""); i++; }
          continue;
        }
        if (isItem(l) || indentOf(l) <= top.indent) break;
        least = Math.min(least, indentOf(l));
        chunk.push(l); i++;
        const fence = FENCE.exec(l);
        if (fence) {  // its lines are code, whatever they look like, up to its close
          while (i < lines.length && !closesFence(lines[i], fence[1])
                 && !(lines[i].trim() && indentOf(lines[i]) <= top.indent)) {
            chunk.push(lines[i++]);
          }
          if (i < lines.length && closesFence(lines[i], fence[1])) {
            least = Math.min(least, indentOf(lines[i]));
            chunk.push(lines[i++]);
          }
        }
      }
      const blocks = document.createElement("div");
      renderMarkdown(chunk.map((l) => dedent(l, least)).join("\n"), blocks, depth);
      const li = top.item, first = blocks.firstChild;
      if (!gap && first && first.nodeName === "P"
          && !(li.lastChild && BLOCK.test(li.lastChild.nodeName))) {
        li.appendChild(document.createElement("br"));  // more of the item's own text
        while (first.firstChild) li.appendChild(first.firstChild);
        first.remove();
      }
      while (blocks.firstChild) li.appendChild(blocks.firstChild);
      gap = false;
      continue;
    }
    i++;
    const indent = indentOf(line);
    const ordered = /^\s*\d/.test(line);
    while (levels.length > 1 && levels[levels.length - 1].indent > indent + 1) {
      closed = levels.pop();
    }
    let top = levels[levels.length - 1];
    if (!top) {
      top = { indent, ordered, list: open(ordered, line, into), item: null };
      levels.push(top);
    } else if (indent >= top.indent + 2 && levels.length < MAX_LIST_DEPTH) {
      if (closed && closed.list.parentNode === top.item && closed.ordered === ordered) {
        top = closed;  // back into the list this item's siblings are in
        top.indent = Math.min(top.indent, indent);
      } else {
        top = { indent, ordered, list: open(ordered, line, top.item), item: null };
      }
      levels.push(top);
    } else if (top.ordered !== ordered) {
      top.list = open(ordered, line, top.list.parentNode);
      top.ordered = ordered;
    }
    closed = null; gap = false;
    const li = document.createElement("li");
    inline(line.replace(LIST_ITEM, ""), li);
    top.list.appendChild(li);
    top.item = li;
  }
  return i;
}

function renderMarkdown(src, into, depth = 0) {
  into.replaceChildren();
  const lines = String(src).split(/\r\n?|\n/);  // "\r\n" from some models is one line end
  const quote = (l) => depth < MAX_QUOTE_DEPTH && l.startsWith(">");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    const fence = FENCE.exec(line);
    if (fence) {
      const pre = document.createElement("pre");
      const code = document.createElement("code");
      const body = [];
      const indent = indentOf(line);  // an indented fence: its lines lose that much (CommonMark)
      i++;
      while (i < lines.length && !closesFence(lines[i], fence[1])) body.push(dedent(lines[i++], indent));
      i++;
      code.textContent = body.join("\n");
      pre.appendChild(code); pre.tabIndex = 0;  // scrollable code is reachable by keyboard
      into.appendChild(pre);
      continue;
    }
    if (RULE.test(line)) { into.appendChild(document.createElement("hr")); i++; continue; }
    if (LIST_ITEM.test(line)) { i = renderList(lines, i, into, depth); continue; }
    if (quote(line)) {
      const q = document.createElement("blockquote");
      const body = [];
      while (i < lines.length && quote(lines[i])) body.push(lines[i++].replace(/^>\s?/, ""));
      renderMarkdown(body.join("\n"), q, depth + 1);
      into.appendChild(q);
      continue;
    }
    if (!line.trim()) { i++; continue; }
    if (tableAt(lines, i)) { i = renderTable(lines, i, into); continue; }
    const h = HEADING.exec(line);
    if (h) {  // "# Title" is h3 (the page's own title is the h1)
      const el = document.createElement("h" + Math.min(h[1].length + 2, 6));
      inline(h[2], el);
      into.appendChild(el); i++;
      continue;
    }
    const para = [];
    while (i < lines.length && lines[i].trim() && !FENCE.test(lines[i]) && !HEADING.test(lines[i])
           && !LIST_ITEM.test(lines[i]) && !quote(lines[i]) && !RULE.test(lines[i])
           && !tableAt(lines, i)) {
      para.push(lines[i++]);
    }
    const p = document.createElement("p");
    para.forEach((l, k) => {
      if (k) p.appendChild(document.createElement("br"));
      inline(l, p);
    });
    into.appendChild(p);
  }
}

// ---------------------------------------------------------------- messages
function scrollDown() {
  const main = list.parentElement;
  main.scrollTop = main.scrollHeight;
}

// Whether the reader is at (or near) the bottom: only then does new content pull the
// view down. Measured before the change: someone who scrolled up to read stays put.
function nearBottom() {
  const main = list.parentElement;
  return main.scrollHeight - main.scrollTop - main.clientHeight < 80;
}

// follow: undefined = follow the bottom if the reader is there; false = do not scroll
// (loadHistory draws many messages and scrolls once, without a layout per message).
function upsert(m, follow) {
  if (follow === undefined) follow = nearBottom();
  let li = m.id ? byId.get(m.id) : null;
  if (!li) {
    list.querySelector(".hint")?.remove();
    li = document.createElement("li");
    const body = document.createElement("div");
    body.className = "body";
    body.dir = "auto";  // Hebrew or Arabic reads right to left (each paragraph on its own: CSS)
    body.id = "m-" + (m.id || Math.random().toString(36).slice(2));
    li.appendChild(body);
    list.appendChild(li);
    if (m.id) byId.set(m.id, li);
  }
  const body = li.firstChild;
  const streaming = m.f === false;
  if (m.kind === "user") {
    li.className = "msg user";
    body.textContent = m.tx || "";
  } else {
    li.className = "msg bot" + (m.n ? " notice" : "") + (streaming ? " streaming" : "");
    try { renderMarkdown(m.tx || "", body); }
    catch (_) { body.textContent = m.tx || ""; }  // never lose a message to the renderer
  }
  li.setAttribute("aria-busy", streaming ? "true" : "false");
  const hadFocus = li.contains(document.activeElement);
  li.querySelector(".buttons")?.remove();
  if (m.b && m.b.length) {
    const row = document.createElement("div");
    row.className = "buttons";
    row.setAttribute("role", "group");
    row.setAttribute("aria-label", "Your decision");
    // A press goes to the conversation this prompt is in, even if the page is already
    // switching to another one (New conversation pressed, its history still loading).
    row.dataset.thread = shown;
    for (const [label, payload, style] of m.b) {
      const b = document.createElement("button");
      b.type = "button"; b.textContent = label;
      b.className = ["primary", "secondary", "danger"].includes(style) ? style : "secondary";
      b.setAttribute("aria-describedby", body.id);
      b.addEventListener("click", () => press(payload, row));
      row.appendChild(b);
    }
    li.appendChild(row);
  } else if (hadFocus) {
    $("input").focus();  // the buttons went away under the keyboard: back to the input
  }
  if (follow) scrollDown();
}

function showError(text) {
  const li = document.createElement("li");
  li.className = "msg error"; li.setAttribute("role", "alert");
  li.textContent = text;
  list.appendChild(li); scrollDown();
}

let typingTimer = 0;
function setTyping(on) {
  // The worker repeats "typing" every few seconds while a turn runs; if that stops
  // without a "done" (a refused or duplicate message), the indicator goes away.
  clearTimeout(typingTimer);
  if (on) {
    const follow = $("typing").hidden && nearBottom();
    $("typing").hidden = false;
    if (follow) scrollDown();
    typingTimer = setTimeout(() => setTyping(false), 12000);
  } else $("typing").hidden = true;
}

function handle(ev) {
  if (ev.t === "reload") { showThread().catch(() => boot(1000)); return; }  // the feed lost entries
  if (ev.t === "typing") { setTyping(true); return; }
  if (ev.t === "done") { setTyping(false); return; }
  if (ev.t === "retract") { byId.get(ev.id)?.remove(); byId.delete(ev.id); return; }
  const m = ev.m || {};
  if (ev.t === "user") upsert({ kind: "user", id: ev.id, tx: m.tx });
  else if (ev.t === "message" || ev.t === "edit") upsert({ kind: "bot", id: ev.id, ...m });
}

function showInfo(text) {
  const li = document.createElement("li");
  li.className = "msg info"; li.setAttribute("role", "status");
  li.textContent = text;
  list.appendChild(li); scrollDown();
}

// ---------------------------------------------------------------- network
// A request with no answer in this time (a hung connection: a mobile network switch,
// a stalled proxy; fetch itself never gives up) is dropped and counts as a network
// error, so a message shows "Not sent" with its text kept, and the next one goes.
let requestTimeoutMs = 25000;

async function api(path, body) {
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), requestTimeoutMs);
  let r;
  let data = {};
  try {
    r = await fetch(path, {
      method: body === undefined ? "GET" : "POST",
      headers: body === undefined ? {} : { "Content-Type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin",
      signal: abort.signal,
    });
    try { data = await r.json(); }
    catch (e) { if (abort.signal.aborted) throw e; }  // a body that stalled: no answer
  } catch (_) {
    const err = new Error(abort.signal.aborted ? "no answer from the server" : "no connection to the server");
    err.network = true;  // no status: send() retries once, boot() keeps trying
    throw err;
  } finally {
    clearTimeout(timer);
  }
  if (!r.ok) {
    const err = new Error(data.error || ("HTTP " + r.status));
    err.status = r.status;
    err.noSession = data.no_session === true;  // the cookie is gone: start() makes a new one
    throw err;
  }
  return data;
}

const param = (name, value) => name + "=" + encodeURIComponent(value);

function newId() {
  const a = new Uint8Array(12);
  crypto.getRandomValues(a);  // works on plain http too, unlike randomUUID
  return Array.from(a, (x) => x.toString(16).padStart(2, "0")).join("");
}

// 409: this tab's conversation is not this browser's any more (another tab started
// many newer ones, or the session was replaced): show the current one, and say so.
async function replaced(what) {
  thread = "";
  await start();
  showInfo("This tab showed a conversation that was replaced (in another tab?): "
           + "this is the current one. " + what);
}

// The cookie is gone (cleared, or expired while this tab stayed open): nothing can be
// sent until the page has a session again. GET /api/me makes one, for a new
// conversation (the earlier one belonged to the old cookie); if a token is set, the
// page asks for it. The request that failed never got through, so nothing is lost.
async function sessionLost(what) {
  thread = "";
  await start();
  showInfo("This page's session had ended (its cookie was cleared or expired), "
           + "so this is a new conversation. " + what);
}

async function press(payload, row) {
  const buttons = row.querySelectorAll("button");
  buttons.forEach((b) => (b.disabled = true));
  row.setAttribute("aria-busy", "true");
  $("input").focus();
  setTyping(true);
  try { await api("/api/actions", { token: payload, thread: row.dataset.thread || thread }); }
  catch (e) {
    setTyping(false);
    buttons.forEach((b) => (b.disabled = false));
    row.removeAttribute("aria-busy");
    if (e.status === 409) replaced("Your choice was not sent.").catch(() => boot(1000));
    else if (e.noSession) sessionLost("Your choice was not sent.").catch(() => boot(1000));
    else {
      showError("Could not send your choice: " + e.message);
      if (e.status === 401) start().catch(() => {});
    }
  }
}

function connect() {
  if (source) source.close();
  clearTimeout(retryTimer);
  const es = new EventSource("/api/events?" + param("thread", thread) + "&" + param("after", last));
  source = es;
  es.onopen = () => { $("status").textContent = "connected"; };
  es.onerror = () => {
    if (es !== source) return;
    $("status").textContent = "reconnecting…";
    // The browser retries by itself unless the server refused (session gone, conversation
    // replaced): then start over, which asks for the token again if needed.
    if (es.readyState === EventSource.CLOSED) { source = null; boot(3000); }
  };
  es.onmessage = (e) => {
    if (es !== source) return;
    if (e.lastEventId) last = e.lastEventId;
    try { handle(JSON.parse(e.data)); } catch (_) {}
  };
}

async function loadHistory() {
  const asked = thread;
  const h = await api("/api/history?" + param("thread", asked));
  list.replaceChildren(); byId.clear();
  shown = h.thread || asked;
  // A turn that ended before this read (an answer faster than the history, as /new's
  // often is) sends its "done" before `last`, so it never arrives here: start without
  // the typing line; a turn still running turns it on again with its next ping.
  setTyping(false);
  for (const m of h.messages) {
    // one message that cannot be shown never keeps the others (or the page) from showing
    try { upsert(m.kind === "user" ? { kind: "user", id: m.id, tx: m.tx } : { kind: "bot", ...m }, false); }
    catch (_) {}
  }
  last = h.last || "0-0";
  if (!h.messages.length) {
    const li = document.createElement("li");
    li.className = "msg hint";
    li.textContent = "A new conversation. Write a message below; /help lists the commands.";
    list.appendChild(li);
  }
  scrollDown();  // once, at the end
}

async function showThread() {
  // (Re)load the transcript of `thread` and follow its live feed from there.
  if (source) { source.close(); source = null; }
  $("status").textContent = "connecting…";  // not "connected": no feed until connect()
  await loadHistory();
  connect();
}

async function switchTo(newThread) {
  // "/new" gave this browser another conversation: show its (fresh) transcript.
  thread = newThread;
  await showThread();
}

async function start() {
  const me = await api("/api/me");
  if (me.needs_token) {
    $("login").hidden = false; $("composer").hidden = true;
    $("status").textContent = "locked";
    $("token").focus();
    return;
  }
  $("login").hidden = true; $("composer").hidden = false;
  thread = thread || me.thread;  // a restart keeps the conversation this tab shows
  try { await loadHistory(); }
  catch (e) {
    if (e.status !== 409 || thread === me.thread) throw e;
    thread = me.thread;
    await loadHistory();
    showInfo("This tab's conversation was replaced (in another tab?): this is the current one.");
  }
  connect();
  $("input").focus();
}

// Start, and while the server cannot be reached (restarting, its storage down), try
// again with growing pauses instead of giving up.
let bootDelay = 0;
function boot(after = 0) {
  clearTimeout(retryTimer);
  retryTimer = setTimeout(() => {
    start().then(() => { bootDelay = 0; }).catch((e) => {
      if (e.network || e.status >= 500) {
        bootDelay = Math.min(bootDelay ? bootDelay * 2 : 1000, 30000);
        $("status").textContent = "server unavailable, retrying in " + Math.round(bootDelay / 1000) + " s…";
        boot(bootDelay);
      } else showError("Could not start: " + e.message);
    });
  }, after);
}

// A message whose fate is unknown (no answer, or a 5xx: the first try may have been
// taken, its response lost): sent again with the same text, it keeps its id, so the
// server sees a retry (one question, answered once), not a second message.
let unsure = null;

// One message at a time, in the order written: a message written while /new is on
// its way waits until the page has switched to the new conversation, and goes there.
let sending = Promise.resolve();
function send(text) {
  const run = sending.then(() => sendNow(text));
  sending = run.catch(() => {});
  return run;
}

async function sendNow(text) {
  const again = unsure && unsure.text === text && unsure.thread === thread;
  const body = { text, id: again ? unsure.id : newId(), thread };
  let r;
  scrollDown();  // the reader sent something: show the bottom, where it and the answer go
  setTyping(true);  // before the request: the answer can beat the response here
  try { r = await api("/api/messages", body); }
  catch (err) {
    try {
      if (err.network) r = await api("/api/messages", body);  // network blip: once more, same id
      else throw err;
    } catch (err2) {
      setTyping(false);
      unsure = err2.network || err2.status >= 500 ? { text, thread: body.thread, id: body.id } : null;
      throw err2;
    }
  }
  unsure = null;
  if (r.result === "duplicate") setTyping(false);
  if (r.thread && r.thread !== thread) {
    // The server switched (the message was taken): if the new conversation cannot be
    // read yet (a storage or network blip), keep trying to show it, as after a restart
    // (boot follows `thread`, already the new one), instead of saying it failed and
    // staying deaf on the old one.
    try { await switchTo(r.thread); }
    catch (_) { $("status").textContent = "reconnecting…"; boot(1000); }
  }
}

function notSent(err, what, whenReplaced) {
  if (err.status === 409) replaced(whenReplaced).catch(() => boot(1000));
  else if (err.noSession) sessionLost(whenReplaced).catch(() => boot(1000));
  else {
    showError(what + " " + err.message);
    if (err.status === 401) start().catch(() => {});
  }
}

$("composer").addEventListener("submit", async (e) => {
  e.preventDefault();
  const input = $("input");
  const text = input.value;
  if (!text.trim()) return;
  input.value = "";
  try { await send(text); }
  catch (err) {
    if (!input.value) input.value = text;
    notSent(err, "Not sent:", "Your message was not sent: it is still in the box.");
  }
});
$("input").addEventListener("keydown", (e) => {
  // An Enter that ends an IME composition (Japanese, Chinese…) picks the candidate, it
  // does not send: Safari ends the composition before this keydown (isComposing is
  // false then), but still reports keyCode 229 for it.
  if (e.isComposing || e.keyCode === 229) return;
  // .click() on the submit button: the form method for this needs Safari 16
  if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("send").click(); }
});
$("new").addEventListener("click", () => {
  // one at a time: a double click (or a second press while the first is on its way)
  // would start two conversations
  const button = $("new");
  if (button.disabled) return;
  button.disabled = true;
  send("/new")
    .catch((err) => notSent(err, "Could not start a new conversation:",
                            "Press New conversation again to start another."))
    .finally(() => { button.disabled = false; });
  $("input").focus();
});
$("login").addEventListener("submit", async (e) => {
  e.preventDefault();
  try { await api("/api/login", { token: $("token").value }); $("login-error").textContent = ""; $("token").value = ""; await start(); }
  catch (err) { $("login-error").textContent = err.message; $("token").focus(); }
});

boot();
