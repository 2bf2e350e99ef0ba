// ax.js: the small kit `ax plugin new --lang js` writes next to app.js (and
// componentize-js bundles with it). `task(run)` wraps the exported function
// so that whatever it throws reaches ax as the WIT's `task-error`:
// `fatal(message)` and `retryable(message)` as they are, anything else (a
// `TypeError` from a bug, a rejected promise) as a retryable error naming the
// exception's type, message and, when the engine gives one, the innermost
// frame of its stack. Without it, a thrown `Error` is no `task-error`: the
// component traps and its message is lost.

/** An error retrying will not help with: the step fails at once. */
export function fatal(message) {
  return { kind: "fatal", message: String(message) };
}

/** A transient error: retried per the step's `retry` policy. */
export function retryable(message) {
  return { kind: "retryable", message: String(message) };
}

/** `thrown` as a `task-error`; see the file's comment. */
export function toTaskError(thrown) {
  if (
    thrown !== null &&
    typeof thrown === "object" &&
    (thrown.kind === "fatal" || thrown.kind === "retryable") &&
    typeof thrown.message === "string"
  ) {
    return thrown;
  }
  if (thrown instanceof Error) {
    const at = innermostFrame(thrown.stack);
    const where = at ? ` (at ${at})` : "";
    return retryable(`uncaught ${thrown.name}: ${thrown.message}${where}`);
  }
  let shown;
  try {
    shown = JSON.stringify(thrown) ?? String(thrown);
  } catch {
    shown = String(thrown);
  }
  return retryable(`uncaught exception: ${shown}`);
}

/** `run` with every throw and rejection turned into a `task-error`. */
export function task(run) {
  return function (ctx, input) {
    let result;
    try {
      result = run(ctx, input);
    } catch (e) {
      throw toTaskError(e);
    }
    if (result !== null && typeof result?.then === "function") {
      return result.then(undefined, (e) => {
        throw toTaskError(e);
      });
    }
    return result;
  };
}

// The first frame of an `Error.stack` as `file:line:column, in function`
// (StarlingMonkey writes `function@file:line:column`, an inner function's name
// with a `<`), its file without folders.
function innermostFrame(stack) {
  const first = String(stack ?? "")
    .split("\n")
    .map((line) => line.trim())
    .find((line) => line !== "");
  if (!first) return undefined;
  const at = first.lastIndexOf("@");
  const fn = at > 0 ? first.slice(0, at).replace(/[<\/]+$/, "") : "";
  const place = first.slice(at + 1).replace(/^.*\//, "");
  return fn ? `${place}, in ${fn}` : place;
}
