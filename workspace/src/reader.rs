//! The receiving side's single gate: every archive (full or changes) is read through
//! `read_archive`, which validates the manifest and each entry before handing it to a sink, and
//! checks count, bytes and digest at the end. Sinks only ever see paths that are relative,
//! canonical, inside a declared mount, unique, and of an accepted kind.

use super::entry::EntryKind;
use super::error::{EntryRejection, WorkspaceError};
use super::manifest::{ArchiveKind, DigestBuilder, Limits, Manifest, FORMAT, MANIFEST_NAME};
use super::paths::{check_symlink_target, mount_of, parse_archive_path};
use super::safe_fs;
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

/// Where validated entries go. Entries arrive parents first (or the archive was not made by
/// `pack`, and the sink reports a missing parent).
pub(crate) trait Sink {
    /// Called once, after the manifest is accepted, with the relative mount roots.
    fn begin(&mut self, mounts: &[PathBuf]) -> Result<(), WorkspaceError>;
    fn dir(&mut self, rel: &Path, mode: u32) -> Result<(), WorkspaceError>;
    /// Must consume `content` (the reader enforces and hashes it).
    fn file(
        &mut self,
        rel: &Path,
        mode: u32,
        mtime: u64,
        content: &mut dyn Read,
    ) -> Result<(), WorkspaceError>;
    /// After `file`, once the content is known complete: its size and hex SHA-256.
    fn file_done(&mut self, rel: &Path, size: u64, sha256: &str) -> Result<(), WorkspaceError>;
    fn symlink(&mut self, rel: &Path, target: &str) -> Result<(), WorkspaceError>;
}

/// A verified archive's manifest, with its mounts and deletions parsed to relative paths.
pub(crate) struct Verified {
    pub manifest: Manifest,
    pub deleted: Vec<(PathBuf, EntryKind)>,
}

/// Longest GNU long name / long link accepted (PATH_MAX plus its NUL).
const MAX_LONG_NAME: u64 = 4097;

fn corrupt(e: io::Error) -> WorkspaceError {
    WorkspaceError::Corrupt(e.to_string())
}

/// Reads `input` (a tar stream), enforcing `limits` and `known` (relative mount roots the
/// receiver accepts), feeding entries to `sink`.
pub(crate) fn read_archive<R: Read>(
    input: R,
    known: &[PathBuf],
    expect: ArchiveKind,
    limits: &Limits,
    sink: &mut dyn Sink,
) -> Result<Verified, WorkspaceError> {
    let mut archive = tar::Archive::new(input);
    // Raw mode: GNU long-name/long-link entries are handled here, bounded, instead of being read
    // into memory whole by the tar crate; PAX extension headers are refused (v1 is GNU only).
    let mut entries = archive.entries().map_err(corrupt)?.raw(true);
    let manifest = {
        let mut first = entries
            .next()
            .ok_or_else(|| WorkspaceError::Manifest("archive is empty".into()))?
            .map_err(corrupt)?;
        if first.path_bytes().as_ref() != MANIFEST_NAME.as_bytes()
            || first.header().entry_type() != tar::EntryType::Regular
        {
            return Err(WorkspaceError::Manifest(format!(
                "first entry is not {MANIFEST_NAME}"
            )));
        }
        let size = first.size();
        if size > limits.max_manifest_bytes {
            return Err(WorkspaceError::TooLarge {
                what: "manifest",
                size,
                limit: limits.max_manifest_bytes,
            });
        }
        let mut json = Vec::with_capacity(size as usize);
        first.read_to_end(&mut json).map_err(corrupt)?;
        if json.len() as u64 != size {
            return Err(WorkspaceError::Corrupt(
                "manifest entry is truncated".into(),
            ));
        }
        serde_json::from_slice::<Manifest>(&json)
            .map_err(|e| WorkspaceError::Manifest(e.to_string()))?
    };
    if manifest.format != FORMAT {
        return Err(WorkspaceError::Manifest(format!(
            "format {:?}, expected {FORMAT:?}",
            manifest.format
        )));
    }
    if manifest.kind != expect {
        return Err(WorkspaceError::Manifest(format!(
            "archive kind {:?}, expected {expect:?}",
            manifest.kind
        )));
    }
    let mut mounts = Vec::new();
    for m in &manifest.mounts {
        let rel = m
            .strip_prefix('/')
            .ok_or(EntryRejection::NonCanonical)
            .and_then(|r| parse_archive_path(r.as_bytes()))
            .map_err(|r| WorkspaceError::bad(m, r))?;
        if !known.contains(&rel) {
            return Err(WorkspaceError::bad(m, EntryRejection::OutsideMounts));
        }
        if mounts.contains(&rel) {
            return Err(WorkspaceError::bad(m, EntryRejection::Duplicate));
        }
        mounts.push(rel);
    }
    let listed = manifest
        .entries
        .saturating_add(manifest.deleted.len() as u64);
    if listed > limits.max_entries {
        return Err(WorkspaceError::TooLarge {
            what: "entry count",
            size: listed,
            limit: limits.max_entries,
        });
    }
    if manifest.total_bytes > limits.max_total_bytes {
        return Err(WorkspaceError::TooLarge {
            what: "archive content",
            size: manifest.total_bytes,
            limit: limits.max_total_bytes,
        });
    }
    if expect == ArchiveKind::Full && !manifest.deleted.is_empty() {
        return Err(WorkspaceError::Manifest(
            "a full archive lists deletions".into(),
        ));
    }
    let mut seen: HashSet<PathBuf> = HashSet::new();
    let mut digest = DigestBuilder::new();
    let mut deleted = Vec::new();
    for d in &manifest.deleted {
        let rel =
            parse_archive_path(d.path.as_bytes()).map_err(|r| WorkspaceError::bad(&d.path, r))?;
        if mount_of(&rel, &mounts).is_none() {
            return Err(WorkspaceError::bad(&d.path, EntryRejection::OutsideMounts));
        }
        if !seen.insert(rel.clone()) {
            return Err(WorkspaceError::bad(&d.path, EntryRejection::Duplicate));
        }
        deleted.push((rel, d.kind));
    }

    sink.begin(&mounts)?;
    let mut count = 0u64;
    let mut total = 0u64;
    let mut long_name: Option<Vec<u8>> = None;
    let mut long_link: Option<Vec<u8>> = None;
    for entry in entries {
        let mut entry = entry.map_err(corrupt)?;
        let kind = entry.header().entry_type();
        if kind.is_gnu_longname() || kind.is_gnu_longlink() {
            let size = entry.size();
            if size > MAX_LONG_NAME {
                let what = format!("GNU long name of {size} bytes");
                return Err(WorkspaceError::bad(
                    what,
                    EntryRejection::UnsupportedType("over 4 KiB".into()),
                ));
            }
            let mut value = Vec::with_capacity(size as usize);
            entry.read_to_end(&mut value).map_err(corrupt)?;
            if value.len() as u64 != size {
                return Err(WorkspaceError::Corrupt("GNU long name is truncated".into()));
            }
            while value.last() == Some(&0) {
                value.pop();
            }
            let slot = if kind.is_gnu_longname() {
                &mut long_name
            } else {
                &mut long_link
            };
            if slot.replace(value).is_some() {
                return Err(WorkspaceError::Corrupt(
                    "two GNU long names for one entry".into(),
                ));
            }
            continue;
        }
        count = count.saturating_add(1);
        if count > manifest.entries {
            return Err(WorkspaceError::ManifestMismatch(format!(
                "more entries than the {} the manifest lists",
                manifest.entries
            )));
        }
        let raw = long_name
            .take()
            .unwrap_or_else(|| entry.path_bytes().into_owned());
        let link = long_link
            .take()
            .or_else(|| entry.link_name_bytes().map(|l| l.into_owned()));
        let shown = String::from_utf8_lossy(&raw).into_owned();
        let rel = parse_archive_path(&raw).map_err(|r| WorkspaceError::bad(&shown, r))?;
        let Some(name) = rel.to_str().map(str::to_owned) else {
            return Err(WorkspaceError::bad(&shown, EntryRejection::NotUtf8));
        };
        if mount_of(&rel, &mounts).is_none() {
            return Err(WorkspaceError::bad(&shown, EntryRejection::OutsideMounts));
        }
        if !seen.insert(rel.clone()) {
            return Err(WorkspaceError::bad(&shown, EntryRejection::Duplicate));
        }
        let header = entry.header();
        let mode = header.mode().map_err(corrupt)? & 0o777;
        match kind {
            tar::EntryType::Regular => {
                let size = entry.size();
                if size > limits.max_entry_bytes {
                    let reason = EntryRejection::TooLarge {
                        size,
                        limit: limits.max_entry_bytes,
                    };
                    return Err(WorkspaceError::bad(&shown, reason));
                }
                let new_total = total.saturating_add(size);
                if new_total > limits.max_total_bytes {
                    return Err(WorkspaceError::TooLarge {
                        what: "archive content",
                        size: new_total,
                        limit: limits.max_total_bytes,
                    });
                }
                if new_total > manifest.total_bytes {
                    return Err(WorkspaceError::ManifestMismatch(format!(
                        "content exceeds the {} bytes the manifest lists",
                        manifest.total_bytes
                    )));
                }
                total = new_total;
                // Any mtime a header can carry (octal, or GNU base-256 up to 2^64-1) is clamped
                // to 0..=MAX_MTIME_SECS; an unparsable one is 0 (docs/workspace-handoff.md).
                let mtime = safe_fs::clamp_mtime(header.mtime().unwrap_or(0));
                let mut hr = Hashing {
                    inner: &mut entry,
                    hash: Sha256::new(),
                    len: 0,
                    read_error: None,
                };
                let written = sink.file(&rel, mode, mtime, &mut hr);
                let drained = io::copy(&mut hr, &mut io::sink());
                if let Some(e) = hr.read_error.take() {
                    return Err(WorkspaceError::Corrupt(e));
                }
                written?;
                drained.map_err(corrupt)?;
                if hr.len != size {
                    return Err(WorkspaceError::Corrupt(format!(
                        "{shown}: content truncated"
                    )));
                }
                let sha = hex::encode(hr.hash.finalize());
                digest.entry(&name, EntryKind::File, mode, size, &sha);
                sink.file_done(&rel, size, &sha)?;
            }
            tar::EntryType::Directory => {
                digest.entry(&name, EntryKind::Dir, mode, 0, "");
                sink.dir(&rel, mode)?;
            }
            tar::EntryType::Symlink => {
                let target = link.ok_or_else(|| {
                    WorkspaceError::Corrupt(format!("{shown}: symlink without target"))
                })?;
                let target = check_symlink_target(&rel, &target, &mounts)
                    .map_err(|r| WorkspaceError::bad(&shown, r))?;
                digest.entry(&name, EntryKind::Symlink, 0o777, 0, &target);
                sink.symlink(&rel, &target)?;
            }
            tar::EntryType::Link => {
                return Err(WorkspaceError::bad(&shown, EntryRejection::HardLink))
            }
            tar::EntryType::Char => {
                return Err(WorkspaceError::bad(
                    &shown,
                    EntryRejection::SpecialFile("character device"),
                ))
            }
            tar::EntryType::Block => {
                return Err(WorkspaceError::bad(
                    &shown,
                    EntryRejection::SpecialFile("block device"),
                ))
            }
            tar::EntryType::Fifo => {
                return Err(WorkspaceError::bad(
                    &shown,
                    EntryRejection::SpecialFile("fifo"),
                ))
            }
            other => {
                return Err(WorkspaceError::bad(
                    &shown,
                    EntryRejection::UnsupportedType(format!("{other:?}")),
                ))
            }
        }
    }
    if long_name.is_some() || long_link.is_some() {
        return Err(WorkspaceError::Corrupt(
            "GNU long name without an entry".into(),
        ));
    }
    if count != manifest.entries {
        return Err(WorkspaceError::ManifestMismatch(format!(
            "{count} entries, the manifest lists {}",
            manifest.entries
        )));
    }
    if total != manifest.total_bytes {
        return Err(WorkspaceError::ManifestMismatch(format!(
            "{total} bytes of content, the manifest lists {}",
            manifest.total_bytes
        )));
    }
    for (rel, kind) in &deleted {
        let name = rel
            .to_str()
            .ok_or_else(|| WorkspaceError::bad(rel.to_string_lossy(), EntryRejection::NotUtf8))?;
        digest.deleted(name, *kind);
    }
    let actual = digest.finish();
    if actual != manifest.digest {
        return Err(WorkspaceError::ManifestMismatch(format!(
            "digest {actual}, the manifest lists {}",
            manifest.digest
        )));
    }
    Ok(Verified { manifest, deleted })
}

/// Hashes and counts what the sink reads; remembers a read error so a truncated archive is
/// reported as corrupt even when the sink wraps the error as its own.
struct Hashing<'a, R: Read> {
    inner: &'a mut R,
    hash: Sha256,
    len: u64,
    read_error: Option<String>,
}

impl<R: Read> Read for Hashing<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self.inner.read(buf) {
            Ok(n) => {
                self.hash.update(buf.get(..n).unwrap_or_default());
                self.len = self.len.saturating_add(n as u64);
                Ok(n)
            }
            Err(e) => {
                self.read_error = Some(e.to_string());
                Err(e)
            }
        }
    }
}
