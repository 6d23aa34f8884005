// Runs app.js's renderMarkdown on stdin under a minimal DOM; prints the text of each <pre>.
const fs = require("fs"), vm = require("vm");
class El {
  constructor(tag) { this.tagName = tag; this.children = []; this._text = ""; this.style = {}; this.dataset = {}; this.classList = { add() {}, remove() {}, toggle() {}, contains() { return false; } }; }
  appendChild(c) { this.children.push(c); return c; }
  append(...cs) { for (const c of cs) this.children.push(typeof c === "string" ? new Text(c) : c); }
  replaceChildren(...cs) { this.children = []; this.append(...cs); }
  set textContent(t) { this.children = []; this._text = String(t); }
  get textContent() { return this._text + this.children.map((c) => c.textContent).join(""); }
  setAttribute() {} addEventListener() {} removeEventListener() {} querySelector() { return null; } querySelectorAll() { return []; }
  focus() {} scrollIntoView() {} remove() {} insertBefore(c) { this.children.push(c); return c; }
}
class Text { constructor(t) { this.textContent = String(t); } }
const document = { createElement: (t) => new El(t), createTextNode: (t) => new Text(t), getElementById: () => new El("div"),
  addEventListener() {}, querySelector: () => new El("div"), querySelectorAll: () => [], body: new El("body"), documentElement: new El("html") };
const ctx = { document, window: {}, console, setTimeout, clearTimeout, URLSearchParams, location: { search: "", hash: "", pathname: "/" },
  localStorage: { getItem() { return null; }, setItem() {} }, sessionStorage: { getItem() { return null; }, setItem() {} },
  fetch: () => new Promise(() => {}), EventSource: class { addEventListener() {} close() {} }, navigator: {}, matchMedia: () => ({ matches: false, addEventListener() {} }),
  history: { replaceState() {}, pushState() {} }, requestAnimationFrame: () => 0 };
ctx.window = ctx; ctx.globalThis = ctx;
vm.createContext(ctx);
const src = fs.readFileSync(process.argv[2], "utf8").replace(/\nboot\(\);\s*$/, "\n");
vm.runInContext(src + "\n;globalThis.__render = renderMarkdown;", ctx);
const into = new El("div");
ctx.__render(fs.readFileSync(0, "utf8"), into);
const pres = [];
const walk = (n) => { if (n.tagName === "pre") pres.push(n.textContent); (n.children || []).forEach(walk); };
walk(into);
process.stdout.write(JSON.stringify({ pre: pres, text: into.textContent }));
