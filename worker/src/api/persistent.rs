//! Persistent Dirs in a pod (docs/worker-api.md "Persistent Dirs"): each `/persistent/<name>` is
//! a checkout on the session's workspace volume, loaded from its source at the start of every
//! turn and committed back by its policy when the turn ends. A source is a directory inside a
//! volume the pod mounts at `SOURCES_ROOT/<name>`, where commands cannot reach (landlock grants
//! them nothing under /var). A ConfigMap source is mounted at /persistent/<name> itself
//! (`mounted`) and never loaded or committed.
//!
//! Sharing one source between sessions: loads and commits hold a lock on the volume
//! (`.kube-harness.lock` at its root, shared for loads, exclusive for commits), and each commit
//! writes a new generation token beside the directory. A turn's after-turn commit compares the
//! token with the one it loaded: if another session committed in between, this turn's version
//! is not written (first commit wins) but kept as a manual commit, and the turn's answer says
//! `conflict`. Every copy goes through `local::persistent::mirror` (built beside, renamed into
//! place, never through a symlink), so a reader sees the old tree or the new one.
//!
//! Sessions run as different uids; the trees a commit writes are given to the shared group
//! (`SOURCES_GID`, the fsGroup of every worker pod that mounts a claim) so that the next session's commit
//! can replace them.

use crate::local::persistent::{mirror, mirror_with, Place};
use crate::local::LocalError;
use kube_harness_protocol::worker_api::{CommitOutcome, PersistentCommit};
use kube_harness_protocol::worker_args::{PersistentDirArg, PersistentPolicy};
use kube_harness_workspace::safe_fs::{self, WalkError};
use rustix::fs::{self as rfs, FlockOperation, Mode, OFlags};
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How many turns of kept (manual or conflicting) versions a session keeps; older ones go.
pub const KEPT_TURNS: usize = 8;
/// How long a load or commit waits for another session's commit of the same volume.
const LOCK_WAIT: Duration = Duration::from_secs(30);
const LOCK_FILE: &str = ".kube-harness.lock";

/// Where a worker's Persistent Dirs live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersistentConfig {
    pub dirs: Vec<PersistentDirArg>,
    /// `SOURCES_ROOT` in a pod: one mounted volume per dir, named by the dir.
    pub sources_root: PathBuf,
    /// `MANUAL_COMMITS_ROOT` in a pod: `<turn>/<dir>/` per kept version.
    pub manual_root: PathBuf,
    /// The workspace's `persistent/` directory (what /persistent shows).
    pub checkout_root: PathBuf,
    /// The group commits give their trees to (`None`: left as written).
    pub share_gid: Option<u32>,
}

/// Why a commit request was not carried out.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error("no Persistent Dir named {0:?} in this session")]
    NoSuchDir(String),
    #[error("/persistent/{0} is read-only: nothing of it is ever committed")]
    ReadOnly(String),
    #[error("no kept version of /persistent/{dir} for turn {turn:?} (a manual dir keeps its last {KEPT_TURNS} turns; an after-turn dir only a conflicting one)")]
    NothingKept { dir: String, turn: String },
    #[error("{0}")]
    Failed(String),
}

pub struct PersistentDirs {
    config: PersistentConfig,
    /// Per dir, the generation token of the source this session last loaded or committed.
    seen: Mutex<BTreeMap<String, String>>,
}

impl PersistentDirs {
    pub fn new(config: PersistentConfig) -> Self {
        PersistentDirs {
            config,
            seen: Mutex::new(BTreeMap::new()),
        }
    }

    /// Whether a turn's start loads anything (and so needs a sandbox built after it: landlock
    /// rules bind to inodes, and a load replaces the directories they were bound to).
    pub fn loads(&self) -> bool {
        self.config
            .dirs
            .iter()
            .any(|d| d.policy != PersistentPolicy::Mounted)
    }

    /// Loads the sources into their checkouts (blocking; at a turn's start); whether anything
    /// was copied (and so the turn needs a sandbox of its own). A `read-only` or `after-turn`
    /// checkout is left as it is when the source's generation is the one this session last
    /// loaded or committed (nothing else changed it since: commands cannot write a read-only
    /// checkout, and an after-turn one was committed as it is). A source without a generation
    /// (never committed by a session, written by something else) is copied every turn, and a
    /// `manual` one always (its uncommitted changes do not outlive their turn).
    pub fn load(&self) -> Result<bool, String> {
        let mut copied = false;
        for dir in self.loaded_dirs() {
            let volume = self.volume(dir);
            let _lock = VolumeLock::take(&volume, false)?;
            let token = generation(&volume, dir.path.as_deref().unwrap_or(&dir.name));
            let seen = super::relock(&self.seen).get(&dir.name).cloned();
            let checkout = self.checkout(dir).path();
            let current = dir.policy != PersistentPolicy::Manual
                && !token.is_empty()
                && seen.as_deref() == Some(token.as_str())
                // The host made it; a command may have swapped it for a symlink since.
                && std::fs::symlink_metadata(&checkout).is_ok_and(|m| m.is_dir());
            if current {
                continue;
            }
            mirror(&self.source(dir), &self.checkout(dir))
                .map_err(|e| format!("loading /persistent/{}: {e}", dir.name))?;
            super::relock(&self.seen).insert(dir.name.clone(), token);
            copied = true;
        }
        Ok(copied)
    }

    /// Commits or keeps every writable dir as `turn_id` left it (blocking; at a turn's end).
    /// `changed`: the dirs the turn's file events name, `None` when they may be incomplete
    /// (then every after-turn dir is committed).
    pub fn end_turn(
        &self,
        turn_id: &str,
        changed: Option<&BTreeSet<String>>,
    ) -> Vec<PersistentCommit> {
        let mut reports = Vec::new();
        for dir in &self.config.dirs {
            let (outcome, message) = match dir.policy {
                PersistentPolicy::Mounted | PersistentPolicy::ReadOnly => continue,
                PersistentPolicy::Manual => match self.keep(dir, turn_id) {
                    Ok(()) => (CommitOutcome::Kept, None),
                    Err(e) => (CommitOutcome::Failed, Some(e)),
                },
                PersistentPolicy::AfterTurn
                    if changed.is_some_and(|c| !c.contains(&dir.name))
                        && super::relock(&self.seen).contains_key(&dir.name) =>
                {
                    (CommitOutcome::Unchanged, None)
                }
                PersistentPolicy::AfterTurn => match self.commit_after_turn(dir, turn_id) {
                    Ok(None) => (CommitOutcome::Committed, None),
                    Ok(Some(conflict)) => (CommitOutcome::Conflict, Some(conflict)),
                    Err(e) => {
                        // Loaded again next turn: what failed to commit is not kept on.
                        super::relock(&self.seen).remove(&dir.name);
                        (CommitOutcome::Failed, Some(e))
                    }
                },
            };
            reports.push(PersistentCommit {
                dir: dir.name.clone(),
                turn_id: turn_id.to_string(),
                outcome,
                message,
            });
        }
        reports
    }

    /// Writes the version of `name` kept at the end of `turn_id` to the source, whatever was
    /// committed since (blocking; `POST /v1/persistent/commit`).
    pub fn commit(&self, name: &str, turn_id: &str) -> Result<PersistentCommit, CommitError> {
        let dir = self
            .config
            .dirs
            .iter()
            .find(|d| d.name == name)
            .ok_or_else(|| CommitError::NoSuchDir(name.to_string()))?;
        if dir.policy.read_only() {
            return Err(CommitError::ReadOnly(name.to_string()));
        }
        let nothing = || CommitError::NothingKept {
            dir: name.to_string(),
            turn: turn_id.to_string(),
        };
        if !kube_harness_protocol::worker_args::plain_segment(turn_id) {
            return Err(nothing());
        }
        let kept = self.kept(dir, turn_id);
        // The kept tree is the worker's own (commands never reach MANUAL_COMMITS_ROOT).
        let is_dir = std::fs::symlink_metadata(kept.path()).is_ok_and(|m| m.is_dir());
        if !is_dir {
            return Err(nothing());
        }
        let volume = self.volume(dir);
        let lock = VolumeLock::take(&volume, true).map_err(CommitError::Failed)?;
        self.write_source(dir, &kept, &lock)
            .map_err(CommitError::Failed)?;
        Ok(PersistentCommit {
            dir: name.to_string(),
            turn_id: turn_id.to_string(),
            outcome: CommitOutcome::Committed,
            message: None,
        })
    }

    /// `Ok(None)` when committed, `Ok(Some(why))` when another session's commit came first.
    fn commit_after_turn(
        &self,
        dir: &PersistentDirArg,
        turn_id: &str,
    ) -> Result<Option<String>, String> {
        let volume = self.volume(dir);
        let lock = VolumeLock::take(&volume, true)?;
        let current = generation(&volume, dir.path.as_deref().unwrap_or(&dir.name));
        let loaded = super::relock(&self.seen).get(&dir.name).cloned();
        if loaded.as_deref() != Some(current.as_str()) {
            drop(lock);
            self.keep(dir, turn_id)?;
            return Ok(Some(format!(
                "another session committed /persistent/{} after this session loaded it; this turn's version was not written but kept: `kube-harness commit SESSION --dir {} --turn {turn_id}` writes it over theirs",
                dir.name, dir.name
            )));
        }
        self.write_source(dir, &self.checkout(dir), &lock)?;
        Ok(None)
    }

    /// Copies `from` over the source and records a new generation (under the exclusive lock).
    fn write_source(
        &self,
        dir: &PersistentDirArg,
        from: &Place,
        _lock: &VolumeLock,
    ) -> Result<(), String> {
        let gid = self.config.share_gid;
        let share = move |fd: &OwnedFd| match gid {
            Some(gid) => safe_fs::share_tree_at(fd, gid),
            None => Ok(()),
        };
        let source = self.source(dir);
        mirror_with(from, &source, &share)
            .map_err(|e| format!("committing /persistent/{}: {e}", dir.name))?;
        let token = uuid::Uuid::new_v4().simple().to_string();
        let rel = dir.path.as_deref().unwrap_or(&dir.name);
        write_generation(&self.volume(dir), rel, &token, gid).map_err(|e| {
            format!(
                "committing /persistent/{}: recording its generation: {e}",
                dir.name
            )
        })?;
        super::relock(&self.seen).insert(dir.name.clone(), token);
        Ok(())
    }

    /// Keeps the checkout as `turn_id` left it, then drops kept turns beyond [`KEPT_TURNS`].
    fn keep(&self, dir: &PersistentDirArg, turn_id: &str) -> Result<(), String> {
        mirror(&self.checkout(dir), &self.kept(dir, turn_id))
            .map_err(|e| format!("keeping /persistent/{} of {turn_id}: {e}", dir.name))?;
        prune(&self.config.manual_root, KEPT_TURNS);
        Ok(())
    }

    fn loaded_dirs(&self) -> impl Iterator<Item = &PersistentDirArg> {
        self.config
            .dirs
            .iter()
            .filter(|d| d.policy != PersistentPolicy::Mounted)
    }

    fn volume(&self, dir: &PersistentDirArg) -> PathBuf {
        self.config.sources_root.join(&dir.name)
    }

    fn source(&self, dir: &PersistentDirArg) -> Place {
        Place::source(self.volume(dir), dir.path.as_deref().unwrap_or(&dir.name))
    }

    fn checkout(&self, dir: &PersistentDirArg) -> Place {
        Place::below(&self.config.checkout_root, &dir.name)
    }

    fn kept(&self, dir: &PersistentDirArg, turn_id: &str) -> Place {
        Place::trusted(self.config.manual_root.join(turn_id).join(&dir.name))
    }
}

impl From<LocalError> for CommitError {
    fn from(e: LocalError) -> Self {
        CommitError::Failed(e.to_string())
    }
}

/// A `flock` on the volume's lock file: shared for a load, exclusive for a commit. A read-only
/// volume without one is read unlocked (nothing can commit to it through this pod).
struct VolumeLock {
    _held: Option<OwnedFd>,
}

impl VolumeLock {
    fn take(volume: &Path, exclusive: bool) -> Result<VolumeLock, String> {
        let root = safe_fs::open_root(volume)
            .map_err(|e| format!("opening the source volume {}: {e}", volume.display()))?;
        let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let fd = match rfs::openat(
            &root,
            LOCK_FILE,
            flags | OFlags::CREATE,
            Mode::from_raw_mode(0o664),
        ) {
            Ok(fd) => {
                // Whoever made it: the group may lock it too (best effort, it may be another's).
                let _ = rfs::fchmod(&fd, Mode::from_raw_mode(0o664));
                fd
            }
            Err(_) if !exclusive => match rfs::openat(&root, LOCK_FILE, flags, Mode::empty()) {
                Ok(fd) => fd,
                Err(_) => return Ok(VolumeLock { _held: None }),
            },
            Err(e) => {
                return Err(format!(
                    "opening the lock {}/{LOCK_FILE}: {e}",
                    volume.display()
                ))
            }
        };
        let op = if exclusive {
            FlockOperation::NonBlockingLockExclusive
        } else {
            FlockOperation::NonBlockingLockShared
        };
        let started = Instant::now();
        loop {
            match rfs::flock(&fd, op) {
                Ok(()) => return Ok(VolumeLock { _held: Some(fd) }),
                Err(rustix::io::Errno::WOULDBLOCK) if started.elapsed() < LOCK_WAIT => {
                    std::thread::sleep(Duration::from_millis(50))
                }
                Err(e) => {
                    return Err(format!(
                        "locking {}/{LOCK_FILE} (another session is committing to it): {e}",
                        volume.display()
                    ))
                }
            }
        }
    }
}

/// The generation file of the directory `rel` in a volume: `.<last>.kube-harness-generation`
/// beside it, so that it is not part of what the dir's sessions see.
fn generation_place(rel: &str) -> (&Path, String) {
    let rel = Path::new(rel);
    let parent = rel.parent().unwrap_or(Path::new(""));
    let last = rel.file_name().unwrap_or_default().to_string_lossy();
    (parent, format!(".{last}.kube-harness-generation"))
}

/// The source's generation token; empty when it has none (never committed, or unreadable).
fn generation(volume: &Path, rel: &str) -> String {
    let (parent, name) = generation_place(rel);
    let read = || -> std::io::Result<String> {
        let root = safe_fs::open_root(volume)?;
        let dir = safe_fs::open_dir_beneath(&root, parent).map_err(WalkError::into_io)?;
        let mut token = String::new();
        safe_fs::open_regular_at(&dir, OsStr::new(&name))?
            .take(64)
            .read_to_string(&mut token)?;
        Ok(token)
    };
    read().unwrap_or_default()
}

fn write_generation(
    volume: &Path,
    rel: &str,
    token: &str,
    gid: Option<u32>,
) -> std::io::Result<()> {
    let (parent, name) = generation_place(rel);
    let root = safe_fs::open_root(volume)?;
    let dir = safe_fs::open_dir_beneath(&root, parent).map_err(WalkError::into_io)?;
    let tmp = format!("{name}.tmp-{}", std::process::id());
    let _ = safe_fs::unlink_at(&dir, OsStr::new(&tmp), false);
    let mut file = safe_fs::create_file_mode_at(&dir, OsStr::new(&tmp), 0o664)?;
    if let Some(gid) = gid {
        let group = Some(rfs::Gid::from_raw(gid));
        let _ = rfs::fchown(&file, None, group);
        // The directories a first commit made on the way (best effort: those another uid made
        // stay as they are, and the group already has them if a worker made them).
        let mut at = root;
        for name in parent.iter() {
            let Ok(next) = safe_fs::open_dir_at(&at, name) else {
                break;
            };
            if rfs::fchown(&next, None, group).is_ok() {
                let _ = rfs::fchmod(&next, Mode::from_raw_mode(0o2775));
            }
            at = next;
        }
    }
    file.write_all(token.as_bytes())?;
    safe_fs::rename_at(&dir, OsStr::new(&tmp), OsStr::new(&name))
}

/// Drops the oldest kept turns beyond `keep` (turn ids sort by their start time).
fn prune(manual_root: &Path, keep: usize) {
    let Ok(root) = safe_fs::open_root(manual_root) else {
        return;
    };
    let Ok(mut turns) = safe_fs::list_dir(&root) else {
        return;
    };
    turns.sort();
    let extra = turns.len().saturating_sub(keep);
    for turn in turns.into_iter().take(extra) {
        if let Err(e) = safe_fs::remove_tree_at(&root, &turn) {
            tracing::warn!("dropping kept turn {}: {e}", turn.to_string_lossy());
        }
    }
}
