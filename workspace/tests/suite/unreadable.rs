//! A command's `chmod 000` in an unprivileged worker (found by an attacker after issue 36): the
//! snapshot for file events used to fail whole on the first unreadable file or directory, and
//! every later command of the session then had no `harness.file.*` events and said nothing about
//! it. Now an unreadable file is compared by its metadata and an unreadable directory keeps what
//! was seen under it, each named in the snapshot's warnings (`fileTrackingSkipped`); an archive,
//! which needs the bytes, still fails.

use super::workspace_support::{layout, mkdir, unprivileged, write, Unprivileged};
use kube_harness_workspace::{
    diff, snapshot, snapshot_since, snapshot_with, ChangeKind, Exclude, HashBudget, Limits,
};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Run as an unprivileged user (root passes every mode check): the test binary runs this test
/// again as uid/gid 65533 when it is root.
#[test]
fn unreadable_files_and_directories_do_not_blind_file_events() {
    let root = match unprivileged(
        "suite::unreadable::unreadable_files_and_directories_do_not_blind_file_events",
        "KH_UNREADABLE_CHILD",
    ) {
        Unprivileged::Ran(_) => return,
        Unprivileged::Here(dir) => dir,
    };
    let spec = layout(&root, &[]);
    let session = root.join("session");
    write(&session.join("f"), b"secret", 0o644);
    write(&session.join("locked/x"), b"x", 0o644);
    write(&session.join("a"), b"a", 0o644);
    let first = snapshot(&spec).unwrap();
    // What a command does: lock a file and a directory, and write another file.
    std::fs::set_permissions(session.join("f"), std::fs::Permissions::from_mode(0o000)).unwrap();
    mkdir(&session.join("locked"), 0o000);
    write(&session.join("new"), b"new", 0o644);
    let second =
        snapshot_since(&spec, &first).expect("an unreadable path does not fail the snapshot");
    let changes: Vec<(PathBuf, ChangeKind)> = diff(&first, &second)
        .into_iter()
        .map(|c| (c.harness_path, c.change))
        .collect();
    let at = |p: &str| Path::new("/session").join(p);
    assert!(
        changes.contains(&(at("new"), ChangeKind::Created)),
        "{changes:?}"
    );
    assert!(
        changes.contains(&(at("f"), ChangeKind::Modified)),
        "its mode changed: {changes:?}"
    );
    assert!(
        !changes
            .iter()
            .any(|(p, _)| p.starts_with(at("locked")) && *p != at("locked")),
        "nothing under the locked directory is reported: {changes:?}"
    );
    for what in [
        "/session/f: cannot be read",
        "/session/locked: cannot be read",
    ] {
        assert!(
            second.warnings.iter().any(|w| w.starts_with(what)),
            "{what} in {:?}",
            second.warnings
        );
    }
    // A command after that one still gets its events.
    write(&session.join("later"), b"l", 0o644);
    let third = snapshot_since(&spec, &second).unwrap();
    let changes = diff(&second, &third);
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert_eq!(changes[0].harness_path, at("later"));
    // An archive needs every file's bytes: it still fails, saying which.
    let budget = HashBudget::archive(&Limits::default());
    let err = snapshot_with(&spec, &Exclude::default(), None, budget).unwrap_err();
    assert!(err.to_string().contains("ermission denied"), "{err}");
    // Unlock so the temp dir can be removed.
    mkdir(&session.join("locked"), 0o755);
    std::fs::set_permissions(session.join("f"), std::fs::Permissions::from_mode(0o644)).unwrap();
}
