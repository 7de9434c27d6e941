//! Attacks on `PUT` and `GET /v1/files`, each asserting the exact answer and that nothing was
//! written (or read) where it must not be: paths that climb out, symlinks a command planted on
//! the way or at the name, a read-only mount, bodies over the limit (declared and streamed), no
//! token or another session's, a directory or a fifo at the name, a turn on Tier-1.

use super::api_support::{config, start, start_with, start_with_tier, TOKEN};
use kube_harness_tier1::LocalTier1;
use kube_harness_worker::api::model::{code, ExecRequest};
use kube_harness_worker::api::WorkerClientError;
use std::path::Path;
use std::sync::Arc;

fn api_code(e: &WorkerClientError) -> (u16, &str) {
    (e.status().unwrap_or(0), e.code().unwrap_or(""))
}

/// Every name under `dir`, recursively (what an attack may have left).
fn tree(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = walkdir::WalkDir::new(dir)
        .min_depth(1)
        .into_iter()
        .flatten()
        .map(|e| e.path().strip_prefix(dir).unwrap().display().to_string())
        .collect();
    names.sort();
    names
}

#[tokio::test]
async fn paths_that_climb_out_or_are_not_plain_are_400_and_write_nothing() {
    let w = start().await;
    let outside = tempfile::tempdir().unwrap();
    let escape = format!("/session/../../../../..{}/pwned", outside.path().display());
    for path in [
        escape.as_str(),
        "/session/../artifacts/x",
        "/session/./x",
        "/session//x",
        "/session/x/",
        "session/x",
        "/etc/passwd",
        "/session",
        "/",
        "",
        "/session/a\0b",
    ] {
        let e = w
            .client
            .write_file(path, b"pwned".to_vec())
            .await
            .unwrap_err();
        assert_eq!(api_code(&e), (400, code::BAD_PATH), "{path:?}: {e}");
        let e = w
            .client
            .read_file_into(path, &mut Vec::new())
            .await
            .unwrap_err();
        assert_eq!(api_code(&e), (400, code::BAD_PATH), "GET {path:?}: {e}");
    }
    assert_eq!(tree(outside.path()), Vec::<String>::new());
    assert_eq!(tree(&w.host("/session")), Vec::<String>::new());
    assert_eq!(tree(&w.host("/artifacts")), Vec::<String>::new());
}

#[tokio::test]
async fn a_symlinked_directory_on_the_way_is_not_followed() {
    let w = start().await;
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "host secret").unwrap();
    // What a command can do: a symlink in the workspace to a host directory.
    std::os::unix::fs::symlink(outside.path(), w.host("/session/link")).unwrap();
    let e = w
        .client
        .write_file("/session/link/planted", b"pwned".to_vec())
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (400, code::BAD_PATH), "{e}");
    let e = w
        .client
        .read_file_into("/session/link/secret", &mut Vec::new())
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (400, code::BAD_PATH), "{e}");
    // Deeper: a parent to create below the symlink.
    let e = w
        .client
        .write_file("/session/link/new/dir/f", b"pwned".to_vec())
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (400, code::BAD_PATH), "{e}");
    assert_eq!(tree(outside.path()), ["secret"]);
}

#[tokio::test]
async fn a_symlink_at_the_name_is_replaced_on_write_and_not_read() {
    let w = start().await;
    let outside = tempfile::tempdir().unwrap();
    let host_file = outside.path().join("passwd");
    std::fs::write(&host_file, "root:x:0:0").unwrap();
    std::os::unix::fs::symlink(&host_file, w.host("/session/f")).unwrap();
    // Read: the symlink is not followed.
    let mut got = Vec::new();
    let e = w
        .client
        .read_file_into("/session/f", &mut got)
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (400, code::NOT_A_FILE), "{e}");
    assert!(got.is_empty());
    // Write: the symlink itself is replaced; the host file is untouched.
    let put = w
        .client
        .write_file("/session/f", b"mine".to_vec())
        .await
        .unwrap();
    assert_eq!(
        put.change, "created",
        "a symlink is not the file it points to"
    );
    assert_eq!(std::fs::read_to_string(&host_file).unwrap(), "root:x:0:0");
    let meta = std::fs::symlink_metadata(w.host("/session/f")).unwrap();
    assert!(meta.file_type().is_file());
    assert_eq!(std::fs::read(w.host("/session/f")).unwrap(), b"mine");
}

#[tokio::test]
async fn a_read_only_mount_is_403_and_unchanged() {
    let w = start().await;
    let before = tree(&w.host("/.agents"));
    let e = w
        .client
        .write_file("/.agents/skills/evil.md", b"pwned".to_vec())
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (403, code::READ_ONLY), "{e}");
    assert_eq!(tree(&w.host("/.agents")), before);
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_declared_or_streamed_and_writes_nothing() {
    let (tmp, mut cfg) = config();
    cfg.max_file_bytes = 1024;
    let w = start_with(tmp, cfg).await;
    // Declared: Content-Length says it.
    let e = w
        .client
        .write_file("/session/big", vec![b'x'; 4096])
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (413, code::PAYLOAD_TOO_LARGE), "{e}");
    // Streamed: no length, cut off at the limit.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        (0..8).map(|_| Ok(vec![b'y'; 512])).collect();
    let body = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    let e = w.client.write_file("/session/big", body).await.unwrap_err();
    assert_eq!(api_code(&e), (413, code::PAYLOAD_TOO_LARGE), "{e}");
    assert_eq!(tree(&w.host("/session")), Vec::<String>::new());
    // At the limit exactly: taken.
    w.client
        .write_file("/session/big", vec![b'z'; 1024])
        .await
        .unwrap();
}

#[tokio::test]
async fn no_token_or_another_sessions_token_is_401_and_writes_nothing() {
    let w = start().await;
    for token in [None, Some("another-sessions-token")] {
        let mut put = reqwest::Client::new()
            .put(format!("{}/v1/files?path=/session/x", w.base_url))
            .body("pwned");
        let mut get =
            reqwest::Client::new().get(format!("{}/v1/files?path=/session/x", w.base_url));
        if let Some(token) = token {
            put = put.bearer_auth(token);
            get = get.bearer_auth(token);
        }
        assert_eq!(put.send().await.unwrap().status().as_u16(), 401);
        assert_eq!(get.send().await.unwrap().status().as_u16(), 401);
    }
    assert!(!w.host("/session/x").exists());
    // The right token, for contrast.
    let ok = reqwest::Client::new()
        .put(format!("{}/v1/files?path=/session/x", w.base_url))
        .bearer_auth(TOKEN)
        .body("mine")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status().as_u16(), 200);
}

#[tokio::test]
async fn a_directory_or_a_fifo_at_the_name_is_refused_without_hanging() {
    let w = start().await;
    std::fs::create_dir(w.host("/session/dir")).unwrap();
    std::fs::write(w.host("/session/dir/kept"), "kept").unwrap();
    let e = w
        .client
        .write_file("/session/dir", b"x".to_vec())
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (409, code::NOT_A_FILE), "{e}");
    let e = w
        .client
        .read_file_into("/session/dir", &mut Vec::new())
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (400, code::NOT_A_FILE), "{e}");
    assert_eq!(tree(&w.host("/session/dir")), ["kept"]);
    // A fifo nobody writes: opening it for reading would block forever.
    let fifo = std::ffi::CString::new(
        w.host("/session/fifo")
            .into_os_string()
            .into_encoded_bytes(),
    )
    .unwrap();
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        w.client.read_file_into("/session/fifo", &mut Vec::new()),
    )
    .await
    .expect("a fifo must not hang the read");
    assert_eq!(api_code(&read.unwrap_err()), (400, code::NOT_A_FILE));
    // A missing file.
    let e = w
        .client
        .read_file_into("/session/none", &mut Vec::new())
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (404, code::NOT_FOUND), "{e}");
}

/// While the turn runs on Tier-1, the worker's copy is not where commands run: an upload there
/// would be invisible to them and fight the merge-back, a download would be stale.
#[tokio::test]
async fn files_are_409_while_the_turn_runs_on_tier1() {
    let (tmp, cfg) = config();
    let w = start_with_tier(tmp, cfg, Some(Arc::new(LocalTier1::default()))).await;
    std::fs::write(w.host("/session/a"), "a").unwrap();
    let r = w
        .client
        .exec(&ExecRequest::new("git --version"))
        .await
        .unwrap();
    assert_eq!(
        (r.outcome.tier, r.outcome.exit_code),
        (1, 0),
        "{}",
        r.outcome.stderr
    );
    let e = w
        .client
        .write_file("/session/b", b"b".to_vec())
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (409, code::TURN_ESCALATED), "{e}");
    let e = w
        .client
        .read_file_into("/session/a", &mut Vec::new())
        .await
        .unwrap_err();
    assert_eq!(api_code(&e), (409, code::TURN_ESCALATED), "{e}");
    assert!(!w.host("/session/b").exists());
    w.client.end_turn().await.unwrap();
    w.client
        .write_file("/session/b", b"b".to_vec())
        .await
        .unwrap();
}
