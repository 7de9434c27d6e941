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

/// Round 2 of issue 14 (an outside attack with the docs and the binary): what it found, each
/// now refused or fixed.
mod round2 {
    use super::super::api_support::{config, start, start_with, TOKEN};
    use super::api_code;
    use kube_harness_worker::api::model::code;
    use std::io::{Read, Write};
    use std::os::unix::fs::PermissionsExt;
    use std::time::{Duration, Instant};

    /// F1, F6: an overwritten file keeps its permission bits exactly (no umask), never setuid,
    /// setgid or sticky: a setuid-root file prepared in the session and overwritten by a client
    /// would otherwise run as root for anyone on the host.
    #[tokio::test]
    async fn an_overwritten_file_keeps_its_permissions_but_never_setuid() {
        let w = start().await;
        for (before, after) in [
            (0o6755, 0o755),
            (0o4777, 0o777),
            (0o0666, 0o666),
            (0o1777, 0o777),
        ] {
            let host = w.host("/session/prepared");
            std::fs::write(&host, "old").unwrap();
            std::fs::set_permissions(&host, std::fs::Permissions::from_mode(before)).unwrap();
            let put = w
                .client
                .write_file("/session/prepared", b"#!/bin/sh\nid\n".to_vec())
                .await
                .unwrap();
            assert_eq!(put.change, "modified");
            let mode = std::fs::metadata(&host).unwrap().permissions().mode() & 0o7777;
            assert_eq!(mode, after, "{before:o} became {mode:o}");
        }
    }

    /// F4, F7: names over 255 bytes and paths that are not UTF-8 once decoded are 400 and make
    /// nothing (no parent directories left behind); `path` twice is 400.
    #[tokio::test]
    async fn bad_names_are_400_and_leave_no_directories() {
        let w = start().await;
        let long = format!("/session/junkA/junkB/{}", "L".repeat(256));
        let e = w.client.write_file(&long, b"x".to_vec()).await.unwrap_err();
        assert_eq!(api_code(&e), (400, code::BAD_PATH), "{e}");
        assert!(
            !w.host("/session/junkA").exists(),
            "a parent was left behind"
        );
        for query in [
            "path=/session/%FF",
            "path=/session/%C0%AE%C0%AE/x",
            "path=/session/a&path=/session/b",
            "other=1",
        ] {
            let r = reqwest::Client::new()
                .put(format!("{}/v1/files?{query}", w.base_url))
                .bearer_auth(TOKEN)
                .body("x")
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 400, "{query}");
            let body: serde_json::Value = r.json().await.unwrap();
            assert_eq!(body["error"]["code"], code::BAD_PATH, "{query}");
        }
        assert_eq!(std::fs::read_dir(w.host("/session")).unwrap().count(), 0);
    }

    /// Issue 29, 6c: `?path=` is plain percent-encoding, not a form: a raw `+` is a plus (it was
    /// decoded as a space, so `a+b.txt` was written as `a b.txt`), `%20` is a space and `%2B` a
    /// plus; and the Rust client encodes both so that a name with either round-trips, on every
    /// route that takes a path. Failed before the fix: `a b.txt` was made.
    #[tokio::test]
    async fn a_plus_in_the_path_is_a_plus_and_names_round_trip() {
        let w = start().await;
        for (query, name) in [
            ("path=/session/a+b.txt", "a+b.txt"),
            ("path=/session/c%20d.txt", "c d.txt"),
            ("path=/session/e%2Bf.txt", "e+f.txt"),
        ] {
            let r = reqwest::Client::new()
                .put(format!("{}/v1/files?{query}", w.base_url))
                .bearer_auth(TOKEN)
                .body("x")
                .send()
                .await
                .unwrap();
            assert_eq!(r.status().as_u16(), 200, "{query}");
            let body: serde_json::Value = r.json().await.unwrap();
            assert_eq!(body["path"], format!("/session/{name}"), "{query}");
            assert!(w.host(&format!("/session/{name}")).is_file(), "{query}");
        }
        let mut names: Vec<String> = std::fs::read_dir(w.host("/session"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["a+b.txt", "c d.txt", "e+f.txt"]);

        // Through the client: a file, and a directory as tar, each named with `+`, a space and
        // `%`, written and read back under exactly that name.
        let odd = "/session/x+y z%41.txt";
        let put = w.client.write_file(odd, b"plus".to_vec()).await.unwrap();
        assert_eq!(put.path, odd);
        assert!(w.host(odd).is_file());
        let mut back = Vec::new();
        w.client.read_file_into(odd, &mut back).await.unwrap();
        assert_eq!(back, b"plus");
        let mut tar = tar::Builder::new(Vec::new());
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o644);
        header.set_size(2);
        tar.append_data(&mut header, "in+side.txt", &b"in"[..])
            .unwrap();
        let dir = "/session/d+ir one";
        w.client
            .write_archive(dir, tar.into_inner().unwrap())
            .await
            .unwrap();
        assert!(w.host("/session/d+ir one/in+side.txt").is_file());
        let mut back = Vec::new();
        w.client.read_archive_into(dir, &mut back).await.unwrap();
        let names: Vec<String> = tar::Archive::new(&back[..])
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["in+side.txt"]);
    }

    /// Round 3, F3: a client that drips a byte now and then, never silent for the idle time,
    /// is refused once its average falls under the minimum rate after the grace period.
    #[tokio::test]
    async fn a_dripping_upload_is_refused_for_its_pace() {
        let (tmp, mut cfg) = config();
        cfg.connections.body.idle = Duration::from_secs(5);
        cfg.connections.body.grace = Duration::from_secs(1);
        cfg.connections.body.min_rate = 1000;
        let w = start_with(tmp, cfg).await;
        let base = w.base_url.clone();
        let (status, took) = tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let mut s = stalled_upload(&base, "/session/drip", 1_000_000, 1);
            let mut dripper = s.try_clone().unwrap();
            std::thread::spawn(move || {
                for _ in 0..20 {
                    std::thread::sleep(Duration::from_millis(400));
                    if dripper.write_all(b"x").is_err() {
                        return;
                    }
                }
            });
            (status_of(&mut s), started.elapsed())
        })
        .await
        .unwrap();
        assert_eq!(status, 408);
        assert!(took < Duration::from_secs(8), "{took:?}");
        assert!(!w.host("/session/drip").exists());
    }

    /// Opens an upload that declares `declared` bytes and sends `sent`, then stalls; returns the
    /// socket (the caller reads the answer).
    fn stalled_upload(
        base_url: &str,
        path: &str,
        declared: usize,
        sent: usize,
    ) -> std::net::TcpStream {
        let addr = base_url.trim_start_matches("http://");
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        write!(
            s,
            "PUT /v1/files?path={path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {TOKEN}\r\ncontent-length: {declared}\r\n\r\n"
        )
        .unwrap();
        s.write_all(&vec![b'x'; sent]).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s
    }

    fn status_of(s: &mut std::net::TcpStream) -> u16 {
        let mut head = [0u8; 12];
        s.read_exact(&mut head).unwrap();
        String::from_utf8_lossy(&head[9..12]).parse().unwrap()
    }

    /// F2, F3: a body that stops sending is refused after the idle time (nothing written); at
    /// most two uploads are received at once (the third is told to try again); a path through
    /// a symlink is refused before the body is read (answered once the server has lingered over
    /// what the client still sends, at most 5 s, so that the client reads the answer).
    #[tokio::test]
    async fn stalled_or_piled_up_uploads_are_refused_in_bounded_time() {
        let (tmp, mut cfg) = config();
        cfg.connections.body.idle = Duration::from_secs(1);
        let w = start_with(tmp, cfg).await;
        let base = w.base_url.clone();
        let (statuses, third, took) = tokio::task::spawn_blocking(move || {
            let mut a = stalled_upload(&base, "/session/a", 1_000_000, 10);
            let mut b = stalled_upload(&base, "/session/b", 1_000_000, 10);
            std::thread::sleep(Duration::from_millis(200));
            let mut c = stalled_upload(&base, "/session/c", 1_000_000, 10);
            let third = status_of(&mut c);
            let started = Instant::now();
            let statuses = [status_of(&mut a), status_of(&mut b)];
            let took = started.elapsed();
            (statuses, third, took)
        })
        .await
        .unwrap();
        assert_eq!(third, 429, "a third concurrent upload");
        assert_eq!(statuses, [408, 408]);
        assert!(took < Duration::from_secs(5), "{took:?}");
        for name in ["a", "b", "c"] {
            assert!(!w.host(&format!("/session/{name}")).exists());
        }
        // A path through a symlink: 400 at once, before the body.
        std::os::unix::fs::symlink("/tmp", w.host("/session/ldir")).unwrap();
        let base = w.base_url.clone();
        let (status, took) = tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            let mut s = stalled_upload(&base, "/session/ldir/x", 1_000_000, 10);
            (status_of(&mut s), started.elapsed())
        })
        .await
        .unwrap();
        assert_eq!(status, 400);
        // Answered after at most the kit's lingering over the unsent rest (5 s), so that the
        // client reads the answer; not after the whole body.
        assert!(took < Duration::from_secs(7), "{took:?}");
    }
}
