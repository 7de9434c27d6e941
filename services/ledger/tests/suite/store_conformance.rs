//! The `DurableJsonStore` contract, run against all three backends through the trait.

use super::common::{open_store, Backend};
use kube_harness_ledger::store::{locked, MAX_DOCUMENT_BYTES};
use kube_harness_ledger::{DurableJsonStore, Key, StoreError};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

fn k(s: &str) -> Key {
    Key::new(s).unwrap()
}

async fn contract(store: Arc<dyn DurableJsonStore>) {
    // Read, write, overwrite, remove.
    assert_eq!(store.read_json(&k("a/doc")).await.unwrap(), None);
    store
        .write_json(&k("a/doc"), &json!({"n": 1, "s": "é", "f": 1.5}))
        .await
        .unwrap();
    assert_eq!(
        store.read_json(&k("a/doc")).await.unwrap(),
        Some(json!({"n": 1, "s": "é", "f": 1.5}))
    );
    store
        .write_json(&k("a/doc"), &json!([1, 2, 3]))
        .await
        .unwrap();
    assert_eq!(
        store.read_json(&k("a/doc")).await.unwrap(),
        Some(json!([1, 2, 3]))
    );
    assert!(store.remove(&k("a/doc")).await.unwrap());
    assert!(!store.remove(&k("a/doc")).await.unwrap());
    assert_eq!(store.read_json(&k("a/doc")).await.unwrap(), None);

    // list_dir: immediate children only, documents and directories, sorted and de-duplicated,
    // including names that sort between a directory's children (`b-c` between `b` and `b/x`).
    for key in ["d/b", "d/b/x", "d/b/y/z", "d/b-c", "d/a", "d2/q", "e"] {
        store.write_json(&k(key), &json!(key)).await.unwrap();
    }
    assert_eq!(
        store.list_dir(Some(&k("d"))).await.unwrap(),
        vec!["a", "b", "b-c"]
    );
    assert_eq!(
        store.list_dir(Some(&k("d/b"))).await.unwrap(),
        vec!["x", "y"]
    );
    assert_eq!(
        store.list_dir(Some(&k("nothing"))).await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(
        store.list_dir(Some(&k("e"))).await.unwrap(),
        Vec::<String>::new()
    );
    // `a` held only a removed document: the file backend keeps its empty directory, the others
    // have no trace of it, so it is left out of the comparison.
    let root: Vec<String> = store
        .list_dir(None)
        .await
        .unwrap()
        .into_iter()
        .filter(|n| n != "a")
        .collect();
    assert_eq!(root, vec!["d", "d2", "e"]);

    // Oversized documents are refused and leave the old value in place.
    store.write_json(&k("big"), &json!("small")).await.unwrap();
    let big = Value::String("x".repeat(MAX_DOCUMENT_BYTES));
    match store.write_json(&k("big"), &big).await {
        Err(StoreError::TooLarge { size, limit, .. }) => assert!(size > limit),
        other => panic!("expected TooLarge, got {other:?}"),
    }
    assert_eq!(
        store.read_json(&k("big")).await.unwrap(),
        Some(json!("small"))
    );
    let just_fits = Value::String("x".repeat(MAX_DOCUMENT_BYTES - 2));
    store.write_json(&k("fits"), &just_fits).await.unwrap();
    assert_eq!(store.read_json(&k("fits")).await.unwrap(), Some(just_fits));

    // with_lock is mutually exclusive: read-modify-write under the lock never loses an update.
    store.write_json(&k("counter"), &json!(0)).await.unwrap();
    let mut handles = Vec::new();
    for _ in 0..8 {
        let store = store.clone();
        handles.push(tokio::spawn(async move {
            for _ in 0..5 {
                locked::<_, StoreError, _, _>(store.as_ref(), &k("counter"), |view| async move {
                    let n = view
                        .read_json(&k("counter"))
                        .await?
                        .and_then(|v| v.as_u64())
                        .unwrap();
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    view.write_json(&k("counter"), &json!(n + 1)).await
                })
                .await
                .unwrap();
            }
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
    assert_eq!(
        store.read_json(&k("counter")).await.unwrap(),
        Some(json!(40))
    );

    // A body's own error comes back as is, and the lock is released afterwards.
    let err = locked::<(), TestErr, _, _>(store.as_ref(), &k("counter"), |_| async {
        Err(TestErr("nope".into()))
    })
    .await;
    assert_eq!(err, Err(TestErr("nope".into())));
    let again = tokio::time::timeout(
        Duration::from_secs(5),
        locked::<u32, StoreError, _, _>(store.as_ref(), &k("counter"), |_| async { Ok(7) }),
    )
    .await
    .expect("lock released after an aborted body");
    assert_eq!(again.unwrap(), 7);
}

impl From<StoreError> for TestErr {
    fn from(e: StoreError) -> Self {
        TestErr(e.to_string())
    }
}
#[derive(Debug, PartialEq)]
struct TestErr(String);

async fn run(backend: Backend, name: &str) {
    let Some(fixture) = open_store(backend, name).await else {
        return;
    };
    contract(fixture.store.clone()).await;
    fixture.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn memory_store_contract() {
    run(Backend::Memory, "store_memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn file_store_contract() {
    run(Backend::File, "store_file").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_store_contract() {
    run(Backend::Postgres, "store_postgres").await;
}

/// PostgreSQL runs the lock body on the locking transaction: a failing body's writes roll back.
#[tokio::test]
async fn postgres_lock_body_error_rolls_back() {
    let Some(fixture) = open_store(Backend::Postgres, "store_pg_rollback").await else {
        return;
    };
    let store = fixture.store.clone();
    let result = locked::<(), TestErr, _, _>(store.as_ref(), &k("x"), |view| async move {
        view.write_json(&k("x"), &json!("written in a failed body"))
            .await?;
        Err(TestErr("fail after write".into()))
    })
    .await;
    assert_eq!(result, Err(TestErr("fail after write".into())));
    assert_eq!(store.read_json(&k("x")).await.unwrap(), None);
    fixture.cleanup().await;
}

/// The file backend leaves no temp files behind and writes documents as plain JSON files.
#[tokio::test]
async fn file_store_layout_is_inspectable() {
    let Some(fixture) = open_store(Backend::File, "store_layout").await else {
        return;
    };
    let store = fixture.store.clone();
    for i in 0..20 {
        store
            .write_json(&k(&format!("dir/doc{i}")), &json!({"i": i}))
            .await
            .unwrap();
    }
    locked::<(), StoreError, _, _>(store.as_ref(), &k("dir/doc1"), |_| async { Ok(()) })
        .await
        .unwrap();
    let root = fixture.dir.as_ref().unwrap().path().join("store/dir");
    let mut names: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert!(
        names
            .iter()
            .all(|n| n.ends_with(".json") || n == ".doc1.lock"),
        "{names:?}"
    );
    assert_eq!(names.iter().filter(|n| n.ends_with(".json")).count(), 20);
    let text = std::fs::read_to_string(root.join("doc3.json")).unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"i": 3})
    );
    fixture.cleanup().await;
}
