// {{name}}: an ax plugin. Greets whoever the input names.
//
// `run` gets the attempt's context and its input as JSON text and returns its
// output as JSON text. Throwing `fatal(message)` fails the step at once,
// `retryable(message)` is retried per the step's `retry` policy. `task` (in
// ax.js) turns anything else thrown (a `TypeError` from a bug) into a
// retryable error with the exception's type, message and line, so
// `ax run show` names it.
import { get as configGet } from "ax:plugin/config@0.1.0";
import { log } from "ax:plugin/log@0.1.0";
import { report } from "ax:plugin/progress@0.1.0";

import { fatal, task } from "./ax.js";

export const run = task((ctx, input) => {
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
});
