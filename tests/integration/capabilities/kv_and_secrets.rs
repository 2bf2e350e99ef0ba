//! KV, config and secrets granted to a step, through the runtime (no
//! server): KV round trips, tenants apart, the quota; only listed
//! config and secrets readable.

use std::sync::Arc;

use ax::capability::kv::KvStore;
use ax::capability::{Grants, KvGrant, KvLimits, KvNamespace};
use ax::store::kv::SledKv;
use serde_json::{Value, json};

use super::{err, limits, probe, results};

fn kv_grant(store: &Arc<SledKv>, tenant: &str, quota: u64) -> Grants {
    Grants {
        kv: Some(KvGrant {
            store: store.clone(),
            namespace: KvNamespace {
                tenant: tenant.into(),
                task: None,
            },
            limits: KvLimits {
                quota_bytes: quota,
                ..KvLimits::default()
            },
        }),
        ..Grants::default()
    }
}

#[tokio::test]
async fn kv_round_trips_and_is_denied_without_a_grant() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SledKv::open_dir(dir.path()).unwrap());
    let ops = json!([
        { "kv_set": { "key": "a/1", "value": {"n": 1} } },
        { "kv_set": { "key": "a/2", "value": [1, 2] } },
        { "kv_get": "a/1" },
        { "kv_list": "a/" },
        { "kv_delete": "a/2" },
        { "kv_get": "a/2" },
        { "kv_set": { "key": "", "value": 1 } },
        { "kv_set_bytes": { "key": "big", "bytes": 2_000_000 } },
    ]);
    let r = results(&probe(ops.clone(), &kv_grant(&store, "a", 1 << 20), &limits(5_000)).await);
    assert_eq!(r[2]["ok"], json!({"n": 1}));
    assert_eq!(r[3]["ok"], json!(["a/1", "a/2"]));
    assert_eq!(r[4]["ok"], true);
    assert_eq!(r[5]["ok"], Value::Null);
    assert!(err(&r[6]).contains("the key is empty"));
    assert!(err(&r[7]).contains("the limit is 1048576"), "{r:?}");
    // Another tenant sees nothing.
    let r = results(
        &probe(
            json!([{ "kv_get": "a/1" }]),
            &kv_grant(&store, "b", 1 << 20),
            &limits(5_000),
        )
        .await,
    );
    assert_eq!(r[0]["ok"], Value::Null);
    // No grant: every call says how to get one.
    let r = results(
        &probe(
            json!([{ "kv_get": "a/1" }]),
            &Grants::default(),
            &limits(5_000),
        )
        .await,
    );
    assert!(err(&r[0]).contains("declare `kv: tenant` or `kv: task`"));
}

#[tokio::test]
async fn kv_quota_refuses_a_write_and_keeps_the_store_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SledKv::open_dir(dir.path()).unwrap());
    let grants = kv_grant(&store, "a", 10_000);
    let r = results(
        &probe(
            json!([
                { "kv_set_bytes": { "key": "one", "bytes": 6_000 } },
                { "kv_set_bytes": { "key": "two", "bytes": 6_000 } },
                { "kv_list": "" },
            ]),
            &grants,
            &limits(5_000),
        )
        .await,
    );
    assert_eq!(r[0]["ok"], Value::Null);
    assert!(
        err(&r[1]).contains("quota of 10000 bytes would be exceeded"),
        "{r:?}"
    );
    assert_eq!(r[2]["ok"], json!(["one"]));
    assert_eq!(store.usage("a").unwrap(), 6_003);
}

#[tokio::test]
async fn config_and_listed_secrets_are_readable_others_not() {
    let grants = Grants {
        config: [("endpoint".to_string(), "http://x".to_string())].into(),
        secrets: [
            ("set".to_string(), Some("v".to_string())),
            ("unset".to_string(), None),
        ]
        .into(),
        ..Grants::default()
    };
    let r = results(
        &probe(
            json!([
                { "config": "endpoint" }, { "config": "missing" },
                { "secret": "set" }, { "secret": "unset" }, { "secret": "other" },
            ]),
            &grants,
            &limits(5_000),
        )
        .await,
    );
    assert_eq!(r[0]["ok"], "http://x");
    assert_eq!(r[1]["ok"], Value::Null);
    assert_eq!(r[2]["ok"], true);
    assert_eq!(r[3]["ok"], false);
    assert!(err(&r[4]).contains("secret `other` is not granted to this step"));
}
