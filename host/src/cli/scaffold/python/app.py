"""{{name}}: an ax plugin. Greets whoever the input names.

`run` gets the attempt's context and its input as JSON text and returns its
output as JSON text. Raising `Err(TaskError(...))` is an error the plugin
returns: `ErrorKind.FATAL` fails the step at once, `ErrorKind.RETRYABLE` is
retried per the step's `retry` policy. Any other exception escaping `run`
traps the instance (outcome `trapped`).
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import config, log, progress
from wit_world.imports.types import Context, ErrorKind, TaskError


def fatal(message: str) -> Err:
    """An error retrying will not help with: the step fails at once."""
    return Err(TaskError(kind=ErrorKind.FATAL, message=message))


class WitWorld(wit_world.WitWorld):
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
