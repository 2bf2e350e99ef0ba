// "Run now" for a task that declares `params:`: a form built from the
// declarations (a text field, a number field, a checkbox or a list per
// type, filled with the defaults), shown in a modal dialog; its values go
// to `POST /v1/tasks/{name}/runs` as `params`. The server checks them again
// and its refusal (an unknown name, a wrong type) is shown in the form.

import { post, ApiError } from "./api.js";
import { h } from "./dom.js";

/** The field of one param, with `read()` giving its value (undefined: leave it to the default). */
function field(p) {
  const id = `param-${p.name}`;
  const has = p.default !== undefined && p.default !== null;
  let input;
  let read;
  if (p.type === "boolean") {
    input = h("input", { type: "checkbox", id, name: p.name, checked: has && p.default === true });
    read = () => input.checked;
  } else if (p.type === "enum") {
    input = h(
      "select",
      { id, name: p.name, required: !has },
      has ? null : h("option", { value: "" }, "choose…"),
      (p.values || []).map((v) => h("option", { value: v, selected: has && v === p.default }, v)),
    );
    read = () => (input.value === "" ? undefined : input.value);
  } else if (p.type === "integer" || p.type === "number") {
    input = h("input", { type: "number", id, name: p.name, step: p.type === "integer" ? "1" : "any", required: !has, value: has ? String(p.default) : null });
    // Not a number: sent as text, for the server to refuse with the param's type.
    read = () => (input.value.trim() === "" ? undefined : Number.isFinite(Number(input.value)) ? Number(input.value) : input.value);
  } else {
    input = h("input", { type: "text", id, name: p.name, required: !has, value: has ? String(p.default) : null });
    read = () => input.value;
  }
  const label = h(
    "label",
    { for: id },
    h("code", {}, p.name),
    " ",
    h("span", { class: "muted" }, p.type === "enum" ? "one of the list" : p.type, has ? "" : ", required"),
  );
  const row = h("div", { class: "param", dataset: { param: p.name } }, label, input, p.description ? h("p", { class: "muted" }, p.description) : null);
  return { row, name: p.name, read };
}

/**
 * Opens the dialog for `task` (a task view with `spec.params`); `done(run)`
 * is called with the created run once the server has it.
 */
export function openParamsForm(task, done) {
  const fields = (task.spec.params || []).map(field);
  const status = h("p", { class: "error", role: "alert", hidden: true });
  const cancel = h("button", { type: "button" }, "Cancel");
  const submit = h("button", { type: "submit", class: "primary" }, "Run");
  const form = h(
    "form",
    { class: "params", id: "params-form", dataset: { task: task.name } },
    h("h2", {}, "Run ", h("span", { class: "name" }, task.name)),
    fields.map((f) => f.row),
    status,
    h("p", { class: "actions" }, submit, cancel),
  );
  const dialog = h("dialog", { class: "params-dialog" }, form);
  const close = () => {
    dialog.close();
    dialog.remove();
  };
  cancel.addEventListener("click", close);
  // Escape closes a modal dialog without removing it: remove it then too.
  dialog.addEventListener("close", () => dialog.remove());
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    const params = {};
    for (const f of fields) {
      const v = f.read();
      if (v !== undefined) params[f.name] = v;
    }
    submit.disabled = true;
    try {
      const run = await post(`/v1/tasks/${encodeURIComponent(task.name)}/runs`, { params });
      close();
      await done(run);
    } catch (err) {
      status.hidden = false;
      status.textContent = err instanceof ApiError ? `${err.code}: ${err.message}` : String(err);
    } finally {
      submit.disabled = false;
    }
  });
  document.body.append(dialog);
  dialog.showModal();
  return dialog;
}
