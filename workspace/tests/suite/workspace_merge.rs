//! The return trip over real files: handoff to a "higher tier" directory, changes there, change
//! archive back, applied to the worker's backing paths.

use super::workspace_support::*;
use kube_harness_workspace::{
    apply, changes_since, pack, rehome, snapshot, unpack, ApplyOptions, ApplyReport, ChangeKind,
    EntryKind, Exclude, PackOptions, RejectReason, UnpackOptions, WorkspaceSpec,
};
use std::path::{Path, PathBuf};

/// A worker workspace, handed off to a tier-1 root.
struct Handoff {
    _dirs: (tempfile::TempDir, tempfile::TempDir),
    worker: PathBuf,
    spec: WorkspaceSpec,
    tier1: PathBuf,
    tier1_spec: WorkspaceSpec,
    worker_base: kube_harness_workspace::Snapshot,
    tier1_base: kube_harness_workspace::Snapshot,
}

impl Handoff {
    fn new(ro: &[&str], tree: impl Fn(&Path)) -> Self {
        let (w, t) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let worker = w.path().to_path_buf();
        let spec = layout(&worker, ro);
        tree(&worker);
        let mut bytes = Vec::new();
        let packed = pack(&spec, &PackOptions::default(), &mut bytes).unwrap();
        let tier1 = t.path().join("ws");
        let unpacked = unpack(bytes.as_slice(), &tier1, &UnpackOptions::for_spec(&spec)).unwrap();
        let tier1_spec = rehome(&spec, &tier1);
        Handoff {
            _dirs: (w, t),
            worker,
            spec,
            tier1,
            tier1_spec,
            worker_base: packed.snapshot,
            tier1_base: unpacked.snapshot,
        }
    }

    /// changes_since on tier 1, apply on the worker.
    fn merge_back(
        &self,
        opts: &ApplyOptions,
    ) -> (Vec<kube_harness_workspace::FileChange>, ApplyReport) {
        let mut bytes = Vec::new();
        let report = changes_since(
            &self.tier1_spec,
            &self.tier1_base,
            &PackOptions::default(),
            &mut bytes,
        )
        .unwrap();
        let applied = apply(&self.spec, bytes.as_slice(), &self.worker_base, opts).unwrap();
        (report.changes, applied)
    }
}

fn base_tree(root: &Path) {
    write(&root.join("session/a.txt"), b"a", 0o644);
    write(&root.join("session/edit.txt"), b"old", 0o644);
    write(&root.join("session/gone.txt"), b"bye", 0o644);
    write(&root.join("session/dir/inner.txt"), b"inner", 0o644);
    write(&root.join("session/was-file"), b"becomes a dir", 0o644);
    write(
        &root.join("session/was-dir/x"),
        b"dir becomes a file",
        0o644,
    );
    write(&root.join("session/chmod.sh"), b"#!/bin/sh", 0o644);
    symlink("a.txt", &root.join("session/link"));
    write(
        &root.join("persistent/company/kb.md"),
        b"company knowledge",
        0o644,
    );
    write(&root.join("persistent/user/notes.md"), b"notes", 0o644);
}

#[test]
fn creates_modifications_deletions_and_modes_come_back() {
    let h = Handoff::new(&[], base_tree);
    let t = h.tier1.join("session");
    write(&t.join("new/deep/file.txt"), "nouveau ✓".as_bytes(), 0o600);
    write(&t.join("edit.txt"), b"new content", 0o644);
    std::fs::remove_file(t.join("gone.txt")).unwrap();
    std::fs::remove_dir_all(t.join("dir")).unwrap();
    std::fs::remove_file(t.join("was-file")).unwrap();
    write(&t.join("was-file/child"), b"c", 0o644);
    std::fs::remove_dir_all(t.join("was-dir")).unwrap();
    write(&t.join("was-dir"), b"now a file", 0o640);
    std::fs::set_permissions(
        t.join("chmod.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    std::fs::remove_file(t.join("link")).unwrap();
    symlink("edit.txt", &t.join("link"));
    symlink("new/deep", &t.join("new-link"));
    write(&h.tier1.join("artifacts/out/report.txt"), b"report", 0o644);

    let (sent, report) = h.merge_back(&ApplyOptions::default());
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    assert!(report.already_applied.is_empty());
    assert_eq!(
        report.applied, sent,
        "every change sent is applied, in the same order"
    );
    let summary: Vec<_> = report
        .applied
        .iter()
        .map(|c| (c.harness_path.to_str().unwrap(), c.change, c.kind))
        .collect();
    use ChangeKind::*;
    use EntryKind::*;
    assert_eq!(
        summary,
        vec![
            ("/artifacts/out", Created, Dir),
            ("/artifacts/out/report.txt", Created, File),
            ("/session/chmod.sh", Modified, File),
            ("/session/dir", Deleted, Dir),
            ("/session/dir/inner.txt", Deleted, File),
            ("/session/edit.txt", Modified, File),
            ("/session/gone.txt", Deleted, File),
            ("/session/link", Modified, Symlink),
            ("/session/new", Created, Dir),
            ("/session/new/deep", Created, Dir),
            ("/session/new/deep/file.txt", Created, File),
            ("/session/new-link", Created, Symlink),
            ("/session/was-dir", Modified, File),
            ("/session/was-dir/x", Deleted, File),
            ("/session/was-file", Modified, Dir),
            ("/session/was-file/child", Created, File),
        ]
    );
    // The worker now holds exactly what tier 1 holds.
    assert_eq!(
        content(&snapshot(&h.spec).unwrap()),
        content(&snapshot(&h.tier1_spec).unwrap())
    );
    assert_eq!(
        std::fs::read(h.worker.join("session/edit.txt")).unwrap(),
        b"new content"
    );

    // Applying the same archive again changes nothing and reports nothing as applied.
    let mut bytes = Vec::new();
    changes_since(
        &h.tier1_spec,
        &h.tier1_base,
        &PackOptions::default(),
        &mut bytes,
    )
    .unwrap();
    let again = apply(
        &h.spec,
        bytes.as_slice(),
        &h.worker_base,
        &ApplyOptions::default(),
    )
    .unwrap();
    assert!(
        again.applied.is_empty() && again.rejected.is_empty(),
        "{again:?}"
    );
    assert_eq!(again.already_applied.len(), sent.len());
}

#[test]
fn no_changes_means_an_empty_change_archive() {
    let h = Handoff::new(&[], base_tree);
    let (sent, report) = h.merge_back(&ApplyOptions::default());
    assert!(sent.is_empty());
    assert_eq!(report, ApplyReport::default());
}

#[test]
fn read_only_prefixes_are_respected_and_reported() {
    let h = Handoff::new(&["/persistent/company"], base_tree);
    write(
        &h.tier1.join("persistent/company/kb.md"),
        b"tampered",
        0o644,
    );
    write(
        &h.tier1.join("persistent/company/new.md"),
        b"sneaked in",
        0o644,
    );
    std::fs::remove_file(h.tier1.join("persistent/user/notes.md")).unwrap();
    write(&h.tier1.join("persistent/user/todo.md"), b"todo", 0o644);

    let (_, report) = h.merge_back(&ApplyOptions::default());
    let rejected: Vec<_> = report
        .rejected
        .iter()
        .map(|r| (r.harness_path.to_str().unwrap(), r.change, &r.reason))
        .collect();
    assert_eq!(
        rejected,
        vec![
            (
                "/persistent/company/kb.md",
                ChangeKind::Modified,
                &RejectReason::ReadOnly
            ),
            (
                "/persistent/company/new.md",
                ChangeKind::Created,
                &RejectReason::ReadOnly
            ),
        ]
    );
    let applied: Vec<_> = report
        .applied
        .iter()
        .map(|c| (c.harness_path.to_str().unwrap(), c.change))
        .collect();
    assert_eq!(
        applied,
        vec![
            ("/persistent/user/notes.md", ChangeKind::Deleted),
            ("/persistent/user/todo.md", ChangeKind::Created)
        ]
    );
    assert_eq!(
        std::fs::read(h.worker.join("persistent/company/kb.md")).unwrap(),
        b"company knowledge"
    );
    assert!(!h.worker.join("persistent/company/new.md").exists());
}

#[test]
fn a_file_changed_on_both_sides_is_a_conflict_and_the_worker_copy_wins() {
    let h = Handoff::new(&[], base_tree);
    // Both sides edit edit.txt; worker deletes a.txt while tier 1 edits it; worker creates
    // new.txt while tier 1 creates it with other bytes; worker-only edits are not reported.
    write(&h.worker.join("session/edit.txt"), b"worker edit", 0o644);
    write(&h.tier1.join("session/edit.txt"), b"tier-1 edit", 0o644);
    std::fs::remove_file(h.worker.join("session/a.txt")).unwrap();
    write(&h.tier1.join("session/a.txt"), b"tier-1 a", 0o644);
    write(&h.worker.join("session/new.txt"), b"worker new", 0o644);
    write(&h.tier1.join("session/new.txt"), b"tier-1 new", 0o644);
    write(&h.worker.join("session/chmod.sh"), b"worker only", 0o644);
    write(&h.tier1.join("session/fine.txt"), b"no conflict", 0o644);

    let (_, report) = h.merge_back(&ApplyOptions::default());
    let conflicts: Vec<_> = report
        .rejected
        .iter()
        .map(|r| match &r.reason {
            RejectReason::Conflict { base, current } => (
                r.harness_path.to_str().unwrap(),
                base.is_some(),
                current.as_ref().map(|c| c.sha256.clone()),
            ),
            other => panic!("unexpected {other:?}"),
        })
        .collect();
    let sha = |b: &[u8]| {
        use sha2::Digest;
        Some(Some(hex::encode(sha2::Sha256::digest(b))))
    };
    assert_eq!(
        conflicts,
        vec![
            ("/session/a.txt", true, None),
            ("/session/edit.txt", true, sha(b"worker edit")),
            ("/session/new.txt", false, sha(b"worker new")),
        ]
    );
    assert_eq!(report.applied.len(), 1);
    assert_eq!(
        report.applied[0].harness_path,
        Path::new("/session/fine.txt")
    );
    assert_eq!(
        std::fs::read(h.worker.join("session/edit.txt")).unwrap(),
        b"worker edit"
    );
    assert_eq!(
        std::fs::read(h.worker.join("session/new.txt")).unwrap(),
        b"worker new"
    );
    assert!(!h.worker.join("session/a.txt").exists());
}

#[test]
fn a_symlink_planted_on_the_worker_cannot_redirect_the_merge() {
    let outside = tempfile::tempdir().unwrap();
    let h = Handoff::new(&[], base_tree);
    // After the handoff, something on the worker swaps session/dir for a link to outside.
    std::fs::remove_dir_all(h.worker.join("session/dir")).unwrap();
    symlink(
        outside.path().to_str().unwrap(),
        &h.worker.join("session/dir"),
    );
    write(
        &h.tier1.join("session/dir/inner.txt"),
        b"through the link?",
        0o644,
    );
    write(
        &h.tier1.join("session/dir/new.txt"),
        b"through the link?",
        0o644,
    );

    let (_, report) = h.merge_back(&ApplyOptions::default());
    assert!(report.applied.is_empty(), "{:?}", report.applied);
    assert_eq!(report.rejected.len(), 2);
    assert!(report
        .rejected
        .iter()
        .all(|r| matches!(r.reason, RejectReason::Conflict { .. })));
    assert!(
        std::fs::read_dir(outside.path()).unwrap().next().is_none(),
        "nothing written through the link"
    );
}

/// Issue 29, 6d: symlinks the higher tier made that point out of the workspace (an absolute
/// target, one that climbs out, an existing link turned outward) are not merged back, and the
/// merge says so: each is named in `left_out` with why, so the turn reports it instead of
/// dropping it silently. A link that stays inside is merged as before.
#[test]
fn symlinks_pointing_out_of_the_workspace_are_left_out_and_reported() {
    let h = Handoff::new(&[], base_tree);
    symlink("/etc", &h.tier1.join("session/etc"));
    symlink("../../../..", &h.tier1.join("session/up"));
    std::fs::remove_file(h.tier1.join("session/link")).unwrap();
    symlink("/etc/passwd", &h.tier1.join("session/link"));
    symlink("a.txt", &h.tier1.join("session/inside"));

    let (_, report) = h.merge_back(&ApplyOptions::default());
    let applied: Vec<_> = report.applied.iter().map(|c| &c.harness_path).collect();
    assert_eq!(applied, [Path::new("/session/inside")], "{report:?}");
    assert_eq!(report.left_out.len(), 3, "{:?}", report.left_out);
    for (path, target) in [
        ("/session/etc", "/etc"),
        ("/session/up", "../../../.."),
        ("/session/link", "/etc/passwd"),
    ] {
        assert!(
            report
                .left_out
                .iter()
                .any(|l| l.starts_with(&format!("{path}: ")) && l.contains(target)),
            "{path} not reported: {:?}",
            report.left_out
        );
    }
    assert!(!h.worker.join("session/etc").exists());
    assert!(std::fs::symlink_metadata(h.worker.join("session/up")).is_err());
    assert_eq!(
        std::fs::read_link(h.worker.join("session/link")).unwrap(),
        Path::new("a.txt"),
        "the worker's link is kept"
    );
}

#[test]
fn runtime_owned_names_and_mount_roots_are_not_merged() {
    let h = Handoff::new(&[], base_tree);
    write(
        &h.tier1.join("session/.kube-harness/state"),
        b"forged",
        0o600,
    );
    std::fs::set_permissions(
        h.tier1.join("artifacts"),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let opts = ApplyOptions {
        exclude: Exclude::names([".kube-harness"]),
        ..Default::default()
    };
    let (_, report) = h.merge_back(&opts);
    let rejected: Vec<_> = report
        .rejected
        .iter()
        .map(|r| (r.harness_path.to_str().unwrap(), &r.reason))
        .collect();
    assert_eq!(
        rejected,
        vec![
            ("/session/.kube-harness", &RejectReason::RuntimeOwned),
            ("/session/.kube-harness/state", &RejectReason::RuntimeOwned),
        ]
    );
    // A mount root's mode is an ordinary change.
    assert_eq!(report.applied.len(), 1);
    assert_eq!(report.applied[0].harness_path, Path::new("/artifacts"));
    assert!(!h.worker.join("session/.kube-harness").exists());
}

#[test]
fn read_only_mounts_are_never_written() {
    let h = Handoff::new(&[], base_tree);
    // Tier 1 claims /.agents is a tracked mount: the worker's table says otherwise.
    let mut spec = h.tier1_spec.clone();
    for m in spec.mounts.iter_mut() {
        if m.harness_path == Path::new("/.agents") {
            m.tracked = true;
            m.backing_path = h.tier1.join(".agents");
        }
    }
    write(&h.tier1.join(".agents/skills/evil.md"), b"x", 0o644);
    let mut bytes = Vec::new();
    let mut base = h.tier1_base.clone();
    base.entries.retain(|p, _| !p.starts_with("/.agents"));
    changes_since(&spec, &base, &PackOptions::default(), &mut bytes).unwrap();
    let err = apply(
        &h.spec,
        bytes.as_slice(),
        &h.worker_base,
        &ApplyOptions::default(),
    )
    .unwrap_err();
    assert!(err.to_string().contains("/.agents"), "{err}");
    assert!(!h.worker.join(".agents/skills/evil.md").exists());
}

#[test]
fn content_staged_on_disk_applies_the_same_and_is_cleaned_up() {
    for budget in [0u64, 5] {
        let h = Handoff::new(&[], base_tree);
        write(&h.tier1.join("session/edit.txt"), b"0123456789", 0o644);
        write(&h.tier1.join("session/tiny"), b"abc", 0o644);
        write(
            &h.tier1.join("artifacts/big.bin"),
            &vec![9u8; 100_000],
            0o644,
        );
        let scratch = tempfile::tempdir().unwrap();
        let opts = ApplyOptions {
            scratch_dir: Some(scratch.path().to_path_buf()),
            memory_staging_bytes: budget,
            ..Default::default()
        };
        let (sent, report) = h.merge_back(&opts);
        assert_eq!(report.applied, sent);
        assert_eq!(
            content(&snapshot(&h.spec).unwrap()),
            content(&snapshot(&h.tier1_spec).unwrap())
        );
        assert!(
            std::fs::read_dir(scratch.path()).unwrap().next().is_none(),
            "scratch left behind"
        );
    }
}
