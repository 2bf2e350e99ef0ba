// The dashboard's only way to the server: the /v1 JSON API with the bearer
// token the person signed in with. The token lives in sessionStorage: it is
// gone when the tab closes and is never written to a cookie, so the API
// stays immune to cross-site request forgery.

const KEY = "ax.session";

/** `{token, tenant, admin}` of this tab, or null before sign-in. */
export function session() {
  try {
    const s = JSON.parse(sessionStorage.getItem(KEY) || "null");
    return s && typeof s.token === "string" && s.token ? s : null;
  } catch {
    return null;
  }
}

export function signIn(token, tenant, admin) {
  sessionStorage.setItem(KEY, JSON.stringify({ token, tenant: tenant || "", admin: admin ?? null }));
}

/** Tenant tokens look like `axt_<id>_<secret>`; anything else is tried as the admin token. */
export function tenantTokenId(token) {
  const m = /^axt_([0-9a-f]+)_/.exec(token || "");
  return m ? m[1] : null;
}

export function signOut() {
  sessionStorage.removeItem(KEY);
}

/** An error answered by the API: `code` and `message` from its error body. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** Calls the API; resolves to the JSON answer (null for 204), rejects with ApiError. */
export async function api(method, path, body) {
  const s = session();
  const headers = { Accept: "application/json" };
  if (s) {
    headers.Authorization = "Bearer " + s.token;
    if (s.tenant) headers["X-Ax-Tenant"] = s.tenant;
  }
  if (body !== undefined) headers["Content-Type"] = "application/json";
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
    });
  } catch (e) {
    throw new ApiError(0, "connection", `cannot reach the ax server: ${e.message}`);
  }
  const text = await response.text();
  let value = null;
  if (text) {
    try {
      value = JSON.parse(text);
    } catch {
      value = text;
    }
  }
  if (response.ok) return value;
  const err = value && value.error;
  throw new ApiError(
    response.status,
    (err && err.code) || "http_error",
    (err && err.message) || `${method} ${path} answered ${response.status}`,
  );
}

export const get = (path) => api("GET", path);

/** Every item of a paged listing (`{KEY: [...], next_cursor}`), following
 * the cursor a full page (1000) at a time. `path` has no query string. */
export async function getAll(path, key) {
  const all = [];
  let cursor = "";
  for (;;) {
    const page = await get(`${path}?limit=1000${cursor ? "&cursor=" + encodeURIComponent(cursor) : ""}`);
    all.push(...(page[key] || []));
    // A cursor that does not move would loop for ever.
    if (!page.next_cursor || page.next_cursor === cursor) return all;
    cursor = page.next_cursor;
  }
}
export const post = (path, body) => api("POST", path, body);

/** Runs `limit` async jobs at a time over `items`. */
export async function pool(items, limit, job) {
  const out = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await job(items[i], i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}
