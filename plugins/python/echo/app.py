"""echo (Python): returns its input and the attempt's context, like the Rust
`echo` plugin, so `ax bench exec` compares the same work across languages.
Built by scripts/polyglot-plugins with componentize-py against ../../../wit.
"""

import json

import wit_world
from wit_world.imports.types import Context, TriggerKind


def trigger_name(kind: TriggerKind) -> str:
    return kind.name.lower()


class WitWorld(wit_world.WitWorld):
    def run(self, ctx: Context, input: str) -> str:
        return json.dumps(
            {
                "input": json.loads(input),
                "context": {
                    "run_id": ctx.run_id,
                    "tenant": ctx.tenant,
                    "task": ctx.task,
                    "step": ctx.step,
                    "attempt": ctx.attempt,
                    "scheduled_for": ctx.scheduled_for,
                    "trigger": trigger_name(ctx.trigger),
                },
            }
        )
