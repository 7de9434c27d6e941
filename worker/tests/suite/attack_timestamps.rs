//! Attacks with timestamps (issue 12, 7): a file a command dates in the year 2300, and archive
//! entries whose GNU base-256 mtime field says 10413792000 (2300-01-01) or 2^64-1. None may
//! panic; every mtime is clamped to `0..=MAX_MTIME_SECS` (2262-04-11, the last second i64
//! nanoseconds hold), and a refused archive leaves no `.kube-harness-*` staging behind.
//! Real sandbox runs, the real Tier-1 agent process on loopback, real files. Runs as root.

use super::runtime_support::{fixture, Setup};
use super::tier1_support::{spawn_agent, spec_of, workspace_root, AGENT_TOKEN};
use kube_harness_runtime::event::kind;
use kube_harness_workspace::safe_fs::MAX_MTIME_SECS;
use kube_harness_workspace::{self as workspace, ApplyOptions, PackOptions};
use serde_json::Value;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

const YEAR_2300: u64 = 10_413_792_000;

/// Rewrites the mtime of the archive entry `name` (GNU base-256 when it does not fit in octal)
/// and fixes the header checksum. The manifest digest does not cover mtimes, so the archive
/// stays valid.
fn set_entry_mtime(archive: &mut [u8], name: &str, mtime: u64) {
    patch_header(archive, name, |h| h.set_mtime(mtime));
}

fn patch_header(archive: &mut [u8], name: &str, f: impl FnOnce(&mut tar::Header)) {
    let mut off = 0usize;
    while off + 512 <= archive.len() {
        let mut h = tar::Header::new_old();
        h.as_mut_bytes().copy_from_slice(&archive[off..off + 512]);
        if h.as_bytes().iter().all(|b| *b == 0) {
            break;
        }
        if h.path_bytes().as_ref() == name.as_bytes() {
            f(&mut h);
            h.set_cksum();
            archive[off..off + 512].copy_from_slice(h.as_bytes());
            return;
        }
        let size = h.entry_size().unwrap() as usize;
        off += 512 + size.div_ceil(512) * 512;
    }
    panic!("{name} not in the archive");
}

/// Names starting with `.kube-harness` anywhere below `root` (staging, temp files).
fn leftovers(root: &Path) -> Vec<String> {
    walkdir::WalkDir::new(root)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().starts_with(".kube-harness"))
        .map(|e| e.path().display().to_string())
        .collect()
}

/// A workspace with `session/a.txt` and `session/b.txt`, packed as the worker hands it over.
fn handoff_archive() -> (tempfile::TempDir, Vec<u8>) {
    let src = workspace_root();
    std::fs::write(src.path().join("session/a.txt"), "alpha\n").unwrap();
    std::fs::write(src.path().join("session/b.txt"), "beta\n").unwrap();
    let mut archive = Vec::new();
    workspace::pack(&spec_of(src.path()), &PackOptions::default(), &mut archive).unwrap();
    (src, archive)
}

async fn put(url: &str, body: Vec<u8>) -> (u16, Value) {
    let r = reqwest::Client::new()
        .put(format!("{url}/v1/workspace"))
        .bearer_auth(AGENT_TOKEN)
        .body(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// `touch -d 2300-01-01`: the snapshot after the command (mtime in ns overflows i64) used to
/// panic on this command and every later one. Now the file is reported like any other, and
/// later commands keep their events.
#[tokio::test]
async fn a_file_dated_2300_is_snapshotted_without_a_panic() {
    let f = fixture(Setup::default());
    let out = f
        .turn
        .exec("echo x > /session/f && touch -d 2300-01-01 /session/f && stat -c %Y /session/f")
        .await;
    assert_eq!(
        (out.stdout.as_str(), out.exit_code),
        ("10413792000\n", 0),
        "{}",
        out.stderr
    );
    let out = f.turn.exec("echo y > /session/g").await;
    assert_eq!(out.exit_code, 0);
    let created: Vec<String> = f
        .events
        .events()
        .into_iter()
        .filter(|e| e.kind == kind::FILE_CREATED)
        .map(|e| e.data["path"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(created, ["/session/f", "/session/g"]);
}

/// The same file handed over to the local Tier-1 (pack, unpack, merge back): the archive
/// carries the clamped mtime and the command on Tier-1 sees the file.
#[tokio::test]
async fn a_file_dated_2300_survives_the_tier1_handoff() {
    let f = fixture(Setup {
        tier1: true,
        ..Setup::default()
    });
    let out = f
        .turn
        .exec("echo x > /session/f && touch -d 2300-01-01 /session/f")
        .await;
    assert_eq!(out.exit_code, 0, "{}", out.stderr);
    let out = f
        .turn
        .exec("git init -q /session/r && cat /session/f && stat -c %Y /session/f")
        .await;
    assert_eq!(
        (out.stdout.as_str(), out.exit_code, out.tier),
        (format!("x\n{MAX_MTIME_SECS}\n").as_str(), 0, 1),
        "{}",
        out.stderr
    );
    let usage = f.turn.end().await;
    assert_eq!(usage["stayedOnTier0"], false, "{usage}");
    assert!(f.session_root.join("session/r/.git").is_dir());
    assert!(
        leftovers(&f.session_root).is_empty(),
        "{:?}",
        leftovers(&f.session_root)
    );
}

/// A handoff archive whose entry says mtime 2^64-1 (base-256): the agent binds it with the
/// mtime clamped, answers 200, and leaves no staging.
#[tokio::test]
async fn bind_clamps_a_base256_mtime_of_2_pow_64_minus_1() {
    let (_src, mut archive) = handoff_archive();
    set_entry_mtime(&mut archive, "session/a.txt", u64::MAX);
    let root = tempfile::tempdir().unwrap();
    let agent = spawn_agent(root.path(), &[]);
    let (status, v) = put(&agent.url, archive).await;
    assert_eq!((status, v["files"].as_u64()), (200, Some(5)), "{v}");
    let meta = std::fs::metadata(agent.host("/session/a.txt")).unwrap();
    assert_eq!(meta.mtime() as u64, MAX_MTIME_SECS);
    assert_eq!(
        std::fs::read_to_string(agent.host("/session/a.txt")).unwrap(),
        "alpha\n"
    );
    assert!(
        leftovers(root.path()).is_empty(),
        "{:?}",
        leftovers(root.path())
    );
}

/// A handoff archive with a 2300 mtime on its first file and a header that breaks the digest
/// after it: the bind used to panic on the mtime (500) and leave `.kube-harness-bind-*` behind,
/// so every later bind got `workspace-not-empty`. Now: 400 with the exact reason, nothing left
/// behind, and a good archive binds next.
#[tokio::test]
async fn a_refused_bind_after_a_2300_mtime_leaves_nothing_and_the_next_bind_works() {
    let (_src, good) = handoff_archive();
    let mut bad = good.clone();
    set_entry_mtime(&mut bad, "session/a.txt", YEAR_2300);
    patch_header(&mut bad, "session/b.txt", |h| h.set_mode(0o600));
    let root = tempfile::tempdir().unwrap();
    let agent = spawn_agent(root.path(), &[]);

    let (status, v) = put(&agent.url, bad).await;
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (400, Some("bad-archive")),
        "{v}"
    );
    assert!(
        message.starts_with("archive does not match its manifest: digest sha256:"),
        "{message}"
    );
    assert!(
        leftovers(root.path()).is_empty(),
        "{:?}",
        leftovers(root.path())
    );
    for m in ["session", "artifacts", "persistent"] {
        let left: Vec<_> = std::fs::read_dir(root.path().join(m))
            .map(|d| d.map(|e| e.unwrap().file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{m}: {left:?}");
    }

    let mut dated = good;
    set_entry_mtime(&mut dated, "session/a.txt", YEAR_2300);
    let (status, v) = put(&agent.url, dated).await;
    assert_eq!(status, 200, "{v}");
    let meta = std::fs::metadata(agent.host("/session/a.txt")).unwrap();
    assert_eq!(meta.mtime() as u64, MAX_MTIME_SECS);
}

/// A change archive from Tier-1 whose new file says mtime 2^64-1: the merge used to panic
/// (`UNIX_EPOCH + 2^64-1 s`) and leave `.kube-harness-apply-*` in /session. Now the change is
/// applied with the mtime clamped and no temp file is left.
#[test]
fn merge_clamps_a_base256_mtime_and_leaves_no_temp_files() {
    // The worker's workspace and its handoff snapshot.
    let worker = workspace_root();
    std::fs::write(worker.path().join("session/a.txt"), "alpha\n").unwrap();
    let mut handoff = Vec::new();
    let packed = workspace::pack(
        &spec_of(worker.path()),
        &PackOptions::default(),
        &mut handoff,
    )
    .unwrap();
    // Tier-1: unpack, create a file, pack the changes.
    let t1 = tempfile::tempdir().unwrap();
    let ws = t1.path().join("ws");
    let spec = spec_of(worker.path());
    let unpacked = workspace::unpack(
        &handoff[..],
        &ws,
        &workspace::UnpackOptions::for_spec(&spec),
    )
    .unwrap();
    std::fs::write(ws.join("session/new.txt"), "new\n").unwrap();
    let mut changes = Vec::new();
    workspace::changes_since(
        &workspace::rehome(&spec, &ws),
        &unpacked.snapshot,
        &PackOptions::default(),
        &mut changes,
    )
    .unwrap();
    set_entry_mtime(&mut changes, "session/new.txt", u64::MAX);

    let scratch = tempfile::tempdir().unwrap();
    let opts = ApplyOptions {
        scratch_dir: Some(scratch.path().to_path_buf()),
        memory_staging_bytes: 0, // stage on disk too, to check that scratch is cleaned
        ..ApplyOptions::default()
    };
    let report = workspace::apply(&spec, &changes[..], &packed.snapshot, &opts).unwrap();
    let applied: Vec<String> = report
        .applied
        .iter()
        .map(|c| format!("{:?} {}", c.change, c.harness_path.display()))
        .collect();
    assert_eq!(applied, ["Created /session/new.txt"]);
    let new = worker.path().join("session/new.txt");
    assert_eq!(std::fs::read_to_string(&new).unwrap(), "new\n");
    assert_eq!(
        std::fs::metadata(&new).unwrap().mtime() as u64,
        MAX_MTIME_SECS
    );
    assert!(
        leftovers(worker.path()).is_empty(),
        "{:?}",
        leftovers(worker.path())
    );
    assert_eq!(std::fs::read_dir(scratch.path()).unwrap().count(), 0);
}
