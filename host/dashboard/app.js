// The dashboard's entry: sign-in, navigation and a hash router
// (`#/tasks`, `#/tasks/NAME`, `#/runs?task=&status=&cursor=`, `#/runs/ID`,
// `#/plugins`, `#/dead-letters`, `#/alerts?status=`, `#/tenants[/NAME]` for
// the admin). The
// server serves one page;
// every route is drawn here from /v1 answers.

import { session, signIn, signOut, get, ApiError, tenantTokenId } from "./api.js";
import { h, replace, zoneCaption } from "./dom.js";
import { tasksPage, taskPage, runsPage, pluginsPage, deadLettersPage, errorBox } from "./pages.js";
import { runPage } from "./run.js";
import { alertsPage } from "./alerts.js";
import { tenantsPage, tenantPage } from "./tenants.js";

const main = document.getElementById("main");
const nav = document.getElementById("nav");
const who = document.getElementById("who");

/** Bumped on every navigation: a refresh timer of an old page finds it changed and stops. */
let generation = 0;

const ROUTES = [
  [/^\/?$/, () => tasksPage],
  [/^\/tasks$/, () => tasksPage],
  [/^\/tasks\/([^/]+)$/, (m) => (ctx) => taskPage(ctx, decodeURIComponent(m[1]))],
  [/^\/runs$/, () => runsPage],
  [/^\/runs\/([^/]+)$/, (m) => (ctx) => runPage(ctx, decodeURIComponent(m[1]))],
  [/^\/plugins$/, () => pluginsPage],
  [/^\/dead-letters$/, () => deadLettersPage],
  [/^\/alerts$/, () => alertsPage],
  [/^\/tenants$/, () => tenantsPage],
  [/^\/tenants\/([^/]+)$/, (m) => (ctx) => tenantPage(ctx, decodeURIComponent(m[1]))],
];

/** Whether the token may read /v1/tenants (admin); tenant tokens are not asked. */
async function probeAdmin(token) {
  if (tenantTokenId(token)) return false;
  try {
    await get("/v1/tenants");
    return true;
  } catch {
    return false;
  }
}

/**
 * Closes and removes every dialog: a dialog belongs to the page it was opened
 * from (the "Run now" form names and runs that page's task), so leaving the
 * page, by a link or Back, must not leave it floating over the next one.
 */
function closeDialogs() {
  for (const d of document.querySelectorAll("dialog")) {
    if (d.open) d.close();
    d.remove();
  }
}

function signInPage(message) {
  closeDialogs();
  nav.hidden = true;
  who.replaceChildren();
  const token = h("input", { type: "password", name: "token", id: "token", autocomplete: "current-password", required: true });
  const tenant = h("input", { type: "text", name: "tenant", id: "tenant", placeholder: "default", pattern: "[A-Za-z0-9][A-Za-z0-9_.\\-]{0,63}" });
  const status = h("p", { class: "error", role: "alert", hidden: !message }, message || "");
  const form = h(
    "form",
    { class: "signin", id: "signin" },
    h("h1", {}, "Sign in to ax"),
    // A username field, hidden: password managers and the accessibility tree expect one.
    h("input", { type: "text", name: "username", autocomplete: "username", value: "ax", hidden: true, "aria-hidden": "true" }),
    h("label", { for: "token" }, "Token"),
    token,
    h("label", { for: "tenant" }, "Tenant (admin token only; empty for ", h("code", {}, "default"), ")"),
    tenant,
    h("button", { type: "submit", class: "primary" }, "Sign in"),
    status,
    h("p", { class: "muted" }, "The token is kept in this tab's session storage only and sent as a bearer token to the /v1 API."),
  );
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    signIn(token.value.trim(), tenant.value.trim());
    try {
      await get("/v1/tasks?limit=1");
      signIn(token.value.trim(), tenant.value.trim(), await probeAdmin(token.value.trim()));
    } catch (err) {
      signOut();
      status.hidden = false;
      status.textContent = err instanceof ApiError ? `${err.code}: ${err.message}` : String(err);
      return;
    }
    if (location.hash === "" || location.hash === "#/signin") location.hash = "#/tasks";
    else render();
  });
  replace(main, form);
  token.focus();
}

function navigation(path) {
  nav.hidden = false;
  for (const a of nav.querySelectorAll("a")) {
    const target = a.getAttribute("href").slice(1);
    a.classList.toggle("current", path === target || path.startsWith(target + "/") || (target === "/tasks" && path === "/"));
  }
  const s = session();
  document.getElementById("nav-tenants").hidden = !s.admin;
  const id = tenantTokenId(s.token);
  const label = id ? `tenant token ${id}` : `admin · tenant ${s.tenant || "default"}`;
  // The zone every time on the page is shown in, said once here rather than in every cell.
  const zone = h("span", { id: "zone", title: "every time shown is in your browser's time zone; hover a time for its exact UTC instant" }, zoneCaption());
  replace(who, zone, " · ", label, " ", h("button", { type: "button", id: "signout", onclick: () => { signOut(); location.hash = "#/signin"; } }, "Sign out"));
}

async function render() {
  const gen = ++generation;
  const hash = location.hash.slice(1) || "/";
  const [path, query] = hash.split("?", 2);
  if (!session() || path === "/signin") {
    if (path !== "/signin" && session() === null && hash !== "/") location.hash = "#/signin";
    return signInPage();
  }
  // A session from before the admin check: ask once.
  if (session().admin === null || session().admin === undefined) {
    const s = session();
    signIn(s.token, s.tenant, await probeAdmin(s.token));
  }
  navigation(path);
  const match = ROUTES.map(([re, page]) => [path.match(re), page]).find(([m]) => m);
  if (!match) {
    replace(main, h("h1", {}, "Not found"), h("p", {}, "No page ", h("code", {}, path)));
    return;
  }
  const page = match[1](match[0]);
  // One pending refresh per page: a draw replaces the timer of the previous one.
  let timer = null;
  const ctx = {
    main,
    alive: () => gen === generation,
    later: (fn, ms) => {
      clearTimeout(timer);
      timer = setTimeout(() => gen === generation && !document.hidden && fn(), ms);
    },
    refresh: async () => {
      if (gen !== generation) return;
      await draw();
    },
  };
  const draw = async () => {
    try {
      await page(ctx, new URLSearchParams(query || ""));
    } catch (e) {
      if (e instanceof ApiError && e.status === 401) {
        signOut();
        return signInPage(`${e.code}: ${e.message}`);
      }
      if (gen === generation) replace(main, errorBox(e));
    }
  };
  main.setAttribute("aria-busy", "true");
  await draw();
  main.removeAttribute("aria-busy");
}

// A page hidden in a background tab stops polling; coming back redraws it.
document.addEventListener("visibilitychange", () => !document.hidden && render());
// Navigation (a link, Back, Forward, a typed URL) closes the page's dialogs
// first; a redraw of the same page (a refresh, the tab shown again) keeps them.
window.addEventListener("hashchange", () => {
  closeDialogs();
  render();
});
render();
