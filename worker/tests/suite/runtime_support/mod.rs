//! A turn over a fresh local-host session with the real Tier-0 sandbox, for the runtime tests.
// Each test binary uses a different part of this module.
#![allow(dead_code)]

use kube_harness_classify::{ClassifyOptions, RuntimeToggles};
use kube_harness_runtime::{
    Collector, Emitter, NextTier, Tier0Executor, Turn, TurnConfig, WorkspaceTracker,
};
use kube_harness_sandbox::{Presentation, SandboxConfig};
use kube_harness_tier1::LocalTier1;
use kube_harness_worker::local::DataDir;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

pub struct Fixture {
    pub _tmp: tempfile::TempDir,
    /// The session's folder on the host (`session/`, `artifacts/`, `persistent/` below it).
    pub session_root: PathBuf,
    pub turn: Turn,
    pub events: Arc<Collector>,
}

#[derive(Default)]
pub struct Setup {
    pub deny: Vec<&'static str>,
    /// Read-only prefixes (created with a `kb.md` inside, so tests can try to change it).
    pub read_only: Vec<&'static str>,
    /// Escalate to the local Tier-1 (else: no higher tier).
    pub tier1: bool,
    pub inline_output_limit: Option<usize>,
}

pub fn fixture(setup: Setup) -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let data = DataDir::open(tmp.path().join(".little-harness")).unwrap();
    let session = data.session("s1").unwrap();
    for prefix in &setup.read_only {
        let dir = session.root.join(prefix.trim_start_matches('/'));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("kb.md"), "kb\n").unwrap();
    }
    let read_only = setup.read_only.iter().map(PathBuf::from).collect();
    let spec = session.workspace(RuntimeToggles::default(), read_only);
    let tier0 = Tier0Executor::new(SandboxConfig::new(spec.clone(), Presentation::Namespace))
        .expect("the Tier-0 sandbox is available on this machine (root or user namespaces)");
    let events = Arc::new(Collector::default());
    let mut classify = ClassifyOptions::default();
    classify.policy.deny_commands = setup.deny.iter().map(|d| d.to_string()).collect();
    let next: Option<Arc<dyn NextTier>> = if setup.tier1 {
        Some(Arc::new(LocalTier1::default()))
    } else {
        None
    };
    let turn = Turn::new(
        TurnConfig {
            workspace: spec.clone(),
            classify,
            inline_output_limit: setup.inline_output_limit.unwrap_or(4096),
        },
        Emitter::new("s1", "t1", vec![events.clone()]),
        Arc::new(tier0),
        next,
        Some(Arc::new(WorkspaceTracker::new(spec))),
        PathBuf::from("/session"),
        BTreeMap::new(),
    );
    Fixture {
        session_root: session.root.clone(),
        _tmp: tmp,
        turn,
        events,
    }
}
