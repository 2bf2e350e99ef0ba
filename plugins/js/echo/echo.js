// echo (JavaScript): returns its input and the attempt's context, like the
// Rust `echo` plugin, so `ax bench exec` compares the same work across
// languages. Built by scripts/polyglot-plugins with componentize-js.
export function run(ctx, input) {
  return JSON.stringify({
    input: JSON.parse(input),
    context: {
      run_id: ctx.runId,
      tenant: ctx.tenant,
      task: ctx.task,
      step: ctx.step,
      attempt: ctx.attempt,
      scheduled_for: ctx.scheduledFor,
      trigger: ctx.trigger,
    },
  });
}
