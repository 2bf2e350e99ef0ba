// remember (JavaScript): the isolation probe. Each attempt reports what a
// module variable held when it started, then stores its input's `write`
// there and reads it back. If one attempt's variable reached the next,
// `before` would show it; `after` proves the write itself works.
//
// With `spread: N` in its input it also marks N bytes of a zeroed buffer,
// 8 KiB apart, so the attempt leaves more separate runs of dirty pages than
// one scan of wasmtime's pool reports (plugins/remember/src/lib.rs says
// why); `spread.before` counts the marks found at the start, `spread.after`
// those after marking.
// Built by scripts/polyglot-plugins.

// Written by every attempt; must be null again at the start of the next.
let remembered = null;

// Bytes between two marks (two host pages), and the marks there is room for.
const STRIDE = 8192;
const MAX_SPREAD = 256;
// Allocated while the component is pre-initialised: zero in its image.
const spread = new Uint8Array(STRIDE * MAX_SPREAD);

function marks() {
  let found = 0;
  for (let i = 0; i < MAX_SPREAD; i++) {
    if (spread[i * STRIDE] !== 0) found++;
  }
  return found;
}

export function run(ctx, input) {
  const data = JSON.parse(input);
  const before = remembered;
  remembered = data.write;
  const output = { before, after: remembered };
  if (data.spread !== undefined) {
    const found = marks();
    const n = Math.min(data.spread, MAX_SPREAD);
    for (let i = 0; i < n; i++) spread[i * STRIDE] = 1;
    output.spread = { before: found, after: marks() };
  }
  return JSON.stringify(output);
}
