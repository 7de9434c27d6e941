//! The data directory and each session's folder in it.

use kube_harness_classify::RuntimeToggles;
use kube_harness_workspace::WorkspaceSpec;
use std::fs;
use std::path::{Path, PathBuf};

/// The local host's default data directory, relative to the working directory.
pub const DEFAULT_DATA_DIR: &str = ".little-harness";

#[derive(Debug, thiserror::Error)]
pub enum LocalError {
    #[error(
        "invalid session id {0:?}: use 1-128 letters, digits, '_', '-' or '.', not '.' or '..'"
    )]
    InvalidSessionId(String),
    #[error("session {0:?} does not exist under {1}")]
    NoSuchSession(String, PathBuf),
    #[error("session {0:?} is running a turn (--same-session reject)")]
    SessionBusy(String),
    #[error("path error: {0}")]
    Path(String),
    #[error("the Tier-0 sandbox is not available on this host: {0}")]
    Sandbox(String),
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> LocalError {
    let context = context.into();
    move |source| LocalError::Io { context, source }
}

/// A local host data directory.
#[derive(Debug, Clone)]
pub struct DataDir {
    root: PathBuf,
}

impl DataDir {
    /// Opens (creating when missing) a data directory.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, LocalError> {
        let root = root.into();
        fs::create_dir_all(root.join("sessions"))
            .map_err(io(format!("creating {}", root.display())))?;
        let root = root
            .canonicalize()
            .map_err(io(format!("resolving {}", root.display())))?;
        Ok(DataDir { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Creates or resumes a session's folder.
    pub fn session(&self, id: &str) -> Result<SessionDir, LocalError> {
        validate_session_id(id)?;
        let dir = SessionDir {
            id: id.to_string(),
            root: self.root.join("sessions").join(id),
        };
        for sub in ["session", "artifacts", "persistent", ".agents/skills"] {
            let path = dir.root.join(sub);
            fs::create_dir_all(&path).map_err(io(format!("creating {}", path.display())))?;
        }
        Ok(dir)
    }

    /// An existing session's folder, for the read-only inspection commands.
    pub fn existing_session(&self, id: &str) -> Result<SessionDir, LocalError> {
        validate_session_id(id)?;
        let root = self.root.join("sessions").join(id);
        if !root.is_dir() {
            return Err(LocalError::NoSuchSession(id.into(), self.root.clone()));
        }
        Ok(SessionDir {
            id: id.into(),
            root,
        })
    }

    /// Session ids, sorted.
    pub fn sessions(&self) -> Result<Vec<String>, LocalError> {
        let dir = self.root.join("sessions");
        let mut ids: Vec<String> = fs::read_dir(&dir)
            .map_err(io(format!("listing {}", dir.display())))?
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().into_string().ok())
            .filter(|id| validate_session_id(id).is_ok())
            .collect();
        ids.sort();
        Ok(ids)
    }
}

fn validate_session_id(id: &str) -> Result<(), LocalError> {
    let ok = (1..=128).contains(&id.len())
        && id != "."
        && id != ".."
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
    if ok {
        Ok(())
    } else {
        Err(LocalError::InvalidSessionId(id.into()))
    }
}

/// One session's folder: names mirror harness paths.
#[derive(Debug, Clone)]
pub struct SessionDir {
    pub id: String,
    pub root: PathBuf,
}

impl SessionDir {
    pub fn trace_path(&self) -> PathBuf {
        self.root.join("trace.ndjson")
    }

    pub fn lock_path(&self) -> PathBuf {
        self.root.join("turn.lock")
    }

    /// The canonical mount table over this folder.
    pub fn workspace(
        &self,
        runtime: RuntimeToggles,
        read_only_prefixes: Vec<PathBuf>,
    ) -> WorkspaceSpec {
        WorkspaceSpec::canonical(&self.root, runtime, read_only_prefixes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lays_out_sessions_and_rejects_bad_ids() {
        let tmp = tempfile::tempdir().unwrap();
        let data = DataDir::open(tmp.path().join(".little-harness")).unwrap();
        let s = data.session("chat_123").unwrap();
        for sub in ["session", "artifacts", "persistent", ".agents/skills"] {
            assert!(s.root.join(sub).is_dir(), "{sub}");
        }
        assert_eq!(data.sessions().unwrap(), ["chat_123"]);
        for bad in ["", ".", "..", "a/b", "../x", "a b", &"x".repeat(129)] {
            assert!(
                matches!(data.session(bad), Err(LocalError::InvalidSessionId(_))),
                "{bad:?}"
            );
        }
        assert!(matches!(
            data.existing_session("nope"),
            Err(LocalError::NoSuchSession(..))
        ));
        assert!(!tmp
            .path()
            .join(".little-harness/sessions/..")
            .join("x")
            .exists());
    }
}
