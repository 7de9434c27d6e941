//! Hostile and broken archives, hand-crafted with the tar crate's low-level header API: each is
//! rejected with a typed error, and the filesystem around the target is left exactly as it was.

use super::workspace_support::*;
use kube_harness_workspace::{
    apply, pack, unpack, ApplyOptions, EntryRejection, Limits, PackOptions, UnpackOptions,
    WorkspaceError, FORMAT, MANIFEST_NAME,
};
use std::path::{Path, PathBuf};
use tar::{EntryType, Header};

/// A header with raw name (and link name) bytes, bypassing the builder's path checks.
fn raw_header(name: &[u8], kind: EntryType, size: u64, link: Option<&[u8]>) -> Header {
    let mut h = Header::new_gnu();
    h.set_entry_type(kind);
    h.set_size(size);
    h.set_mode(0o644);
    h.set_mtime(0);
    let old = h.as_old_mut();
    old.name.fill(0);
    old.name[..name.len()].copy_from_slice(name);
    if let Some(l) = link {
        old.linkname.fill(0);
        old.linkname[..l.len()].copy_from_slice(l);
    }
    h.set_cksum();
    h
}

fn manifest(mounts: &[&str], entries: u64, total: u64) -> Vec<u8> {
    serde_json::json!({
        "format": FORMAT, "kind": "full", "mounts": mounts,
        "entries": entries, "totalBytes": total, "digest": "sha256:00",
    })
    .to_string()
    .into_bytes()
}

/// Manifest (listing `entries.len()` entries and their bytes) followed by the raw entries.
fn craft(entries: &[(Header, &[u8])]) -> Vec<u8> {
    let total = entries
        .iter()
        .filter(|(h, _)| h.entry_type() == EntryType::Regular)
        .map(|(h, _)| h.size().unwrap())
        .sum();
    craft_with(
        &manifest(&["/session", "/artifacts"], entries.len() as u64, total),
        entries,
    )
}

fn craft_with(manifest: &[u8], entries: &[(Header, &[u8])]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    b.append(
        &raw_header(
            MANIFEST_NAME.as_bytes(),
            EntryType::Regular,
            manifest.len() as u64,
            None,
        ),
        manifest,
    )
    .unwrap();
    for (h, data) in entries {
        b.append(h, *data).unwrap();
    }
    b.into_inner().unwrap()
}

fn file(name: &str, data: &[u8]) -> Header {
    raw_header(name.as_bytes(), EntryType::Regular, data.len() as u64, None)
}

fn dir(name: &str) -> Header {
    raw_header(name.as_bytes(), EntryType::Directory, 0, None)
}

fn link(name: &str, target: &str) -> Header {
    raw_header(
        name.as_bytes(),
        EntryType::Symlink,
        0,
        Some(target.as_bytes()),
    )
}

/// A scratch area: `<outer>/target` (empty) next to `<outer>/victim/file` and `<outer>/etc`.
struct Area {
    outer: tempfile::TempDir,
}

impl Area {
    fn new() -> Self {
        let outer = tempfile::tempdir().unwrap();
        mkdir(&outer.path().join("target"), 0o755);
        write(&outer.path().join("victim/file"), b"precious", 0o644);
        mkdir(&outer.path().join("etc"), 0o755);
        Area { outer }
    }
    fn target(&self) -> PathBuf {
        self.outer.path().join("target")
    }
    fn path(&self, rel: &str) -> String {
        self.outer.path().join(rel).display().to_string()
    }
}

fn opts() -> UnpackOptions {
    UnpackOptions {
        mounts: vec!["/session".into(), "/artifacts".into(), "/persistent".into()],
        limits: Limits::default(),
    }
}

/// Unpacks `bytes` into a fresh area; asserts rejection and that nothing around (or in) the
/// target changed.
fn rejected_with(bytes: &[u8], limits: Limits) -> WorkspaceError {
    let area = Area::new();
    let before = listing(area.outer.path());
    let err = unpack(bytes, &area.target(), &UnpackOptions { limits, ..opts() }).unwrap_err();
    assert_eq!(
        listing(area.outer.path()),
        before,
        "filesystem changed after: {err}"
    );
    assert!(!err.to_string().is_empty());
    err
}

fn rejected(bytes: &[u8]) -> WorkspaceError {
    rejected_with(bytes, Limits::default())
}

fn reason(err: &WorkspaceError) -> &EntryRejection {
    match err {
        WorkspaceError::BadEntry { reason, .. } => reason,
        other => panic!("expected an entry rejection, got: {other}"),
    }
}

#[test]
fn parent_dir_components_are_rejected() {
    for name in ["../x", "session/../../x", "session/a/../../../victim/file"] {
        let bytes = craft(&[(dir("session"), b""), (file(name, b"pwned"), b"pwned")]);
        assert_eq!(
            reason(&rejected(&bytes)),
            &EntryRejection::ParentDir,
            "{name}"
        );
    }
}

#[test]
fn absolute_paths_are_rejected() {
    let area = Area::new();
    let abs = area.path("victim/file");
    for name in ["/etc/x", abs.as_str()] {
        let bytes = craft(&[(file(name, b"pwned"), b"pwned")]);
        assert_eq!(
            reason(&rejected(&bytes)),
            &EntryRejection::AbsolutePath,
            "{name}"
        );
    }
    assert_eq!(std::fs::read(&abs).unwrap(), b"precious");
    assert!(!Path::new("/etc/x").exists());
}

#[test]
fn symlink_out_then_write_through_it_is_rejected() {
    let area = Area::new();
    let etc = area.path("etc");
    for target in [
        "/etc",
        etc.as_str(),
        "../../etc",
        "..",
        "../..",
        "a/../../..",
    ] {
        let bytes = craft(&[
            (dir("session"), b""),
            (link("session/a", target), b""),
            (file("session/a/passwd", b"root::0:0"), b"root::0:0"),
        ]);
        let err = rejected(&bytes);
        assert!(
            matches!(reason(&err), EntryRejection::SymlinkOutside(_)),
            "{target}: {err}"
        );
    }
    assert!(std::fs::read_dir(&etc).unwrap().next().is_none());
}

#[test]
fn a_symlink_inside_cannot_be_written_through() {
    // The link itself is fine (it points inside), but no later entry may traverse it.
    for target in [".", "sub", "../artifacts"] {
        let bytes = craft(&[
            (dir("session"), b""),
            (dir("session/sub"), b""),
            (link("session/l", target), b""),
            (file("session/l/x", b"via link"), b"via link"),
        ]);
        assert_eq!(
            reason(&rejected(&bytes)),
            &EntryRejection::ThroughSymlink,
            "{target}"
        );
    }
    // Chained links whose `..` would climb out through another link are refused up front.
    let bytes = craft(&[
        (link("session/s", "."), b""),
        (link("session/t", "s/../../etc"), b""),
    ]);
    assert!(matches!(
        reason(&rejected(&bytes)),
        EntryRejection::SymlinkOutside(_)
    ));
}

#[test]
fn device_nodes_fifos_and_hard_links_are_rejected() {
    let cases = [
        (
            EntryType::Char,
            EntryRejection::SpecialFile("character device"),
        ),
        (
            EntryType::Block,
            EntryRejection::SpecialFile("block device"),
        ),
        (EntryType::Fifo, EntryRejection::SpecialFile("fifo")),
    ];
    for (kind, want) in cases {
        let mut h = raw_header(b"session/dev", kind, 0, None);
        h.set_device_major(1).unwrap();
        h.set_device_minor(3).unwrap();
        h.set_cksum();
        let bytes = craft(&[(dir("session"), b""), (h, b"")]);
        assert_eq!(reason(&rejected(&bytes)), &want);
    }
    let bytes = craft(&[
        (file("session/a", b"x"), b"x"),
        (
            raw_header(b"session/b", EntryType::Link, 0, Some(b"session/a")),
            b"",
        ),
    ]);
    assert_eq!(reason(&rejected(&bytes)), &EntryRejection::HardLink);
}

#[test]
fn a_2_gib_declared_entry_is_rejected_before_it_is_read() {
    let limits = Limits {
        max_total_bytes: 1 << 20,
        max_entry_bytes: 1 << 20,
        ..Limits::default()
    };
    let huge = raw_header(b"session/huge", EntryType::Regular, 2 << 30, None);
    let bytes = craft_with(
        &manifest(&["/session"], 1, 10),
        &[(huge, b"only a few bytes")],
    );
    let err = rejected_with(&bytes, limits);
    assert_eq!(
        reason(&err),
        &EntryRejection::TooLarge {
            size: 2 << 30,
            limit: 1 << 20
        }
    );
}

#[test]
fn totals_over_the_limit_are_rejected() {
    let limits = Limits {
        max_total_bytes: 1000,
        ..Limits::default()
    };
    let data = vec![1u8; 600];
    let two = [
        (file("session/a", &data), &data[..]),
        (file("session/b", &data), &data[..]),
    ];
    // An honest manifest is refused before any entry is read.
    let err = rejected_with(&craft(&two), limits);
    assert!(
        matches!(
            err,
            WorkspaceError::TooLarge {
                size: 1200,
                limit: 1000,
                ..
            }
        ),
        "{err}"
    );
    // A manifest that understates the total is caught while streaming.
    let err = rejected_with(
        &craft_with(&manifest(&["/session"], 2, 600), &two),
        Limits::default(),
    );
    assert!(matches!(err, WorkspaceError::ManifestMismatch(_)), "{err}");
    // ... and the limit holds even when the manifest lies below it.
    let err = rejected_with(
        &craft_with(&manifest(&["/session"], 2, 900), &two),
        Limits {
            max_total_bytes: 900,
            ..limits
        },
    );
    assert!(
        matches!(
            err,
            WorkspaceError::TooLarge {
                size: 1200,
                limit: 900,
                ..
            }
        ),
        "{err}"
    );
    // Too many entries.
    let err = rejected_with(
        &craft(&two),
        Limits {
            max_entries: 1,
            ..Limits::default()
        },
    );
    assert!(
        matches!(
            err,
            WorkspaceError::TooLarge {
                what: "entry count",
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn entries_and_mounts_outside_the_known_mounts_are_rejected() {
    let bytes = craft(&[(file("etc/passwd", b"x"), b"x")]);
    assert_eq!(reason(&rejected(&bytes)), &EntryRejection::OutsideMounts);
    let bytes = craft_with(
        &manifest(&["/etc"], 1, 1),
        &[(file("etc/passwd", b"x"), b"x")],
    );
    assert_eq!(reason(&rejected(&bytes)), &EntryRejection::OutsideMounts);
    let bytes = craft_with(&manifest(&["/.agents"], 0, 0), &[]);
    assert_eq!(reason(&rejected(&bytes)), &EntryRejection::OutsideMounts);
    let bytes = craft(&[(file(MANIFEST_NAME, b"{}"), b"{}")]);
    assert_eq!(reason(&rejected(&bytes)), &EntryRejection::OutsideMounts);
}

#[test]
fn long_names_and_pax_paths_are_checked_too() {
    // GNU long name entry ('L') carrying `..`.
    let mut b = tar::Builder::new(Vec::new());
    let m = manifest(&["/session"], 1, 1);
    b.append(
        &raw_header(
            MANIFEST_NAME.as_bytes(),
            EntryType::Regular,
            m.len() as u64,
            None,
        ),
        m.as_slice(),
    )
    .unwrap();
    let long = format!("session/{}/../../../../x", "d".repeat(120));
    let mut l = raw_header(
        b"././@LongLink",
        EntryType::GNULongName,
        long.len() as u64 + 1,
        None,
    );
    l.set_cksum();
    b.append(&l, format!("{long}\0").as_bytes()).unwrap();
    b.append(&file("session/ok", b"x"), &b"x"[..]).unwrap();
    let bytes = b.into_inner().unwrap();
    assert_eq!(reason(&rejected(&bytes)), &EntryRejection::ParentDir);

    // PAX extension headers are not part of the v1 format: refused before they can override the
    // next entry's path (here with an absolute one).
    let mut b = tar::Builder::new(Vec::new());
    b.append(
        &raw_header(
            MANIFEST_NAME.as_bytes(),
            EntryType::Regular,
            m.len() as u64,
            None,
        ),
        m.as_slice(),
    )
    .unwrap();
    let record = "path=/tmp/kube-harness-pax-escape\n";
    let record = format!("{} {record}", record.len() + 3);
    b.append(
        &raw_header(
            b"session/pax",
            EntryType::XHeader,
            record.len() as u64,
            None,
        ),
        record.as_bytes(),
    )
    .unwrap();
    b.append(&file("session/ok", b"x"), &b"x"[..]).unwrap();
    let bytes = b.into_inner().unwrap();
    assert!(matches!(
        reason(&rejected(&bytes)),
        EntryRejection::UnsupportedType(_)
    ));
    assert!(!Path::new("/tmp/kube-harness-pax-escape").exists());

    // A long name far over PATH_MAX is refused from its header, never buffered.
    let mut b = tar::Builder::new(Vec::new());
    b.append(
        &raw_header(
            MANIFEST_NAME.as_bytes(),
            EntryType::Regular,
            m.len() as u64,
            None,
        ),
        m.as_slice(),
    )
    .unwrap();
    let huge = raw_header(b"././@LongLink", EntryType::GNULongName, 2 << 30, None);
    b.append(&huge, &b"session/x"[..]).unwrap();
    let err = rejected(&b.into_inner().unwrap());
    assert!(
        matches!(reason(&err), EntryRejection::UnsupportedType(_)),
        "{err}"
    );
}

#[test]
fn duplicates_and_missing_parents_are_rejected() {
    let bytes = craft(&[
        (file("session/a", b"1"), b"1"),
        (file("session/a", b"2"), b"2"),
    ]);
    assert_eq!(reason(&rejected(&bytes)), &EntryRejection::Duplicate);
    let bytes = craft(&[
        (link("session/a", "b"), b""),
        (file("session/a", b"2"), b"2"),
    ]);
    assert_eq!(reason(&rejected(&bytes)), &EntryRejection::Duplicate);
    let bytes = craft(&[(file("session/no/such/dir", b"1"), b"1")]);
    assert_eq!(reason(&rejected(&bytes)), &EntryRejection::ParentMissing);
}

#[test]
fn manifest_problems_are_rejected() {
    // No manifest at all, or not first.
    let mut b = tar::Builder::new(Vec::new());
    b.append(&file("session/a", b"x"), &b"x"[..]).unwrap();
    assert!(matches!(
        rejected(&b.into_inner().unwrap()),
        WorkspaceError::Manifest(_)
    ));
    assert!(matches!(
        rejected(&[0u8; 1024]),
        WorkspaceError::Manifest(_)
    ));
    // Wrong version, wrong kind, not JSON.
    let v0 = manifest(&["/session"], 0, 0);
    let v0 = String::from_utf8(v0)
        .unwrap()
        .replace(FORMAT, "kube-harness.workspace.v0");
    assert!(matches!(
        rejected(&craft_with(v0.as_bytes(), &[])),
        WorkspaceError::Manifest(_)
    ));
    let changes = String::from_utf8(manifest(&["/session"], 0, 0))
        .unwrap()
        .replace("\"full\"", "\"changes\"");
    assert!(matches!(
        rejected(&craft_with(changes.as_bytes(), &[])),
        WorkspaceError::Manifest(_)
    ));
    assert!(matches!(
        rejected(&craft_with(b"not json", &[])),
        WorkspaceError::Manifest(_)
    ));
    // Oversized manifest.
    let err = rejected_with(
        &craft_with(&vec![b' '; 5000], &[]),
        Limits {
            max_manifest_bytes: 4096,
            ..Limits::default()
        },
    );
    assert!(
        matches!(
            err,
            WorkspaceError::TooLarge {
                what: "manifest",
                ..
            }
        ),
        "{err}"
    );
    // Count: fewer and more entries than listed.
    let bytes = craft_with(
        &manifest(&["/session"], 3, 1),
        &[(file("session/a", b"x"), b"x")],
    );
    assert!(matches!(
        rejected(&bytes),
        WorkspaceError::ManifestMismatch(_)
    ));
    let bytes = craft_with(&manifest(&["/session"], 0, 0), &[(dir("session"), b"")]);
    assert!(matches!(
        rejected(&bytes),
        WorkspaceError::ManifestMismatch(_)
    ));
    // Right count and bytes, wrong digest.
    let bytes = craft(&[(file("session/a", b"x"), b"x")]);
    assert!(
        matches!(rejected(&bytes), WorkspaceError::ManifestMismatch(m) if m.contains("digest"))
    );
}

fn real_archive() -> Vec<u8> {
    let src = tempfile::tempdir().unwrap();
    let spec = layout(src.path(), &[]);
    for i in 0..20 {
        write(
            &src.path().join(format!("session/d{}/f{i}", i % 3)),
            &vec![i as u8; 700 + i * 37],
            0o644,
        );
    }
    symlink("d0", &src.path().join("session/l"));
    let mut bytes = Vec::new();
    pack(&spec, &PackOptions::default(), &mut bytes).unwrap();
    assert!(unpack(
        bytes.as_slice(),
        &tempfile::tempdir().unwrap().path().join("ok"),
        &opts()
    )
    .is_ok());
    bytes
}

#[test]
fn truncated_archives_are_rejected_at_every_cut() {
    let bytes = real_archive();
    let data_end = bytes.len() - 1024; // the two zero blocks that end a tar
    let mut cuts: Vec<usize> = (0..data_end).step_by(512).collect();
    cuts.extend((1..data_end).step_by(997));
    for cut in cuts {
        let err = rejected(&bytes[..cut]);
        assert!(
            matches!(
                err,
                WorkspaceError::Corrupt(_)
                    | WorkspaceError::ManifestMismatch(_)
                    | WorkspaceError::Manifest(_)
            ),
            "cut at {cut}: {err}"
        );
    }
}

#[test]
fn tampered_content_and_headers_are_rejected() {
    let bytes = real_archive();
    // Flip one byte of file content (after the manifest's header+data blocks and a header).
    let mut tampered = bytes.clone();
    let content_at = tampered
        .iter()
        .rposition(|&b| b == 19)
        .expect("content of f19 present");
    tampered[content_at] ^= 0xff;
    assert!(
        matches!(rejected(&tampered), WorkspaceError::ManifestMismatch(m) if m.contains("digest"))
    );
    // Break a header checksum.
    let mut broken = bytes.clone();
    broken[512 * 3 + 10] ^= 0x55;
    let err = rejected(&broken);
    assert!(
        matches!(
            err,
            WorkspaceError::Corrupt(_) | WorkspaceError::BadEntry { .. }
        ),
        "{err}"
    );
}

#[test]
fn target_must_be_empty_and_absent_targets_are_removed_on_failure() {
    let area = Area::new();
    write(&area.target().join("already-here"), b"x", 0o644);
    let before = listing(area.outer.path());
    let err = unpack(real_archive().as_slice(), &area.target(), &opts()).unwrap_err();
    assert!(matches!(err, WorkspaceError::Target { .. }), "{err}");
    assert_eq!(listing(area.outer.path()), before);

    let fresh = area.outer.path().join("fresh");
    let bytes = craft(&[(file("../x", b"1"), b"1")]);
    assert!(unpack(bytes.as_slice(), &fresh, &opts()).is_err());
    assert!(
        !fresh.exists(),
        "a target created by unpack is removed again on failure"
    );
}

#[test]
fn apply_rejects_hostile_change_archives_without_touching_the_workspace() {
    let root = tempfile::tempdir().unwrap();
    let spec = layout(root.path(), &[]);
    write(&root.path().join("session/keep"), b"keep", 0o644);
    let base = kube_harness_workspace::snapshot(&spec).unwrap();
    let change_manifest = |entries: u64, total: u64| {
        serde_json::json!({"format": FORMAT, "kind": "changes", "mounts": ["/session"],
            "entries": entries, "totalBytes": total, "digest": "sha256:00"})
        .to_string()
        .into_bytes()
    };
    let cases: Vec<Vec<u8>> = vec![
        craft_with(
            &change_manifest(1, 1),
            &[(file("session/../x", b"1"), b"1")],
        ),
        craft_with(&change_manifest(1, 1), &[(file("/tmp/x", b"1"), b"1")]),
        craft_with(
            &change_manifest(2, 1),
            &[
                (link("session/l", "/etc"), b""),
                (file("session/l/p", b"1"), b"1"),
            ],
        ),
        craft_with(
            &change_manifest(2, 1),
            &[
                (link("session/l", "."), b""),
                (file("session/l/p", b"1"), b"1"),
            ],
        ),
        craft_with(
            &change_manifest(1, 0),
            &[(raw_header(b"session/dev", EntryType::Block, 0, None), b"")],
        ),
        craft_with(&change_manifest(1, 1), &[(file("session/new", b"1"), b"1")]), // digest mismatch
        craft(&[(file("session/new", b"1"), b"1")]),                              // a full archive
    ];
    let before = listing(root.path());
    for (i, bytes) in cases.iter().enumerate() {
        let err = apply(&spec, bytes.as_slice(), &base, &ApplyOptions::default()).unwrap_err();
        assert!(!err.to_string().is_empty(), "case {i}");
        assert_eq!(
            listing(root.path()),
            before,
            "case {i} changed the workspace: {err}"
        );
    }
}
