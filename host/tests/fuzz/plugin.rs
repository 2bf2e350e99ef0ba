//! Plugin upload validation: `Runtime::load` (the header check, wasmtime's
//! parse, validation and compilation, then the check against the ax world,
//! as `POST /v1/plugins` runs it) on random bytes behind a real or a broken
//! preamble, and on real plugins from the build (host/build.rs exports their
//! folder as `AX_PLUGIN_DIR`) with a few bytes edited. Most edits are refused
//! while parsing; one that still validates is compiled, which is why the
//! bound is wider than the other targets'.

use std::sync::LazyLock;
use std::time::Duration;

use ax::runtime::{Runtime, RuntimeConfig};
use proptest::prelude::*;

use crate::strategies::{Edit, apply, edits};
use crate::{Target, Verdict, explained};

const TARGET: Target = Target {
    name: "plugin",
    cases: 192,
    // A compile of an example plugin takes ~0.1–1 s; the CI machine is shared.
    bound: Duration::from_secs(10),
};

/// Real plugins to edit: a good one, one that fails the world check, one
/// with an extra import.
const PLUGINS: &[&str] = &["hello", "echo", "invalid-not-ax", "invalid_extra_import"];

static PLUGIN_BYTES: LazyLock<Vec<Vec<u8>>> = LazyLock::new(|| {
    PLUGINS
        .iter()
        .map(|name| {
            let path = std::path::Path::new(env!("AX_PLUGIN_DIR")).join(format!("{name}.wasm"));
            std::fs::read(&path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
        })
        .collect()
});

/// One runtime for every case, as the host has; no pooling (a fuzz run
/// instantiates nothing) and a small memory cache, so valid edits do not
/// pile up.
static RUNTIME: LazyLock<Runtime> = LazyLock::new(|| {
    Runtime::new(RuntimeConfig {
        pooling: false,
        loaded_bytes: 16 << 20,
        ..RuntimeConfig::default()
    })
    .expect("a runtime")
});

/// Bytes that shift wasm's structure: section ids, LEB128 continuation and
/// huge lengths, the component preamble.
const TOKENS: &[&str] = &[
    "\0",
    "\u{7f}",
    "\u{1}",
    "\u{b}",
    "\0asm\r\0\u{1}\0",
    "\u{0}\u{0}\u{0}\u{0}",
];

#[derive(Debug, Clone)]
enum Case {
    /// A preamble (component, core module, other version) and random bytes.
    Random(u8, Vec<u8>),
    /// A real plugin (by index into [`PLUGINS`]) with edits.
    Mutated(usize, Vec<Edit>),
}

fn strategy() -> impl Strategy<Value = Case> {
    prop_oneof![
        1 => (0u8..4, prop::collection::vec(any::<u8>(), 0..256)).prop_map(|(p, b)| Case::Random(p, b)),
        2 => (0..PLUGINS.len(), edits(TOKENS, 4)).prop_map(|(i, e)| Case::Mutated(i, e)),
    ]
}

fn bytes(case: &Case) -> Vec<u8> {
    match case {
        Case::Random(preamble, rest) => {
            let mut out = match preamble {
                0 => b"\0asm\x0d\0\x01\0".to_vec(),
                1 => b"\0asm\x01\0\0\0".to_vec(),
                2 => b"\0asm\x0e\0\x01\0".to_vec(),
                _ => Vec::new(),
            };
            out.extend_from_slice(rest);
            out
        }
        Case::Mutated(i, e) => apply(&PLUGIN_BYTES[*i], e),
    }
}

fn check(bytes: &[u8]) -> Verdict {
    match RUNTIME.load(bytes) {
        Ok(_) => {
            crate::tally("loaded");
            Ok(())
        }
        Err(e) => {
            crate::tally(if bytes.starts_with(b"\0asm") {
                "refused"
            } else {
                "no preamble"
            });
            explained("Runtime::load", e.to_string())
        }
    }
}

#[test]
fn fuzz() {
    // The real plugins themselves load (and warm the compile path).
    for (name, bytes) in PLUGINS.iter().zip(PLUGIN_BYTES.iter()) {
        let outcome = RUNTIME.load(bytes);
        assert_eq!(
            outcome.is_ok(),
            *name == "hello" || *name == "echo",
            "{name}: {:?}",
            outcome.err()
        );
    }
    crate::run(&TARGET, check, strategy(), |case| check(&bytes(case)));
}
