// remember (JavaScript): the isolation probe. Each attempt reports what a
// module variable held when it started, then stores its input's `write`
// there and reads it back. If one attempt's variable reached the next,
// `before` would show it; `after` proves the write itself works.
// Built by scripts/polyglot-plugins.

// Written by every attempt; must be null again at the start of the next.
let remembered = null;

export function run(ctx, input) {
  const before = remembered;
  remembered = JSON.parse(input).write;
  return JSON.stringify({ before, after: remembered });
}
