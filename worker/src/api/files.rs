//! One file in or out of a session (`PUT` and `GET /v1/files?path=…`), as a raw body, streamed
//! and bounded (docs/worker-api.md, "Files").
//!
//! The handoff's rules hold here: the path is a harness path under one of the session's mounts,
//! with normal components only (no `..`, `.` or empty ones); a write must be allowed by the mount
//! table (403 `read-only` otherwise); and below the mount's root nothing is followed through a
//! symlink. A command can plant symlinks anywhere it writes, so the parent directories are
//! opened, or created, fd-relative with O_NOFOLLOW; the body, spooled first to an unnamed file
//! outside every mount ([`spool`]), is copied to a new file beside the target (O_EXCL|O_NOFOLLOW,
//! a random name) and renamed over the name ([`place`]): a symlink planted at the name is
//! replaced, never written through. Past the size limit the answer is 413 and nothing is written.

use super::error::WorkerError;
use axum::body::Body;
use kube_harness_service_kit::body::{self, BodyError, BodyHead, Receiving};
use kube_harness_workspace::safe_fs::{self, WalkError};
use kube_harness_workspace::{ChangeKind, EntryKind, FileChange, Mount, WorkspaceSpec};
use std::ffi::OsString;
use std::io::{Seek, SeekFrom};
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};
use tokio::io::AsyncWriteExt;

/// Mode of a file the API creates (an overwritten file keeps its own, but for the setuid, setgid
/// and sticky bits, which are never written).
const NEW_FILE_MODE: u32 = 0o644;
/// The permission bits a placed file may have.
const PERMISSION_BITS: u32 = 0o777;
/// The kernel's limit on one name (NAME_MAX).
const NAME_MAX: usize = 255;
/// Mode of a parent directory the API creates.
const NEW_DIR_MODE: u32 = 0o755;

/// A checked harness path: the mount it is under and the path relative to that mount's root.
#[derive(Debug, Clone)]
pub struct Target {
    pub harness: PathBuf,
    pub mount: Mount,
    /// Relative to the mount's root; never empty (a mount root is not a file).
    pub rel: PathBuf,
}

/// Checks `path` against the mount table: absolute, normal components only, under a mount, not
/// the mount's root. 400 otherwise.
pub fn resolve(spec: &WorkspaceSpec, path: &str) -> Result<Target, WorkerError> {
    resolve_in(spec, path, false)
}

/// [`resolve`] for a directory: a mount's root is allowed (`/session` itself).
pub fn resolve_dir(spec: &WorkspaceSpec, path: &str) -> Result<Target, WorkerError> {
    resolve_in(spec, path, true)
}

fn resolve_in(spec: &WorkspaceSpec, path: &str, root_ok: bool) -> Result<Target, WorkerError> {
    let bad = |why: &str| WorkerError::BadPath(format!("path {path:?}: {why}"));
    if path.is_empty() || path.contains('\0') {
        return Err(bad("empty or with a NUL byte"));
    }
    let harness = Path::new(path);
    if !harness.is_absolute() {
        return Err(bad(
            "must be absolute, under /session, /artifacts or /persistent",
        ));
    }
    // `Path::components` drops `.` and repeated slashes; the raw text is checked as well so that
    // `/session/./x` or `/session//x` is refused rather than silently normalised.
    let raw_ok = path
        .split('/')
        .skip(1)
        .all(|c| !c.is_empty() && c != "." && c != "..");
    let normal = harness
        .components()
        .all(|c| matches!(c, Component::RootDir | Component::Normal(_)));
    if !raw_ok || !normal {
        return Err(bad(
            "only plain names between slashes (no `..`, `.` or `//`)",
        ));
    }
    if path.split('/').any(|c| c.len() > NAME_MAX) {
        return Err(bad(&format!("a name is longer than {NAME_MAX} bytes")));
    }
    let Some(mount) = spec.mount_for(harness) else {
        let roots: Vec<String> = spec
            .mounts
            .iter()
            .map(|m| m.harness_path.display().to_string())
            .collect();
        return Err(bad(&format!(
            "not under a mount of this session ({})",
            roots.join(", ")
        )));
    };
    let rel = harness
        .strip_prefix(&mount.harness_path)
        .map_err(|_| bad("not under its mount"))?
        .to_path_buf();
    if rel.as_os_str().is_empty() && !root_ok {
        return Err(bad("is a mount's root, not a file"));
    }
    Ok(Target {
        harness: harness.to_path_buf(),
        mount: mount.clone(),
        rel,
    })
}

/// What a write did, for the answer and the file event.
#[derive(Debug, Clone)]
pub struct Written {
    pub change: FileChange,
    pub bytes: u64,
}

/// A request body spooled to an unnamed file of the worker's own (outside every mount: no
/// command can see or change it), before the session is taken: a slow client holds nothing
/// but its own connection.
pub struct Spooled {
    pub file: std::fs::File,
    pub bytes: u64,
}

/// Streams `body` into a spool file, refusing it past `limit` bytes (413: at once when its
/// Content-Length says so, else the moment the count passes the limit) or when it does not keep
/// its pace (408 `body-timeout`, `ConnectionLimits::body`); the spool goes with the error.
pub async fn spool(
    head: &BodyHead,
    body: Body,
    limit: u64,
    flag: &str,
) -> Result<Spooled, WorkerError> {
    let refused = |e: BodyError| match e {
        BodyError::TooLarge { .. } => WorkerError::TooLarge(format!(
            "the body is over the limit of {limit} bytes ({flag})"
        )),
        BodyError::TooSlow { .. } => WorkerError::BodyTimeout(format!("{e}; nothing was written")),
        other => WorkerError::BadRequest(format!("reading the request body: {other}")),
    };
    let mut receiving = Receiving::start(head, body, limit).await.map_err(refused)?;
    let io = |e: std::io::Error| WorkerError::Io(format!("spooling the upload: {e}"));
    let file = tempfile::tempfile().map_err(io)?;
    let mut out = tokio::fs::File::from_std(file.try_clone().map_err(io)?);
    while let Some(chunk) = receiving.next().await.map_err(refused)? {
        out.write_all(&chunk).await.map_err(io)?;
    }
    out.flush().await.map_err(io)?;
    Ok(Spooled {
        file,
        bytes: receiving.bytes(),
    })
}

/// Checks the directories on the way to `target` that exist (none may be a symlink or a file)
/// and returns those that do not, shallowest first: what a `place` creates, and removes again if
/// it then fails. Cheap enough to run before the body is read, so a bad path is refused at once.
pub fn missing_parents(target: &Target) -> Result<Vec<PathBuf>, WorkerError> {
    let Some((parent_rel, _)) = safe_fs::split_last(&target.rel) else {
        return Err(not_a_file(target));
    };
    missing_dirs(target, parent_rel)
}

/// The directories of `dir` (relative to the target's mount) that do not exist, shallowest
/// first; 400 when one that exists is a symlink or not a directory.
pub fn missing_dirs(target: &Target, dir: &Path) -> Result<Vec<PathBuf>, WorkerError> {
    let root = safe_fs::open_root(&target.mount.backing_path)
        .map_err(|e| io_failed(target, "opening its mount", &e))?;
    let mut prefix = PathBuf::new();
    let mut missing = Vec::new();
    for component in dir.components() {
        prefix.push(component);
        if !missing.is_empty() {
            missing.push(prefix.clone());
            continue;
        }
        match safe_fs::open_dir_beneath(&root, &prefix) {
            Ok(_) => {}
            Err(WalkError::Missing) => missing.push(prefix.clone()),
            Err(e) => return Err(walk_refusal(target, e)),
        }
    }
    Ok(missing)
}

/// Removes the directories a failed `place` created (deepest first; only while empty).
pub(crate) fn remove_created(target: &Target, created: &[PathBuf]) {
    let Ok(root) = safe_fs::open_root(&target.mount.backing_path) else {
        return;
    };
    for dir in created.iter().rev() {
        if let Some((parent, name)) = safe_fs::split_last(dir) {
            if let Ok(parent) = safe_fs::open_dir_beneath(&root, parent) {
                let _ = safe_fs::unlink_at(&parent, name, true);
            }
        }
    }
}

/// A refused upload's body: lingered over (bounded), so that the client reads the refusal.
pub async fn discard(head: &BodyHead, body: Body) {
    body::refuse(head, &mut body.into_data_stream()).await;
}

/// Puts a spooled body at `target` (blocking: run it off the async threads). The caller holds
/// the session (no command runs) and has checked that the mount table allows the write. The
/// body is copied to a new file beside the target, synced, and renamed over the name.
pub fn place(target: &Target, spooled: Spooled) -> Result<Written, WorkerError> {
    let Spooled { mut file, bytes } = spooled;
    let created = missing_parents(target)?;
    let placed = (|| {
        let (parent, name) = open_parent(target, true)?;
        let existing = existing_file(&parent, &name, target)?;
        let mode = existing.map_or(NEW_FILE_MODE, |mode| mode & PERMISSION_BITS);
        let temp = temp_name(&name);
        let mut out = safe_fs::create_file_mode_at(&parent, &temp, mode)
            .map_err(|e| io_failed(target, "creating the upload", &e))?;
        // The exact mode, whatever the worker's umask.
        let copied = safe_fs::chmod_fd(&out, mode)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| std::io::copy(&mut file, &mut out))
            .and_then(|_| out.sync_data());
        if let Err(e) = copied {
            let _ = safe_fs::unlink_at(&parent, &temp, false);
            return Err(io_failed(target, "writing the upload", &e));
        }
        Ok((parent, name, temp, existing, mode))
    })();
    let (parent, name, temp, existing, mode) = match placed {
        Ok(placed) => placed,
        Err(refusal) => {
            remove_created(target, &created);
            return Err(refusal);
        }
    };
    // A directory cannot have taken the name since (the session is held, and only commands
    // write the workspace), but if one did, the rename refuses and the temp file goes.
    if let Err(e) = safe_fs::rename_at(&parent, &temp, &name) {
        let _ = safe_fs::unlink_at(&parent, &temp, false);
        remove_created(target, &created);
        return Err(match e.raw_os_error() {
            Some(libc::EISDIR) | Some(libc::ENOTEMPTY) | Some(libc::EEXIST) => {
                is_a_directory(target)
            }
            _ => io_failed(target, "placing the upload", &e),
        });
    }
    Ok(Written {
        change: FileChange {
            harness_path: target.harness.clone(),
            change: if existing.is_some() {
                ChangeKind::Modified
            } else {
                ChangeKind::Created
            },
            kind: EntryKind::File,
            size: bytes,
            mode,
        },
        bytes,
    })
}

/// Opens `target` for reading: a regular file, reached without following a symlink. 404 when
/// it does not exist, 400 `not-a-file` for a directory, a symlink or anything else.
pub fn open(target: &Target) -> Result<(std::fs::File, u64), WorkerError> {
    let (parent, name) = open_parent(target, false)?;
    match safe_fs::stat_at(&parent, &name) {
        Ok(None) => return Err(not_found(target)),
        Ok(Some(st)) if (st.st_mode & libc::S_IFMT) != libc::S_IFREG => {
            return Err(not_a_file(target))
        }
        Ok(Some(_)) => {}
        Err(e) => return Err(io_failed(target, "looking at the file", &e)),
    }
    let file = safe_fs::open_regular_at(&parent, &name).map_err(|e| match e.raw_os_error() {
        Some(libc::ENOENT) => not_found(target),
        Some(libc::ELOOP) => not_a_file(target),
        _ if e.kind() == std::io::ErrorKind::InvalidInput => not_a_file(target),
        _ => io_failed(target, "opening the file", &e),
    })?;
    let size = file
        .metadata()
        .map_err(|e| io_failed(target, "looking at the file", &e))?
        .size();
    Ok((file, size))
}

/// `target` must be a directory, reached without following a symlink: 404 when missing, 400
/// otherwise.
pub fn require_dir(target: &Target) -> Result<(), WorkerError> {
    let root = safe_fs::open_root(&target.mount.backing_path)
        .map_err(|e| io_failed(target, "opening its mount", &e))?;
    match safe_fs::open_dir_beneath(&root, &target.rel) {
        Ok(_) => Ok(()),
        Err(WalkError::Missing) => Err(not_found(target)),
        Err(WalkError::Blocked) => Err(WorkerError::BadPath(format!(
            "path {}: a symlink on the way is not followed",
            target.harness.display()
        ))),
        Err(WalkError::NotDir) => Err(WorkerError::NotAFile(format!(
            "{} is not a directory",
            target.harness.display()
        ))),
        Err(other) => Err(io_failed(target, "opening it", &other.into_io())),
    }
}

/// The directory that holds `target`, opened beneath its mount's root without following a
/// symlink (created where missing when `create`), and the file's name in it.
fn open_parent(target: &Target, create: bool) -> Result<(OwnedFd, OsString), WorkerError> {
    let Some((parent_rel, name)) = safe_fs::split_last(&target.rel) else {
        return Err(not_a_file(target));
    };
    let root = safe_fs::open_root(&target.mount.backing_path)
        .map_err(|e| io_failed(target, "opening its mount", &e))?;
    let parent = if create {
        safe_fs::ensure_dir_beneath(&root, parent_rel, NEW_DIR_MODE, false)
    } else {
        safe_fs::open_dir_beneath(&root, parent_rel)
    };
    let parent = parent.map_err(|e| walk_refusal(target, e))?;
    Ok((parent, name.to_os_string()))
}

/// The mode of the regular file at `name`, if there is one; a directory there is 409,
/// and anything else (a symlink, a fifo) is replaced by the rename, never followed.
fn existing_file(
    parent: &OwnedFd,
    name: &OsString,
    target: &Target,
) -> Result<Option<u32>, WorkerError> {
    match safe_fs::stat_at(parent, name) {
        Ok(None) => Ok(None),
        Ok(Some(st)) => match st.st_mode & libc::S_IFMT {
            libc::S_IFDIR => Err(is_a_directory(target)),
            libc::S_IFREG => Ok(Some(st.st_mode & 0o7777)),
            _ => Ok(None),
        },
        Err(e) => Err(io_failed(target, "looking at the file", &e)),
    }
}

/// A name beside the target that no command can have prepared: a random part, created O_EXCL.
pub(crate) fn temp_name(name: &std::ffi::OsStr) -> OsString {
    let random = uuid::Uuid::new_v4().simple().to_string();
    let mut temp = OsString::from(".kh-upload-");
    temp.push(random.get(..12).unwrap_or(&random));
    temp.push("-");
    // Kept short: NAME_MAX is 255 bytes, and the target's name may be close to it.
    let short: String = name.to_string_lossy().chars().take(32).collect();
    temp.push(short.replace('/', "_"));
    temp
}

fn walk_refusal(target: &Target, e: WalkError) -> WorkerError {
    match e {
        WalkError::Missing => not_found(target),
        WalkError::Blocked => WorkerError::BadPath(format!(
            "path {}: a directory on the way is a symlink, which is not followed",
            target.harness.display()
        )),
        WalkError::NotDir => WorkerError::BadPath(format!(
            "path {}: something on the way is not a directory",
            target.harness.display()
        )),
        other => io_failed(target, "opening its directory", &other.into_io()),
    }
}

fn not_found(target: &Target) -> WorkerError {
    WorkerError::NotFound(format!("{} does not exist", target.harness.display()))
}

fn not_a_file(target: &Target) -> WorkerError {
    WorkerError::NotAFile(format!(
        "{} is not a regular file (a directory, a symlink or a special file)",
        target.harness.display()
    ))
}

fn is_a_directory(target: &Target) -> WorkerError {
    WorkerError::KindConflict(format!("{} is a directory", target.harness.display()))
}

fn io_failed(target: &Target, what: &str, e: &std::io::Error) -> WorkerError {
    WorkerError::Io(format!("{what} {}: {e}", target.harness.display()))
}
