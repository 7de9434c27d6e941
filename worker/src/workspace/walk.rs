//! One walk over the tracked mounts, shared by snapshots and packing so both see the same tree:
//! symlinks are never followed (only a mount's own backing path is), excluded names and names
//! that are not UTF-8 are skipped, and paths that belong to a more specific mount are left to it.

use super::error::WorkspaceError;
use super::paths::Exclude;
use super::spec::WorkspaceSpec;
use std::fs::Metadata;
use std::path::{Path, PathBuf};

/// One filesystem object under a tracked mount.
pub(crate) struct Item {
    pub harness: PathBuf,
    pub abs: PathBuf,
    pub meta: Metadata,
}

/// All objects under the tracked mounts, sorted by harness path (parents before children), and
/// warnings for what was skipped.
pub(crate) fn walk(
    spec: &WorkspaceSpec,
    exclude: &Exclude,
) -> Result<(Vec<Item>, Vec<String>), WorkspaceError> {
    let mut items = Vec::new();
    let mut warnings = Vec::new();
    // Sorted walks of mounts in harness-path order already yield harness-path order (walkdir
    // sorts siblings by name, as `Path`'s ordering does); only nested mounts need a final sort.
    let mut mounts: Vec<_> = spec.tracked().collect();
    mounts.sort_by(|a, b| a.harness_path.cmp(&b.harness_path));
    let nested = spec.mounts.iter().any(|m| {
        spec.mounts.iter().any(|o| {
            o.harness_path != m.harness_path && o.harness_path.starts_with(&m.harness_path)
        })
    });
    for mount in mounts {
        let root = &mount.backing_path;
        let root_meta = match std::fs::metadata(root) {
            Ok(m) if m.is_dir() => m,
            Ok(_) => {
                warnings.push(format!(
                    "{}: backing path is not a directory",
                    root.display()
                ));
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(WorkspaceError::io(root, e)),
        };
        items.push(Item {
            harness: mount.harness_path.clone(),
            abs: root.clone(),
            meta: root_meta,
        });
        let walker = walkdir::WalkDir::new(root)
            .follow_links(false)
            .sort_by_file_name()
            .min_depth(1)
            .into_iter();
        let mut not_utf8 = Vec::new();
        let mut walker = walker.filter_entry(|e| {
            let name = e.file_name();
            if name.to_str().is_none() {
                not_utf8.push(e.path().to_string_lossy().into_owned());
                return false;
            }
            !exclude.matches(Path::new(name))
        });
        while let Some(next) = walker.next() {
            let entry = match next {
                Ok(e) => e,
                // Deleted while we walked: it is simply not in this snapshot.
                Err(e)
                    if e.io_error()
                        .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound) =>
                {
                    continue
                }
                Err(e) => {
                    let path = e.path().unwrap_or(root).to_path_buf();
                    return Err(WorkspaceError::io(path, e.into()));
                }
            };
            let rel = entry
                .path()
                .strip_prefix(root)
                .expect("walkdir stays under its root");
            let harness = mount.harness_path.join(rel);
            if nested
                && spec.mount_for(&harness).map(|m| &m.harness_path) != Some(&mount.harness_path)
            {
                if entry.file_type().is_dir() {
                    walker.skip_current_dir();
                }
                continue;
            }
            let meta = match entry.metadata() {
                Ok(m) => m,
                Err(e)
                    if e.io_error()
                        .is_some_and(|io| io.kind() == std::io::ErrorKind::NotFound) =>
                {
                    continue
                }
                Err(e) => return Err(WorkspaceError::io(entry.path(), e.into())),
            };
            items.push(Item {
                harness,
                abs: entry.path().to_path_buf(),
                meta,
            });
        }
        drop(walker);
        warnings.extend(
            not_utf8
                .into_iter()
                .map(|p| format!("{p}: name is not UTF-8, skipped")),
        );
    }
    if nested {
        items.sort_by(|a, b| a.harness.cmp(&b.harness));
    }
    debug_assert!(items.windows(2).all(|w| w[0].harness < w[1].harness));
    Ok((items, warnings))
}
