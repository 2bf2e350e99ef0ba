//! Returns its input and the attempt's context: the trivial plugin used by
//! benchmarks and by tests that check what a plugin receives.
use ax_plugin_sdk::{Context, Result, export_plugin};
use serde_json::{Value, json};

fn run(ctx: Context, input: Value) -> Result<Value> {
    Ok(json!({
        "input": input,
        "context": {
            "run_id": ctx.run_id,
            "tenant": ctx.tenant,
            "task": ctx.task,
            "step": ctx.step,
            "attempt": ctx.attempt,
            "scheduled_for": ctx.scheduled_for,
            "trigger": format!("{:?}", ctx.trigger).to_lowercase(),
        }
    }))
}

export_plugin!(run);
