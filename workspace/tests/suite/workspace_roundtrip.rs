//! Handoff round trips over real files: pack a tree, unpack it elsewhere, compare.

use super::workspace_support::*;
use kube_harness_workspace::{
    diff, pack, rehome, snapshot, snapshot_since, unpack, ChangeKind, EntryKind, Exclude, Limits,
    PackOptions, UnpackOptions, WorkspaceError,
};
use std::path::Path;

fn sample_tree(root: &Path) {
    let s = root.join("session");
    write(&s.join("a.txt"), b"hello\n", 0o644);
    write(&s.join("empty"), b"", 0o600);
    write(&s.join("run.sh"), b"#!/bin/sh\necho hi\n", 0o755);
    write(&s.join("ro.txt"), b"read only", 0o444);
    write(
        &s.join("deep/er/still/deeper/x.bin"),
        &[0u8, 1, 2, 255],
        0o640,
    );
    write(&s.join("żółw 🐢.txt"), "unicode ✓".as_bytes(), 0o644);
    write(&s.join("日本語/ファイル.md"), "本文".as_bytes(), 0o644);
    let long = "n".repeat(120);
    write(
        &s.join(format!("{long}/{long}.txt")),
        b"long names use GNU extensions",
        0o644,
    );
    mkdir(&s.join("emptydir"), 0o700);
    write(
        &s.join("locked/inner.txt"),
        b"inside a read-only dir",
        0o644,
    );
    mkdir(&s.join("locked"), 0o555);
    symlink("a.txt", &s.join("link-to-file"));
    symlink("deep/er", &s.join("link-to-dir"));
    symlink("../artifacts/report.html", &s.join("cross-mount"));
    symlink("../../a.txt", &s.join("deep/er/up-link"));
    symlink(&"l".repeat(150), &s.join("dangling-long-target"));
    write(&root.join("artifacts/report.html"), b"<html></html>", 0o644);
    write(&root.join("persistent/user/notes.md"), b"notes", 0o600);
    write(
        &root.join(".agents/skills/s.md"),
        b"untracked mount, never packed",
        0o644,
    );
}

#[test]
fn round_trip_preserves_tree_modes_and_links() {
    let src = tempfile::tempdir().unwrap();
    let spec = layout(src.path(), &[]);
    sample_tree(src.path());
    // Outside targets are skipped with a warning, never packed.
    symlink("/etc/passwd", &src.path().join("session/abs-link"));
    symlink("../../outside", &src.path().join("session/escape-link"));

    let mut bytes = Vec::new();
    let packed = pack(&spec, &PackOptions::default(), &mut bytes).unwrap();
    assert_eq!(packed.warnings.len(), 2, "{:?}", packed.warnings);
    assert!(packed.warnings.iter().any(|w| w.contains("abs-link")));
    assert!(packed.warnings.iter().any(|w| w.contains("escape-link")));

    let dst = tempfile::tempdir().unwrap();
    let target = dst.path().join("root");
    let unpacked = unpack(bytes.as_slice(), &target, &UnpackOptions::for_spec(&spec)).unwrap();
    assert_eq!(unpacked.entries, packed.entries);
    assert_eq!(unpacked.digest, packed.digest);
    assert_eq!(unpacked.total_bytes, packed.total_bytes);

    // Everything but the skipped links arrived, byte for byte, mode for mode.
    let mut expected = content(&packed.snapshot);
    expected.remove(Path::new("/session/abs-link")).unwrap();
    expected.remove(Path::new("/session/escape-link")).unwrap();
    let there = snapshot(&rehome(&spec, &target)).unwrap();
    assert_eq!(content(&there), expected);
    // The snapshot unpack returns is the tree it wrote.
    assert_eq!(content(&unpacked.snapshot), expected);
    assert!(
        !target.join(".agents").exists(),
        "untracked mounts are not packed"
    );
    assert!(!target.join(kube_harness_workspace::STAGING_NAME).exists());
    assert_eq!(
        std::fs::read_link(target.join("session/link-to-dir")).unwrap(),
        Path::new("deep/er")
    );
    assert_eq!(
        std::fs::read(target.join("session/cross-mount")).unwrap(),
        b"<html></html>"
    );
}

#[test]
fn packing_is_deterministic() {
    let src = tempfile::tempdir().unwrap();
    let spec = layout(src.path(), &[]);
    sample_tree(src.path());
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let ra = pack(&spec, &PackOptions::default(), &mut a).unwrap();
    let rb = pack(&spec, &PackOptions::default(), &mut b).unwrap();
    assert_eq!(ra.digest, rb.digest);
    assert!(a == b, "two packs of the same tree differ");
}

#[test]
fn excluded_names_stay_behind() {
    let src = tempfile::tempdir().unwrap();
    let spec = layout(src.path(), &[]);
    write(
        &src.path().join("session/.kube-harness/state"),
        b"runtime",
        0o600,
    );
    write(&src.path().join("session/keep"), b"k", 0o600);
    let opts = PackOptions {
        exclude: Exclude::names([".kube-harness"]),
        ..Default::default()
    };
    let mut bytes = Vec::new();
    let packed = pack(&spec, &opts, &mut bytes).unwrap();
    assert!(packed
        .snapshot
        .get(Path::new("/session/.kube-harness"))
        .is_none());
    let target = tempfile::tempdir().unwrap();
    unpack(
        bytes.as_slice(),
        target.path(),
        &UnpackOptions::for_spec(&spec),
    )
    .unwrap();
    assert!(target.path().join("session/keep").exists());
    assert!(!target.path().join("session/.kube-harness").exists());
}

#[test]
fn pack_over_the_size_limit_fails_before_writing() {
    let src = tempfile::tempdir().unwrap();
    let spec = layout(src.path(), &[]);
    write(&src.path().join("session/big"), &vec![7u8; 4096], 0o644);
    write(&src.path().join("session/small"), b"x", 0o644);
    let opts = PackOptions {
        limits: Limits {
            max_total_bytes: 4000,
            ..Limits::default()
        },
        ..Default::default()
    };
    let mut out = Vec::new();
    let err = pack(&spec, &opts, &mut out).unwrap_err();
    assert!(
        matches!(
            err,
            WorkspaceError::TooLarge {
                size: 4097,
                limit: 4000,
                ..
            }
        ),
        "{err}"
    );
    assert!(
        out.is_empty(),
        "nothing may be written once the limit is known to be exceeded"
    );
    assert!(err.to_string().contains("over the limit"), "{err}");
}

#[test]
fn diff_reports_created_modified_deleted_and_modes() {
    let src = tempfile::tempdir().unwrap();
    let spec = layout(src.path(), &[]);
    let s = src.path().join("session");
    write(&s.join("keep"), b"same", 0o644);
    write(&s.join("edit"), b"before", 0o644);
    write(&s.join("chmod"), b"x", 0o644);
    write(&s.join("gone"), b"bye", 0o644);
    write(&s.join("touched"), b"t", 0o644);
    let before = snapshot(&spec).unwrap();

    write(&s.join("edit"), b"after!", 0o644);
    std::fs::set_permissions(
        s.join("chmod"),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .unwrap();
    std::fs::remove_file(s.join("gone")).unwrap();
    write(&s.join("new/file"), b"n", 0o644);
    // Rewriting identical bytes is not a modification.
    write(&s.join("touched"), b"t", 0o644);
    let after = snapshot_since(&spec, &before).unwrap();
    let changes: Vec<_> = diff(&before, &after)
        .into_iter()
        .map(|c| {
            (
                c.harness_path.display().to_string(),
                c.change,
                c.kind,
                c.mode,
            )
        })
        .collect();
    assert_eq!(
        changes,
        vec![
            (
                "/session/chmod".into(),
                ChangeKind::Modified,
                EntryKind::File,
                0o600
            ),
            (
                "/session/edit".into(),
                ChangeKind::Modified,
                EntryKind::File,
                0o644
            ),
            (
                "/session/gone".into(),
                ChangeKind::Deleted,
                EntryKind::File,
                0o644
            ),
            (
                "/session/new".into(),
                ChangeKind::Created,
                EntryKind::Dir,
                0o755
            ),
            (
                "/session/new/file".into(),
                ChangeKind::Created,
                EntryKind::File,
                0o644
            ),
        ]
    );
}

/// A same-size rewrite right after a snapshot can leave size and (coarse) timestamps equal; the
/// incremental snapshot must still notice it.
#[test]
fn same_size_rewrite_within_a_timestamp_tick_is_detected() {
    let src = tempfile::tempdir().unwrap();
    let spec = layout(src.path(), &[]);
    let f = src.path().join("session/f");
    for round in 0..20u8 {
        write(&f, &[b'a' + (round % 2); 8], 0o644);
        let before = snapshot(&spec).unwrap();
        std::fs::write(&f, [b'a' + ((round + 1) % 2); 8]).unwrap();
        let after = snapshot_since(&spec, &before).unwrap();
        let changes = diff(&before, &after);
        assert_eq!(changes.len(), 1, "round {round}: {changes:?}");
        assert_eq!(changes[0].change, ChangeKind::Modified);
    }
}

#[test]
fn snapshot_since_reuses_settled_hashes_but_still_sees_changes() {
    let src = tempfile::tempdir().unwrap();
    let spec = layout(src.path(), &[]);
    write(&src.path().join("session/old"), b"settled", 0o644);
    std::thread::sleep(std::time::Duration::from_millis(150));
    let first = snapshot(&spec).unwrap();
    let again = snapshot_since(&spec, &first).unwrap();
    assert!(diff(&first, &again).is_empty());
    std::fs::write(src.path().join("session/old"), b"changed, longer").unwrap();
    let third = snapshot_since(&spec, &again).unwrap();
    assert_eq!(diff(&again, &third).len(), 1);
}

#[test]
fn nested_mounts_are_walked_by_the_most_specific_mount() {
    let src = tempfile::tempdir().unwrap();
    let mut spec = layout(src.path(), &[]);
    // /session/cache is its own untracked mount inside /session's backing directory.
    spec.mounts.push(kube_harness_workspace::Mount {
        harness_path: "/session/cache".into(),
        backing_path: src.path().join("session/cache"),
        writable: true,
        tracked: false,
        read_only_prefixes: Vec::new(),
    });
    write(
        &src.path().join("session/cache/blob"),
        b"not tracked",
        0o644,
    );
    write(&src.path().join("session/b"), b"tracked", 0o644);
    write(
        &src.path().join("session/cachet"),
        b"tracked, sorts after cache/",
        0o644,
    );
    let snap = snapshot(&spec).unwrap();
    let paths: Vec<_> = snap
        .entries
        .keys()
        .map(|p| p.display().to_string())
        .collect();
    assert_eq!(
        paths,
        [
            "/artifacts",
            "/persistent",
            "/session",
            "/session/b",
            "/session/cachet"
        ]
    );
}
