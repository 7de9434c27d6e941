//! The settings of `kube-harness worker`, typed: what the binary parses (`--flag` or the
//! `KH_WORKER_*` variable of the same name) and what the operator renders into a worker pod's
//! arguments ([`WorkerArgs::to_args`]). One type on both sides, so a flag one side renames or
//! drops fails the operator's tests, not a pod.
//!
//! The defaults are defined here once; the engines that use them re-export them.

use crate::RuntimeToggles;
use clap::{ArgAction, Args, ValueEnum};
use serde::{Deserialize, Serialize};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;

pub use kube_harness_bounds::{
    DEFAULT_HEADER_READ_TIMEOUT, DEFAULT_IDLE_TIMEOUT, DEFAULT_MAX_CONNECTIONS,
};

/// Default `--listen`: every interface, port 8080.
pub const DEFAULT_LISTEN: SocketAddr =
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 8080));
/// Default `--session`.
pub const DEFAULT_SESSION: &str = "session";
/// Default `--workspace-root`: a pod, where the volumes are mounted at the canonical paths.
pub const DEFAULT_WORKSPACE_ROOT: &str = "/";
/// Default `--provision-timeout`, in seconds.
pub const DEFAULT_PROVISION_TIMEOUT_SECS: u64 = 180;
/// Default `--command-timeout`, in seconds.
pub const DEFAULT_COMMAND_TIMEOUT_SECS: u64 = 60;
/// Default `--max-timeout`, in seconds.
pub const DEFAULT_MAX_TIMEOUT_SECS: u64 = 600;
/// Default `--shutdown-grace`, in seconds.
pub const DEFAULT_SHUTDOWN_GRACE_SECS: u64 = 20;
/// Default `--turn-idle-timeout`, in seconds: a client's turn (`POST /v1/turns`) with no
/// command for this long is ended, so an abandoned one does not hold the session.
pub const DEFAULT_TURN_IDLE_TIMEOUT_SECS: u64 = 900;
/// Default `--max-archive-bytes` (the worker's pod Tier-1 and the agent): 1 GiB.
pub const DEFAULT_MAX_ARCHIVE_BYTES: u64 = 1 << 30;
/// Default of `--max-file-bytes`: 1 GiB.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 1 << 30;
/// Default `--max-file-events`: at most this many `harness.file.*` events per command and per
/// merge-back.
pub const DEFAULT_MAX_FILE_EVENTS: usize = 10_000;
/// Default `--max-file-event-bytes`: at most this many bytes of paths (as JSON strings) in the
/// `harness.file.*` events of one command and of one merge-back. A path may be about 64 KB (256
/// levels of 250-character names), so the count alone let 5,000 files make an 81 MB exec answer
/// (issue 12).
pub const DEFAULT_MAX_FILE_EVENT_BYTES: usize = 4 * 1024 * 1024;

/// What a second command (or turn) does while one runs in the same session: the worker API's
/// exec and the local host's turns. The CRD has its own enum (it needs a JSON schema); the
/// operator maps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Serialize, Deserialize, Hash)]
#[serde(rename_all = "lowercase")]
pub enum SameSession {
    // Wait for the running one to finish. (Plain comments: a doc comment here would change
    // the `--help` text into a list of described values.)
    #[default]
    Queue,
    // Answered at once: 409 `session-busy` from the worker, an error from the local host.
    Reject,
}

impl SameSession {
    /// The flag value: `queue` or `reject`.
    pub fn as_str(self) -> &'static str {
        match self {
            SameSession::Queue => "queue",
            SameSession::Reject => "reject",
        }
    }
}

impl std::fmt::Display for SameSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for SameSession {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "queue" => Ok(SameSession::Queue),
            "reject" => Ok(SameSession::Reject),
            other => Err(format!(
                "same-session must be queue or reject, not {other:?}"
            )),
        }
    }
}

/// Where the worker sends a command the classifier escalates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, ValueEnum, Serialize, Deserialize, Hash)]
#[serde(rename_all = "lowercase")]
pub enum Escalation {
    // Refused with exit 126.
    #[default]
    None,
    // A Tier-1 pod from the operator's tier API.
    Pod,
}

impl Escalation {
    /// The flag value: `none` or `pod`.
    pub fn as_str(self) -> &'static str {
        match self {
            Escalation::None => "none",
            Escalation::Pod => "pod",
        }
    }
}

impl std::fmt::Display for Escalation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the worker finds a Persistent Dir's source volume: `SOURCES_ROOT/NAME`.
pub const SOURCES_ROOT: &str = "/var/run/kube-harness/sources";
/// Where the worker keeps `manual` Persistent Dirs' turns until they are committed (on the
/// session's workspace volume, outside every path commands can reach).
pub const MANUAL_COMMITS_ROOT: &str = "/var/run/kube-harness/manual-commits";
/// The fsGroup of every worker pod that mounts a Persistent Dir claim: the trees a
/// commit writes belong to it, so sessions (each its own uid) can replace each other's commits.
pub const SOURCES_GID: u32 = 99_999;

/// What the worker does with a Persistent Dir's source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PersistentPolicy {
    /// Mounted read-only at /persistent/NAME by the pod (a ConfigMap): nothing to load.
    Mounted,
    /// Loaded at each turn's start; writes fail.
    ReadOnly,
    /// Loaded at each turn's start, committed back when the turn ends.
    AfterTurn,
    /// Loaded at each turn's start; each turn's end state kept until a commit names it.
    Manual,
}

impl PersistentPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            PersistentPolicy::Mounted => "mounted",
            PersistentPolicy::ReadOnly => "read-only",
            PersistentPolicy::AfterTurn => "after-turn",
            PersistentPolicy::Manual => "manual",
        }
    }

    /// Whether commands may not change the directory.
    pub fn read_only(self) -> bool {
        matches!(self, PersistentPolicy::Mounted | PersistentPolicy::ReadOnly)
    }
}

/// `--persistent-dir NAME:POLICY[:PATH]`, checked when parsed: NAME one plain path segment,
/// PATH plain names separated by `/` (default NAME), none for `mounted`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PersistentDirArg {
    pub name: String,
    pub policy: PersistentPolicy,
    /// The directory inside the source volume (`None` for `mounted`).
    pub path: Option<String>,
}

/// One plain path segment: letters, digits, `.`, `_`, `-`, not `.` or `..`, at most 255 bytes.
pub fn plain_segment(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && s != "."
        && s != ".."
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

impl std::str::FromStr for PersistentDirArg {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let mut parts = s.splitn(3, ':');
        let name = parts.next().unwrap_or_default();
        let policy = parts.next().unwrap_or_default();
        let path = parts.next();
        if !plain_segment(name) {
            return Err(format!(
                "{s:?}: NAME must be one plain path segment (NAME:POLICY[:PATH])"
            ));
        }
        let policy = match policy {
            "mounted" => PersistentPolicy::Mounted,
            "read-only" => PersistentPolicy::ReadOnly,
            "after-turn" => PersistentPolicy::AfterTurn,
            "manual" => PersistentPolicy::Manual,
            other => {
                return Err(format!(
                    "{s:?}: policy {other:?} is not one of mounted, read-only, after-turn, manual"
                ))
            }
        };
        let path = match (policy, path) {
            (PersistentPolicy::Mounted, Some(_)) => {
                return Err(format!("{s:?}: a mounted dir has no PATH"))
            }
            (PersistentPolicy::Mounted, None) => None,
            (_, Some(p)) if p.len() <= 1024 && p.split('/').all(plain_segment) => Some(p.to_string()),
            (_, Some(p)) => {
                return Err(format!(
                    "{s:?}: PATH {p:?} must be plain names separated by '/' (no '.', '..', empty segments)"
                ))
            }
            (_, None) => Some(name.to_string()),
        };
        Ok(PersistentDirArg {
            name: name.to_string(),
            policy,
            path,
        })
    }
}

impl std::fmt::Display for PersistentDirArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.name, self.policy.as_str())?;
        match &self.path {
            Some(p) => write!(f, ":{p}"),
            None => Ok(()),
        }
    }
}

/// `kube-harness worker`'s settings. Every flag can also come from its `KH_WORKER_*` variable.
#[derive(Args, Debug, Clone, PartialEq, Eq)]
pub struct WorkerArgs {
    /// Address to serve the API on.
    #[arg(long, env = "KH_WORKER_LISTEN", default_value_t = DEFAULT_LISTEN)]
    pub listen: SocketAddr,
    /// File holding the bearer token clients must send (the session's Secret, mounted).
    #[arg(long, env = "KH_WORKER_TOKEN_FILE", value_name = "FILE")]
    pub token_file: PathBuf,
    /// Start pooled: serve nothing but `POST /v1/adopt` (with the bearer token in this file, the
    /// warm pool's) until one session adopts the worker, which then writes --token-file and runs
    /// as if started with the adoption's arguments. Set by the operator on warm-pool pods.
    #[arg(long, env = "KH_WORKER_ADOPT_TOKEN_FILE", value_name = "FILE")]
    pub adopt_token_file: Option<PathBuf>,
    /// The session's name: the default session log run id, reported by /v1/status.
    #[arg(long, env = "KH_WORKER_SESSION", default_value = DEFAULT_SESSION)]
    pub session: String,
    /// The tier this process is: 0 (the session's worker) or 1 (the agent of a Tier-1 pod,
    /// which uses only --listen, --token-file, --workspace-root, --skills-keeper,
    /// --command-timeout, --max-timeout, --max-body-bytes, --max-archive-bytes and the
    /// connection flags --header-read-timeout, --idle-timeout, --max-connections).
    #[arg(long, env = "KH_WORKER_TIER", default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub tier: u8,
    /// Whether python3/python may run on Tier-0.
    #[arg(long, env = "KH_WORKER_PYTHON", value_name = "BOOL", default_value_t = RuntimeToggles::default().python, action = ArgAction::Set)]
    pub python: bool,
    /// Whether node may run on Tier-0.
    #[arg(long, env = "KH_WORKER_JAVASCRIPT", value_name = "BOOL", default_value_t = RuntimeToggles::default().javascript, action = ArgAction::Set)]
    pub javascript: bool,
    /// Whether network clients (curl) may run on Tier-0.
    #[arg(long, env = "KH_WORKER_NETWORK", value_name = "BOOL", default_value_t = RuntimeToggles::default().network, action = ArgAction::Set)]
    pub network: bool,
    /// Refuse this command on every tier (repeatable; in the env variable: comma-separated).
    #[arg(
        long = "deny-command",
        env = "KH_WORKER_DENY_COMMAND",
        value_name = "CMD",
        value_delimiter = ','
    )]
    pub deny_command: Vec<String>,
    /// A Persistent Dir, `NAME:POLICY[:PATH]` (repeatable; docs/worker-api.md "Persistent
    /// Dirs"): /persistent/NAME is loaded at each turn's start from PATH inside the source
    /// volume mounted at /var/run/kube-harness/sources/NAME and committed back by POLICY
    /// (`read-only`, `after-turn`, `manual`); `mounted` is a read-only source mounted at
    /// /persistent/NAME itself (a ConfigMap), which is never loaded or committed.
    #[arg(
        long = "persistent-dir",
        env = "KH_WORKER_PERSISTENT_DIR",
        value_name = "SPEC",
        value_delimiter = ','
    )]
    pub persistent_dir: Vec<PersistentDirArg>,
    /// A harness path under /persistent that commands may read but not change (repeatable;
    /// a landlock read-only prefix; changes a higher tier made there are not merged back).
    #[arg(
        long = "read-only-prefix",
        env = "KH_WORKER_READ_ONLY_PREFIX",
        value_name = "PATH",
        value_delimiter = ','
    )]
    pub read_only_prefix: Vec<PathBuf>,
    /// A second exec for a busy session waits (`queue`) or is answered 409 (`reject`).
    #[arg(long, env = "KH_WORKER_SAME_SESSION", value_enum, default_value_t = SameSession::default())]
    pub same_session: SameSession,
    /// The session log service (`http://host:port`); events are appended there, and steps with
    /// a runId and stepKey are replayed from it.
    #[arg(long, env = "KH_WORKER_SESSION_LOG_URL", value_name = "URL")]
    pub session_log_url: Option<String>,
    /// File holding the session log's bearer token.
    #[arg(long, env = "KH_WORKER_SESSION_LOG_TOKEN_FILE", value_name = "FILE")]
    pub session_log_token_file: Option<PathBuf>,
    /// Prefix of every session-log run this worker writes: run R becomes SCOPE:R, and requests
    /// without a runId go to run SCOPE. The operator sets NAMESPACE:UID of the session.
    #[arg(long, env = "KH_WORKER_SESSION_LOG_RUN_SCOPE", value_name = "SCOPE")]
    pub session_log_run_scope: Option<String>,
    /// Where the canonical workspace directories are: `/` in a pod (volumes mounted at
    /// /session, /artifacts, /persistent, /.agents); elsewhere a directory holding session/,
    /// artifacts/, persistent/ and .agents/ (presented through a private mount namespace).
    #[arg(
        long,
        env = "KH_WORKER_WORKSPACE_ROOT",
        default_value = DEFAULT_WORKSPACE_ROOT,
        value_name = "DIR"
    )]
    pub workspace_root: PathBuf,
    /// The agent (`--tier 1`) in a pod: the loopback address of the pod's skills keeper (the
    /// container that writes the volume shown read-only at /.agents), connected before the
    /// agent serves anything. Without it, `--workspace-root /` shows no /.agents.
    #[arg(long, env = "KH_WORKER_SKILLS_KEEPER", value_name = "ADDR")]
    pub skills_keeper: Option<SocketAddr>,
    /// Where escalating commands go: `none` refuses them with exit 126; `pod` asks the
    /// operator's tier API for a Tier-1 pod (needs --tier-api-url and --session-namespace).
    #[arg(long, env = "KH_WORKER_ESCALATION", value_enum, default_value_t = Escalation::default())]
    pub escalation: Escalation,
    /// The operator's tier API (`http://<release>-operator.<namespace>:8081`), for
    /// `--escalation pod`; the worker's own token (--token-file) is the bearer.
    #[arg(long, env = "KH_WORKER_TIER_API_URL", value_name = "URL")]
    pub tier_api_url: Option<String>,
    /// The session's namespace, for `--escalation pod`.
    #[arg(long, env = "KH_WORKER_SESSION_NAMESPACE", value_name = "NS")]
    pub session_namespace: Option<String>,
    /// How long a Tier-1 pod may take to be ready and bound before the command is refused
    /// with 126, in seconds.
    #[arg(
        long,
        env = "KH_WORKER_PROVISION_TIMEOUT",
        default_value_t = DEFAULT_PROVISION_TIMEOUT_SECS,
        value_name = "SECONDS"
    )]
    pub provision_timeout: u64,
    /// Default per-command time limit, in seconds.
    #[arg(
        long,
        env = "KH_WORKER_COMMAND_TIMEOUT",
        default_value_t = DEFAULT_COMMAND_TIMEOUT_SECS,
        value_name = "SECONDS"
    )]
    pub command_timeout: u64,
    /// The most a request's timeoutMs may ask for, in seconds.
    #[arg(
        long,
        env = "KH_WORKER_MAX_TIMEOUT",
        default_value_t = DEFAULT_MAX_TIMEOUT_SECS,
        value_name = "SECONDS"
    )]
    pub max_timeout: u64,
    /// Largest accepted JSON request body, in bytes (413 beyond; read as it arrives and cut off
    /// there). Default: 262144 (256 KiB) for the worker, 4194304 (4 MiB) for the agent
    /// (`--tier 1`), whose exec requests also carry the session's exported variables.
    #[arg(long, env = "KH_WORKER_MAX_BODY_BYTES", value_name = "BYTES")]
    pub max_body_bytes: Option<usize>,
    /// Largest archive, in bytes (default 1 GiB). The worker: the workspace it hands to a Tier-1
    /// pod and the change archive it reads back (beyond it the merge fails cleanly: nothing is
    /// applied, the turn's dispose reports it). The agent (`--tier 1`): the workspace archive
    /// it accepts (413 beyond) and the change archive it packs. Archives are streamed through
    /// a spool file in the temp directory, never held in memory.
    #[arg(
        long,
        env = "KH_WORKER_MAX_ARCHIVE_BYTES",
        default_value_t = DEFAULT_MAX_ARCHIVE_BYTES,
        value_name = "BYTES"
    )]
    pub max_archive_bytes: u64,
    /// Largest file accepted by `PUT /v1/files`, in bytes (413 beyond, and nothing written).
    /// Streamed to disk as it arrives, never held in memory. Also the most a streamed exec keeps
    /// of one output stream under /artifacts/trace/.
    #[arg(
        long,
        env = "KH_WORKER_MAX_FILE_BYTES",
        default_value_t = DEFAULT_MAX_FILE_BYTES,
        value_name = "BYTES"
    )]
    pub max_file_bytes: u64,
    /// On SIGTERM, how long the running command may take to finish before the turn is ended.
    #[arg(
        long,
        env = "KH_WORKER_SHUTDOWN_GRACE",
        default_value_t = DEFAULT_SHUTDOWN_GRACE_SECS,
        value_name = "SECONDS"
    )]
    pub shutdown_grace: u64,
    /// A client's turn (`POST /v1/turns`) with no command for this long, in seconds, is ended by
    /// the worker as by `POST /v1/turns/end` (merged back), so an abandoned turn does not hold
    /// the session: other clients get 409 `turn-busy` while it is open.
    #[arg(
        long,
        env = "KH_WORKER_TURN_IDLE_TIMEOUT",
        default_value_t = DEFAULT_TURN_IDLE_TIMEOUT_SECS,
        value_name = "SECONDS",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub turn_idle_timeout: u64,
    /// At most this many file events (`harness.file.*`) per command and per merge-back; past
    /// it one `harness.file.truncated` event with the counts. Also the most paths the end-turn
    /// answer lists.
    #[arg(
        long,
        env = "KH_WORKER_MAX_FILE_EVENTS",
        default_value_t = DEFAULT_MAX_FILE_EVENTS,
        value_name = "N"
    )]
    pub max_file_events: usize,
    /// At most this many bytes of paths (as JSON strings) in one command's (or one merge-back's)
    /// file events, the rest counted in the `harness.file.truncated` event; also the most bytes
    /// of paths the end-turn answer lists.
    #[arg(
        long,
        env = "KH_WORKER_MAX_FILE_EVENT_BYTES",
        default_value_t = DEFAULT_MAX_FILE_EVENT_BYTES,
        value_name = "BYTES"
    )]
    pub max_file_event_bytes: usize,
    /// Seconds a client has to send a request's head (from connecting, or from the first byte
    /// of a request on a kept-alive connection); then the connection is closed.
    #[arg(
        long,
        env = "KH_WORKER_HEADER_READ_TIMEOUT",
        default_value_t = DEFAULT_HEADER_READ_TIMEOUT.as_secs(),
        value_name = "SECONDS"
    )]
    pub header_read_timeout: u64,
    /// Seconds a kept-alive connection with no request in flight may stay silent.
    #[arg(
        long,
        env = "KH_WORKER_IDLE_TIMEOUT",
        default_value_t = DEFAULT_IDLE_TIMEOUT.as_secs(),
        value_name = "SECONDS"
    )]
    pub idle_timeout: u64,
    /// Most client connections open at once (at most half the open-file limit). At the limit a
    /// new connection closes the longest-waiting idle or half-sent one; when all are answering
    /// requests, it waits.
    #[arg(
        long,
        env = "KH_WORKER_MAX_CONNECTIONS",
        default_value_t = DEFAULT_MAX_CONNECTIONS,
        value_name = "N"
    )]
    pub max_connections: usize,
    /// Tier-1 agent (`--tier 1`): the most processes (and threads) its commands' uid may have at
    /// once, set as RLIMIT_NPROC on every command. In a Tier-1 pod that uid is the pod's own, so
    /// this bounds a fork bomb to the pod (docs/tier1.md "Bounds"). Unset: the agent's own limit.
    #[arg(long, env = "KH_WORKER_MAX_PROCESSES", value_name = "N")]
    pub max_processes: Option<u64>,
}

impl WorkerArgs {
    /// The settings a worker gets from `--token-file FILE` alone (the defaults above).
    pub fn new(token_file: impl Into<PathBuf>) -> Self {
        let toggles = RuntimeToggles::default();
        WorkerArgs {
            listen: DEFAULT_LISTEN,
            token_file: token_file.into(),
            adopt_token_file: None,
            session: DEFAULT_SESSION.into(),
            tier: 0,
            python: toggles.python,
            javascript: toggles.javascript,
            network: toggles.network,
            deny_command: Vec::new(),
            persistent_dir: Vec::new(),
            read_only_prefix: Vec::new(),
            same_session: SameSession::default(),
            session_log_url: None,
            session_log_token_file: None,
            session_log_run_scope: None,
            workspace_root: DEFAULT_WORKSPACE_ROOT.into(),
            skills_keeper: None,
            escalation: Escalation::default(),
            tier_api_url: None,
            session_namespace: None,
            provision_timeout: DEFAULT_PROVISION_TIMEOUT_SECS,
            command_timeout: DEFAULT_COMMAND_TIMEOUT_SECS,
            max_timeout: DEFAULT_MAX_TIMEOUT_SECS,
            max_body_bytes: None,
            max_archive_bytes: DEFAULT_MAX_ARCHIVE_BYTES,
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE_SECS,
            turn_idle_timeout: DEFAULT_TURN_IDLE_TIMEOUT_SECS,
            max_file_events: DEFAULT_MAX_FILE_EVENTS,
            max_file_event_bytes: DEFAULT_MAX_FILE_EVENT_BYTES,
            header_read_timeout: DEFAULT_HEADER_READ_TIMEOUT.as_secs(),
            idle_timeout: DEFAULT_IDLE_TIMEOUT.as_secs(),
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_processes: None,
        }
    }

    /// The flags that give back exactly these settings when parsed (with no `KH_WORKER_*`
    /// variable set). The listen address, token file, session, toggles and same-session policy
    /// are always written; every other setting only when it differs from its default, so a pod
    /// the operator built before these settings were typed keeps its arguments (and its spec
    /// hash), and a `KH_WORKER_*` variable still sets a flag the arguments leave out.
    pub fn to_args(&self) -> Vec<String> {
        let default = WorkerArgs::new(&self.token_file);
        let mut args = vec![
            "--listen".to_string(),
            self.listen.to_string(),
            "--token-file".into(),
            path(&self.token_file),
            "--session".into(),
            self.session.clone(),
            format!("--python={}", self.python),
            format!("--javascript={}", self.javascript),
            format!("--network={}", self.network),
            "--same-session".into(),
            self.same_session.to_string(),
        ];
        // One argument each, `--deny-command=NAME`: a name that looks like a flag
        // (`--network=true`) stays the flag's value and can never be read as a flag of its own.
        for deny in &self.deny_command {
            args.push(format!("--deny-command={deny}"));
        }
        for dir in &self.persistent_dir {
            args.push("--persistent-dir".into());
            args.push(dir.to_string());
        }
        for prefix in &self.read_only_prefix {
            args.push("--read-only-prefix".into());
            args.push(path(prefix));
        }
        let mut flag = |name: &str, value: String| {
            args.push(format!("--{name}"));
            args.push(value);
        };
        if self.escalation != default.escalation {
            flag("escalation", self.escalation.to_string());
        }
        let options = [
            ("tier-api-url", self.tier_api_url.clone()),
            ("session-namespace", self.session_namespace.clone()),
            ("session-log-url", self.session_log_url.clone()),
            (
                "session-log-token-file",
                self.session_log_token_file.as_deref().map(path),
            ),
            ("session-log-run-scope", self.session_log_run_scope.clone()),
            (
                "adopt-token-file",
                self.adopt_token_file.as_deref().map(path),
            ),
            ("skills-keeper", self.skills_keeper.map(|a| a.to_string())),
        ];
        for (name, value) in options {
            if let Some(value) = value {
                flag(name, value);
            }
        }
        if self.tier != default.tier {
            flag("tier", self.tier.to_string());
        }
        if self.workspace_root != default.workspace_root {
            flag("workspace-root", path(&self.workspace_root));
        }
        if let Some(max) = self.max_body_bytes {
            flag("max-body-bytes", max.to_string());
        }
        if let Some(max) = self.max_processes {
            flag("max-processes", max.to_string());
        }
        let tuning = [
            (
                "provision-timeout",
                self.provision_timeout.to_string(),
                default.provision_timeout.to_string(),
            ),
            (
                "command-timeout",
                self.command_timeout.to_string(),
                default.command_timeout.to_string(),
            ),
            (
                "max-timeout",
                self.max_timeout.to_string(),
                default.max_timeout.to_string(),
            ),
            (
                "max-archive-bytes",
                self.max_archive_bytes.to_string(),
                default.max_archive_bytes.to_string(),
            ),
            (
                "max-file-bytes",
                self.max_file_bytes.to_string(),
                default.max_file_bytes.to_string(),
            ),
            (
                "shutdown-grace",
                self.shutdown_grace.to_string(),
                default.shutdown_grace.to_string(),
            ),
            (
                "turn-idle-timeout",
                self.turn_idle_timeout.to_string(),
                default.turn_idle_timeout.to_string(),
            ),
            (
                "max-file-events",
                self.max_file_events.to_string(),
                default.max_file_events.to_string(),
            ),
            (
                "max-file-event-bytes",
                self.max_file_event_bytes.to_string(),
                default.max_file_event_bytes.to_string(),
            ),
            (
                "header-read-timeout",
                self.header_read_timeout.to_string(),
                default.header_read_timeout.to_string(),
            ),
            (
                "idle-timeout",
                self.idle_timeout.to_string(),
                default.idle_timeout.to_string(),
            ),
            (
                "max-connections",
                self.max_connections.to_string(),
                default.max_connections.to_string(),
            ),
        ];
        for (name, value, default) in tuning {
            if value != default {
                flag(name, value);
            }
        }
        args
    }
}

/// A path as an argument. Paths the operator renders are UTF-8; a non-UTF-8 one is rendered
/// lossily (it could not round-trip through a pod's `args` strings either).
fn path(p: &std::path::Path) -> String {
    p.to_string_lossy().into_owned()
}

/// `kube-harness worker`'s shape, for [`WorkerArgs::parse_flags`].
#[derive(clap::Parser)]
struct FlagsOnly {
    #[command(flatten)]
    worker: WorkerArgs,
}

impl WorkerArgs {
    /// Parses rendered flags ([`WorkerArgs::to_args`]) as the binary does, but blind to the
    /// `KH_WORKER_*` variables of this process: a warm worker's adoption must bind exactly the
    /// arguments it was sent, whatever its pod's environment says.
    pub fn parse_flags(args: &[String]) -> Result<WorkerArgs, clap::Error> {
        use clap::{CommandFactory, FromArgMatches};
        let command = FlagsOnly::command().mut_args(|a| a.env(clap::builder::Resettable::Reset));
        let matches = command
            .try_get_matches_from(std::iter::once("worker".into()).chain(args.iter().cloned()))?;
        Ok(FlagsOnly::from_arg_matches(&matches)?.worker)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    type Cli = FlagsOnly;

    fn parse(args: &[String]) -> Result<WorkerArgs, clap::Error> {
        WorkerArgs::parse_flags(args)
    }

    #[test]
    fn persistent_dir_specs_parse_and_bad_ones_say_why() {
        let d: PersistentDirArg = "notes:after-turn".parse().unwrap();
        assert_eq!(d.path.as_deref(), Some("notes"));
        assert_eq!(d.to_string(), "notes:after-turn:notes");
        let d: PersistentDirArg = "kb:read-only:org/kb".parse().unwrap();
        assert!(d.policy.read_only());
        for bad in [
            "../x:manual",
            "x:sometimes",
            "x:manual:../up",
            "x:manual:a//b",
            "x:manual:/abs",
            "x:mounted:p",
            "x",
            "",
        ] {
            let e = bad.parse::<PersistentDirArg>().unwrap_err();
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }

    #[test]
    fn the_defaults_of_new_are_the_flags_defaults() {
        let parsed = parse(&["--token-file".into(), "/t".into()]).unwrap();
        assert_eq!(parsed, WorkerArgs::new("/t"));
    }

    #[test]
    fn every_setting_round_trips_through_its_flags() {
        let args = WorkerArgs {
            listen: "127.0.0.1:9000".parse().unwrap(),
            token_file: "/run/token".into(),
            adopt_token_file: Some("/run/pool/token".into()),
            session: "s-1".into(),
            tier: 1,
            python: false,
            javascript: false,
            network: true,
            deny_command: vec!["rm".into(), "curl".into()],
            persistent_dir: vec![
                "kb:mounted".parse().unwrap(),
                "notes:after-turn:teams/a/notes".parse().unwrap(),
                "drafts:manual".parse().unwrap(),
            ],
            read_only_prefix: vec!["/persistent/notes/policy".into()],
            same_session: SameSession::Reject,
            session_log_url: Some("http://log:8080".into()),
            session_log_token_file: Some("/run/log-token".into()),
            session_log_run_scope: Some("ns:uid".into()),
            workspace_root: "/srv/ws".into(),
            skills_keeper: Some("127.0.0.1:8079".parse().unwrap()),
            escalation: Escalation::Pod,
            tier_api_url: Some("http://op:8081".into()),
            session_namespace: Some("ns".into()),
            provision_timeout: 7,
            command_timeout: 8,
            max_timeout: 9,
            max_body_bytes: Some(10),
            max_archive_bytes: 11,
            max_file_bytes: 111,
            shutdown_grace: 12,
            turn_idle_timeout: 19,
            max_file_events: 13,
            max_file_event_bytes: 14,
            header_read_timeout: 15,
            idle_timeout: 16,
            max_connections: 17,
            max_processes: Some(18),
        };
        let rendered = args.to_args();
        assert_eq!(parse(&rendered).unwrap(), args);
        // Every setting above is off its default, so every flag must be written: one added to
        // WorkerArgs but not to to_args fails here even if its test value is forgotten.
        for arg in Cli::command().get_arguments() {
            let flag = format!("--{}", arg.get_long().unwrap());
            assert!(
                rendered
                    .iter()
                    .any(|a| a == &flag || a.starts_with(&format!("{flag}="))),
                "{flag} is not rendered: {rendered:?}"
            );
        }
    }

    /// Issue 30: `denyCommands: ["--network=true"]` was rendered as two arguments, and the
    /// worker read the second as its own flag (a network toggle the session never asked for, or
    /// a crash loop). Failed on the old code: `--network=true` parsed as the network toggle.
    #[test]
    fn a_deny_entry_that_looks_like_a_flag_stays_a_deny_entry() {
        let mut args = WorkerArgs::new("/t");
        args.deny_command = vec!["--network=true".into(), "-x".into(), "git".into()];
        let rendered = args.to_args();
        assert!(rendered.contains(&"--deny-command=--network=true".to_string()));
        let parsed = parse(&rendered).unwrap();
        assert_eq!(parsed.deny_command, args.deny_command);
        assert!(!parsed.network, "the network stays off");
    }

    #[test]
    fn defaults_render_only_the_settings_always_written() {
        assert_eq!(
            WorkerArgs::new("/t").to_args(),
            [
                "--listen",
                "0.0.0.0:8080",
                "--token-file",
                "/t",
                "--session",
                "session",
                "--python=true",
                "--javascript=true",
                "--network=false",
                "--same-session",
                "queue",
            ]
        );
    }

    #[test]
    fn the_enums_take_the_documented_values() {
        assert_eq!("reject".parse::<SameSession>(), Ok(SameSession::Reject));
        assert!("wait".parse::<SameSession>().is_err());
        assert_eq!(
            serde_json::to_string(&SameSession::Queue).unwrap(),
            "\"queue\""
        );
        assert_eq!(serde_json::to_string(&Escalation::Pod).unwrap(), "\"pod\"");
        assert!(parse(&["--token-file=/t".into(), "--escalation=tier1".into()]).is_err());
    }
}
