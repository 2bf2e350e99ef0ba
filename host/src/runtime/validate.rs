//! Checks that uploaded bytes are an ax plugin: WebAssembly, a component (not
//! a core module), exporting the ax world's `run`, importing only what ax
//! provides. Each failure names what is wrong. Used by `ax exec` and by upload.

use std::fmt::Write as _;

use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::component::types::ComponentItem;

use super::{Error, Result};

/// The WIT world plugins must target.
pub const WORLD: &str = "ax:plugin/task@0.1.0";

/// Import names a plugin may use: the ax host interfaces, outbound wasi:http
/// (every request checked against the step's allow-list; a step without one
/// gets every request denied) and the WASI 0.2 families wasmtime-wasi
/// provides (whose dangerous parts are denied by the context: no preopens, no
/// sockets, no environment). `wasi:http/incoming-handler` is not provided: a
/// plugin is called through `run`, never served requests.
const ALLOWED_IMPORTS: &[&str] = &[
    "ax:plugin/types@0.1.",
    "ax:plugin/log@0.1.",
    "ax:plugin/progress@0.1.",
    "ax:plugin/config@0.1.",
    "ax:plugin/secrets@0.1.",
    "ax:plugin/kv@0.1.",
    "wasi:http/outgoing-handler@0.2.",
    "wasi:http/types@0.2.",
    "wasi:cli/",
    "wasi:clocks/",
    "wasi:filesystem/",
    "wasi:io/",
    "wasi:random/",
    "wasi:sockets/",
];

/// The preamble: `\0asm`, then a version/layer word that tells a core module
/// (1, 0) from a component (0x0d, 1).
pub(super) fn check_header(bytes: &[u8]) -> Result<()> {
    const MAGIC: &[u8] = b"\0asm";
    if bytes.len() < 8 || &bytes[..4] != MAGIC {
        return Err(Error::Malformed(if bytes.is_empty() {
            "the body is empty".into()
        } else {
            "it does not start with the `\\0asm` magic bytes".into()
        }));
    }
    match &bytes[4..8] {
        [1, 0, 0, 0] => Err(Error::CoreModule),
        [_, _, 1, 0] => Ok(()),
        other => Err(Error::Malformed(format!(
            "unknown WebAssembly version/layer {other:02x?}"
        ))),
    }
}

/// What can be known of `bytes` without compiling them, in a fraction of a
/// compilation's time: the header, a full validation of the binary (every
/// function body), and the names of the component's own imports and exports
/// against the ax world ([`ALLOWED_IMPORTS`], a `run` function). What only a
/// compilation can tell — the *types* of the imports and of `run`, what
/// Cranelift or the engine's limits refuse — [`check_world`] and the linker
/// check after it, in the background.
///
/// Validated with every WebAssembly feature on: this check must never refuse
/// what the engine would accept; a feature the engine does not support is
/// then refused by the compilation, with its reason.
pub(super) fn check_cheap(bytes: &[u8]) -> Result<()> {
    check_header(bytes)?;
    wasmparser::Validator::new_with_features(wasmparser::WasmFeatures::all())
        .validate_all(bytes)
        .map_err(|e| Error::Invalid(format!("{e}")))?;
    let (mut imports, mut has_run, mut exports) = (Vec::new(), false, String::new());
    // Nested modules and components have their own imports: only the
    // outermost component's (depth 0) are the plugin's.
    let mut depth = 0usize;
    for payload in wasmparser::Parser::new(0).parse_all(bytes) {
        use wasmparser::Payload;
        match payload.map_err(|e| Error::Invalid(format!("{e}")))? {
            Payload::ModuleSection { .. } | Payload::ComponentSection { .. } => depth += 1,
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(section) if depth == 0 => {
                for import in section {
                    let import = import.map_err(|e| Error::Invalid(format!("{e}")))?;
                    // A type import (`context`, `task-error` of the world)
                    // names a type of an imported interface, not something
                    // the host provides: as in `check_world`, not an import.
                    if !matches!(import.ty, wasmparser::ComponentTypeRef::Type(_)) {
                        imports.push(import.name.name.to_string());
                    }
                }
            }
            Payload::ComponentExportSection(section) if depth == 0 => {
                for export in section {
                    let export = export.map_err(|e| Error::Invalid(format!("{e}")))?;
                    let name = export.name.name;
                    if name == "run" && export.kind == wasmparser::ComponentExternalKind::Func {
                        has_run = true;
                    }
                    if !exports.is_empty() {
                        exports.push_str(", ");
                    }
                    let _ = write!(exports, "`{name}`");
                }
            }
            _ => {}
        }
    }
    check_names(imports.iter().map(String::as_str), has_run, exports)
}

/// The rules on names both checks share: only allowed imports, a `run` func.
fn check_names<'a>(
    imports: impl Iterator<Item = &'a str>,
    has_run: bool,
    mut exports: String,
) -> Result<()> {
    let unsupported: Vec<&str> = imports
        .filter(|name| !ALLOWED_IMPORTS.iter().any(|p| name.starts_with(p)))
        .collect();
    if !unsupported.is_empty() {
        let names = unsupported
            .iter()
            .map(|n| format!("`{n}`"))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(Error::UnsupportedImport(names));
    }
    if !has_run {
        if exports.is_empty() {
            exports.push_str("nothing");
        }
        return Err(Error::WrongWorld(format!(
            "it exports no `run` function (it exports {exports})"
        )));
    }
    Ok(())
}

/// Checks the component's imports and exports against the ax world.
pub(super) fn check_world(engine: &Engine, component: &Component) -> Result<()> {
    let ty = component.component_type();
    let mut exports = String::new();
    let mut has_run = false;
    for (name, item) in ty.exports(engine) {
        if name == "run" && matches!(item.ty, ComponentItem::ComponentFunc(_)) {
            has_run = true;
        }
        if !exports.is_empty() {
            exports.push_str(", ");
        }
        let _ = write!(exports, "`{name}`");
    }
    check_names(ty.imports(engine).map(|(name, _)| name), has_run, exports)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::fixtures::example;

    #[test]
    fn empty_and_foreign_bytes_are_malformed() {
        assert!(matches!(check_header(b""), Err(Error::Malformed(_))));
        assert!(matches!(
            check_header(b"PK\x03\x04zipfile"),
            Err(Error::Malformed(_))
        ));
    }

    #[test]
    fn core_module_is_named_as_such() {
        let err = check_header(b"\0asm\x01\0\0\0").unwrap_err();
        assert!(matches!(err, Error::CoreModule));
        assert!(err.to_string().contains("wasm32-wasip2"));
    }

    #[test]
    fn the_cheap_check_refuses_by_names_and_leaves_types_to_the_compiler() {
        for ok in ["echo", "hello", "notify", "invalid_wrong_signature"] {
            check_cheap(&example(ok)).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        let err = check_cheap(&example("invalid-not-ax")).unwrap_err();
        assert!(matches!(err, Error::WrongWorld(_)), "{err}");
        assert!(err.to_string().contains("wasi:cli/run"), "{err}");
        let err = check_cheap(&example("invalid_extra_import")).unwrap_err();
        assert!(matches!(err, Error::UnsupportedImport(_)), "{err}");
        assert!(err.to_string().contains("test:evil/backdoor"), "{err}");
        // A body cut short is not valid wasm.
        let echo = example("echo");
        let err = check_cheap(&echo[..echo.len() / 2]).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{err}");
    }

    #[test]
    fn component_preamble_passes() {
        assert!(check_header(b"\0asm\x0d\0\x01\0").is_ok());
    }
}
