"""remember (Python): the isolation probe. Each attempt reports what a
module global held when it started, then stores its input's `write` there
and reads it back. If one attempt's global reached the next, `before` would
show it; `after` proves the write itself works (so the test can fail).

With `spread: N` in its input it also marks N bytes of a zeroed buffer,
8 KiB apart, so the attempt leaves more separate runs of dirty pages than
one scan of wasmtime's pool reports (plugins/remember/src/lib.rs says why);
`spread.before` counts the marks found at the start, `spread.after` those
after marking.
Built by scripts/polyglot-plugins.
"""

import json

import wit_world
from wit_world.imports.types import Context

# Written by every attempt; must be None again at the start of the next.
remembered = None

# Bytes between two marks (two host pages), and the marks there is room for.
STRIDE = 8192
MAX_SPREAD = 256
# Allocated while the component is pre-initialised: zero in its image.
spread = bytearray(STRIDE * MAX_SPREAD)


def marks() -> int:
    return sum(1 for i in range(MAX_SPREAD) if spread[i * STRIDE])


class WitWorld(wit_world.WitWorld):
    def run(self, ctx: Context, input: str) -> str:
        global remembered
        data = json.loads(input)
        before = remembered
        remembered = data["write"]
        output = {"before": before, "after": remembered}
        n = data.get("spread")
        if n is not None:
            found = marks()
            for i in range(min(int(n), MAX_SPREAD)):
                spread[i * STRIDE] = 1
            output["spread"] = {"before": found, "after": marks()}
        return json.dumps(output)
