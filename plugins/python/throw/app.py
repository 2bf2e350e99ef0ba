"""throw (Python): an `IndexError` (with input `{"parse": "x"}`, a `JSONDecodeError`
from the standard library) escapes `run` without the scaffold's `ax.task`, so the host
says what the plugin did from the traceback componentize-py prints (tests:
`polyglot::*exception*`). Built by scripts/polyglot-plugins with componentize-py."""

import json
import wit_world
from wit_world.imports.types import Context


def third(items: list) -> int:
    return items[2]


class WitWorld(wit_world.WitWorld):
    def run(self, ctx: Context, input: str) -> str:
        # With {"parse": TEXT}, a `JSONDecodeError` raised inside the
        # standard library instead.
        text = json.loads(input).get("parse")
        if text is not None:
            return str(json.loads(text))
        return str(third([1]))
