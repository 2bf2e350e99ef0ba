// The list pages: overview strip, tasks, one task, runs, plugins, dead
// letters, tenants. Each page is `async (ctx, params) => void`: it fills
// `ctx.main` and may call `ctx.later(fn, ms)` to refresh itself while it is
// still the page on screen.

import { get, getAll, post, pool, ApiError } from "./api.js";
import {
  h, replace, link, route, qs, badge, table, when, relative, human, span, bytes, num, button, confirmDialog, failureOf, TERMINAL,
} from "./dom.js";
import { dag, histogram, outcomeStrip } from "./charts.js";
import { openParamsForm } from "./params.js";

/** Whether "Run now" asks for the task's params first. */
const hasParams = (t) => Boolean(t.spec && t.spec.params && t.spec.params.length);

/** `cron 0 30 1 * * ? (Asia/Shanghai)`, `every 10s`, `after a, b (success)`, `manual`. */
export function triggerText(spec) {
  const t = (spec && spec.trigger) || {};
  if (t.cron) return `cron ${t.cron}${t.timezone ? ` (${t.timezone})` : ""}`;
  if (t.every) return `every ${t.every}`;
  if (t.at) return `at ${t.at}`;
  if (t.delay) return `delay ${t.delay}`;
  if (t.after && t.after.length) return `after ${t.after.join(", ")} (${t.on || "success"})`;
  return "manual";
}

function errorBox(e) {
  return h("p", { class: "error", role: "alert" }, e instanceof ApiError ? `${e.code}: ${e.message}` : String(e));
}

/** Shows a failed action above the page without leaving it. */
export function flash(ctx, e) {
  const box = errorBox(e);
  ctx.main.prepend(box);
  setTimeout(() => box.remove(), 8000);
}

function durationOf(r) {
  return span(r.started_at, r.finished_at);
}

/** Success rate of finished runs, as `{ok, done, rate}`. */
export function successRate(runs) {
  const done = runs.filter((r) => TERMINAL.has(r.status) && r.status !== "cancelled");
  const ok = done.filter((r) => r.status === "succeeded").length;
  return { ok, done: done.length, rate: done.length ? ok / done.length : null };
}

function pct(rate) {
  return rate === null ? "-" : `${(rate * 100).toFixed(1)}%`;
}

function stat(label, value, cls, title) {
  return h("div", { class: ["stat", cls], title }, h("div", { class: "value" }, value), h("div", { class: "label" }, label));
}

/** Readiness and the store's kind, from `/readyz` (`null`: not ready); on PostgreSQL the pool's use. */
function storeStat(store) {
  if (!store) return stat("store", "not ready", "bad");
  const pool = store.pool;
  const label = pool ? `store: ${store.kind}, ${pool.in_use} of ${pool.max} connections in use` : `store: ${store.kind || "?"}`;
  const title = pool
    ? `${pool.open} connections open, ${pool.connection_errors} connection errors since start, ${pool.calls} calls` +
      (pool.mean_call_ms === null ? "" : `, mean ${pool.mean_call_ms.toFixed(2)} ms`)
    : undefined;
  return stat(label, "ready", pool && pool.connection_errors ? "" : "good", title);
}

/** Below this share of succeeded runs the success rate shows red. */
const SUCCESS_TARGET = 0.95;

/**
 * The four signals the seed articles run a scheduler by: backlog, running
 * work, success rate, start lateness (scheduled → started, p95 over recent
 * scheduled runs); plus readiness (with the store's kind and, on
 * PostgreSQL, its pool's use) and open dead letters.
 */
async function overview(recentRuns) {
  const [store, queued, running, dead] = await Promise.all([
    fetch("/readyz", { cache: "no-store" }).then(
      async (r) => (r.ok ? (await r.json()).store || {} : null),
      () => null,
    ),
    get("/v1/runs?status=queued&limit=1000"),
    get("/v1/runs?status=running&limit=1000"),
    get("/v1/dead-letters"),
  ]);
  const runs = recentRuns.slice(0, 200);
  const sr = successRate(runs);
  const late = runs
    .filter((r) => r.trigger !== "manual" && r.started_at)
    .map((r) => span(r.scheduled_for, r.started_at))
    .sort((a, b) => a - b);
  const p95 = late.length ? late[Math.min(late.length - 1, Math.floor(late.length * 0.95))] : null;
  const count = (v) => (v.next_cursor ? `${v.runs.length}+` : String(v.runs.length));
  const openDead = (dead.dead_letters || []).length;
  return h(
    "section",
    { class: "overview", "aria-label": "health" },
    storeStat(store),
    stat("queued", count(queued)),
    stat("running", count(running)),
    stat(
      `success (last ${sr.done}; red under ${SUCCESS_TARGET * 100}%)`,
      pct(sr.rate),
      sr.rate !== null && sr.rate < SUCCESS_TARGET ? "bad" : "good",
      `${sr.ok} of the last ${sr.done} finished runs succeeded (cancelled ones not counted); green at ${SUCCESS_TARGET * 100}% or more, red under it`,
    ),
    stat("start lateness p95", p95 === null ? "-" : human(Math.max(0, p95)), p95 !== null && p95 > 5000 ? "bad" : ""),
    stat("open dead letters", link("#/dead-letters", String(openDead)), openDead ? "bad" : ""),
  );
}

/** How many runs the task list reads in one call for the strips and the success rate. */
const RECENT_RUNS = 500;
/** Runs in a task's strip of recent outcomes. */
const STRIP_RUNS = 10;
/** Tasks absent from those runs whose last run is asked for one by one (six at a time); past this, the cell says so. */
const LOOKUPS = 50;

/** The task list's name filter, from `#/tasks?q=` (read at each draw, so a refresh keeps it). */
const taskQuery = () => new URLSearchParams(location.hash.split("?")[1] || "").get("q") || "";

/** Hides the task rows whose name does not contain `q` (case-insensitive). */
function filterTasks(main, q) {
  const needle = q.trim().toLowerCase();
  let shown = 0;
  for (const tr of main.querySelectorAll("#tasks tbody tr")) {
    const name = tr.querySelector("[data-name]")?.dataset.name;
    if (name === undefined) continue;
    tr.hidden = Boolean(needle) && !name.toLowerCase().includes(needle);
    if (!tr.hidden) shown++;
  }
  const none = main.querySelector("#no-match");
  if (none) none.hidden = !needle || shown > 0;
}

export async function tasksPage(ctx) {
  // One call for the recent runs of every task: the strips, each task's last
  // run and the health strip's success rate all come from it.
  const [tasks, recent] = await Promise.all([getAll("/v1/tasks", "tasks"), get(`/v1/runs?limit=${RECENT_RUNS}`)]);
  const recentRuns = recent.runs || [];
  const strip = await overview(recentRuns);
  const byTask = new Map();
  for (const r of recentRuns) {
    const list = byTask.get(r.task) || [];
    if (list.length < STRIP_RUNS) list.push(r);
    byTask.set(r.task, list);
  }
  // A task absent from those runs: its last run asked for on its own, for the first LOOKUPS such tasks.
  const missing = tasks.filter((t) => !byTask.has(t.name)).slice(0, LOOKUPS);
  const found = await pool(missing, 6, (t) => get(`/v1/runs${qs({ task: t.name, limit: 1 })}`).then((v) => v.runs || []));
  missing.forEach((t, i) => byTask.set(t.name, found[i]));
  const rows = tasks.map((t) => {
    const runs = byTask.get(t.name);
    const r = runs ? runs[0] || null : null;
    const act = async (what) => {
      try {
        if (what === "run" && hasParams(t)) return openParamsForm(t, () => ctx.refresh());
        if (what === "run") await post(`/v1/tasks/${encodeURIComponent(t.name)}/runs`, {});
        else await post(`/v1/tasks/${encodeURIComponent(t.name)}/${what}`);
      } catch (e) {
        return flash(ctx, e);
      }
      await ctx.refresh();
    };
    return [
      link(route("tasks", t.name), h("span", { dataset: { name: t.name } }, t.name)),
      h("code", {}, triggerText(t.spec)),
      t.paused ? badge("paused") : t.next_fire ? h("span", { title: t.next_fire }, relative(t.next_fire)) : "-",
      r
        ? h("span", { class: "last", dataset: { task: t.name } }, link(route("runs", r.id), badge(r.status)), " ", relative(r.created_at), r.reason ? h("span", { class: "muted clip", title: r.reason }, " · " + r.reason) : null)
        : runs
          ? h("span", { class: "muted no-runs" }, "no runs yet")
          : h("span", { class: "muted" }, link(route("runs") + qs({ task: t.name }), `not in the last ${RECENT_RUNS} runs`)),
      // Its last runs, oldest left, one square each, a link to the run.
      runs && runs.length ? h("span", { class: "recent", dataset: { task: t.name } }, outcomeStrip(runs)) : "-",
      h(
        "span",
        { class: "actions" },
        button("Run now", () => act("run"), { class: "primary", "data-action": "run", "data-task": t.name }),
        t.paused
          ? button("Resume", () => act("resume"), { "data-action": "resume", "data-task": t.name })
          : button("Pause", () => act("pause"), { "data-action": "pause", "data-task": t.name }),
      ),
    ];
  });
  // The search box keeps its text and focus across the page's refreshes; its text lives in the URL.
  const hadFocus = document.activeElement && document.activeElement.id === "task-search";
  const search = h("input", { type: "search", id: "task-search", placeholder: "filter by name", "aria-label": "filter tasks by name", value: taskQuery() });
  search.addEventListener("input", () => {
    history.replaceState(null, "", "#/tasks" + qs({ q: search.value }));
    filterTasks(ctx.main, search.value);
  });
  replace(
    ctx.main,
    strip,
    h("div", { class: "title-row" }, h("h1", {}, "Tasks"), h("form", { class: "filters", role: "search", onsubmit: (e) => e.preventDefault() }, search)),
    // On a phone each task is a card, so Run now and Pause stay on screen.
    table(["task", "trigger", "next fire", "last run", `last ${STRIP_RUNS}`, ""], rows, { id: "tasks", class: "stack" }),
    h("p", { class: "muted", id: "no-match", hidden: true }, "no task's name contains that"),
  );
  filterTasks(ctx.main, search.value);
  if (hadFocus) {
    search.focus();
    search.setSelectionRange(search.value.length, search.value.length);
  }
  // Watch runs in flight (a "Run now" just clicked, a cron firing).
  const active = [...byTask.values()].some((runs) => runs[0] && !TERMINAL.has(runs[0].status));
  ctx.later(() => ctx.refresh(), active ? 1000 : 5000);
}

export async function taskPage(ctx, name) {
  const enc = encodeURIComponent(name);
  const [task, graph, next, recent] = await Promise.all([
    get(`/v1/tasks/${enc}`),
    get(`/v1/tasks/${enc}/graph?format=json`),
    get(`/v1/tasks/${enc}/next?count=5`),
    get(`/v1/runs${qs({ task: name, limit: 200 })}`),
  ]);
  const runs = recent.runs || [];
  const sr = successRate(runs);
  const durations = runs.filter((r) => r.status === "succeeded" || r.status === "failed").map(durationOf).filter((d) => d !== null);
  replace(
    ctx.main,
    h("h1", {}, "Task ", h("span", { class: "name" }, task.name), " ", task.paused ? badge("paused") : null),
    h(
      "p",
      { class: "actions" },
      button("Run now", async () => {
        const open = (run) => {
          location.hash = route("runs", run.id);
        };
        if (hasParams(task)) return openParamsForm(task, open);
        try {
          const run = await post(`/v1/tasks/${enc}/runs`, {});
          location.hash = route("runs", run.id);
        } catch (e) {
          flash(ctx, e);
        }
      }, { class: "primary", "data-action": "run", "data-task": task.name }),
      button(task.paused ? "Resume" : "Pause", async () => {
        try {
          await post(`/v1/tasks/${enc}/${task.paused ? "resume" : "pause"}`);
        } catch (e) {
          flash(ctx, e);
        }
        await ctx.refresh();
      }),
      link(`#/runs${qs({ task: name })}`, "all runs →"),
    ),
    h(
      "dl",
      { class: "facts" },
      h("dt", {}, "trigger"), h("dd", {}, h("code", {}, triggerText(task.spec))),
      h("dt", {}, "version"), h("dd", {}, String(task.version)),
      hasParams(task) ? [h("dt", {}, "params"), h("dd", {}, h("ul", { class: "plain" }, task.spec.params.map((p) => h("li", {}, h("code", {}, p.name), ` ${p.type}`, p.default !== undefined ? ` = ${JSON.stringify(p.default)}` : " (required)"))))] : null,
      h("dt", {}, "updated"), h("dd", {}, when(task.updated_at)),
      h("dt", {}, "next fires"), h("dd", {}, (next.next || []).length ? h("ul", { class: "plain" }, next.next.map((t) => h("li", {}, when(t), " ", h("span", { class: "muted" }, relative(t))))) : "-"),
      task.spec.description ? [h("dt", {}, "description"), h("dd", {}, task.spec.description)] : null,
    ),
    h("h2", {}, "Steps"),
    dag(graph),
    h("h2", {}, `Recent runs (${runs.length})`),
    h(
      "div",
      { class: "cards" },
      h("div", { class: "card" }, h("h3", {}, "Success rate"), h("div", { class: "big" }, pct(sr.rate)), h("p", { class: "muted" }, `${sr.ok} of ${sr.done} finished runs succeeded`), outcomeStrip(runs.slice(0, 50))),
      h("div", { class: "card" }, h("h3", {}, "Duration (succeeded and failed runs)"), histogram(durations)),
    ),
    runsTable(runs.slice(0, 20)),
    h("h2", {}, "Definition"),
    h("pre", { class: "source" }, task.source || JSON.stringify(task.spec, null, 2)),
  );
}

/** A failed run's error in a line: its step, the error's class, the error's first line (all of it in the tooltip). */
function shortError(r) {
  const f = failureOf(r);
  if (!f) return null;
  const first = String(f.error || "").split("\n")[0];
  const text = `${f.step ? f.step + ": " : ""}${first.length > 80 ? first.slice(0, 79) + "…" : first}`;
  return h("span", { class: "run-error", title: [f.step, f.cls, f.error].filter(Boolean).join(" · ") }, f.cls ? h("span", { class: "error-class" }, f.cls) : null, " ", text);
}

function runsTable(runs) {
  return table(
    ["run", "task", "status", "trigger", "scheduled for", "started", "duration"],
    runs.map((r) => [
      link(route("runs", r.id), h("code", {}, r.id)),
      link(route("tasks", r.task), r.task),
      // A failed run's error; else why it still waits (a tenant's quota, a paused pool).
      r.status === "failed" && failureOf(r)
        ? h("span", {}, badge(r.status), " ", shortError(r))
        : r.reason ? h("span", { title: r.reason }, badge(r.status), " ", h("span", { class: "muted clip" }, r.reason)) : badge(r.status),
      r.trigger,
      when(r.scheduled_for),
      when(r.started_at),
      human(durationOf(r)),
    ]),
    { class: "runs" },
    "no runs yet",
  );
}

const RUN_STATUSES = ["", "queued", "running", "succeeded", "failed", "cancelled"];

/** The time ranges of the Runs page: `since=` value, label, milliseconds. */
const RANGES = [["", "any time", 0], ["1h", "last 1 h", 3600e3], ["24h", "last 24 h", 24 * 3600e3], ["7d", "last 7 d", 7 * 24 * 3600e3]];

export async function runsPage(ctx, params) {
  // `limit` stays in the URL with the filters, so paging keeps the page size.
  const filter = { task: params.get("task") || "", status: params.get("status") || "", since: params.get("since") || "", limit: params.get("limit") || "" };
  const cursor = params.get("cursor") || "";
  // The range is the server's `since=` (runs created at or after it, unix
  // ms): exact on every page. A relative range ("24h") is pinned to an
  // instant on the page it is chosen on (`from`), which the pager carries,
  // so "older →" continues the same range rather than one that moved on.
  const range = RANGES.find(([v]) => v === filter.since) || RANGES[0];
  const pinned = Number(params.get("from"));
  const from = range[2] ? (cursor && Number.isFinite(pinned) && pinned > 0 ? pinned : Math.round(Date.now() - range[2])) : null;
  const [page, tasks] = await Promise.all([
    get(`/v1/runs${qs({ task: filter.task, status: filter.status, since: from === null ? "" : String(from), cursor, limit: filter.limit || 50 })}`),
    getAll("/v1/tasks", "tasks"),
  ]);
  const runs = page.runs || [];
  const more = Boolean(page.next_cursor);
  const taskSelect = h("select", { name: "task", "aria-label": "task" }, h("option", { value: "" }, "all tasks"), tasks.map((t) => h("option", { value: t.name, selected: t.name === filter.task }, t.name)));
  const statusSelect = h("select", { name: "status", "aria-label": "status" }, RUN_STATUSES.map((x) => h("option", { value: x, selected: x === filter.status }, x || "any status")));
  const sinceSelect = h("select", { name: "since", "aria-label": "time range" }, RANGES.map(([v, label]) => h("option", { value: v, selected: v === range[0] }, label)));
  const apply = () => {
    location.hash = "#/runs" + qs({ task: taskSelect.value, status: statusSelect.value, since: sinceSelect.value, limit: filter.limit });
  };
  taskSelect.addEventListener("change", apply);
  statusSelect.addEventListener("change", apply);
  sinceSelect.addEventListener("change", apply);
  // Open a run by its id (checked first, so a typo says so here).
  // The page redraws every 3 s: what was typed, and the focus, stay.
  const typed = document.getElementById("run-search");
  const refocus = Boolean(typed) && document.activeElement === typed;
  const idInput = h("input", { type: "search", id: "run-search", name: "run", placeholder: "run id", "aria-label": "run id", autocomplete: "off", value: typed ? typed.value : null });
  const idStatus = h("span", { class: "error-inline", role: "alert", hidden: true });
  const open = async (e) => {
    e.preventDefault();
    const id = idInput.value.trim();
    if (!id) return;
    try {
      await get(`/v1/runs/${encodeURIComponent(id)}`);
    } catch (err) {
      idStatus.hidden = false;
      idStatus.textContent = err instanceof ApiError && err.status === 404 ? `no run ${id}` : String(err.message || err);
      return;
    }
    location.hash = route("runs", id);
  };
  replace(
    ctx.main,
    h("h1", {}, "Runs"),
    h(
      "div",
      { class: "filter-bar" },
      h("form", { class: "filters", onsubmit: (e) => e.preventDefault() }, taskSelect, statusSelect, sinceSelect),
      h("p", { class: "quick" }, link("#/runs" + qs({ status: "failed", since: "24h" }), "failed in the last 24 h")),
      h("form", { class: "filters", id: "run-open", role: "search", onsubmit: open }, idInput, h("button", { type: "submit" }, "Open"), idStatus),
    ),
    bulkRetry(ctx, runs, [filter.task && `task ${filter.task}`, filter.status && `status ${filter.status}`, range[2] ? range[1] : ""].filter(Boolean)),
    runsTable(runs),
    h(
      "p",
      { class: "pager" },
      cursor ? link("#/runs" + qs(filter), "← newest") : null,
      more ? link("#/runs" + qs({ ...filter, from: from === null ? "" : String(from), cursor: page.next_cursor }), "older →") : null,
    ),
  );
  if (refocus) idInput.focus();
  // The first page follows new runs; older pages stay put.
  if (!cursor) ctx.later(() => ctx.refresh(), 3000);
}

/**
 * **Retry N failed**: the failed runs of the page shown (its filters, its
 * page: never more than its `limit`, at most 1000), each retried with
 * `POST /v1/runs/{id}/retry` after a confirmation that names how many, their
 * tasks and their ids. The set is fixed when the dialog opens: runs that
 * fail later, or a redraw of the page behind it, do not join it. A run that
 * is refused (retried elsewhere meanwhile: `409`; a full queue: `429`) is
 * named in the dialog, and confirming again retries only those left.
 */
function bulkRetry(ctx, runs, filters) {
  const failed = runs.filter((r) => r.status === "failed");
  if (!failed.length) return null;
  const label = `Retry ${failed.length} failed`;
  const open = () => {
    let left = failed.slice();
    const tasks = [...new Set(left.map((r) => r.task))];
    const body = [
      `Retry ${left.length} failed run${left.length === 1 ? "" : "s"} of ${tasks.length === 1 ? "task" : "tasks"} `,
      tasks.map((t, i) => [i ? ", " : "", h("code", {}, t)]),
      filters.length ? ` (the runs shown: ${filters.join(", ")})` : " (the runs shown)",
      "? Each run's unsuccessful steps run again; succeeded steps keep their outputs.",
      h("ul", { class: "bulk-runs", id: "bulk-runs" }, left.map((r) => h("li", { dataset: { run: r.id } }, h("code", {}, r.id), " ", r.task))),
    ];
    confirmDialog("Retry failed runs", body, `Retry ${left.length}`, async () => {
      // Four at a time: a page is at most 1000 runs, and each retry is one small write.
      const refused = (await pool(left, 4, async (r) => {
        try {
          await post(`/v1/runs/${encodeURIComponent(r.id)}/retry`);
          return null;
        } catch (e) {
          return { run: r, why: e && e.code ? `${e.code}: ${e.message}` : String(e) };
        }
      })).filter(Boolean);
      const done = left.length - refused.length;
      left = refused.map((x) => x.run);
      await ctx.refresh();
      if (refused.length) {
        throw new Error(`retried ${done}; not retried: ${refused.map((x) => `${x.run.id} (${x.why})`).join("; ")}`);
      }
    });
  };
  return h("p", { class: "bulk" }, button(label, open, { id: "bulk-retry", "data-count": String(failed.length) }));
}

/** The plugin references (`name@1.0.0`, `name@^1`, `name@stable`) of a task's definition: its own and its steps'. */
function pluginRefs(spec) {
  return [spec && spec.plugin, ...((spec && spec.steps) || []).map((st) => st.plugin)].filter((x) => typeof x === "string");
}

export async function pluginsPage(ctx) {
  const [{ plugins }, tasks] = await Promise.all([get("/v1/plugins"), getAll("/v1/tasks", "tasks")]);
  // Which tasks name each plugin (any version, range or tag of it), with the reference they use.
  const users = new Map();
  for (const t of tasks) {
    for (const ref of new Set(pluginRefs(t.spec))) {
      const name = ref.split("@")[0];
      const list = users.get(name) || [];
      if (!list.some((u) => u.task === t.name)) list.push({ task: t.name, ref });
      users.set(name, list);
    }
  }
  const usedBy = (name) => {
    const list = users.get(name) || [];
    if (!list.length) return h("span", { class: "muted" }, "no task");
    return h("span", { class: "used-by", dataset: { plugin: name } }, list.map((u, i) => [i ? ", " : "", h("a", { href: route("tasks", u.task), title: u.ref }, u.task)]));
  };
  replace(
    ctx.main,
    h("h1", {}, "Plugins"),
    table(
      ["name", "version", "tags", "digest (sha256)", "size", "uploaded", "used by (tasks naming it)"],
      plugins.map((p) => [p.name, p.version, (p.tags || []).length ? (p.tags || []).join(", ") : "-", h("code", { title: p.digest }, String(p.digest).slice(0, 16) + "…"), bytes(p.size), when(p.created_at), usedBy(p.name)]),
      { id: "plugins" },
    ),
  );
}

export async function deadLettersPage(ctx, params) {
  // `id`: the one a run's timeline links to, marked (resolved ones included, so it is there).
  const focus = params.get("id") || "";
  const all = params.get("all") === "1" || Boolean(focus);
  const { dead_letters } = await get(`/v1/dead-letters?open=${all ? "false" : "true"}`);
  replace(
    ctx.main,
    h("h1", {}, all ? "Dead letters (all)" : "Open dead letters"),
    h("p", {}, link(all ? "#/dead-letters" : "#/dead-letters?all=1", all ? "only open ones" : "include resolved ones")),
    table(
      ["task", "run", "step", "attempts", "outcome", "error", "recorded", ""],
      dead_letters.map((d) => [
        h("span", { dataset: { deadLetter: d.id }, title: d.id }, link(route("tasks", d.task), d.task)),
        link(route("runs", d.run_id), h("code", {}, d.run_id)),
        d.step,
        String(d.attempts),
        badge(d.outcome),
        h("span", { class: "clip", title: d.error || "" }, d.error || "-"),
        when(d.created_at),
        d.resolution
          ? h("span", { class: "muted" }, `resolved: ${d.resolution}`)
          : button("Requeue", async () => {
            try {
              const run = await post(`/v1/dead-letters/${encodeURIComponent(d.id)}/requeue`);
              location.hash = route("runs", run.id);
            } catch (e) {
              flash(ctx, e);
            }
          }),
      ]),
      { id: "dead-letters" },
    ),
  );
  const row = focus && [...ctx.main.querySelectorAll("[data-dead-letter]")].find((e) => e.dataset.deadLetter === focus);
  if (row) {
    row.closest("tr").classList.add("focus");
    row.scrollIntoView({ block: "center" });
  }
}

export { errorBox, num };
