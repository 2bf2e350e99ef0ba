//! `ax task validate FILE` and `ax task apply --dry-run`: a definition
//! checked before it is saved. The document is parsed and validated here,
//! with the server's own parser and rules (crate::task); the server is then
//! asked whether each plugin version it names is uploaded (or, for a range
//! or a tag, selects an uploaded version). The host's caps
//! (`caps.max_fuel`, …) and a tenant's quota are not known to the client:
//! limits above them are still refused by `ax task apply`, with the field.
//! `--dry-run` also prints a line diff against the stored definition.

use serde_json::Value;

use super::http::{Client, enc};
use super::output::{cell, items};
use super::{Failure, Outcome, done};
use crate::cli::term::{Layout, safe};
use crate::task::{self, TaskSpec};

/// Parses and validates `text` (read from `origin`); the error names the file and the field.
pub(super) fn check(text: &str, origin: &str) -> Result<TaskSpec, Failure> {
    task::load(text, &crate::model::Caps::UNLIMITED).map_err(|e| {
        let at = if e.path.is_empty() {
            String::new()
        } else {
            format!("{}: ", e.path)
        };
        Failure::new("invalid", format!("{origin}: {at}{}", e.message))
    })
}

/// Asks the server for each plugin version the task names (for a range or
/// a tag: the plugin's versions and tags, to see that it selects one now): a
/// missing one is an error naming the step. `Ok(false)` when the server is
/// unreachable (nothing checked).
fn plugins_uploaded(client: &Client, spec: &TaskSpec, origin: &str) -> Result<bool, Failure> {
    for (i, step) in spec.steps.iter().enumerate() {
        let name = enc(&step.plugin.name);
        let path = match step.plugin.version.exact() {
            Some(version) => format!("/v1/plugins/{name}/{}", enc(version)),
            None => format!("/v1/plugins/{name}"),
        };
        let missing = |why: String| {
            Failure::new(
                "invalid",
                format!("{origin}: steps[{i}].plugin: {why} (`ax plugin push`, `ax plugin tag`)"),
            )
        };
        match client.get(&path) {
            Ok(v) => {
                if let Some(why) = unselected(&step.plugin, &v) {
                    return Err(missing(why));
                }
            }
            Err(f) if f.code == "connection" => return Ok(false),
            Err(f) if f.code == "not_found" => {
                // For an exact version, the versions that are uploaded.
                let uploaded = match client.get(&format!("/v1/plugins/{name}")) {
                    Ok(v) => items(&v["versions"])
                        .filter_map(|v| v["version"].as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                    Err(_) => String::new(),
                };
                let also = if uploaded.is_empty() {
                    format!("no version of `{}` is uploaded", step.plugin.name)
                } else {
                    format!("uploaded versions of `{}`: {uploaded}", step.plugin.name)
                };
                return Err(missing(format!(
                    "plugin {} is not uploaded for this tenant; {also}",
                    step.plugin
                )));
            }
            Err(f) => return Err(f),
        }
    }
    Ok(true)
}

/// For a range or a tag, given `GET /v1/plugins/{name}` (its versions and
/// tags): why it selects no version, if it does not.
fn unselected(plugin: &task::PluginRef, versions: &Value) -> Option<String> {
    let version = |v: &Value| v["version"].as_str().unwrap_or_default().to_owned();
    let uploaded: Vec<String> = versions["versions"]
        .as_array()
        .map(|vs| vs.iter().map(version).collect())
        .unwrap_or_default();
    match &plugin.version {
        task::VersionSelector::Exact(_) => None,
        task::VersionSelector::Range(_) => {
            let picked = plugin.version.pick(uploaded.iter().map(String::as_str));
            picked.is_none().then(|| {
                format!(
                    "plugin {plugin}: no uploaded version is in the range (uploaded: {})",
                    uploaded.join(", ")
                )
            })
        }
        task::VersionSelector::Tag(tag) => {
            let found = versions["tags"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|t| t["tag"] == tag.as_str() && uploaded.contains(&version(t)));
            (!found).then(|| format!("plugin {plugin}: `{}` has no tag `{tag}`", plugin.name))
        }
    }
}

/// `ax task validate FILE`.
pub(super) fn validate(client: &Client, text: &str, origin: &str) -> Outcome {
    let spec = check(text, origin)?;
    let checked = plugins_uploaded(client, &spec, origin)?;
    let steps = spec.steps.len();
    println!(
        "{origin}: task {} is valid ({steps} step{})",
        cell(&spec.name.clone().into()),
        if steps == 1 { "" } else { "s" }
    );
    if !checked {
        eprintln!(
            "ax: plugins not checked: cannot reach the ax server at {}",
            client.base
        );
    }
    done()
}

/// `ax task apply --dry-run`: validates, then prints what applying would
/// change; stores nothing.
pub(super) fn dry_run(client: &Client, text: &str, origin: &str) -> Outcome {
    let spec = check(text, origin)?;
    if !plugins_uploaded(client, &spec, origin)? {
        return Err(Failure::new(
            "connection",
            format!("cannot reach the ax server at {}", client.base),
        ));
    }
    let stored = match client.get(&format!("/v1/tasks/{}", enc(&spec.name))) {
        Ok(v) => v,
        Err(f) if f.code == "not_found" => Value::Null,
        Err(f) => return Err(f),
    };
    let name = cell(&spec.name.clone().into());
    match stored["source"].as_str() {
        None => {
            println!("task {name} would be created (dry run: nothing stored)");
            print!("{}", safe(&diff("", text), Layout::Block));
        }
        Some(source) if source == text => {
            println!("task {name} is unchanged (dry run: nothing stored)");
        }
        Some(source) => {
            println!(
                "task {name} would be replaced (version {} → {}; dry run: nothing stored)",
                cell(&stored["version"]),
                stored["version"]
                    .as_u64()
                    .map_or_else(|| "-".into(), |v| (v + 1).to_string())
            );
            println!("--- stored");
            println!("+++ {origin}");
            print!("{}", safe(&diff(source, text), Layout::Block));
        }
    }
    done()
}

/// Lines of context shown around a change.
const CONTEXT: usize = 2;

/// Above this many line pairs the diff is not computed line by line (its
/// table would be large): every old line is shown removed, every new one added.
const MAX_DIFF_CELLS: usize = 4_000_000;

/// A line diff: changed lines with `-`/`+`, [`CONTEXT`] unchanged lines
/// around each change with two spaces, `…` between hunks. A longest
/// common subsequence, computed in O(old × new) up to [`MAX_DIFF_CELLS`].
pub(super) fn diff(old: &str, new: &str) -> String {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let mut ops: Vec<(char, &str)> = Vec::new();
    if a.len().saturating_mul(b.len()) > MAX_DIFF_CELLS {
        ops.extend(a.iter().map(|l| ('-', *l)));
        ops.extend(b.iter().map(|l| ('+', *l)));
    } else {
        // lcs[i][j]: the longest common subsequence of a[i..] and b[j..].
        let width = b.len() + 1;
        let mut lcs = vec![0u32; (a.len() + 1) * width];
        for i in (0..a.len()).rev() {
            for j in (0..b.len()).rev() {
                lcs[i * width + j] = if a[i] == b[j] {
                    lcs[(i + 1) * width + j + 1] + 1
                } else {
                    lcs[(i + 1) * width + j].max(lcs[i * width + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < a.len() || j < b.len() {
            if i < a.len() && j < b.len() && a[i] == b[j] {
                ops.push((' ', a[i]));
                i += 1;
                j += 1;
            } else if j < b.len()
                && (i == a.len() || lcs[i * width + j + 1] > lcs[(i + 1) * width + j])
            {
                ops.push(('+', b[j]));
                j += 1;
            } else {
                ops.push(('-', a[i]));
                i += 1;
            }
        }
    }
    let changed: Vec<usize> = (0..ops.len()).filter(|&k| ops[k].0 != ' ').collect();
    let near = |k: usize| changed.iter().any(|&c| c.abs_diff(k) <= CONTEXT);
    let mut out = String::new();
    let mut skipped = false;
    for (k, (op, line)) in ops.iter().enumerate() {
        if near(k) {
            if skipped && !out.is_empty() {
                out.push_str("…\n");
            }
            skipped = false;
            let mark = if *op == ' ' { ' ' } else { *op };
            out.push(mark);
            out.push(' ');
            out.push_str(line);
            out.push('\n');
        } else {
            skipped = true;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_diff_shows_changed_lines_with_context_and_elides_the_rest() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\nj\n";
        let new = "a\nb\nc\nD\ne\nf\ng\nh\nj\ni\n";
        assert_eq!(
            diff(old, new),
            "  b\n  c\n- d\n+ D\n  e\n  f\n…\n  h\n  j\n+ i\n"
        );
        assert_eq!(diff(old, old), "");
        assert_eq!(diff("", "x\ny\n"), "+ x\n+ y\n");
        assert_eq!(diff("x\n", ""), "- x\n");
    }

    #[test]
    fn a_definition_is_checked_with_the_servers_rules_naming_file_and_field() {
        let bad = "name: t\nplugin: hello@1.0.0\nretry: { max_attempts: 0 }\n";
        let e = check(bad, "t.yaml").unwrap_err();
        assert_eq!(e.code, "invalid");
        assert!(
            e.message.starts_with("t.yaml: retry.max_attempts: "),
            "{}",
            e.message
        );
        let cycle = "name: t\nsteps:\n  - { name: a, needs: [b], plugin: x@1.0.0 }\n  - { name: b, needs: [a], plugin: x@1.0.0 }\n";
        assert!(
            check(cycle, "t.yaml")
                .unwrap_err()
                .message
                .contains("cycle")
        );
        assert_eq!(
            check("name: t\nplugin: x@1.0.0\n", "t.yaml")
                .unwrap()
                .steps
                .len(),
            1
        );
    }
}
