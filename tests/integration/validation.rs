//! Validation of plugin bytes: every bad upload gets a specific error; the
//! artifact cache serves good ones without recompiling.

use ax::runtime::{Error, LoadSource, Runtime, RuntimeConfig};

use crate::common::{RUNTIME, plugin_bytes};

fn load_err(bytes: &[u8]) -> Error {
    RUNTIME.load(bytes).expect_err("must be refused")
}

#[test]
fn garbage_is_not_webassembly() {
    let err = load_err(b"#!/bin/sh\nrm -rf /\n");
    assert!(matches!(err, Error::Malformed(_)), "{err}");
    assert!(err.to_string().contains("magic"), "{err}");
    assert!(matches!(load_err(b""), Error::Malformed(_)));
}

#[test]
fn core_module_is_refused_as_such() {
    // The smallest valid core module: magic and version 1.
    let err = load_err(b"\0asm\x01\0\0\0");
    assert!(matches!(err, Error::CoreModule), "{err}");
    assert!(err.to_string().contains("not a component"));
}

#[test]
fn truncated_component_is_invalid() {
    let bytes = plugin_bytes("echo");
    let err = load_err(&bytes[..bytes.len() / 2]);
    assert!(matches!(err, Error::Invalid(_)), "{err}");
}

#[test]
fn component_of_another_world_is_refused_naming_its_exports() {
    let err = load_err(&plugin_bytes("invalid-not-ax"));
    assert!(matches!(err, Error::WrongWorld(_)), "{err}");
    let message = err.to_string();
    assert!(message.contains("ax:plugin/task@0.1.0"), "{message}");
    assert!(message.contains("wasi:cli/run"), "{message}");
}

#[test]
fn component_importing_unknown_interfaces_is_refused_naming_them() {
    let err = load_err(&plugin_bytes("invalid_extra_import"));
    assert!(matches!(err, Error::UnsupportedImport(_)), "{err}");
    assert!(
        err.to_string().contains("test:evil/backdoor@0.1.0"),
        "{err}"
    );
}

#[test]
fn run_with_the_wrong_signature_is_refused() {
    let err = load_err(&plugin_bytes("invalid_wrong_signature"));
    assert!(matches!(err, Error::WrongWorld(_)), "{err}");
    assert!(err.to_string().contains("`run`"), "{err}");
}

#[test]
fn compiled_artifacts_are_cached_on_disk_and_reused() {
    let dir = tempfile::tempdir().unwrap();
    let config = RuntimeConfig {
        cache_dir: Some(dir.path().to_path_buf()),
        pooling: false,
        ..RuntimeConfig::default()
    };
    let bytes = plugin_bytes("hello");
    let first = Runtime::new(config.clone()).unwrap();
    let (plugin, source) = first.load_traced(&bytes).unwrap();
    assert_eq!(source, LoadSource::Compiled);
    assert_eq!(first.load_traced(&bytes).unwrap().1, LoadSource::Memory);
    let artifacts: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert_eq!(artifacts.len(), 1);
    let name = artifacts[0]
        .as_ref()
        .unwrap()
        .file_name()
        .into_string()
        .unwrap();
    assert!(name.starts_with(plugin.digest()), "{name}");

    let second = Runtime::new(config.clone()).unwrap();
    assert_eq!(second.load_traced(&bytes).unwrap().1, LoadSource::DiskCache);

    // A damaged artifact is discarded and the component compiled again.
    std::fs::write(artifacts[0].as_ref().unwrap().path(), b"not an artifact").unwrap();
    let third = Runtime::new(config).unwrap();
    assert_eq!(third.load_traced(&bytes).unwrap().1, LoadSource::Compiled);
}

#[test]
fn artifacts_are_keyed_by_the_engine_fingerprint() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = plugin_bytes("hello");
    let config = RuntimeConfig {
        cache_dir: Some(dir.path().to_path_buf()),
        pooling: false,
        ..RuntimeConfig::default()
    };
    let (plugin, _) = Runtime::new(config.clone())
        .unwrap()
        .load_traced(&bytes)
        .unwrap();
    let ours = std::fs::read_dir(dir.path())
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    // An artifact left by an engine with other settings (another ax version)
    // sits under another fingerprint: it is never deserialized.
    std::fs::remove_file(&ours).unwrap();
    let foreign = dir
        .path()
        .join(format!("{}-0000000000000000.cwasm", plugin.digest()));
    std::fs::write(&foreign, b"compiled by someone else").unwrap();
    let (_, source) = Runtime::new(config).unwrap().load_traced(&bytes).unwrap();
    assert_eq!(source, LoadSource::Compiled);
    assert!(
        ours.exists(),
        "the fresh artifact is cached under this engine's fingerprint"
    );
    assert_eq!(
        std::fs::read(&foreign).unwrap(),
        b"compiled by someone else"
    );
}
