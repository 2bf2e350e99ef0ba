// {{name}}: an ax plugin. Greets whoever the input names.
//
// `run` gets the attempt's context and its input as JSON text and returns its
// output as JSON text. Throwing a `{ kind, message }` object is an error the
// plugin returns: kind "fatal" fails the step at once, "retryable" is retried
// per the step's `retry` policy. Anything else thrown (an `Error`, a
// `TypeError` from a bug) traps the instance (outcome `trapped`).
import { get as configGet } from "ax:plugin/config@0.1.0";
import { log } from "ax:plugin/log@0.1.0";
import { report } from "ax:plugin/progress@0.1.0";

/** An error retrying will not help with: the step fails at once. */
function fatal(message) {
  return { kind: "fatal", message };
}

export function run(ctx, input) {
  let data;
  try {
    data = JSON.parse(input);
  } catch (e) {
    throw fatal(`input is not JSON: ${e.message}`);
  }
  if (typeof data?.name !== "string" || data.name === "") {
    throw fatal('input needs a string "name", e.g. {"name": "ax"}');
  }
  // `config:` in the task definition, or `ax exec --config greeting=hi`.
  const greeting = configGet("greeting") ?? "hello";
  log("info", `greeting ${data.name}`, [["attempt", String(ctx.attempt)]]);
  report(100, "done");
  return JSON.stringify({ greeting: `${greeting}, ${data.name}` });
}
