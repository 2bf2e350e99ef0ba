"""{{name}}: an ax plugin. Greets whoever the input names.

`run` gets the attempt's context and its input as JSON text and returns its
output as JSON text. Raising `fatal(message)` fails the step at once,
`retryable(message)` is retried per the step's `retry` policy. `@task` (in
ax.py) turns any other exception escaping `run` (an `IndexError` from a bug)
into a retryable error with the exception's type, message and line, so
`ax run show` names it.
"""

import json

import wit_world
from wit_world.imports import config, log, progress
from wit_world.imports.types import Context

from ax import fatal, task


class WitWorld(wit_world.WitWorld):
    @task
    def run(self, ctx: Context, input: str) -> str:
        try:
            data = json.loads(input)
        except ValueError as e:
            raise fatal(f"input is not JSON: {e}")
        name = data.get("name") if isinstance(data, dict) else None
        if not isinstance(name, str) or not name:
            raise fatal('input needs a string "name", e.g. {"name": "ax"}')
        # `config:` in the task definition, or `ax exec --config greeting=hi`.
        greeting = config.get("greeting") or "hello"
        log.log(log.Level.INFO, f"greeting {name}", [("attempt", str(ctx.attempt))])
        progress.report(100, "done")
        return json.dumps({"greeting": f"{greeting}, {name}"})
