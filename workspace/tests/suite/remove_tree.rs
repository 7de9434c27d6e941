//! `safe_fs::remove_tree_at` against trees a hostile command leaves: deeper than any limit, modes
//! that lock the owner out, symlinks pointing outside (the attack round on the forker, B1-B4).

use super::workspace_support::{unprivileged, Unprivileged};
use kube_harness_workspace::safe_fs;
use rustix::fs::{self as rfs, Mode, OFlags};
use std::ffi::OsStr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// `levels` nested directories `d` under `root/name`, made one level at a time holding one
/// descriptor (a path that long could not be named).
fn deep_tree(root: &Path, name: &str, levels: usize) {
    std::fs::create_dir(root.join(name)).unwrap();
    let mut fd = safe_fs::open_root(&root.join(name)).unwrap();
    for _ in 0..levels {
        rfs::mkdirat(&fd, "d", Mode::from_raw_mode(0o700)).unwrap();
        fd = rfs::openat(&fd, "d", OFlags::RDONLY | OFlags::DIRECTORY, Mode::empty()).unwrap();
    }
    rfs::openat(
        &fd,
        "f",
        OFlags::CREATE | OFlags::WRONLY,
        Mode::from_raw_mode(0o600),
    )
    .unwrap();
}

#[test]
fn a_tree_deeper_than_any_limit_goes_on_a_small_stack() {
    let tmp = tempfile::tempdir().unwrap();
    deep_tree(tmp.path(), "deep", 5000);
    let root = safe_fs::open_root(tmp.path()).unwrap();
    // The recursive std::fs::remove_dir_all overflowed a 2 MiB runtime thread at ~21,000 levels;
    // this runs 5,000 levels on 128 KiB.
    let removed = std::thread::Builder::new()
        .stack_size(128 * 1024)
        .spawn(move || safe_fs::remove_tree_at(&root, OsStr::new("deep")))
        .unwrap()
        .join()
        .expect("no stack overflow");
    removed.expect("removed");
    assert!(!tmp.path().join("deep").exists());
    // Nothing was moved out of the tree on the way.
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

#[test]
fn a_symlink_inside_is_removed_and_never_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tmp.path().join("outside");
    std::fs::create_dir_all(outside.join("keep")).unwrap();
    std::fs::write(outside.join("keep/file"), b"x").unwrap();
    std::fs::create_dir_all(tmp.path().join("tree/a")).unwrap();
    std::os::unix::fs::symlink(&outside, tmp.path().join("tree/a/link")).unwrap();
    std::os::unix::fs::symlink(outside.join("keep"), tmp.path().join("tree/top-link")).unwrap();
    let root = safe_fs::open_root(tmp.path()).unwrap();
    safe_fs::remove_tree_at(&root, OsStr::new("tree")).unwrap();
    assert!(!tmp.path().join("tree").exists());
    assert_eq!(std::fs::read(outside.join("keep/file")).unwrap(), b"x");
    // A symlink named as the tree itself is removed, not its target.
    std::os::unix::fs::symlink(&outside, tmp.path().join("link-root")).unwrap();
    safe_fs::remove_tree_at(&root, OsStr::new("link-root")).unwrap();
    assert!(outside.join("keep/file").exists());
}

/// Run as an unprivileged user (root passes every mode check): the test binary runs this test
/// again as uid/gid 65533 when it is root.
#[test]
fn modes_that_lock_the_owner_out_do_not_stop_removal() {
    let dir = match unprivileged(
        "suite::remove_tree::modes_that_lock_the_owner_out_do_not_stop_removal",
        "KH_REMOVE_TREE_CHILD",
    ) {
        Unprivileged::Ran(tmp) => {
            assert_eq!(
                std::fs::read_dir(tmp.path()).unwrap().count(),
                0,
                "the unprivileged run removed its tree"
            );
            return;
        }
        Unprivileged::Here(dir) => dir,
    };
    let tree = dir.join("k");
    std::fs::create_dir_all(tree.join("d/e")).unwrap();
    std::fs::write(tree.join("d/f"), vec![0u8; 100_000]).unwrap();
    std::fs::write(tree.join("d/e/g"), b"g").unwrap();
    // The attack: an unreadable directory inside a read-only one, as the command's own user.
    std::fs::set_permissions(tree.join("d/e"), std::fs::Permissions::from_mode(0o000)).unwrap();
    std::fs::set_permissions(tree.join("d"), std::fs::Permissions::from_mode(0o000)).unwrap();
    std::fs::set_permissions(&tree, std::fs::Permissions::from_mode(0o500)).unwrap();
    assert!(
        std::fs::remove_dir_all(&tree).is_err(),
        "std cannot remove it (else this test proves nothing)"
    );
    let root = safe_fs::open_root(&dir).unwrap();
    safe_fs::remove_tree_at(&root, OsStr::new("k")).unwrap();
    assert!(
        std::fs::symlink_metadata(&tree).is_err(),
        "the tree is gone"
    );
}
