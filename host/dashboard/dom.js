// DOM helpers. Every page is built from nodes, never from HTML strings: text
// (task names, plugin output, logs: all untrusted) always lands in text nodes
// or attribute values, so nothing a plugin prints can become markup.

const SVG_NS = "http://www.w3.org/2000/svg";

function build(el, attrs, children) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on") && typeof v === "function") {
      el.addEventListener(k.slice(2), v);
    } else if (k === "class") {
      el.setAttribute("class", Array.isArray(v) ? v.filter(Boolean).join(" ") : v);
    } else if (k === "dataset") {
      Object.assign(el.dataset, v);
    } else {
      el.setAttribute(k, v === true ? "" : String(v));
    }
  }
  append(el, children);
  return el;
}

/** Appends children: nodes as they are, strings and numbers as text, arrays flattened. */
export function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

/** `h("a", {href: "#/x"}, "text", child)`: an HTML element. */
export function h(tag, attrs, ...children) {
  return build(document.createElement(tag), attrs, children);
}

/** An SVG element, same calling convention as `h`. */
export function s(tag, attrs, ...children) {
  return build(document.createElementNS(SVG_NS, tag), attrs, children);
}

/** Replaces everything inside `el`. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** A hash link inside the dashboard; path parts are URI-encoded by the caller's helpers. */
export function link(href, ...children) {
  return h("a", { href }, ...children);
}

/** `#/runs/ID` etc. with each segment encoded. */
export function route(...segments) {
  return "#/" + segments.map((x) => encodeURIComponent(x)).join("/");
}

/** `?a=1&b=2` from an object, skipping empty values. */
export function qs(params) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== null && v !== undefined && v !== "") p.set(k, v);
  }
  const t = p.toString();
  return t ? "?" + t : "";
}

/** A coloured state badge (`succeeded`, `failed`, …). */
export function badge(state) {
  const text = state ?? "-";
  return h("span", { class: ["badge", "st-" + String(text).replace(/[^a-z_]/g, "")] }, text);
}

/**
 * A table from headers and rows of cells (nodes or text), in a box that
 * scrolls sideways on its own when the table is wider than the page (a phone).
 * Each cell carries its column's header as `data-label`, which a `stack`
 * table shows beside the cell when narrow screens lay its rows out as cards.
 */
export function table(headers, rows, attrs = {}, empty = "nothing yet") {
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      attrs,
      h("thead", {}, h("tr", {}, headers.map((x) => h("th", {}, x)))),
      h(
        "tbody",
        {},
        rows.length
          ? rows.map((r) => h("tr", {}, r.map((c, i) => h("td", { "data-label": headers[i] }, c))))
          : h("tr", {}, h("td", { colspan: headers.length, class: "empty" }, empty)),
      ),
    ),
  );
}

/** The browser's zone at instant `d` as its UTC offset: `UTC`, `UTC+08:00`, `UTC-03:30`. */
export function zoneLabel(d) {
  const off = -d.getTimezoneOffset();
  if (off === 0) return "UTC";
  const abs = Math.abs(off);
  const pad = (n) => String(n).padStart(2, "0");
  return `UTC${off > 0 ? "+" : "-"}${pad(Math.floor(abs / 60))}:${pad(abs % 60)}`;
}

/** How the page header names the zone every time is shown in: `times in UTC+08:00`. */
export function zoneCaption(now = new Date()) {
  return `times in ${zoneLabel(now)}`;
}

/**
 * `2026-11-30 08:30:00` in the browser's zone, which the page header names
 * once (`zoneCaption`); an instant whose offset differs from today's (the
 * other side of a DST change) says its own. The exact instant is the tooltip.
 * `ms: true` adds milliseconds; `day` (an instant) leaves the date out when
 * it is that instant's local date, for a table whose caption gives it.
 */
export function when(iso, opts = {}) {
  if (!iso) return "-";
  const d = new Date(iso);
  if (isNaN(d)) return String(iso);
  const pad = (n, w = 2) => String(n).padStart(w, "0");
  const date = (x) => `${x.getFullYear()}-${pad(x.getMonth() + 1)}-${pad(x.getDate())}`;
  const sameDay = opts.day && date(new Date(opts.day)) === date(d);
  const clock = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}${opts.ms ? "." + pad(d.getMilliseconds(), 3) : ""}`;
  const zone = zoneLabel(d) === zoneLabel(new Date()) ? "" : ` ${zoneLabel(d)}`;
  return h("time", { datetime: iso, title: iso }, `${sameDay ? "" : date(d) + " "}${clock}${zone}`);
}

/** The local date of an instant: `2026-11-30`. */
export function dayOf(iso) {
  const d = new Date(iso);
  return `${d.getFullYear()}-${String(d.getMonth() + 1).padStart(2, "0")}-${String(d.getDate()).padStart(2, "0")}`;
}

/** `in 5s`, `3m ago`. */
export function relative(iso, now = Date.now()) {
  if (!iso) return "-";
  const ms = new Date(iso).getTime() - now;
  const t = human(Math.abs(ms));
  return ms >= 0 ? `in ${t}` : `${t} ago`;
}

/** `0.4ms`, `340ms`, `1.25s`, `2m05s`, `3h10m`. */
export function human(ms) {
  if (ms === null || ms === undefined || isNaN(ms)) return "-";
  // Attempts of small plugins take well under a millisecond: "0ms" would read as "did nothing".
  if (ms > 0 && ms < 0.05) return "<0.1ms";
  if (ms > 0 && ms < 10) return `${Number(ms.toFixed(1))}ms`;
  if (ms < 1000) return `${Math.round(ms)}ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(2)}s`;
  const sec = Math.round(ms / 1000);
  if (sec < 3600) return `${Math.floor(sec / 60)}m${String(sec % 60).padStart(2, "0")}s`;
  return `${Math.floor(sec / 3600)}h${String(Math.floor((sec % 3600) / 60)).padStart(2, "0")}m`;
}

/** Milliseconds between two instants, or null. */
export function span(from, to) {
  if (!from || !to) return null;
  return new Date(to).getTime() - new Date(from).getTime();
}

/** `1.2 MiB`. */
export function bytes(n) {
  if (n === null || n === undefined) return "-";
  if (n < 1024) return `${n} B`;
  if (n < 1 << 20) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / (1 << 20)).toFixed(1)} MiB`;
}

/** `48,211`. */
export function num(n) {
  return n === null || n === undefined ? "-" : Number(n).toLocaleString("en-US");
}

/** JSON for people, in a `<pre>` (as text). */
export function jsonBlock(value) {
  return h("pre", { class: "json" }, JSON.stringify(value, null, 2));
}

/** A button that disables itself while its async action runs. */
export function button(label, action, attrs = {}) {
  const b = h("button", { type: "button", ...attrs }, label);
  b.addEventListener("click", async () => {
    b.disabled = true;
    try {
      await action();
    } finally {
      b.disabled = false;
    }
  });
  return b;
}

export const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);

/** Outcomes that mean the sandbox stopped the plugin (a limit), not the plugin's own error. */
const LIMITS = {
  trapped: "trapped",
  fuel_exhausted: "fuel exhausted",
  memory_exceeded: "memory exceeded",
  timed_out: "timed out",
  output_too_large: "output too large",
  lost: "host lost",
};

/**
 * What kind of failure an attempt was: `retryable` or `fatal` for an error
 * the plugin returned (its `error_kind`), `sandbox limit: …` for a trap or a
 * limit the host enforced.
 */
export function failureClass(attempt) {
  if (!attempt) return null;
  if (attempt.outcome in LIMITS) return `sandbox limit: ${LIMITS[attempt.outcome]}`;
  if (attempt.outcome === "failed") return attempt.error_kind || "failed";
  return attempt.outcome || null;
}

/**
 * Why a failed run failed: its failing step (the one its reason names, else
 * the first failed or dead one), that step's last error and the error's
 * class, from the run view alone (`GET /v1/runs` and `/v1/runs/ID` carry the
 * steps and their attempts). Null for a run that did not fail.
 */
export function failureOf(run) {
  if (!run || run.status !== "failed") return null;
  const failed = (run.steps || []).filter((st) => st.status === "failed" || st.status === "dead");
  if (!failed.length) return run.reason ? { step: null, error: run.reason, cls: null } : null;
  const step = failed.find((st) => run.reason && run.reason.includes("`" + st.name + "`")) || failed[0];
  const last = (step.attempts || []).filter((a) => a.outcome && a.outcome !== "succeeded").pop() || null;
  return { step: step.name, error: (last && last.error) || step.error || "", cls: failureClass(last) };
}

/**
 * A modal confirmation: `title`, a sentence saying what will happen (nodes or
 * text), and a button `label` that runs `action` (its refusal is shown in the
 * dialog). Like every dialog it is removed when the page changes.
 */
export function confirmDialog(title, body, label, action) {
  const status = h("p", { class: "error", role: "alert", hidden: true });
  const cancel = h("button", { type: "button" }, "Cancel");
  const ok = h("button", { type: "submit", class: "primary", "data-action": "confirm" }, label);
  const form = h("form", { class: "confirm", id: "confirm-form" }, h("h2", {}, title), h("p", {}, body), status, h("p", { class: "actions" }, ok, cancel));
  const dialog = h("dialog", { class: "params-dialog" }, form);
  const close = () => {
    dialog.close();
    dialog.remove();
  };
  cancel.addEventListener("click", close);
  dialog.addEventListener("close", () => dialog.remove());
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    ok.disabled = true;
    try {
      await action();
      close();
    } catch (err) {
      status.hidden = false;
      status.textContent = err && err.code ? `${err.code}: ${err.message}` : String(err);
    } finally {
      ok.disabled = false;
    }
  });
  document.body.append(dialog);
  dialog.showModal();
  return dialog;
}
