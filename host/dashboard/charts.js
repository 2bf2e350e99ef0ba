// Hand-drawn SVG: the DAG, the duration histogram, the outcome strip and the
// attempt timeline. Small enough that a chart library would be the bigger
// thing to maintain; colours come from style.css classes (`st-STATE`).

import { s, h, human, route } from "./dom.js";

/** Node widths: grown to fit the longest label, up to a cap (then an ellipsis and a tooltip). */
const NODE_MIN_W = 170;
const NODE_MAX_W = 280;
/** Roughly the advance of one character of the node's name (12px, bold) and of its second line (11px). */
const NAME_CH = 7.6;
const SUB_CH = 6.5;
const NODE_H = 46;
const GAP_X = 70;
const GAP_Y = 22;
const PAD = 12;
const MAX_DRAWN = 300;

function clip(text, max) {
  const t = String(text ?? "");
  return t.length > max ? t.slice(0, max - 1) + "…" : t;
}

/** An SVG text of at most `max` characters; when cut, its full text is its tooltip. */
function label(text, max, attrs) {
  const t = String(text ?? "");
  const shown = clip(t, max);
  return s("text", { ...attrs, "data-full": t }, shown, shown === t ? null : s("title", {}, t));
}

/** What a step's node says under its name: its state in a run, and its plugin. */
const subText = (node) => (node.state ? `${node.state} · ${node.plugin}` : node.plugin);

/** What the dashed edges and the marks mean, under a DAG that has conditional steps or trigger rules. */
function dagLegend(hasWhen, hasRule) {
  return h(
    "p",
    { class: "legend muted" },
    hasWhen
      ? [
        s("svg", { width: 34, height: 10, "aria-hidden": "true" }, s("line", { x1: 0, y1: 5, x2: 34, y2: 5, class: "edge conditional" })),
        " conditional step: runs only if its ", h("code", {}, "when"), " holds (marked ", h("code", {}, "if"), ") · ",
      ]
      : null,
    hasRule ? ["a step marked with a trigger rule (e.g. ", h("code", {}, "all_done"), ") runs by that rule, not only when every upstream step succeeded · "] : null,
    "hover a step or an edge for its condition",
  );
}

/**
 * The DAG of `GET /v1/tasks/{name}/graph?format=json[&run=ID]`: one column per
 * layer, steps coloured by state, dashed edges into conditional steps.
 */
export function dag(graph) {
  const nodes = graph.nodes || [];
  // Past a few hundred steps a drawing is a wall of boxes (and slow); the run
  // page's step table and the task's definition still list every step.
  if (nodes.length > MAX_DRAWN) {
    return h("p", { class: "muted" }, `${nodes.length} steps: too many to draw here; \`ax graph ${graph.task} --format dot\` draws them with Graphviz.`);
  }
  const columns = [];
  for (const n of nodes) (columns[n.layer] ||= []).push(n);
  const want = Math.max(0, ...nodes.map((n) => Math.max(String(n.name).length * NAME_CH, subText(n).length * SUB_CH) + 24));
  const NODE_W = Math.round(Math.min(NODE_MAX_W, Math.max(NODE_MIN_W, want)));
  const nameMax = Math.floor((NODE_W - 24) / NAME_CH);
  const subMax = Math.floor((NODE_W - 24) / SUB_CH);
  const pos = new Map();
  const rows = Math.max(1, ...columns.map((c) => (c ? c.length : 0)));
  const height = PAD * 2 + rows * NODE_H + (rows - 1) * GAP_Y;
  columns.forEach((col, x) => {
    const top = (height - (col.length * NODE_H + (col.length - 1) * GAP_Y)) / 2;
    col.forEach((n, y) => {
      pos.set(n.name, { x: PAD + x * (NODE_W + GAP_X), y: top + y * (NODE_H + GAP_Y), node: n });
    });
  });
  const width = PAD * 2 + columns.length * NODE_W + Math.max(0, columns.length - 1) * GAP_X;
  const svg = s("svg", {
    class: "dag",
    viewBox: `0 0 ${width} ${height}`,
    width,
    height,
    role: "img",
    "aria-label": `DAG of ${graph.task}`,
  });
  svg.append(
    s(
      "defs",
      {},
      s(
        "marker",
        { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" },
        s("path", { d: "M0,0 L10,5 L0,10 z", class: "arrowhead" }),
      ),
    ),
  );
  for (const e of graph.edges || []) {
    const a = pos.get(e.from);
    const b = pos.get(e.to);
    if (!a || !b) continue;
    const x1 = a.x + NODE_W;
    const y1 = a.y + NODE_H / 2;
    const x2 = b.x;
    const y2 = b.y + NODE_H / 2;
    const mid = (x1 + x2) / 2;
    svg.append(
      s(
        "path",
        {
          d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}`,
          class: ["edge", b.node.when ? "conditional" : ""],
          "marker-end": "url(#arrow)",
        },
        s("title", {}, `${e.from} → ${e.to}${b.node.when ? ` (only when ${b.node.when})` : ""}`),
      ),
    );
  }
  for (const { x, y, node } of pos.values()) {
    const state = node.state === undefined ? "none" : node.state || "pending";
    const rule = node.trigger_rule && node.trigger_rule !== "all_success" ? node.trigger_rule : null;
    const title = [
      `${node.name} — ${node.plugin}`,
      node.state !== undefined ? `state: ${node.state ?? "not in this run"}` : null,
      node.when ? `when: ${node.when}` : null,
      rule ? `trigger rule: ${rule}` : null,
    ]
      .filter(Boolean)
      .join("\n");
    // The condition and the trigger rule are marked on the node too (a tooltip alone is hidden on a phone).
    const mark = [node.when ? "if" : null, rule].filter(Boolean).join(" · ");
    svg.append(
      s(
        "g",
        { class: ["node", "st-" + state], transform: `translate(${x},${y})`, "data-step": node.name },
        s("title", {}, title),
        s("rect", { width: NODE_W, height: NODE_H, rx: 6 }),
        label(node.name, mark ? nameMax - mark.length - 2 : nameMax, { x: 10, y: 19, class: "name" }),
        mark ? s("text", { x: NODE_W - 8, y: 17, class: "mark", "text-anchor": "end" }, mark, s("title", {}, [node.when ? `when: ${node.when}` : null, rule ? `trigger rule: ${rule}` : null].filter(Boolean).join("\n"))) : null,
        label(subText(node), subMax, { x: 10, y: 36, class: "sub" }),
      ),
    );
  }
  const hasWhen = nodes.some((n) => n.when);
  const hasRule = nodes.some((n) => n.trigger_rule && n.trigger_rule !== "all_success");
  return h("div", { class: "dag-box" }, h("div", { class: "scroll" }, svg), hasWhen || hasRule ? dagLegend(hasWhen, hasRule) : null);
}

/**
 * Histogram of run durations (ms): 16 bins up to the largest, p50 and p95
 * marked. `runs` are finished runs with a duration.
 */
export function histogram(durations) {
  const W = 520;
  const H = 150;
  const L = 40;
  const B = 24;
  if (!durations.length) return h("p", { class: "muted" }, "no finished runs yet");
  const sorted = [...durations].sort((a, b) => a - b);
  const q = (p) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
  const max = Math.max(sorted[sorted.length - 1], 1);
  const bins = new Array(16).fill(0);
  for (const d of sorted) bins[Math.min(15, Math.floor((d / max) * 16))]++;
  const top = Math.max(...bins);
  const bw = (W - L - 8) / bins.length;
  const svg = s("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": "run duration histogram" });
  bins.forEach((n, i) => {
    // The top 32 pixels hold the p50/p95 labels.
    const bh = top ? ((H - B - 32) * n) / top : 0;
    svg.append(
      s(
        "rect",
        { x: L + i * bw + 1, y: H - B - bh, width: bw - 2, height: bh, class: "bar" },
        s("title", {}, `${human((i * max) / 16)} – ${human(((i + 1) * max) / 16)}: ${n} runs`),
      ),
    );
  });
  [["p50", q(0.5)], ["p95", q(0.95)]].forEach(([label, v], i) => {
    const x = L + (v / max) * (W - L - 8);
    // Labels right of the middle hang to the left of their line, so none is cut.
    const right = x > (L + W) / 2;
    svg.append(s("line", { x1: x, x2: x, y1: 6, y2: H - B, class: "marker" }));
    svg.append(s("text", { x: right ? x - 3 : x + 3, y: 14 + i * 13, class: "axis", "text-anchor": right ? "end" : "start" }, `${label} ${human(v)}`));
  });
  svg.append(s("line", { x1: L, x2: W - 8, y1: H - B, y2: H - B, class: "axis-line" }));
  svg.append(s("text", { x: L, y: H - 6, class: "axis" }, "0"));
  svg.append(s("text", { x: W - 8, y: H - 6, class: "axis", "text-anchor": "end" }, human(max)));
  svg.append(s("text", { x: 4, y: H - B, class: "axis" }, "0"));
  svg.append(s("text", { x: 4, y: 40, class: "axis" }, String(top)));
  return svg;
}

/** One square per run, oldest left, coloured by status; each links to its run. */
export function outcomeStrip(runs) {
  const size = 10;
  const list = [...runs].reverse();
  const width = Math.max(size, list.length * (size + 2));
  // A viewBox, so a narrow card scales the strip down instead of cutting it.
  const svg = s("svg", { class: "strip", viewBox: `0 0 ${width} ${size}`, width, height: size, role: "img", "aria-label": "recent outcomes" });
  list.forEach((r, i) => {
    svg.append(
      s(
        "a",
        { href: route("runs", r.id) },
        s("rect", { x: i * (size + 2), y: 0, width: size, height: size, rx: 2, class: "st-" + r.status }, s("title", {}, `${r.id}: ${r.status}`)),
      ),
    );
  });
  return svg;
}

/**
 * The attempt timeline of one run: a row per attempt, from queued (when the
 * step entered `queued` for that attempt, grey) through started to finished
 * (coloured by outcome), then its retry backoff (amber) if one followed, on
 * one time axis from the run's creation.
 */
export function attemptTimeline(rows, t0, t1) {
  const W = 760;
  const L = 150;
  const R = 12;
  const ROW = 22;
  const H = 26 + rows.length * ROW;
  const total = Math.max(1, t1 - t0);
  const x = (t) => L + ((t - t0) / total) * (W - L - R);
  const svg = s("svg", { class: "timeline", viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": "attempt timeline" });
  for (let i = 0; i <= 4; i++) {
    const t = t0 + (total * i) / 4;
    svg.append(s("line", { x1: x(t), x2: x(t), y1: 14, y2: H, class: "grid" }));
    const label = total < 100 ? `${(t - t0).toFixed(1)}ms` : human(t - t0);
    svg.append(s("text", { x: x(t), y: 10, class: "axis", "text-anchor": i === 4 ? "end" : i ? "middle" : "start" }, "+" + label));
  }
  rows.forEach((r, i) => {
    const y = 20 + i * ROW;
    svg.append(s("text", { x: 4, y: y + 12, class: "label" }, clip(`${r.step} #${r.attempt}`, 22)));
    if (r.queued !== null && r.started !== null && r.started > r.queued) {
      svg.append(
        s("rect", { x: x(r.queued), y: y + 5, width: Math.max(1, x(r.started) - x(r.queued)), height: 6, class: "wait" }, s("title", {}, `queued ${human(r.started - r.queued)}`)),
      );
    }
    if (r.backoff) {
      const [from, to] = [r.backoff[0], r.backoff[1] ?? t1];
      svg.append(
        s("rect", { x: x(from), y: y + 5, width: Math.max(1, x(to) - x(from)), height: 6, class: "backoff" }, s("title", {}, `retry backoff ${human(to - from)}`)),
      );
    }
    if (r.started !== null) {
      const end = r.finished ?? t1;
      svg.append(
        s(
          "rect",
          { x: x(r.started), y: y + 1, width: Math.max(2, x(end) - x(r.started)), height: 14, rx: 2, class: "st-" + (r.outcome || "running") },
          s("title", {}, `${r.step} attempt ${r.attempt}: ${r.outcome || "running"} in ${human(end - r.started)}`),
        ),
      );
    }
  });
  return h("div", { class: "scroll" }, svg);
}
