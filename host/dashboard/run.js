// One run: its DAG with step states, the attempt timeline (queued → started
// → finished with fuel, memory and outcome), the steps' outputs, and one
// merged timeline of state changes and log lines — the view the seed
// articles troubleshoot a run with. Refreshes every second while the run is
// active.

import { get, post } from "./api.js";
import { h, s, replace, link, route, badge, table, when, dayOf, human, span, bytes, num, jsonBlock, button, confirmDialog, failureOf, TERMINAL } from "./dom.js";
import { dag, attemptTimeline } from "./charts.js";
import { flash } from "./pages.js";

const ms = (iso) => (iso ? new Date(iso).getTime() : null);

/** Rows for the timeline chart and the attempts table. */
function attemptRows(run, events) {
  const rows = [];
  for (const step of run.steps || []) {
    const queuedAt = events.filter((e) => e.step === step.name && e.to === "queued").map((e) => ms(e.at));
    const backoffAt = events.filter((e) => e.step === step.name && e.to === "retry_wait").map((e) => ms(e.at));
    for (const a of step.attempts || []) {
      const started = ms(a.started_at);
      // The step's last entry into `queued` before this attempt started.
      const queued = queuedAt.filter((t) => t <= started).pop() ?? null;
      // A backoff after this attempt: from entering `retry_wait` to the next `queued`.
      const waitFrom = backoffAt.find((t) => t >= started) ?? null;
      const waitTo = waitFrom === null ? null : queuedAt.find((t) => t >= waitFrom) ?? null;
      rows.push({
        backoff: waitFrom === null ? null : [waitFrom, waitTo],
        step: step.name,
        plugin: step.plugin,
        attempt: a.number,
        queued,
        started,
        finished: ms(a.finished_at),
        outcome: a.outcome,
        a,
      });
    }
  }
  return rows.sort((x, y) => x.started - y.started);
}

/**
 * The attempt chart's legend: only what it draws (a queued bar where an
 * attempt waited, a backoff bar where a retry waited), each with its swatch.
 */
function attemptLegend(rows) {
  const swatch = (cls, height) => s("svg", { width: 18, height: 10, "aria-hidden": "true" }, s("rect", { x: 0, y: (10 - height) / 2, width: 18, height, rx: 2, class: cls }));
  const items = [
    rows.some((r) => r.queued !== null && r.started !== null && r.started > r.queued) ? ["queued", swatch("wait", 6), " queued"] : null,
    ["attempt", swatch("st-succeeded", 10), swatch("st-failed", 10), " the attempt, coloured by outcome"],
    rows.some((r) => r.backoff) ? ["backoff", swatch("backoff", 6), " retry backoff"] : null,
  ].filter(Boolean);
  return h("p", { class: "legend muted", id: "attempts-legend" }, items.map(([key, ...what], i) => [i ? " · " : "", h("span", { dataset: { item: key } }, what)]));
}

/** The attempts; its times are times of day (with milliseconds) on the run's day, which the caption gives. */
function attemptsTable(rows, day) {
  const at = (iso) => when(iso, { ms: true, day });
  return table(
    ["step", "#", "version", "outcome", "queued", "started", "finished", "waited", "ran", "fuel", "memory peak", "error"],
    rows.map((r) => [
      r.step,
      String(r.attempt),
      // The plugin version the attempt ran (what a range or tag resolved to when it started).
      r.a.plugin_version ? h("code", { title: `${r.plugin || ""} sha256:${r.a.plugin_digest || "?"}` }, r.a.plugin_version) : "-",
      badge(r.outcome || "running"),
      r.queued ? at(new Date(r.queued).toISOString()) : "-",
      at(r.a.started_at),
      at(r.a.finished_at),
      r.queued !== null ? human(r.started - r.queued) : "-",
      r.a.finished_at ? human(r.a.duration_ms) : "-",
      num(r.a.fuel_consumed),
      bytes(r.a.memory_peak_bytes),
      r.a.error ? h("span", { class: "clip", title: `${r.a.error_kind || ""} ${r.a.error}` }, r.a.error) : "-",
    ]),
    { id: "attempts" },
  );
}

/** A step's output, or why it ended: an error in red, but a skipped step's
 * reason (a false condition, an upstream skipped) is no error: muted text. */
function stepResult(st) {
  if (st.status === "skipped") return h("span", { class: "muted skip-reason" }, st.error ? `skipped: ${st.error}` : "skipped");
  // Cancelled is no failure either: amber, as its badge and its DAG node.
  if (st.status === "cancelled") return h("span", { class: "cancel-reason" }, st.error ? `cancelled: ${st.error}` : "cancelled");
  if (st.error) return h("pre", { class: "error-text" }, st.error);
  return st.output !== null && st.output !== undefined ? jsonBlock(st.output) : "-";
}

/** An event's reason, its dead letter's id (`… dead letter d0194…`: `d` and hex) a link to that dead letter. */
function reasonText(reason) {
  const m = /^(.*\bdead letter `?)(d[0-9a-f]{8,})(`?.*)$/s.exec(reason);
  if (!m) return reason;
  return [m[1], link("#/dead-letters" + `?all=1&id=${encodeURIComponent(m[2])}`, h("code", { class: "dead-letter" }, m[2])), m[3]];
}

/** State changes and log lines of every attempt, in time order. */
function mergedTimeline(run, events, logs) {
  const t0 = ms(run.created_at);
  const entries = events.map((e) => ({
    at: ms(e.at),
    who: e.step ? `${e.step}${e.attempt ? " #" + e.attempt : ""}` : "run",
    kind: "event",
    what: [e.from ? `${e.from} → ` : "", badge(e.to), e.reason ? [" ", reasonText(e.reason)] : "", e.actor ? h("span", { class: "muted" }, ` (${e.actor})`) : ""],
  }));
  const startOf = new Map();
  for (const s of run.steps || []) for (const a of s.attempts || []) startOf.set(`${s.name}#${a.number}`, ms(a.started_at));
  for (const a of logs.attempts || []) {
    const base = startOf.get(`${a.step}#${a.attempt}`);
    if (base === undefined) continue;
    for (const l of a.logs || []) {
      const fields = (l.fields || []).map((kv) => `${kv[0]}=${kv[1]}`).join(" ");
      entries.push({
        at: base + (l.at_ms || 0),
        who: `${a.step} #${a.attempt}`,
        kind: "log lvl-" + String(l.level).replace(/[^a-z]/g, ""),
        what: [h("span", { class: "level" }, l.level), " ", l.message, fields ? h("span", { class: "muted" }, " " + fields) : ""],
      });
    }
  }
  entries.sort((x, y) => x.at - y.at);
  return h(
    "ol",
    { class: "merged", id: "timeline" },
    entries.map((e) =>
      h("li", { class: e.kind }, h("span", { class: "t", title: new Date(e.at).toISOString() }, "+" + human(e.at - t0)), h("span", { class: "who" }, e.who), h("span", { class: "what" }, e.what)),
    ),
  );
}

/** What each attempt printed and logged, as text. */
function logsSection(logs) {
  const attempts = logs.attempts || [];
  if (!attempts.length) return h("p", { class: "muted" }, "no attempt has logged anything yet");
  return h(
    "div",
    { id: "logs" },
    attempts.map((a) =>
      h(
        "section",
        { class: "attempt-log" },
        h("h3", {}, `${a.step} · attempt ${a.attempt}`),
        (a.logs || []).length
          ? h("pre", { class: "log" }, a.logs.map((l) => `${String(l.at_ms).padStart(6)}ms ${String(l.level).padEnd(5)} ${l.message}${(l.fields || []).map((kv) => ` ${kv[0]}=${kv[1]}`).join("")}\n`).join(""))
          : null,
        a.stdout ? [h("h4", {}, "stdout"), h("pre", { class: "log" }, a.stdout)] : null,
        a.stderr ? [h("h4", {}, "stderr"), h("pre", { class: "log" }, a.stderr)] : null,
        (a.progress || []).length ? h("p", { class: "muted" }, "progress: " + a.progress.map((p) => JSON.stringify(p)).join(", ")) : null,
      ),
    ),
  );
}

export async function runPage(ctx, id) {
  const enc = encodeURIComponent(id);
  const run = await get(`/v1/runs/${enc}`);
  const [graph, logs, { events }] = await Promise.all([
    get(`/v1/tasks/${encodeURIComponent(run.task)}/graph?format=json&run=${enc}`).catch(() => null),
    get(`/v1/runs/${enc}/logs`),
    get(`/v1/runs/${enc}/events`),
  ]);
  const rows = attemptRows(run, events);
  const active = !TERMINAL.has(run.status);
  const t0 = ms(run.created_at);
  const t1 = Math.max(ms(run.finished_at) ?? Date.now(), ...rows.map((r) => r.finished ?? r.started ?? t0));
  const act = (what) => async () => {
    try {
      await post(`/v1/runs/${enc}/${what}`);
    } catch (e) {
      return flash(ctx, e);
    }
    await ctx.refresh();
  };
  const fail = failureOf(run);
  // Rerun from a step (it and everything downstream run again, in this run), after a confirmation naming both.
  const rerun = (step) => () =>
    confirmDialog(
      "Rerun from a step",
      ["Run step ", h("code", {}, step), " of run ", h("code", {}, run.id), " (task ", run.task, ") again, with every step downstream of it?"],
      `Rerun ${step}`,
      async () => {
        await post(`/v1/runs/${enc}/steps/${encodeURIComponent(step)}/rerun`);
        await ctx.refresh();
      },
    );
  replace(
    ctx.main,
    h("h1", {}, "Run ", h("code", {}, run.id), " ", h("span", { id: "run-status" }, badge(run.status))),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "task"), h("dd", {}, link(route("tasks", run.task), run.task)),
      h("dt", {}, "trigger"), h("dd", {}, `${run.trigger} · priority ${run.priority}`),
      h("dt", {}, "scheduled for"), h("dd", {}, when(run.scheduled_for)),
      h("dt", {}, "started"), h("dd", {}, when(run.started_at), run.started_at ? h("span", { class: "muted" }, ` (${human(span(run.scheduled_for, run.started_at))} after scheduled)`) : null),
      h("dt", {}, "finished"), h("dd", {}, when(run.finished_at), run.finished_at ? h("span", { class: "muted" }, ` (took ${human(span(run.started_at, run.finished_at))})`) : null),
      run.reason ? [h("dt", {}, "reason"), h("dd", {}, run.reason)] : null,
      // The failing step's error up front, with its class (retryable, fatal, a sandbox limit).
      fail
        ? [h("dt", {}, "error"), h("dd", { id: "run-error" }, fail.step ? [h("code", {}, fail.step), " "] : null, fail.cls ? h("span", { class: "error-class" }, fail.cls) : null, h("pre", { class: "error-text" }, fail.error))]
        : null,
      run.idempotency_key ? [h("dt", {}, "idempotency key"), h("dd", {}, h("code", {}, run.idempotency_key))] : null,
    ),
    h(
      "p",
      { class: "actions" },
      active ? button("Cancel", act("cancel")) : null,
      run.status === "failed" || run.status === "cancelled" ? button("Retry failed steps", act("retry"), { class: "primary" }) : null,
    ),
    h("h2", {}, "Steps"),
    graph ? dag(graph) : h("p", { class: "muted" }, "the task's graph is not available"),
    table(
      ["step", "plugin", "status", "attempts", "output / error", ""],
      (run.steps || []).map((st) => [
        st.name,
        st.plugin ? h("code", {}, st.plugin) : "-",
        badge(st.status),
        String((st.attempts || []).length),
        stepResult(st),
        !active && (st.status === "failed" || st.status === "dead")
          ? button("Rerun from this step", rerun(st.name), { "data-action": "rerun", "data-step": st.name })
          : null,
      ]),
      // On a phone each step is a card, its output or error the card's full width.
      { id: "steps", class: "stack" },
    ),
    h("h2", {}, "Attempts"),
    rows.length ? attemptTimeline(rows, t0, t1) : null,
    rows.length ? attemptLegend(rows) : null,
    rows.length ? h("p", { class: "muted caption", id: "attempts-caption" }, `queued, started and finished: times of day on ${dayOf(run.created_at)}, to the millisecond (a date where another day)`) : null,
    attemptsTable(rows, run.created_at),
    h("h2", {}, "Timeline: state changes and logs"),
    mergedTimeline(run, events, logs),
    h("h2", {}, "Logs"),
    logsSection(logs),
    h("details", {}, h("summary", {}, "input"), jsonBlock(run.input)),
  );
  if (active) ctx.later(() => ctx.refresh(), 1000);
}
