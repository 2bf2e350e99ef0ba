// Admin pages: tenants with their quotas, the current fuel window and the
// run data they keep, and one tenant's usage (per day and per task) and
// storage against its quotas. Only the admin token may read
// /v1/tenants; the navigation shows these pages only to it.

import { get, session, signIn } from "./api.js";
import { h, s, replace, link, route, qs, badge, table, when, human, num, button } from "./dom.js";

const DAY = 24 * 3600 * 1000;

/** `12.3M` fuel. */
function fuel(n) {
  if (n === null || n === undefined) return "-";
  if (n >= 1e9) return `${(n / 1e9).toFixed(1)}G`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)}M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(1)}k`;
  return String(n);
}

/** Fuel used of the window's budget, as a bar (or the amount when unlimited). */
function windowBar(w) {
  if (!w) return "-";
  if (!w.fuel_budget) return h("span", {}, fuel(w.fuel_used), h("span", { class: "muted" }, " (no budget)"));
  const share = Math.min(1, w.fuel_used / w.fuel_budget);
  const svg = s("svg", { class: "meter", width: 120, height: 10, role: "img", "aria-label": "fuel used" },
    s("rect", { width: 120, height: 10, rx: 3, class: "meter-bg" }),
    s("rect", { width: Math.max(1, 120 * share), height: 10, rx: 3, class: share >= 1 ? "meter-full" : share > 0.8 ? "meter-high" : "meter-ok" }),
  );
  return h("span", { class: "window", title: `${w.fuel_used} of ${w.fuel_budget} until ${w.end}` }, svg, ` ${fuel(w.fuel_used)} / ${fuel(w.fuel_budget)}`);
}

/** `1.5 GiB` of `n` bytes. */
function bytes(n) {
  if (n === null || n === undefined) return "-";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) {
    n /= 1024;
    i += 1;
  }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`;
}

/** `used` of `quota` bytes as a bar (amber past 80 %, red when full). */
function bytesBar(used, quota, label) {
  if (!quota) return h("span", {}, bytes(used), h("span", { class: "muted" }, " (host limit)"));
  const share = Math.min(1, used / quota);
  const svg = s("svg", { class: "meter", width: 120, height: 10, role: "img", "aria-label": label },
    s("rect", { width: 120, height: 10, rx: 3, class: "meter-bg" }),
    s("rect", { width: Math.max(1, 120 * share), height: 10, rx: 3, class: share >= 1 ? "meter-full" : share > 0.8 ? "meter-high" : "meter-ok" }),
  );
  return h("span", { class: "window", title: `${used} of ${quota} bytes` }, svg, ` ${bytes(used)} / ${bytes(quota)}`);
}

/** What a tenant keeps against its storage quotas (`storage` of its usage report). */
function storageFacts(st) {
  if (!st) return null;
  return h(
    "dl",
    { class: "facts", id: "storage" },
    h("dt", {}, "run data"), h("dd", {}, bytesBar(st.run_bytes, st.run_bytes_quota, "run data kept")),
    h("dt", {}, "largest run input"), h("dd", {}, bytes(st.max_input_bytes)),
    h("dt", {}, "plugins"), h("dd", {}, bytesBar(st.plugin_bytes, st.plugin_bytes_quota, "plugin bytes kept"), ` · ${num(st.plugins)} of ${num(st.max_plugins)} versions`),
    h("dt", {}, "key-value data"), h("dd", {}, bytesBar(st.kv_bytes, st.kv_bytes_quota, "key-value bytes kept")),
  );
}

function quotaText(q) {
  if (!q) return "-";
  const parts = [];
  if (q.fuel_per_window) parts.push(`fuel ${fuel(q.fuel_per_window)}/${q.window}`);
  if (q.max_concurrent_attempts) parts.push(`${q.max_concurrent_attempts} at once`);
  if (q.max_queued_runs) parts.push(`${num(q.max_queued_runs)} queued`);
  if (q.trigger_rate_per_sec) parts.push(`${q.trigger_rate_per_sec} triggers/s`);
  if (q.weight && q.weight !== 1) parts.push(`weight ${q.weight}`);
  return parts.length ? parts.join(" · ") : "no limits";
}

/** Each quota field: what it limits, and how its value reads. */
const QUOTA_FIELDS = {
  fuel_per_window: ["fuel per window", (v) => h("span", { title: num(v) }, fuel(v))],
  window: ["window", String],
  out_of_fuel: ["once the window's fuel is used", String],
  wall_ms_per_window: ["wall time per window", human],
  max_fuel_per_attempt: ["fuel per attempt", (v) => h("span", { title: num(v) }, fuel(v))],
  max_memory_mb: ["memory per attempt", (v) => `${num(v)} MiB`],
  max_timeout: ["timeout per attempt", String],
  max_concurrent_attempts: ["attempts at once", num],
  max_priority: ["highest run priority", String],
  max_queued_runs: ["runs waiting to start", num],
  trigger_rate_per_sec: ["manual triggers per second", String],
  weight: ["share under contention (weight)", String],
  kv_bytes: ["key-value data", bytes],
  max_plugins: ["plugin versions", num],
  plugin_bytes: ["plugin bytes", bytes],
  run_bytes: ["run data", bytes],
  max_input_bytes: ["largest run input", bytes],
};

/** The quota as set, one limit a row: known fields first in a fixed order, then any other. */
function quotaTable(q) {
  const entries = Object.entries(q || {});
  const known = Object.keys(QUOTA_FIELDS).flatMap((k) => entries.filter(([key]) => key === k));
  const other = entries.filter(([key]) => !(key in QUOTA_FIELDS));
  const rows = [...known, ...other].map(([key, v]) => {
    const [what, show] = QUOTA_FIELDS[key] || [key, (x) => JSON.stringify(x)];
    return [what, v === null || v === undefined ? h("span", { class: "muted" }, "no tenant limit") : show(v), h("code", {}, key)];
  });
  return table(["limit", "value", "field"], rows, { id: "quota" });
}

/**
 * A link to `task` of `tenant`: the dashboard shows the tenant it acts as,
 * so following it switches to `tenant` first when that is another one.
 */
function taskLink(tenant, task) {
  const acting = session().tenant || "default";
  const a = h("a", { href: route("tasks", task), title: tenant === acting ? null : `opens it acting as tenant ${tenant}` }, task);
  if (tenant !== acting) {
    // Runs before the hash changes, so the task page is drawn as `tenant`.
    a.addEventListener("click", () => {
      const current = session();
      signIn(current.token, tenant === "default" ? "" : tenant, current.admin);
    });
  }
  return a;
}

/** Switches the admin's session to act on `tenant` and opens its tasks. */
function actAs(tenant) {
  const current = session();
  signIn(current.token, tenant === "default" ? "" : tenant, current.admin);
  location.hash = "#/tasks";
}

export async function tenantsPage(ctx) {
  const { tenants } = await get("/v1/tenants");
  const from = new Date(Date.now() - 7 * DAY).toISOString();
  const usage = await Promise.all(
    tenants.map((t) => get(`/v1/tenants/${encodeURIComponent(t.name)}/usage${qs({ from })}`).catch(() => null)),
  );
  const acting = session().tenant || "default";
  replace(
    ctx.main,
    h("h1", {}, "Tenants"),
    table(
      ["tenant", "state", "quota", "fuel this window", "run data", "attempts (7 days)", "fuel (7 days)", ""],
      tenants.map((t, i) => {
        const u = usage[i];
        return [
          link(route("tenants", t.name), t.name),
          t.disabled ? badge("disabled") : t.held ? h("span", { title: t.held }, badge("held")) : badge("active"),
          quotaText(t.quota),
          u ? windowBar(u.window) : "-",
          u && u.storage ? bytesBar(u.storage.run_bytes, u.storage.run_bytes_quota, "run data kept") : "-",
          u ? num(u.total.attempts) : "-",
          u ? fuel(u.total.fuel) : "-",
          t.name === acting
            ? h("span", { class: "muted" }, "acting as")
            : button("Act as", () => actAs(t.name), { "data-tenant": t.name }),
        ];
      }),
      { id: "tenants" },
    ),
  );
  ctx.later(() => ctx.refresh(), 10000);
}

/** Fuel per day as bars, one per UTC day of the range. */
function dailyChart(byDay, fromIso, toIso) {
  const days = [];
  for (let t = new Date(fromIso.slice(0, 10) + "T00:00:00Z").getTime(); t < new Date(toIso).getTime(); t += DAY) {
    days.push(new Date(t).toISOString().slice(0, 10));
  }
  const W = 520;
  const H = 140;
  const B = 22;
  const top = Math.max(1, ...days.map((d) => (byDay[d] ? byDay[d].fuel : 0)));
  const bw = (W - 10) / Math.max(1, days.length);
  const svg = s("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, width: W, height: H, role: "img", "aria-label": "fuel per day" });
  days.forEach((d, i) => {
    const u = byDay[d] || { fuel: 0, attempts: 0 };
    const bh = ((H - B - 20) * u.fuel) / top;
    svg.append(
      s("rect", { x: 5 + i * bw + 2, y: H - B - bh, width: bw - 4, height: bh, class: "bar" }, s("title", {}, `${d}: ${fuel(u.fuel)} fuel, ${u.attempts} attempts`)),
      s("text", { x: 5 + i * bw + bw / 2, y: H - 6, class: "axis", "text-anchor": "middle" }, d.slice(5)),
    );
  });
  svg.append(s("text", { x: 6, y: 14, class: "axis" }, `max ${fuel(top)} fuel/day`));
  return svg;
}

export async function tenantPage(ctx, name) {
  const enc = encodeURIComponent(name);
  const from = new Date(Date.now() - 14 * DAY).toISOString();
  const [t, u] = await Promise.all([get(`/v1/tenants/${enc}`), get(`/v1/tenants/${enc}/usage${qs({ from })}`)]);
  const outcomes = (o) => Object.entries(o || {}).map(([k, v]) => `${k} ${v}`).join(", ") || "-";
  replace(
    ctx.main,
    h("h1", {}, "Tenant ", h("span", { class: "name" }, t.name), " ", t.disabled ? badge("disabled") : t.held ? badge("held") : null),
    t.held ? h("p", { class: "error" }, t.held) : null,
    h(
      "dl",
      { class: "facts" },
      t.description ? [h("dt", {}, "description"), h("dd", {}, t.description)] : null,
      h("dt", {}, "quota"), h("dd", {}, quotaText(t.quota)),
      h("dt", {}, "fuel window"), h("dd", {}, windowBar(u.window), " ", h("span", { class: "muted" }, "until "), when(u.window.end)),
      h("dt", {}, "outbound HTTP"), h("dd", {}, (t.allow_http || []).length ? t.allow_http.join(", ") : "none"),
      h("dt", {}, "created"), h("dd", {}, when(t.created_at)),
    ),
    h("p", { class: "actions" }, button("Act as this tenant", () => actAs(t.name))),
    h("h2", {}, "Storage"),
    storageFacts(u.storage),
    h("h2", {}, "Usage, last 14 days"),
    h(
      "div",
      { class: "cards" },
      h("div", { class: "card" }, h("h3", {}, "Fuel per day (UTC)"), dailyChart(u.by_day || {}, u.from, u.to)),
      h(
        "div",
        { class: "card" },
        h("h3", {}, "Totals"),
        h("div", { class: "big" }, fuel(u.total.fuel)),
        h("p", { class: "muted" }, `fuel in ${num(u.total.attempts)} attempts, ${human(u.total.wall_ms)} of wall time`),
        h("p", {}, outcomes(u.total.outcomes)),
      ),
    ),
    table(
      ["task", "attempts", "fuel", "wall time", "outcomes"],
      Object.entries(u.by_task || {}).map(([task, x]) => [taskLink(t.name, task), num(x.attempts), fuel(x.fuel), human(x.wall_ms), outcomes(x.outcomes)]),
      { id: "usage-by-task" },
    ),
    h("h3", {}, "Quota as set"),
    quotaTable(t.quota),
  );
}
