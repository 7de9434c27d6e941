//! `PUT` and `GET /v1/files`: a file in and out of a session through a real worker over loopback,
//! its `harness.file.*` event, and what the next command sees (and does not report again).

use super::api_support::{config, start, start_with, TestLog};
use kube_harness_worker::api::model::ExecRequest;

/// Bytes no text codec would leave alone: every byte value, repeated.
fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
}

#[tokio::test]
async fn a_file_round_trips_and_is_an_upload_event_of_the_turn() {
    let w = start().await;
    let data = payload(3 << 20);
    let put = w
        .client
        .write_file("/session/in/deep/data.bin", data.clone())
        .await
        .unwrap();
    assert_eq!(
        (put.change.as_str(), put.bytes),
        ("created", data.len() as u64)
    );
    let kinds: Vec<_> = put
        .events
        .iter()
        .map(|e| {
            (
                e.kind.as_str(),
                e.data["path"].as_str(),
                e.data["source"].as_str(),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [(
            "harness.file.created",
            Some("/session/in/deep/data.bin"),
            Some("upload")
        )]
    );
    // The parents were made; the bytes are the bytes.
    assert_eq!(
        std::fs::read(w.host("/session/in/deep/data.bin")).unwrap(),
        data
    );
    let mut back = Vec::new();
    let n = w
        .client
        .read_file_into("/session/in/deep/data.bin", &mut back)
        .await
        .unwrap();
    assert_eq!((n, back == data), (data.len() as u64, true));

    // A command sees it, and does not report it as its own change.
    let r = w
        .client
        .exec(&ExecRequest::new("wc -c < /session/in/deep/data.bin"))
        .await
        .unwrap();
    assert_eq!(r.outcome.stdout.trim(), (3 << 20).to_string());
    assert!(
        r.events
            .iter()
            .all(|e| !e.kind.starts_with("harness.file.")),
        "the upload reported again by the command: {:?}",
        r.events
    );

    // Written again: modified, its mode kept.
    let r = w
        .client
        .exec(&ExecRequest::new("chmod 600 /session/in/deep/data.bin"))
        .await
        .unwrap();
    assert_eq!(r.outcome.exit_code, 0);
    let again = w
        .client
        .write_file("/session/in/deep/data.bin", b"short".to_vec())
        .await
        .unwrap();
    assert_eq!(again.change, "modified");
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(w.host("/session/in/deep/data.bin")).unwrap();
    assert_eq!((meta.len(), meta.permissions().mode() & 0o777), (5, 0o600));

    // The turn's file list has it.
    let ended = w.client.end_turn().await.unwrap().turn.unwrap();
    assert!(
        ended
            .file_changes
            .iter()
            .any(|f| f.path == "/session/in/deep/data.bin"),
        "{:?}",
        ended.file_changes
    );
    // Nothing of the upload machinery is left beside it.
    let names: Vec<_> = std::fs::read_dir(w.host("/session/in/deep"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["data.bin"]);
}

#[tokio::test]
async fn an_empty_file_and_an_artifact_round_trip() {
    let w = start().await;
    let put = w
        .client
        .write_file("/artifacts/empty", Vec::new())
        .await
        .unwrap();
    assert_eq!((put.change.as_str(), put.bytes), ("created", 0));
    let mut back = Vec::new();
    assert_eq!(
        w.client
            .read_file_into("/artifacts/empty", &mut back)
            .await
            .unwrap(),
        0
    );
}

#[tokio::test]
async fn an_upload_event_reaches_the_session_log() {
    let log = TestLog::start().await;
    let (tmp, mut cfg) = config();
    cfg.session_log = Some(log.config());
    let w = start_with(tmp, cfg).await;
    let put = w
        .client
        .write_file("/session/x.txt", b"x".to_vec())
        .await
        .unwrap();
    assert_eq!(put.log_pending, 0);
    let events = log.client().read_all("s1").await.unwrap();
    assert!(
        events.iter().any(|e| e.event_type == "harness.file.created"
            && e.payload["path"] == "/session/x.txt"
            && e.payload["source"] == "upload"),
        "{events:?}"
    );
}
