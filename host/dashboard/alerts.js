// The alerts page (`#/alerts?status=pending|dead|delivered&cursor=`): the
// tenant's webhook alert outbox, newest first, from `GET /v1/alerts`. A dead
// alert can be retried (`POST /v1/alerts/{id}/retry`); pending ones show
// their next try and last error, and the page refreshes while any is pending.

import { get, post } from "./api.js";
import { h, replace, link, route, qs, badge, table, when, button } from "./dom.js";
import { flash } from "./pages.js";

const STATES = ["pending", "dead", "delivered"];

export async function alertsPage(ctx, params) {
  const status = STATES.includes(params.get("status")) ? params.get("status") : "";
  const cursor = params.get("cursor") || "";
  const { alerts, next_cursor } = await get(`/v1/alerts${qs({ status, cursor, limit: 50 })}`);
  const filter = (s, label) =>
    s === status ? h("strong", {}, label) : link(`#/alerts${qs({ status: s })}`, label);
  replace(
    ctx.main,
    h("h1", {}, "Alerts"),
    h(
      "p",
      {},
      filter("", "all"), " · ", filter("pending", "pending"), " · ",
      filter("dead", "dead"), " · ", filter("delivered", "delivered"),
    ),
    h(
      "p",
      { class: "muted" },
      "Webhook alerts are kept in the store until delivered (at least once, across restarts); a dead one gave up after its attempts and can be retried.",
    ),
    table(
      ["state", "kind", "run", "webhook", "attempts", "next try", "last error", "raised", ""],
      alerts.map((a) => [
        badge(a.status),
        a.kind || "-",
        a.run_id ? link(route("runs", a.run_id), h("code", {}, a.run_id)) : "-",
        h("span", { class: "clip", title: a.url }, a.url),
        String(a.attempts),
        a.status === "pending" ? when(a.next_try) : "-",
        h("span", { class: "clip", title: a.last_error || "" }, a.last_error || "-"),
        when(a.created_at),
        a.status === "dead"
          ? button("Retry", async () => {
            try {
              await post(`/v1/alerts/${encodeURIComponent(a.id)}/retry`);
              await ctx.refresh();
            } catch (e) {
              flash(ctx, e);
            }
          })
          : "",
      ]),
      { id: "alerts" },
    ),
    next_cursor ? h("p", {}, link(`#/alerts${qs({ status, cursor: next_cursor })}`, "older")) : "",
  );
  if (alerts.some((a) => a.status === "pending")) ctx.later(ctx.refresh, 2000);
}
