//! The checks of one step: its name, plugin reference, pool and `needs` list;
//! its limits (non-zero, within the tenant's caps and what a 32-bit wasm
//! instance can address); its retry policy's bounds; and its capability
//! fields (HTTP patterns and limits, secret names, config entries — the
//! task's `config` is checked with the same rule).

use std::collections::BTreeMap;
use std::time::Duration;

use super::name_error;
use crate::capability;
use crate::model::Caps;
use crate::model::name::{is_valid_name, is_valid_tag, is_valid_version};
use crate::task::error::{Result, SpecError};
use crate::task::retry::{Backoff, RetryPolicy};
use crate::task::types::{PluginRef, StepLimits, StepSpec, VersionSelector};
use crate::task::value::join;
use crate::task::{
    MAX_ATTEMPTS, MAX_BACKOFF, MAX_BACKOFF_ENTRIES, MAX_BACKOFF_FACTOR, MAX_WASM_MEMORY_MB,
};

/// The fields of one step, found at `path` (`steps[1]`).
pub(super) fn validate_step(step: &StepSpec, path: &str, caps: &Caps) -> Result<()> {
    let at = |field: &str| join(path, field);
    if !is_valid_name(&step.name) {
        return Err(name_error(&at("name"), "step", &step.name));
    }
    if let Some(e) = plugin_ref_error(&step.plugin) {
        return Err(SpecError::new(at("plugin"), e));
    }
    validate_limits(&step.limits, &at("limits"), caps)?;
    if let Some(pool) = &step.pool
        && !is_valid_name(pool)
    {
        return Err(name_error(&at("pool"), "pool", pool));
    }
    validate_retry(&step.retry, &at("retry"))?;
    for (i, need) in step.needs.iter().enumerate() {
        if step.needs[..i].contains(need) {
            return Err(SpecError::new(
                format!("{}[{i}]", at("needs")),
                format!("`{need}` is listed twice"),
            ));
        }
    }
    validate_capabilities(step, path)
}

/// What is wrong with a plugin reference built by hand (a parsed one is
/// right by construction).
fn plugin_ref_error(plugin: &PluginRef) -> Option<String> {
    if !is_valid_name(&plugin.name) {
        return plugin.to_string().parse::<PluginRef>().err();
    }
    match &plugin.version {
        VersionSelector::Exact(v) if !is_valid_version(v) => Some(format!(
            "`{}` is not a semver version (like 1.2.0 or 1.2.0-rc.1)",
            crate::template::shorten(v)
        )),
        VersionSelector::Tag(t) if !is_valid_tag(t) => Some(format!(
            "`{}` is not a valid tag: a name starting with a letter, at most {} characters, \
             that does not read as a version range",
            crate::template::shorten(t),
            crate::model::name::MAX_NAME_LEN
        )),
        _ => None,
    }
}

/// The capability fields of a step: patterns (already parsed), secret names,
/// config entries, HTTP limits.
fn validate_capabilities(step: &StepSpec, path: &str) -> Result<()> {
    let at = |field: &str| join(path, field);
    if step.allow_http.len() > capability::http::MAX_PATTERNS {
        return Err(SpecError::new(
            at("allow_http"),
            format!(
                "at most {} patterns may be listed",
                capability::http::MAX_PATTERNS
            ),
        ));
    }
    for (i, name) in step.secrets.iter().enumerate() {
        let here = format!("{}[{i}]", at("secrets"));
        if !capability::valid_name(name) {
            return Err(name_error(&here, "secret", name));
        }
        if step.secrets[..i].contains(name) {
            return Err(SpecError::new(here, format!("`{name}` is listed twice")));
        }
    }
    validate_config(&step.config, &at("config"))?;
    let limits = &step.limits;
    let lat = |field: &str| join(&at("limits"), field);
    if let Some(n) = limits.http_requests
        && n > capability::MAX_HTTP_REQUESTS
    {
        return Err(SpecError::new(
            lat("http_requests"),
            format!(
                "{n} is above the limit of {}",
                capability::MAX_HTTP_REQUESTS
            ),
        ));
    }
    if let Some(t) = limits.http_timeout
        && t.is_zero()
    {
        return Err(SpecError::new(
            lat("http_timeout"),
            "http_timeout must be longer than 0s",
        ));
    }
    if let Some(kb) = limits.http_response_kb
        && (kb == 0 || kb.saturating_mul(1 << 10) > capability::MAX_HTTP_RESPONSE_BYTES)
    {
        return Err(SpecError::new(
            lat("http_response_kb"),
            format!(
                "{kb} is outside 1..={} KiB",
                capability::MAX_HTTP_RESPONSE_BYTES >> 10
            ),
        ));
    }
    Ok(())
}

/// Config keys are names (`[A-Za-z0-9][A-Za-z0-9_.-]{0,63}`), values bounded.
pub(super) fn validate_config(config: &BTreeMap<String, String>, path: &str) -> Result<()> {
    if config.len() > capability::MAX_CONFIG_ENTRIES {
        return Err(SpecError::new(
            path,
            format!(
                "{} entries; the limit is {}",
                config.len(),
                capability::MAX_CONFIG_ENTRIES
            ),
        ));
    }
    for (key, value) in config {
        if !capability::valid_name(key) {
            return Err(name_error(&join(path, key), "config key", key));
        }
        if value.len() > capability::MAX_CONFIG_VALUE {
            return Err(SpecError::new(
                join(path, key),
                format!(
                    "is {} bytes; the limit is {}",
                    value.len(),
                    capability::MAX_CONFIG_VALUE
                ),
            ));
        }
    }
    Ok(())
}

fn validate_limits(limits: &StepLimits, path: &str, caps: &Caps) -> Result<()> {
    let at = |field: &str| join(path, field);
    let above = |field: &str, value: String, cap: String| {
        SpecError::new(
            at(field),
            format!("{field} {value} is above the tenant's cap of {cap}"),
        )
    };
    if let Some(fuel) = limits.fuel {
        if fuel == 0 {
            return Err(SpecError::new(at("fuel"), "fuel must be greater than 0"));
        }
        if fuel > caps.max_fuel {
            return Err(above("fuel", fuel.to_string(), caps.max_fuel.to_string()));
        }
    }
    if let Some(mb) = limits.memory_mb {
        if mb == 0 {
            return Err(SpecError::new(
                at("memory_mb"),
                "memory_mb must be greater than 0",
            ));
        }
        if mb > caps.max_memory_mb {
            return Err(above(
                "memory_mb",
                mb.to_string(),
                caps.max_memory_mb.to_string(),
            ));
        }
        if mb > MAX_WASM_MEMORY_MB {
            return Err(SpecError::new(
                at("memory_mb"),
                format!(
                    "memory_mb {mb} is above the {MAX_WASM_MEMORY_MB} MiB a 32-bit WebAssembly instance can address"
                ),
            ));
        }
    }
    if let Some(timeout) = limits.timeout {
        if timeout.is_zero() {
            return Err(SpecError::new(
                at("timeout"),
                "timeout must be longer than 0s",
            ));
        }
        if timeout > caps.max_timeout {
            return Err(above(
                "timeout",
                humantime::format_duration(timeout).to_string(),
                humantime::format_duration(caps.max_timeout).to_string(),
            ));
        }
    }
    Ok(())
}

fn validate_retry(retry: &RetryPolicy, path: &str) -> Result<()> {
    let at = |field: &str| join(path, field);
    if retry.max_attempts == 0 {
        return Err(SpecError::new(
            at("max_attempts"),
            "must be at least 1 (1 means no retry)",
        ));
    }
    if retry.max_attempts > MAX_ATTEMPTS {
        return Err(SpecError::new(
            at("max_attempts"),
            format!(
                "{} is above the limit of {MAX_ATTEMPTS}",
                retry.max_attempts
            ),
        ));
    }
    let too_long = |p: String, d: Duration| {
        SpecError::new(
            p,
            format!(
                "{} is above the longest backoff of {}",
                humantime::format_duration(d),
                humantime::format_duration(MAX_BACKOFF)
            ),
        )
    };
    let backoff = at("backoff");
    match &retry.backoff {
        Backoff::List(waits) => {
            if waits.is_empty() {
                return Err(SpecError::new(
                    backoff,
                    "the list is empty; give at least one duration",
                ));
            }
            if waits.len() > MAX_BACKOFF_ENTRIES {
                return Err(SpecError::new(
                    backoff,
                    format!(
                        "{} entries; the limit is {MAX_BACKOFF_ENTRIES}",
                        waits.len()
                    ),
                ));
            }
            if let Some((i, d)) = waits.iter().enumerate().find(|(_, d)| **d > MAX_BACKOFF) {
                return Err(too_long(format!("{backoff}[{i}]"), *d));
            }
        }
        Backoff::Exponential(e) => {
            let at = |field: &str| format!("{backoff}.exponential.{field}");
            if e.initial.is_zero() {
                return Err(SpecError::new(at("initial"), "must be longer than 0s"));
            }
            if e.initial > MAX_BACKOFF {
                return Err(too_long(at("initial"), e.initial));
            }
            if e.max < e.initial {
                return Err(SpecError::new(
                    at("max"),
                    format!(
                        "{} is below initial ({})",
                        humantime::format_duration(e.max),
                        humantime::format_duration(e.initial)
                    ),
                ));
            }
            if e.max > MAX_BACKOFF {
                return Err(too_long(at("max"), e.max));
            }
            if !(1.0..=MAX_BACKOFF_FACTOR).contains(&e.factor) {
                return Err(SpecError::new(
                    at("factor"),
                    format!("{} is outside 1.0..={MAX_BACKOFF_FACTOR:.1}", e.factor),
                ));
            }
        }
    }
    for (i, r) in retry.retry_on.iter().enumerate() {
        if retry.retry_on[..i].contains(r) {
            let name = serde_json::to_value(r)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            return Err(SpecError::new(
                format!("{}[{i}]", at("retry_on")),
                format!("`{name}` is listed twice"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::name_error;
    use crate::task::test_support::{CAPS, err_of};
    use crate::task::{Caps, MAX_DESCRIPTION_BYTES, load};

    #[test]
    fn validation_errors_name_their_field() {
        let long_desc = format!(
            "name: t\nplugin: p@1.0.0\ndescription: {}\n",
            "d".repeat(MAX_DESCRIPTION_BYTES + 1)
        );
        let cases: Vec<(String, &str, String)> = vec![
            ("name: bad name\nplugin: p@1.0.0\n".into(), "name", name_error("", "task", "bad name").message),
            (long_desc, "description", "is 4097 bytes; the limit is 4096".into()),
            ("name: t\nsteps: []\n".into(), "steps", "a task needs at least one step".into()),
            (
                "name: t\nsteps: [{name: ok, plugin: p@1.0.0}, {name: 'b/c', plugin: p@1.0.0}]\n".into(),
                "steps[1].name",
                name_error("", "step", "b/c").message,
            ),
            ("name: t\nplugin: p@1.0.0\npool: 'my pool'\n".into(), "pool", name_error("", "pool", "my pool").message),
            ("name: t\nplugin: p@1.0.0\nlimits: {fuel: 0}\n".into(), "limits.fuel", "fuel must be greater than 0".into()),
            ("name: t\nplugin: p@1.0.0\nlimits: {memory_mb: 0}\n".into(), "limits.memory_mb", "memory_mb must be greater than 0".into()),
            ("name: t\nplugin: p@1.0.0\nlimits: {timeout: 0s}\n".into(), "limits.timeout", "timeout must be longer than 0s".into()),
            (
                "name: t\nplugin: p@1.0.0\nlimits: {fuel: 90000000000}\n".into(),
                "limits.fuel",
                "fuel 90000000000 is above the tenant's cap of 10000000000".into(),
            ),
            (
                "name: t\nplugin: p@1.0.0\nlimits: {memory_mb: 512}\n".into(),
                "limits.memory_mb",
                "memory_mb 512 is above the tenant's cap of 256".into(),
            ),
            (
                "name: t\nplugin: p@1.0.0\nlimits: {timeout: 2h}\n".into(),
                "limits.timeout",
                "timeout 2h is above the tenant's cap of 30m".into(),
            ),
            ("name: t\nplugin: p@1.0.0\nretry: {max_attempts: 0}\n".into(), "retry.max_attempts", "must be at least 1 (1 means no retry)".into()),
            ("name: t\nplugin: p@1.0.0\nretry: {max_attempts: 101}\n".into(), "retry.max_attempts", "101 is above the limit of 100".into()),
            ("name: t\nplugin: p@1.0.0\nretry: {backoff: []}\n".into(), "retry.backoff", "the list is empty; give at least one duration".into()),
            (
                "name: t\nplugin: p@1.0.0\nretry: {backoff: [1s, 2days]}\n".into(),
                "retry.backoff[1]",
                "2days is above the longest backoff of 1day".into(),
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {backoff: {exponential: {initial: 0s}}}\n".into(),
                "retry.backoff.exponential.initial",
                "must be longer than 0s".into(),
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {backoff: {exponential: {initial: 10s, max: 5s}}}\n".into(),
                "retry.backoff.exponential.max",
                "5s is below initial (10s)".into(),
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {backoff: {exponential: {max: 48h}}}\n".into(),
                "retry.backoff.exponential.max",
                "2days is above the longest backoff of 1day".into(),
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {backoff: {exponential: {factor: 0.5}}}\n".into(),
                "retry.backoff.exponential.factor",
                "0.5 is outside 1.0..=10.0".into(),
            ),
            (
                "name: t\nplugin: p@1.0.0\nretry: {retry_on: [fatal, fatal]}\n".into(),
                "retry.retry_on[1]",
                "`fatal` is listed twice".into(),
            ),
        ];
        for (yaml, path, message) in cases {
            let (p, m) = err_of(&yaml);
            assert_eq!(
                (p.as_str(), m.as_str()),
                (path, message.as_str()),
                "for {yaml}"
            );
        }
    }

    #[test]
    fn memory_beyond_what_wasm_addresses_is_refused() {
        let e = load(
            "name: t\nplugin: p@1.0.0\nlimits: {memory_mb: 8192}\n",
            &Caps::UNLIMITED,
        )
        .unwrap_err();
        assert_eq!(e.path, "limits.memory_mb");
        assert_eq!(
            e.message,
            "memory_mb 8192 is above the 4096 MiB a 32-bit WebAssembly instance can address"
        );
    }

    #[test]
    fn limits_at_the_caps_are_accepted() {
        let yaml =
            "name: t\nplugin: p@1.0.0\nlimits: {fuel: 10000000000, memory_mb: 256, timeout: 30m}\n";
        assert!(load(yaml, &CAPS).is_ok());
    }

    #[test]
    fn bad_capability_fields_are_refused_where_they_are() {
        for (yaml, path, message) in [
            (
                "name: t\nplugin: p@1.0.0\nallow_http: [\"https://ok.example.com\", \"nope\"]\n",
                "allow_http[1]",
                "scheme://host",
            ),
            (
                "name: t\nplugin: p@1.0.0\nallow_http: [\"http://127.0.0.1.:8080\"]\n",
                "allow_http[0]",
                "a trailing dot is refused",
            ),
            (
                "name: t\nplugin: p@1.0.0\nkv: 1\n",
                "kv",
                "expected `tenant` or `task`",
            ),
            (
                "name: t\nplugin: p@1.0.0\nsecrets: [a, a]\n",
                "secrets[1]",
                "listed twice",
            ),
            (
                "name: t\nplugin: p@1.0.0\nsecrets: [\"-x\"]\n",
                "secrets[0]",
                "not a valid secret name",
            ),
            (
                "name: t\nplugin: p@1.0.0\nconfig: { \"a b\": 1 }\n",
                "config.a b",
                "not a valid config key name",
            ),
            (
                "name: t\nplugin: p@1.0.0\nconfig: [1]\n",
                "config",
                "mapping of keys to values",
            ),
            (
                "name: t\nplugin: p@1.0.0\nlimits: { http_requests: 20000 }\n",
                "limits.http_requests",
                "above the limit",
            ),
            (
                "name: t\nplugin: p@1.0.0\nlimits: { http_timeout: 0s }\n",
                "limits.http_timeout",
                "longer than 0s",
            ),
            (
                "name: t\nplugin: p@1.0.0\nlimits: { http_response_kb: 0 }\n",
                "limits.http_response_kb",
                "outside 1..=",
            ),
        ] {
            let e = load(yaml, &CAPS).unwrap_err();
            assert_eq!(e.path, path, "{yaml}: {e:?}");
            assert!(e.message.contains(message), "{yaml}: {}", e.message);
        }
    }
}
