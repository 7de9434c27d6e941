//! Shared helpers for the sandbox integration tests (a module of the suite; the fork-bomb test
//! includes it with `#[path]`).
#![allow(dead_code, clippy::new_without_default)]

use kube_harness_classify::RuntimeToggles;
use kube_harness_sandbox::{Invocation, Outcome, Presentation, SandboxConfig, Tier0Sandbox};
use kube_harness_workspace::{Mount, WorkspaceSpec};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// A local-host-like data dir: session/, artifacts/, persistent/, .agents/ under a temp dir.
pub struct Data {
    pub dir: tempfile::TempDir,
}

impl Data {
    pub fn new() -> Data {
        let dir = tempfile::tempdir().unwrap();
        for d in ["session", "artifacts", "persistent", ".agents"] {
            std::fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        Data { dir }
    }
    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }
    pub fn root(&self) -> &Path {
        self.dir.path()
    }
}

pub fn toggles(network: bool) -> RuntimeToggles {
    RuntimeToggles {
        python: true,
        javascript: true,
        network,
    }
}

/// Namespace presentation over the canonical layout.
pub fn ns_sandbox(data: &Data, network: bool, ro_prefixes: Vec<PathBuf>) -> Tier0Sandbox {
    let spec = WorkspaceSpec::canonical(data.root(), toggles(network), ro_prefixes);
    Tier0Sandbox::new(SandboxConfig::new(spec, Presentation::Namespace)).expect("sandbox")
}

/// Direct presentation: harness path == backing path, inside the temp dir.
pub fn direct_spec(data: &Data, network: bool, ro_prefixes: Vec<PathBuf>) -> WorkspaceSpec {
    let m = |rel: &str, writable: bool, tracked: bool| {
        let p = data.path(rel);
        Mount {
            harness_path: p.clone(),
            backing_path: p,
            writable,
            tracked,
            read_only_prefixes: Vec::new(),
        }
    };
    let mut persistent = m("persistent", true, true);
    persistent.read_only_prefixes = ro_prefixes;
    WorkspaceSpec {
        mounts: vec![
            m("session", true, true),
            m("artifacts", true, true),
            persistent,
            m(".agents", false, false),
        ],
        runtime: toggles(network),
    }
}

pub fn direct_sandbox(data: &Data, network: bool, ro_prefixes: Vec<PathBuf>) -> Tier0Sandbox {
    let spec = direct_spec(data, network, ro_prefixes);
    Tier0Sandbox::new(SandboxConfig::new(spec, Presentation::Direct)).expect("sandbox")
}

/// (sandbox, the cwd the script starts in) for both presentations: the local host's namespace
/// and the worker pod's direct mode.
pub fn both(data: &Data) -> Vec<(&'static str, Tier0Sandbox, PathBuf)> {
    vec![
        (
            "namespace",
            ns_sandbox(data, false, vec![]),
            "/session".into(),
        ),
        (
            "direct",
            direct_sandbox(data, false, vec![]),
            data.path("session"),
        ),
    ]
}

/// Runs one script to its outcome.
pub fn run(sb: &Tier0Sandbox, cwd: &Path, script: &str) -> Outcome {
    rt().block_on(sb.run(&inv(script, cwd)))
}

pub fn inv(script: &str, cwd: impl Into<PathBuf>) -> Invocation {
    Invocation {
        script: script.to_string(),
        cwd: cwd.into(),
        env: BTreeMap::new(),
        output: None,
    }
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Runs and prints the outcome on failure paths (the assertion message carries it).
pub fn show(o: &Outcome) -> String {
    format!(
        "exit={} timed_out={} stdout={:?} stderr={:?}",
        o.exit_code,
        o.timed_out,
        text(&o.stdout),
        text(&o.stderr)
    )
}
