//! The local host: the same engines with no cluster, data under a data directory laid out as the
//! seed's `localHost()` does (`session/`, `artifacts/`, `.agents/skills/`, `persistent/`,
//! `trace.ndjson`, locks), one session never running two turns at once.

pub mod data_dir;
pub mod host;
pub mod lock;
pub mod persistent;
pub mod trace;

pub use data_dir::{DataDir, LocalError, SessionDir};
pub use host::{commit_manual, run_turn, LocalTurn, TurnResult};
pub use lock::{SameSession, TurnGuard};
pub use persistent::{CommitPolicy, PersistentDir, Place};
pub use trace::FileTrace;
