//! Property tests over random trees on real files: a handoff round-trips exactly, and random
//! changes made on the higher tier merge back to an identical worker tree.

use super::workspace_support::*;
use kube_harness_workspace::{
    apply, changes_since, pack, rehome, snapshot, unpack, ApplyOptions, PackOptions, UnpackOptions,
};
use proptest::prelude::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

const NAMES: &[&str] = &["a", "b", "ç", "日本", "x y", ".hidden", "n-🐢", "0"];
const MOUNTS: &[&str] = &["session", "artifacts", "persistent"];

#[derive(Debug, Clone)]
enum Kind {
    File(Vec<u8>, u32),
    Dir(u32),
    /// Link to the n-th object created so far in the same mount (or, for `None`, outside).
    Link(Option<usize>),
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        4 => (prop::collection::vec(any::<u8>(), 0..300), prop::sample::select(vec![0o644u32, 0o600, 0o755, 0o444]))
            .prop_map(|(c, m)| Kind::File(c, m)),
        2 => prop::sample::select(vec![0o755u32, 0o700, 0o555]).prop_map(Kind::Dir),
        1 => prop::option::weighted(0.8, 0usize..50).prop_map(Kind::Link),
    ]
}

fn op() -> impl Strategy<Value = (usize, Vec<usize>, Kind)> {
    (
        0..MOUNTS.len(),
        prop::collection::vec(0..NAMES.len(), 1..4),
        kind(),
    )
}

/// Builds the tree; returns nothing, ops that do not fit (name taken, parent is a file) are skipped.
fn build(root: &Path, ops: &[(usize, Vec<usize>, Kind)]) {
    let mut made: Vec<Vec<PathBuf>> = vec![Vec::new(); MOUNTS.len()];
    let mut ro_dirs = Vec::new();
    for (m, names, kind) in ops {
        let rel: PathBuf = names.iter().map(|&i| NAMES[i]).collect();
        let path = root.join(MOUNTS[*m]).join(&rel);
        if path.symlink_metadata().is_ok()
            || std::fs::create_dir_all(path.parent().unwrap()).is_err()
        {
            continue;
        }
        match kind {
            Kind::File(c, mode) => write(&path, c, *mode),
            Kind::Dir(mode) => {
                std::fs::create_dir(&path).unwrap();
                ro_dirs.push((path.clone(), *mode));
            }
            Kind::Link(None) => symlink("../../../../outside", &path),
            Kind::Link(Some(i)) => {
                let Some(target) = made[*m].get(i % made[*m].len().max(1)) else {
                    continue;
                };
                let up = "../".repeat(rel.components().count() - 1);
                symlink(&format!("{up}{}", target.display()), &path);
            }
        }
        made[*m].push(rel);
    }
    for (dir, mode) in ro_dirs {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode)).unwrap();
    }
}

#[derive(Debug, Clone)]
enum Mutation {
    Delete,
    Rewrite(Vec<u8>),
    Chmod(u32),
    CreateIn(usize, Vec<u8>),
}

fn mutation() -> impl Strategy<Value = (usize, Mutation)> {
    let m = prop_oneof![
        Just(Mutation::Delete),
        prop::collection::vec(any::<u8>(), 0..200).prop_map(Mutation::Rewrite),
        prop::sample::select(vec![0o600u32, 0o755, 0o640]).prop_map(Mutation::Chmod),
        (0..NAMES.len(), prop::collection::vec(any::<u8>(), 0..50))
            .prop_map(|(n, c)| Mutation::CreateIn(n, c)),
    ];
    (0usize..1000, m)
}

fn mutate(paths: &[PathBuf], (i, m): &(usize, Mutation)) {
    let Some(path) = paths.get(i % paths.len().max(1)) else {
        return;
    };
    let Ok(meta) = path.symlink_metadata() else {
        return;
    };
    let _ = match m {
        Mutation::Delete if meta.is_dir() => std::fs::remove_dir_all(path),
        Mutation::Delete => std::fs::remove_file(path),
        Mutation::Rewrite(c) if meta.is_file() => std::fs::write(path, c),
        Mutation::Chmod(mode) if !meta.file_type().is_symlink() => {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(*mode))
        }
        Mutation::CreateIn(n, c) if meta.is_dir() => {
            std::fs::write(path.join(format!("new-{}", NAMES[*n])), c)
        }
        _ => Ok(()),
    };
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_trees_round_trip_exactly(ops in prop::collection::vec(op(), 0..30)) {
        let src = tempfile::tempdir().unwrap();
        let spec = layout(src.path(), &[]);
        build(src.path(), &ops);
        let mut bytes = Vec::new();
        let packed = pack(&spec, &PackOptions::default(), &mut bytes).unwrap();
        let dst = tempfile::tempdir().unwrap();
        let unpacked = unpack(bytes.as_slice(), dst.path(), &UnpackOptions::for_spec(&spec)).unwrap();
        let mut expected = content(&packed.snapshot);
        // Only links pointing outside are left behind, each with a warning.
        expected.retain(|p, _| !packed.warnings.iter().any(|w| w.starts_with(&format!("{}: ", p.display()))));
        prop_assert_eq!(packed.warnings.len(), content(&packed.snapshot).len() - expected.len());
        let there = snapshot(&rehome(&spec, dst.path())).unwrap();
        prop_assert_eq!(content(&there), expected.clone());
        prop_assert_eq!(content(&unpacked.snapshot), expected);
    }

    #[test]
    fn random_changes_merge_back_exactly(
        ops in prop::collection::vec(op(), 0..25),
        muts in prop::collection::vec(mutation(), 0..15),
    ) {
        let (w, t) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let spec = layout(w.path(), &[]);
        build(w.path(), &ops);
        // Links out are not handed off; keep the trees comparable.
        for e in walkdir::WalkDir::new(w.path()).into_iter().flatten() {
            if e.path_is_symlink() && std::fs::read_link(e.path()).unwrap().ends_with("outside") {
                std::fs::remove_file(e.path()).unwrap();
            }
        }
        let mut bytes = Vec::new();
        let packed = pack(&spec, &PackOptions::default(), &mut bytes).unwrap();
        let unpacked = unpack(bytes.as_slice(), t.path(), &UnpackOptions::for_spec(&spec)).unwrap();
        let tier1 = rehome(&spec, t.path());
        let paths: Vec<PathBuf> = unpacked.snapshot.entries.keys()
            .filter(|p| p.components().count() > 2)
            .map(|p| t.path().join(p.strip_prefix("/").unwrap()))
            .collect();
        for m in &muts {
            mutate(&paths, m);
        }
        let mut back = Vec::new();
        let sent = changes_since(&tier1, &unpacked.snapshot, &PackOptions::default(), &mut back).unwrap();
        let report = apply(&spec, back.as_slice(), &packed.snapshot, &ApplyOptions::default()).unwrap();
        prop_assert!(report.rejected.is_empty(), "{:?}", report.rejected);
        prop_assert_eq!(&report.applied, &sent.changes);
        prop_assert_eq!(content(&snapshot(&spec).unwrap()), content(&snapshot(&tier1).unwrap()));
    }
}
