"""throw (Python): lets an `IndexError` escape `run`, without the scaffold's
`ax.task` wrapper, so the host has to say what the plugin did from the
traceback componentize-py prints (tests: `polyglot::*exception*`).
Built by scripts/polyglot-plugins with componentize-py against ../../../wit.
"""

import wit_world
from wit_world.imports.types import Context


def third(items: list) -> int:
    return items[2]


class WitWorld(wit_world.WitWorld):
    def run(self, ctx: Context, input: str) -> str:
        return str(third([1]))
