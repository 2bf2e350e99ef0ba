//! The task and step types a user writes, after parsing: [`TaskSpec`],
//! [`StepSpec`], [`PluginRef`] (with its [`VersionSelector`]) and [`StepLimits`], with the little behaviour
//! they carry: the limits, HTTP limits and grants an attempt of a step gets,
//! and the `(name, needs)` graph [`crate::dag`] takes. Plain data: the retry
//! policy is `task::retry`, trigger rules `task::rules`; reading these types
//! from text is `task::convert` (which also implements their `Deserialize`),
//! checking them `task::validate`.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::de;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use super::params::ParamSpec;
use super::retry::RetryPolicy;
use super::rules::TriggerRule;
use super::{alerts, retention};
use crate::capability::{self, HttpPattern, KvScope, StepGrants};
use crate::model::name::{MAX_NAME_LEN, is_valid_name, is_valid_tag, is_valid_version};
use crate::model::record::RecordMode;
use crate::model::{Caps, Limits};
use crate::schedule::{CatchUp, Overlap, TriggerSpec};
use crate::template::shorten;

/// A task definition (SPEC §4), after parsing. Serializes to the canonical
/// `steps` form (a shorthand one-step task comes back with one step).
///
/// `Deserialize` is implemented by hand with the same converter as
/// [`parse`](super::parse), which refuses unknown fields with their path (the
/// effect of `deny_unknown_fields`, with better messages).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TaskSpec {
    /// Unique per tenant; `[A-Za-z0-9][A-Za-z0-9_.-]{0,63}`.
    pub name: String,
    /// Free text for people.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// When the task fires; `None` means manual/API only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trigger: Option<TriggerSpec>,
    /// What to do with fire instants missed while ax was down.
    pub catch_up: CatchUp,
    /// What to do when a fire comes while the previous run is active.
    pub overlap: Overlap,
    /// 0..=9, higher first in the dispatch queue.
    pub priority: u8,
    /// The typed values a run's input is made of (`task::params`); empty:
    /// the input is whatever the trigger sends.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub params: Vec<ParamSpec>,
    /// The DAG, in declaration order (at least one step).
    pub steps: Vec<StepSpec>,
    /// How much finished history to keep (`crate::scheduler::retention`); `None`: the
    /// server defaults.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention: Option<retention::RetentionSpec>,
    /// Where failures, dead letters and late starts are reported
    /// (`crate::scheduler::alerts`); `None`: only the tenant's alerts, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub alerts: Option<alerts::AlertSpec>,
    /// Config values every step can read (`config.get`); a step's own
    /// `config` overrides single keys.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
    /// Whether attempts are recorded for replay (`ax run replay`); a step's
    /// own `record` overrides it.
    #[serde(skip_serializing_if = "is_off")]
    pub record: RecordMode,
}

fn is_off(mode: &RecordMode) -> bool {
    *mode == RecordMode::Off
}

/// One node of a task's DAG.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepSpec {
    /// Unique within the task; same charset as task names.
    pub name: String,
    /// The plugin to run: `name@version`, `name@RANGE` or `name@TAG`.
    pub plugin: PluginRef,
    /// The input template (see [`crate::template`]); `{}` when absent.
    pub input: Value,
    /// Per-attempt limits; unset fields take [`Limits::default`].
    #[serde(skip_serializing_if = "StepLimits::is_unset")]
    pub limits: StepLimits,
    /// A named slot pool bounding concurrency across tasks.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<String>,
    /// How failed attempts are retried.
    pub retry: RetryPolicy,
    /// Steps that must finish first (per [`StepSpec::trigger_rule`]).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub needs: Vec<String>,
    /// A CEL condition; false means the step is skipped. Stored now, evaluated at run time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// How upstream results decide whether this step runs.
    pub trigger_rule: TriggerRule,
    /// Destinations this step may send HTTP requests to (none by default).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub allow_http: Vec<HttpPattern>,
    /// Names of the tenant's secrets this step may read (none by default).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub secrets: Vec<String>,
    /// The key-value store this step sees, if any (none by default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv: Option<KvScope>,
    /// Config values for this step, over the task's.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
    /// Whether this step's attempts are recorded; `None`: the task's `record`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub record: Option<RecordMode>,
}

/// The plugin a step runs, written `name@SELECTOR`: an exact version
/// (`p@1.2.3`), a semver range (`p@^1.2`, `p@~1.2`, `p@>=1.0, <2`, `p@1.x`)
/// or a tag (`p@stable`). Which version a range or a tag means is decided
/// when an attempt starts (`crate::store::resolve_plugin`), not here.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PluginRef {
    /// The plugin's name.
    pub name: String,
    /// Which of its versions.
    pub version: VersionSelector,
}

/// Which version of a plugin a step names. The text after `@` is read as,
/// in this order: a semver version (exact); a semver range (what the
/// `semver` crate, Cargo's, reads: a bare `1` or `1.2` is `^1`, `^1.2`); a
/// tag ([`is_valid_tag`]: a name starting with a letter that is not a range).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum VersionSelector {
    /// That version and no other.
    Exact(String),
    /// The highest uploaded version the range matches.
    Range(VersionRange),
    /// The version the tag points at.
    Tag(String),
}

/// Longest range text after `@` (`>=1.0.0-rc.1, <2.0.0` is 20).
pub const MAX_RANGE_LEN: usize = 128;

/// A semver range as written, with its parse. Compared, hashed and written
/// back by its text, so a stored definition reads back as sent.
#[derive(Clone, Debug)]
pub struct VersionRange {
    text: String,
    req: semver::VersionReq,
}

impl VersionRange {
    /// The range as written.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Whether `version` is in the range. A pre-release (`1.3.0-rc.1`) is
    /// only when a comparator names a pre-release of the same
    /// `MAJOR.MINOR.PATCH` (`>=1.3.0-rc.1`), as in Cargo; text that is not
    /// a semver version is not.
    pub fn matches(&self, version: &str) -> bool {
        semver::Version::parse(version).is_ok_and(|v| self.req.matches(&v))
    }
}

impl PartialEq for VersionRange {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}
impl Eq for VersionRange {}
impl std::hash::Hash for VersionRange {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.text.hash(h);
    }
}
impl PartialOrd for VersionRange {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for VersionRange {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.text.cmp(&other.text)
    }
}

impl VersionSelector {
    /// The exact version, if this selector names one.
    pub fn exact(&self) -> Option<&str> {
        match self {
            Self::Exact(v) => Some(v),
            _ => None,
        }
    }

    /// The tag, if this selector is one.
    pub fn tag(&self) -> Option<&str> {
        match self {
            Self::Tag(t) => Some(t),
            _ => None,
        }
    }

    /// Of `versions` (of one plugin), the one an exact version or a range
    /// selects: the exact one, or the highest in the range by semver order.
    /// A tag selects through its record, so this gives `None` for it.
    pub fn pick<'a>(&self, versions: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
        match self {
            Self::Exact(want) => versions.into_iter().find(|v| v == want),
            Self::Range(range) => versions
                .into_iter()
                .filter_map(|v| semver::Version::parse(v).ok().map(|p| (p, v)))
                .filter(|(p, _)| range.req.matches(p))
                .max_by(|(a, _), (b, _)| a.cmp(b))
                .map(|(_, v)| v),
            Self::Tag(_) => None,
        }
    }
}

impl fmt::Display for VersionSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Exact(v) | Self::Tag(v) => f.write_str(v),
            Self::Range(r) => f.write_str(&r.text),
        }
    }
}

impl FromStr for VersionSelector {
    type Err = String;

    /// Reads the text after `@` (see [`VersionSelector`] for the order).
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if is_valid_version(s) {
            return Ok(Self::Exact(s.to_owned()));
        }
        if s.len() <= MAX_RANGE_LEN
            && let Ok(req) = semver::VersionReq::parse(s)
        {
            return Ok(Self::Range(VersionRange {
                text: s.to_owned(),
                req,
            }));
        }
        if is_valid_tag(s) {
            return Ok(Self::Tag(s.to_owned()));
        }
        Err(format!(
            "`{}` is neither a semver version (1.2.0, 1.2.0-rc.1), a version range \
             (^1.2, ~1.2, >=1.0, <2, 1.x) nor a tag (a name starting with a letter, \
             at most {MAX_NAME_LEN} characters)",
            shorten(s)
        ))
    }
}

/// Per-attempt limits a step asks for. Each is checked against the tenant's
/// [`Caps`] on save.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StepLimits {
    /// Instruction budget (wasmtime fuel).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fuel: Option<u64>,
    /// Linear memory cap, in MiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_mb: Option<u64>,
    /// Wall-clock budget, written `30s`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "duration_text::option"
    )]
    pub timeout: Option<Duration>,
    /// Outbound HTTP requests per attempt.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_requests: Option<u32>,
    /// Per-request HTTP timeout, written `10s`.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "duration_text::option"
    )]
    pub http_timeout: Option<Duration>,
    /// Largest HTTP response body, in KiB.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub http_response_kb: Option<u64>,
}

impl StepLimits {
    /// Whether no limit is set (all defaults).
    pub fn is_unset(&self) -> bool {
        *self == StepLimits::default()
    }
}

/// MiB to bytes, saturating (validation keeps real values far below overflow).
fn mib(mb: u64) -> u64 {
    mb.saturating_mul(1 << 20)
}

impl StepSpec {
    /// The limits an attempt of this step gets: [`Limits::default`] with the
    /// step's `fuel`, `memory_mb` and `timeout` applied.
    pub fn limits_or_default(&self) -> Limits {
        let mut limits = Limits::default();
        if let Some(fuel) = self.limits.fuel {
            limits.fuel = fuel;
        }
        if let Some(mb) = self.limits.memory_mb {
            limits.memory_bytes = mib(mb);
        }
        if let Some(timeout) = self.limits.timeout {
            limits.timeout = timeout;
        }
        limits
    }

    /// [`StepSpec::limits_or_default`], each value lowered to its cap
    /// ([`Limits::capped`]): what an attempt of this step gets at its start.
    pub fn limits_capped(&self, caps: &Caps) -> Limits {
        self.limits_or_default().capped(caps)
    }
}

impl StepSpec {
    /// The HTTP limits an attempt of this step gets (defaults where unset).
    pub fn http_limits(&self) -> capability::HttpLimits {
        let mut http = capability::HttpLimits::default();
        if let Some(n) = self.limits.http_requests {
            http.max_requests = n;
        }
        if let Some(t) = self.limits.http_timeout {
            http.timeout = t;
        }
        if let Some(kb) = self.limits.http_response_kb {
            http.max_response_bytes = kb.saturating_mul(1 << 10);
        }
        http
    }
}

impl TaskSpec {
    /// What step `i` declares: its allow-list, HTTP limits, secret names, KV
    /// scope and config (the task's, overridden by the step's).
    pub fn step_grants(&self, i: usize) -> StepGrants {
        let step = &self.steps[i];
        let mut config = self.config.clone();
        config.extend(step.config.iter().map(|(k, v)| (k.clone(), v.clone())));
        StepGrants {
            allow_http: step.allow_http.clone(),
            http_limits: step.http_limits(),
            secrets: step.secrets.clone(),
            kv: step.kv,
            config,
            record: step.record.unwrap_or(self.record),
        }
    }

    /// The steps as `(name, needs)` pairs, the shape [`crate::dag`] takes.
    pub fn graph(&self) -> Vec<(&str, &[String])> {
        self.steps
            .iter()
            .map(|s| (s.name.as_str(), s.needs.as_slice()))
            .collect()
    }

    /// The step with this name.
    pub fn step(&self, name: &str) -> Option<&StepSpec> {
        self.steps.iter().find(|s| s.name == name)
    }
}

impl fmt::Display for PluginRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}@{}", self.name, self.version)
    }
}

impl FromStr for PluginRef {
    type Err = String;

    /// Reads `name@SELECTOR`, checking the name's charset and the selector
    /// ([`VersionSelector`]).
    fn from_str(s: &str) -> Result<Self, String> {
        let Some((name, version)) = s.split_once('@') else {
            return Err(format!(
                "`{}` has no version: write the plugin as name@1.2.3, name@^1.2 or name@TAG",
                shorten(s)
            ));
        };
        if !is_valid_name(name) {
            return Err(format!(
                "`{}` is not a valid plugin name: use letters, digits, `_`, `.` and `-`, \
                 start with a letter or digit, at most {MAX_NAME_LEN} characters",
                shorten(name)
            ));
        }
        Ok(PluginRef {
            name: name.to_owned(),
            version: version.parse()?,
        })
    }
}

impl Serialize for PluginRef {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for PluginRef {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d)?.parse().map_err(de::Error::custom)
    }
}

/// Durations written as humantime text (`30s`, `2m`, `1h 30m`); the retry
/// policy's backoff uses them too.
pub(super) mod duration_text {
    use std::time::Duration;

    use serde::Serializer;

    pub(in crate::task) fn plain<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&humantime::format_duration(*d))
    }

    pub(in crate::task) fn option<S: Serializer>(
        d: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => plain(d, s),
            None => s.serialize_none(),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::task::load;
    use crate::task::test_support::{CAPS, SPEC_EXAMPLE, plugin, secs};

    #[test]
    fn plugin_ref_round_trips_as_text() {
        let p = plugin("extract-orders@1.2.0-rc.1");
        assert_eq!(p.name, "extract-orders");
        assert_eq!(p.version.exact(), Some("1.2.0-rc.1"));
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            json!("extract-orders@1.2.0-rc.1")
        );
        assert_eq!(
            serde_json::from_value::<PluginRef>(json!("extract-orders@1.2.0-rc.1")).unwrap(),
            p
        );
        assert!(serde_json::from_value::<PluginRef>(json!("nope")).is_err());
    }

    #[test]
    fn the_text_after_the_at_reads_as_a_version_then_a_range_then_a_tag() {
        let sel = |s: &str| plugin(&format!("p@{s}")).version;
        assert_eq!(sel("1.2.3"), VersionSelector::Exact("1.2.3".into()));
        assert_eq!(sel("1.2.3+b.1"), VersionSelector::Exact("1.2.3+b.1".into()));
        for range in [
            "^1.2",
            "~1.2",
            ">=1.0, <2",
            "1.x",
            "1",
            "1.2",
            "*",
            "x",
            "=1.2.3",
        ] {
            assert!(
                matches!(sel(range), VersionSelector::Range(ref r) if r.text() == range),
                "{range}"
            );
        }
        assert_eq!(sel("stable"), VersionSelector::Tag("stable".into()));
        assert_eq!(sel("v2"), VersionSelector::Tag("v2".into()));
        for bad in ["", "-x", "1.2.3.4.5", "a b", ">=", "^", "1.2.3-", "nope!"] {
            let e = format!("p@{bad}").parse::<PluginRef>().unwrap_err();
            assert!(e.contains("neither a semver version"), "{bad}: {e}");
        }
        let long = format!(">={}", "1.0.0, >=".repeat(20));
        assert!(
            format!("p@{long}").parse::<PluginRef>().is_err(),
            "too long"
        );
        // Ranges and tags round-trip as written.
        for text in ["p@>=1.0, <2", "p@stable", "p@~1.2"] {
            let p = plugin(text);
            assert_eq!(serde_json::to_value(&p).unwrap(), json!(text));
            assert_eq!(serde_json::from_value::<PluginRef>(json!(text)).unwrap(), p);
        }
    }

    #[test]
    fn a_range_picks_the_highest_match_and_no_pre_release_unless_asked() {
        let versions = [
            "1.0.0",
            "1.1.0",
            "1.10.0-rc.1",
            "1.2.0",
            "2.0.0",
            "2.1.0-beta.1",
            "junk",
        ];
        let pick = |s: &str| {
            plugin(&format!("p@{s}"))
                .version
                .pick(versions)
                .map(str::to_owned)
        };
        assert_eq!(
            pick("^1.0").as_deref(),
            Some("1.2.0"),
            "semver order, not text order"
        );
        assert_eq!(pick("~1.1").as_deref(), Some("1.1.0"));
        assert_eq!(pick(">=1.0, <2").as_deref(), Some("1.2.0"));
        assert_eq!(pick("1.x").as_deref(), Some("1.2.0"));
        assert_eq!(pick("*").as_deref(), Some("2.0.0"), "not 2.1.0-beta.1");
        assert_eq!(pick("^2").as_deref(), Some("2.0.0"));
        // Asked for: a comparator with a pre-release of the same x.y.z.
        assert_eq!(pick(">=2.1.0-beta.1").as_deref(), Some("2.1.0-beta.1"));
        assert_eq!(pick(">=1.10.0-rc.0, <2").as_deref(), Some("1.10.0-rc.1"));
        assert_eq!(pick("^3"), None);
        assert_eq!(pick("1.1.0").as_deref(), Some("1.1.0"), "exact");
        assert_eq!(pick("1.3.0"), None, "exact, absent");
        assert_eq!(pick("stable"), None, "a tag resolves through its record");
        let VersionSelector::Range(r) = plugin("p@^1.2").version else {
            panic!("a range")
        };
        assert!(r.matches("1.9.0") && !r.matches("1.9.0-rc.1") && !r.matches("2.0.0"));
        assert!(!r.matches("not a version"));
    }

    const CAPS_TASK: &str = "name: t\nconfig: { endpoint: \"http://x\", retries: 3, verbose: true }\nsteps:\n  - name: a\n    plugin: p@1.0.0\n    allow_http: [\"https://*.example.com\", \"http://127.0.0.1:*\"]\n    secrets: [token]\n    kv: task\n    config: { retries: 5 }\n    limits: { http_requests: 7, http_timeout: 2s, http_response_kb: 64 }\n  - name: b\n    plugin: p@1.0.0\n    kv: true\n";

    #[test]
    fn capability_fields_are_read_and_merged_into_step_grants() {
        let spec = load(CAPS_TASK, &CAPS).unwrap();
        let a = spec.step_grants(0);
        assert_eq!(
            a.allow_http
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>(),
            ["https://*.example.com", "http://127.0.0.1:*"]
        );
        assert_eq!(a.secrets, ["token"]);
        assert_eq!(a.kv, Some(KvScope::Task));
        assert_eq!(a.config["retries"], "5", "the step overrides the task");
        assert_eq!(a.config["endpoint"], "http://x");
        assert_eq!(a.config["verbose"], "true");
        assert_eq!(a.http_limits.max_requests, 7);
        assert_eq!(a.http_limits.timeout, secs(2));
        assert_eq!(a.http_limits.max_response_bytes, 64 << 10);
        let b = spec.step_grants(1);
        assert_eq!(b.kv, Some(KvScope::Tenant));
        assert!(b.allow_http.is_empty() && b.secrets.is_empty());
        assert_eq!(b.config["retries"], "3");
        assert_eq!(b.http_limits, capability::HttpLimits::default());
    }

    #[test]
    fn capability_fields_survive_storing() {
        let spec = load(CAPS_TASK, &CAPS).unwrap();
        let stored = serde_json::to_value(&spec).unwrap();
        let back: TaskSpec = serde_json::from_value(stored).unwrap();
        assert_eq!(back, spec);
    }

    #[test]
    fn a_step_declaring_nothing_is_granted_nothing() {
        let spec = load("name: t\nplugin: p@1.0.0\n", &CAPS).unwrap();
        let g = spec.step_grants(0);
        assert!(g.allow_http.is_empty() && g.secrets.is_empty() && g.config.is_empty());
        assert_eq!(g.kv, None);
        let spec = load("name: t\nplugin: p@1.0.0\nkv: false\n", &CAPS).unwrap();
        assert_eq!(spec.step_grants(0).kv, None);
    }

    #[test]
    fn limits_or_default_overrides_only_what_is_set() {
        let spec = load(SPEC_EXAMPLE, &CAPS).unwrap();
        let extract = spec.steps[0].limits_or_default();
        assert_eq!(extract.fuel, 50_000_000);
        assert_eq!(extract.memory_bytes, 64 << 20);
        assert_eq!(extract.timeout, secs(30));
        assert_eq!(extract.max_output_bytes, Limits::default().max_output_bytes);
        assert_eq!(spec.steps[1].limits_or_default(), Limits::default());
        let partial = load("name: t\nplugin: p@1.0.0\nlimits: {memory_mb: 16}\n", &CAPS).unwrap();
        let limits = partial.steps[0].limits_or_default();
        assert_eq!(
            (limits.fuel, limits.memory_bytes, limits.timeout),
            (Limits::default().fuel, 16 << 20, Limits::default().timeout)
        );
    }

    #[test]
    fn limits_capped_lowers_defaults_to_the_caps() {
        let spec = load("name: t\nplugin: p@1.0.0\n", &CAPS).unwrap();
        let small = Caps {
            max_fuel: 1000,
            max_memory_mb: 8,
            max_timeout: secs(5),
        };
        let limits = spec.steps[0].limits_capped(&small);
        assert_eq!(
            (limits.fuel, limits.memory_bytes, limits.timeout),
            (1000, 8 << 20, secs(5))
        );
        assert_eq!(
            spec.steps[0].limits_capped(&Caps::UNLIMITED),
            Limits::default()
        );
    }
}
