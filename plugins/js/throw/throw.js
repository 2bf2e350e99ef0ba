// throw (JavaScript): a `TypeError` escapes `run`, without the scaffold's
// `ax.js` wrapper, so the host has to say what the plugin did from what
// componentize-js prints (tests: `polyglot::*exception*`). Built by
// scripts/polyglot-plugins with componentize-js.
export function run(ctx, input) {
  const order = undefined;
  return order.id;
}
