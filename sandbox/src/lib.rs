//! The Tier-0 sandbox executor: real `/bin/bash` with an empty environment, only the Tier-0
//! toolset of the capability matrix executable, and the kernel's own confinement (namespaces,
//! landlock, seccomp, `no_new_privs`, capability drop, rlimits, a pids cgroup).
//!
//! Everything that can be computed once (tool directory, landlock ruleset, seccomp BPF program,
//! the mount namespace) is built in [`Tier0Sandbox::new`], which also starts the sandbox's
//! forker: a small process that applies all of it to itself once and then forks every command's
//! supervisor (`forker.rs`, `forker_main.rs`). [`Tier0Sandbox::run`] sends it one request; the
//! command adds only what differs per command (process group, pids cgroup, working directory,
//! rlimits, a landlock domain of its own).
//! See `docs/security-model.md` for what each layer stops and what it does not.

mod cgroup;
mod child;
mod config;
mod elf;
pub mod fd;
mod forker;
mod forker_main;
mod landlock_rules;
mod namespace;
mod ns_plan;
mod probe;
mod run;
/// The seccomp policy and its program (public only for `examples/seccomp_cost.rs`).
#[doc(hidden)]
pub mod seccomp;
mod tools;
mod wire;

pub use config::{
    Invocation, Limits, Outcome, OutputChunk, OutputStream, OutputTap, Presentation, SandboxConfig,
    SandboxError,
};
pub use probe::{probe, Capabilities};
pub use tools::denied_tools;

use kube_harness_workspace::spec::SESSION;
use run::Plan;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A ready-to-use Tier-0 sandbox for one workspace spec. Cheap to share (`run` takes `&self`);
/// several commands may run at once. Dropping it ends its forker and removes its runtime
/// directory.
pub struct Tier0Sandbox {
    plan: Arc<Plan>,
    limits: Limits,
    /// Environment every command starts from (PATH, HOME, TMPDIR), as the script sees it.
    base_env: BTreeMap<String, String>,
    /// Names the tool directory offers, sorted.
    tools: Vec<String>,
    /// Owns the runtime directory (tool dir, tmp, namespace root); removed on drop.
    _runtime: kube_harness_workspace::leftovers::ScratchDir,
}

impl Tier0Sandbox {
    /// Prepares the sandbox: checks the host (landlock, seccomp, namespaces when asked for),
    /// builds the tool directory, the landlock ruleset and the seccomp program.
    pub fn new(config: SandboxConfig) -> Result<Self, SandboxError> {
        let caps = probe();
        if caps.landlock_abi.is_none() {
            return Err(SandboxError::LandlockUnavailable);
        }
        if !caps.seccomp {
            return Err(SandboxError::SeccompUnavailable);
        }
        config.validate()?;
        // Named after this process, so that the next sandbox can remove what a killed one left
        // (its private /tmp holds the commands' files); readable by this user only.
        sweep_runtime_dirs();
        raise_open_files();
        // SAFETY: plain getter.
        let pid = unsafe { libc::getpid() };
        let runtime = tempfile::Builder::new()
            .prefix(&format!("{RUNTIME_PREFIX}{pid}-"))
            .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
            .tempdir()
            .map_err(|e| SandboxError::io("creating the runtime directory", e))?;
        let runtime_dir = runtime.path().to_path_buf();
        let tmp_dir = runtime_dir.join("tmp");
        mkdir(&tmp_dir)?;

        let toggles = config.workspace.runtime;
        let ns = matches!(config.presentation, Presentation::Namespace);
        // Namespace mode: the tool dir lives inside the prepared root and is seen at TOOLS_IN_NS.
        let (tool_dir, tool_path_visible, tmp_visible) = if ns {
            let dir = runtime_dir
                .join("root")
                .join(namespace::TOOLS_IN_NS.trim_start_matches('/'));
            (
                dir,
                PathBuf::from(namespace::TOOLS_IN_NS),
                PathBuf::from("/tmp"),
            )
        } else {
            let dir = runtime_dir.join("tools");
            (dir.clone(), dir, tmp_dir.clone())
        };
        let toolset = tools::build(&tool_dir, toggles, &config.denied)?;

        let ns_plan = if ns {
            if !caps.mount_namespace {
                return Err(SandboxError::NamespaceUnavailable {
                    detail: caps.namespace_detail.clone(),
                });
            }
            Some(namespace::prepare(
                &runtime_dir,
                &tmp_dir,
                &config.workspace,
                &tools::code_dirs(&toolset),
                // With network off, seccomp already refuses inet sockets. An empty network
                // namespace (≈1 ms per command, plus asynchronous teardown) is only added where
                // landlock cannot scope abstract unix sockets (ABI < 6): those are per network
                // namespace, and the host's (X11, container runtimes) must stay unreachable.
                !toggles.network && caps.landlock_abi.unwrap_or(0) < 6,
                caps.is_root,
            )?)
        } else {
            None
        };

        let ns = ns_plan.as_ref().map(namespace::build).transpose()?;
        let own_proc = match (&ns, ns_plan.as_ref().and_then(|p| p.fresh_proc.as_ref())) {
            (Some(ns), Some(_)) => Some(namespace::open_proc(ns)?),
            _ => None,
        };
        let inputs = landlock_rules::Inputs {
            workspace: &config.workspace,
            tool_dir: &tool_dir,
            executables: &toolset.executables,
            tmp_dir: &tmp_dir,
            namespace_root: ns_plan.as_ref().map(|p| p.root_host.as_path()),
            own_proc: own_proc.as_ref(),
            network: toggles.network,
        };
        let ruleset = landlock_rules::build(&inputs)?;
        let nested = landlock_rules::nested(&inputs)?;
        let filter = seccomp::build(toggles.network)?;

        // uid 0 is exempt from RLIMIT_NPROC: its commands get a pids cgroup each, or none run.
        let pids = if caps.is_root {
            let hierarchy = cgroup::locate().map_err(SandboxError::PidsCgroup)?;
            Some(cgroup::Pids::new(
                &hierarchy,
                config.limits.max_processes,
                config.limits.max_cpu_millicores,
            )?)
        } else {
            None
        };
        // Capabilities go: uid 0's, and those the forker holds in the sandbox's user namespace.
        let drop_caps = caps.is_root || ns.as_ref().is_some_and(|n| n.user.is_some());
        let setup = forker::Setup::new(
            &toolset.bash,
            &config.limits,
            &filter,
            ruleset,
            nested,
            // Landlock's signal scope (ABI 6): each supervisor's own domain bounds its kill(-1).
            caps.landlock_abi.unwrap_or(0) >= 6,
            ns,
            drop_caps,
        );
        let forker = forker::Forker::new(setup).map_err(SandboxError::Forker)?;
        let plan = Plan { forker, pids };

        let home = if config
            .workspace
            .mounts
            .iter()
            .any(|m| m.harness_path == Path::new(SESSION))
        {
            SESSION.to_string()
        } else {
            config
                .workspace
                .mounts
                .iter()
                .find(|m| m.writable)
                .map(|m| m.harness_path.display().to_string())
                .unwrap_or_else(|| "/".to_string())
        };
        let mut base_env = BTreeMap::new();
        base_env.insert("PATH".into(), tool_path_visible.display().to_string());
        base_env.insert("HOME".into(), home);
        base_env.insert("TMPDIR".into(), tmp_visible.display().to_string());
        // Python's user site is under HOME, which commands write: a usercustomize.py or a .pth
        // file there would run in every later python (yq's too, a python script), unseen by
        // classification and past a deny policy naming python3.
        base_env.insert("PYTHONNOUSERSITE".into(), "1".into());

        Ok(Tier0Sandbox {
            plan: Arc::new(plan),
            limits: config.limits,
            base_env,
            tools: toolset.names,
            _runtime: kube_harness_workspace::leftovers::ScratchDir::from_tempdir(runtime),
        })
    }

    /// The pid of the sandbox's forker process, when one runs (it is started again when a
    /// command finds it gone). For tests and diagnostics.
    pub fn forker_pid(&self) -> Option<u32> {
        Some(self.plan.forker.pid()).filter(|p| *p != 0)
    }

    /// Runs one script. Never returns an error: faults become exit code 126 and one
    /// `kube-harness: …` line on stderr.
    pub async fn run(&self, inv: &Invocation) -> Outcome {
        run::run(&self.plan, &self.limits, &self.base_env, inv).await
    }

    /// The environment every command starts from (`PATH` = the tool directory, `HOME`, `TMPDIR`),
    /// as the script sees it. [`Invocation::env`] entries override these.
    pub fn base_env(&self) -> &BTreeMap<String, String> {
        &self.base_env
    }

    /// Command names reachable through `PATH` (matrix Tier-0 commands present on this host and
    /// allowed by the toggles).
    pub fn tools(&self) -> &[String] {
        &self.tools
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Whether each command gets a cpu cgroup (root, with the host's cpu controller): its tree
    /// weighs as one task, at most `Limits::max_cpu_millicores`.
    pub fn cpu_bounded(&self) -> bool {
        self.plan
            .pids
            .as_ref()
            .is_some_and(cgroup::Pids::cpu_bounded)
    }
}

/// Raises this process's soft `RLIMIT_NOFILE` to its hard limit (the forker inherits it).
/// Descriptors in flight over unix sockets count per uid across the host, and every sender is
/// checked against its own soft limit: a command of the same uid may hold up to its own limit
/// (`Limits::max_open_files`) in flight, and a worker at the usual login default (1024) could
/// then no longer pass a command's pipes to the forker, nor the forker its pidfd back: every
/// other command failed (issue 29's second outside attack).
fn raise_open_files() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on this process with a valid struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Runtime directories are `$TMPDIR/kube-harness-sandbox-<pid>-<random>`.
const RUNTIME_PREFIX: &str = "kube-harness-sandbox-";

/// Removes runtime directories of this user whose process is gone (a worker killed with
/// SIGKILL never runs its destructors).
fn sweep_runtime_dirs() {
    kube_harness_workspace::leftovers::sweep_dead(&std::env::temp_dir(), RUNTIME_PREFIX);
}

fn mkdir(path: &Path) -> Result<(), SandboxError> {
    std::fs::create_dir_all(path)
        .map_err(|e| SandboxError::io(format!("creating {}", path.display()), e))
}

// The runtime shares one sandbox between concurrent commands.
const _: fn() = || {
    fn shared<T: Send + Sync>() {}
    shared::<Tier0Sandbox>();
};
