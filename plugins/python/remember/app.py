"""remember (Python): the isolation probe. Each attempt reports what a
module global held when it started, then stores its input's `write` there
and reads it back. If one attempt's global reached the next, `before` would
show it; `after` proves the write itself works (so the test can fail).
Built by scripts/polyglot-plugins.
"""

import json

import wit_world
from wit_world.imports.types import Context

# Written by every attempt; must be None again at the start of the next.
remembered = None


class WitWorld(wit_world.WitWorld):
    def run(self, ctx: Context, input: str) -> str:
        global remembered
        before = remembered
        remembered = json.loads(input)["write"]
        return json.dumps({"before": before, "after": remembered})
