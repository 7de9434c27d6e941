//! File store durability: injected failures around write, fdatasync and directory fsync (the
//! store must fail closed), dropped unsynced bytes, torn tails, damaged records, group commit.

use kube_harness_session_log::model::{EventInput, PreparedEvent, DEFAULT_MAX_PAYLOAD_BYTES};
use kube_harness_session_log::store::{FaultFs, FileStore, FileStoreOptions, FsOp, RealFs, SyncFs};
use kube_harness_session_log::{RunId, StoreError};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn event(key: &str) -> PreparedEvent {
    let input = EventInput {
        append_idempotency_key: key.into(),
        occurrence_id: None,
        event_type: "t".into(),
        payload: json!({"key": key}),
    };
    PreparedEvent::new(input, DEFAULT_MAX_PAYLOAD_BYTES).unwrap()
}

fn run(r: &str) -> RunId {
    RunId::parse(r).unwrap()
}

async fn open(path: &Path, fs: Arc<dyn SyncFs>) -> anyhow::Result<FileStore> {
    FileStore::open(path.to_path_buf(), FileStoreOptions::default(), fs).await
}

async fn keys(store: &FileStore, r: &str) -> Result<Vec<String>, StoreError> {
    let (events, more) = store.read(&run(r), 0, 1000, u64::MAX).await?;
    assert!(!more);
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.sequence, i as u64 + 1);
    }
    Ok(events
        .into_iter()
        .map(|e| e.append_idempotency_key)
        .collect())
}

fn data_path(dir: &tempfile::TempDir) -> PathBuf {
    dir.path().join("sessions.ndjson")
}

#[tokio::test]
async fn failed_write_poisons_the_store_and_restart_drops_the_torn_half() {
    let dir = tempfile::tempdir().unwrap();
    let path = data_path(&dir);
    let fs = Arc::new(FaultFs::new());
    let store = open(&path, fs.clone()).await.unwrap();
    store.append(&run("r"), event("a")).await.unwrap();
    fs.fail_next(FsOp::Write);
    let err = store.append(&run("r"), event("b")).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Poisoned(ref m) if m.contains("write")),
        "{err}"
    );
    // Fail closed: later appends fail although the disk works again; reads still serve acked data.
    let err = store.append(&run("r"), event("c")).await.unwrap_err();
    assert!(matches!(err, StoreError::Poisoned(_)), "{err}");
    assert!(store.poisoned().is_some());
    assert_eq!(keys(&store, "r").await.unwrap(), vec!["a"]);
    drop(store);
    let size_with_torn_half = std::fs::metadata(&path).unwrap().len();
    let reopened = open(&path, Arc::new(RealFs)).await.unwrap();
    assert_eq!(keys(&reopened, "r").await.unwrap(), vec!["a"]);
    assert!(
        std::fs::metadata(&path).unwrap().len() < size_with_torn_half,
        "torn half truncated"
    );
    reopened.append(&run("r"), event("b")).await.unwrap();
    assert_eq!(keys(&reopened, "r").await.unwrap(), vec!["a", "b"]);
}

#[tokio::test]
async fn failed_fdatasync_is_never_retried_then_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let path = data_path(&dir);
    let fs = Arc::new(FaultFs::new());
    let store = open(&path, fs.clone()).await.unwrap();
    store.append(&run("r"), event("a")).await.unwrap();
    fs.fail_next(FsOp::SyncData);
    let err = store.append(&run("r"), event("b")).await.unwrap_err();
    assert!(
        matches!(err, StoreError::Poisoned(ref m) if m.contains("fdatasync")),
        "{err}"
    );
    let syncs_after_failure = fs.calls().iter().filter(|c| **c == FsOp::SyncData).count();
    for key in ["c", "b"] {
        assert!(matches!(
            store.append(&run("r"), event(key)).await,
            Err(StoreError::Poisoned(_))
        ));
    }
    assert_eq!(
        fs.calls().iter().filter(|c| **c == FsOp::SyncData).count(),
        syncs_after_failure,
        "no fsync may be retried after a failure"
    );
    // A crash now loses what was never synced; everything acknowledged is still there.
    drop(store);
    fs.lose_unsynced(&path).unwrap();
    let reopened = open(&path, Arc::new(RealFs)).await.unwrap();
    assert_eq!(keys(&reopened, "r").await.unwrap(), vec!["a"]);
}

#[tokio::test]
async fn failed_directory_fsync_or_unsupported_fsync_refuses_to_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = data_path(&dir);
    let fs = Arc::new(FaultFs::new());
    fs.fail_next(FsOp::SyncDir);
    let err = open(&path, fs.clone()).await.err().unwrap().to_string();
    assert!(
        err.contains("fsync of directory") && err.contains("refusing to start"),
        "{err}"
    );

    let fs = Arc::new(FaultFs::new());
    fs.fail_always(FsOp::SyncData);
    let err = open(&path, fs).await.err().unwrap().to_string();
    assert!(
        err.contains("fdatasync") && err.contains("fail closed"),
        "{err}"
    );

    // With sync off the same broken filesystem is accepted: the documented opt-out.
    let fs = Arc::new(FaultFs::new());
    fs.fail_always(FsOp::SyncData);
    fs.fail_always(FsOp::SyncDir);
    let options = FileStoreOptions {
        sync: false,
        ..FileStoreOptions::default()
    };
    let store = FileStore::open(path.clone(), options, fs.clone())
        .await
        .unwrap();
    store.append(&run("r"), event("a")).await.unwrap();
    assert!(
        fs.calls().iter().all(|c| *c == FsOp::Write),
        "sync=false never syncs"
    );
}

#[tokio::test]
async fn every_acknowledgement_follows_the_sync_that_covers_it_and_syncs_are_shared() {
    let dir = tempfile::tempdir().unwrap();
    let path = data_path(&dir);
    let fs = Arc::new(FaultFs::new());
    let store = Arc::new(open(&path, fs.clone()).await.unwrap());
    let syncs_before = fs.calls().iter().filter(|c| **c == FsOp::SyncData).count();
    let mut tasks = Vec::new();
    for t in 0..64 {
        let (store, fs) = (store.clone(), fs.clone());
        tasks.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for i in 0..10 {
                let key = format!("t{t}-{i}");
                store.append(&run("r"), event(&key)).await.unwrap();
                // Durable length at the moment of the acknowledgement.
                acked.push((key, fs.durable_len()));
            }
            acked
        }));
    }
    let mut acked = Vec::new();
    for t in tasks {
        acked.extend(t.await.unwrap());
    }
    let data = std::fs::read(&path).unwrap();
    let mut end_of = std::collections::HashMap::new();
    let mut offset = 0u64;
    for line in data.split_inclusive(|b| *b == b'\n') {
        offset += line.len() as u64;
        let v: serde_json::Value = serde_json::from_slice(line).unwrap();
        end_of.insert(
            v["event"]["appendIdempotencyKey"]
                .as_str()
                .unwrap()
                .to_string(),
            offset,
        );
    }
    for (key, durable) in &acked {
        assert!(
            durable >= &end_of[key],
            "{key} acknowledged before its bytes were synced"
        );
    }
    let syncs = fs.calls().iter().filter(|c| **c == FsOp::SyncData).count() - syncs_before;
    assert!(
        syncs < 640,
        "640 appends from 64 tasks must share syncs, got {syncs} syncs"
    );
    assert_eq!(keys(&store, "r").await.unwrap().len(), 640);
}

#[tokio::test]
async fn torn_tail_is_truncated_once_and_damaged_records_refuse_replay_of_their_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = data_path(&dir);
    {
        let store = open(&path, Arc::new(RealFs)).await.unwrap();
        for i in 0..4 {
            store
                .append(&run("a"), event(&format!("a{i}")))
                .await
                .unwrap();
            store
                .append(&run("b"), event(&format!("b{i}")))
                .await
                .unwrap();
        }
    }
    let clean = std::fs::read(&path).unwrap();
    // A torn final record (no newline) is cut off at restart.
    let mut torn = clean.clone();
    torn.extend_from_slice(br#"{"crc32c":"0000","event":{"runId":"a","seq"#);
    std::fs::write(&path, &torn).unwrap();
    {
        let store = open(&path, Arc::new(RealFs)).await.unwrap();
        assert_eq!(
            std::fs::read(&path).unwrap(),
            clean,
            "exactly the torn fragment is removed"
        );
        assert_eq!(keys(&store, "a").await.unwrap().len(), 4);
    }
    // A damaged complete record (here: line 3, run a's 2nd event) refuses replay of run a only.
    let mut lines: Vec<Vec<u8>> = clean
        .split_inclusive(|b| *b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    let text = String::from_utf8(lines[2].clone()).unwrap();
    assert!(text.contains(r#""runId":"a""#));
    lines[2] = text.replace(r#""key":"a1""#, r#""key":"a9""#).into_bytes();
    std::fs::write(&path, lines.concat()).unwrap();
    let store = open(&path, Arc::new(RealFs)).await.unwrap();
    let err = keys(&store, "a").await.unwrap_err().to_string();
    assert!(
        err.contains("run a cannot be replayed")
            && err.contains("line 3")
            && err.contains("checksum"),
        "{err}"
    );
    let err = store.append(&run("a"), event("new")).await.unwrap_err();
    assert!(
        matches!(err, StoreError::RunCorrupt { .. }),
        "appends to a damaged run are refused"
    );
    assert_eq!(
        keys(&store, "b").await.unwrap().len(),
        4,
        "other runs are unaffected"
    );
    store.append(&run("b"), event("b4")).await.unwrap();
    drop(store);
    assert!(
        std::fs::read(&path).unwrap().len() > clean.len(),
        "damaged data is kept, not truncated"
    );
}

#[tokio::test]
async fn a_sequence_gap_refuses_replay_of_that_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = data_path(&dir);
    {
        let store = open(&path, Arc::new(RealFs)).await.unwrap();
        for i in 0..3 {
            store
                .append(&run("a"), event(&format!("a{i}")))
                .await
                .unwrap();
        }
        store.append(&run("b"), event("b0")).await.unwrap();
    }
    let clean = std::fs::read(&path).unwrap();
    let mut lines: Vec<&[u8]> = clean.split_inclusive(|b| *b == b'\n').collect();
    lines.remove(1); // run a's sequence 2: each remaining record is intact, but a has a gap
    std::fs::write(&path, lines.concat()).unwrap();
    let store = open(&path, Arc::new(RealFs)).await.unwrap();
    let err = keys(&store, "a").await.unwrap_err().to_string();
    assert!(err.contains("sequence gap: expected 2, found 3"), "{err}");
    assert_eq!(keys(&store, "b").await.unwrap(), vec!["b0"]);
}

#[tokio::test]
async fn an_unattributable_damaged_record_refuses_every_run() {
    let dir = tempfile::tempdir().unwrap();
    let path = data_path(&dir);
    {
        let store = open(&path, Arc::new(RealFs)).await.unwrap();
        store.append(&run("a"), event("a0")).await.unwrap();
    }
    let mut data = std::fs::read(&path).unwrap();
    data.extend_from_slice(b"\x00\x01garbage\n");
    std::fs::write(&path, &data).unwrap();
    let store = open(&path, Arc::new(RealFs)).await.unwrap();
    let err = keys(&store, "a").await.unwrap_err().to_string();
    assert!(err.contains("line 2") && err.contains("no run"), "{err}");
    assert!(store.append(&run("z"), event("z")).await.is_err());
}

#[tokio::test]
async fn a_second_process_cannot_open_the_same_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = data_path(&dir);
    let _first = open(&path, Arc::new(RealFs)).await.unwrap();
    let err = open(&path, Arc::new(RealFs))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("locked by another process"), "{err}");
    let missing = dir.path().join("no/such/dir/x.ndjson");
    let err = open(&missing, Arc::new(RealFs))
        .await
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("does not exist"), "{err}");
}

#[tokio::test]
async fn same_key_within_one_batch_is_stored_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(&data_path(&dir), Arc::new(RealFs)).await.unwrap());
    let mut tasks = Vec::new();
    for i in 0..50 {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let key = if i % 2 == 0 {
                "dup".to_string()
            } else {
                format!("u{i}")
            };
            store.append(&run("r"), event(&key)).await.unwrap()
        }));
    }
    let mut dup_seqs = std::collections::HashSet::new();
    for (i, t) in tasks.into_iter().enumerate() {
        let outcome = t.await.unwrap();
        if i % 2 == 0 {
            dup_seqs.insert(outcome.event.sequence);
        }
    }
    assert_eq!(dup_seqs.len(), 1);
    assert_eq!(keys(&store, "r").await.unwrap().len(), 26);
}

#[tokio::test]
async fn over_http_a_poisoned_store_answers_503_and_fails_its_health_check() {
    use kube_harness_service_kit::AuthConfig;
    use kube_harness_session_log::client::NewEvent;
    use kube_harness_session_log::server::ServerConfig;
    use kube_harness_session_log::Store;

    let dir = tempfile::tempdir().unwrap();
    let fs = Arc::new(FaultFs::new());
    let store = Store::File(Arc::new(open(&data_path(&dir), fs.clone()).await.unwrap()));
    let config = ServerConfig::new(AuthConfig::with_token(super::common::TOKEN).unwrap());
    let (base, _stop) = super::common::start_with(store, config).await;
    let client = kube_harness_session_log::SessionLogClient::new(
        &base,
        Some(super::common::TOKEN.into()),
        super::common::fast_retries(),
    )
    .unwrap();
    let event = |k: &str| NewEvent::with_key(k, "t", super::common::obj(json!({})));
    client.append("r", &event("a")).await.unwrap();
    let health = reqwest::get(format!("{base}/healthz")).await.unwrap();
    assert_eq!(health.status(), 200);

    fs.fail_next(FsOp::SyncData);
    let err = client
        .append("r", &event("b"))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("store-failed") && err.contains("fdatasync"),
        "{err}"
    );
    let health = reqwest::get(format!("{base}/healthz")).await.unwrap();
    assert_eq!(
        health.status(),
        503,
        "the liveness probe must see the poisoned store"
    );
    assert!(health.text().await.unwrap().contains("fdatasync"));
    let events = client.read_all("r").await.unwrap();
    assert_eq!(events.len(), 1, "acknowledged events stay readable");
}

/// Reads load their records from the file (the index holds positions, not events), so damage
/// done to a record after the store opened is caught when it is read, as at open: RunCorrupt for
/// that run, while other runs and retries of intact records are still served.
#[tokio::test]
async fn a_record_damaged_after_open_fails_its_read_not_others() {
    let dir = tempfile::tempdir().unwrap();
    let path = data_path(&dir);
    let store = open(&path, Arc::new(RealFs)).await.unwrap();
    store.append(&run("a"), event("a1")).await.unwrap();
    store.append(&run("b"), event("b1")).await.unwrap();
    store.append(&run("a"), event("a2")).await.unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(&path, text.replacen("\"key\":\"a2\"", "\"key\":\"a3\"", 1)).unwrap();
    let err = keys(&store, "a").await.unwrap_err();
    assert!(
        matches!(&err, StoreError::RunCorrupt { reason, .. } if reason.contains("checksum")),
        "{err}"
    );
    assert_eq!(keys(&store, "b").await.unwrap(), ["b1"]);
    let again = store.append(&run("a"), event("a1")).await.unwrap();
    assert_eq!((again.event.sequence, again.created), (1, false));
}
