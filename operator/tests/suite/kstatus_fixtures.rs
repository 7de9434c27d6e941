//! The statuses the operator writes, as committed JSON under `tests/gitops/fixtures/`: the Argo
//! CD health checks (`examples/gitops/argocd/*.lua`) are tested against them
//! (`tests/gitops/argocd-health.sh`), so a change of conditions that the checks do not follow
//! fails there. Stale fixtures fail here; `KH_BLESS=1 cargo test -p kube-harness-operator --test
//! all kstatus_fixtures` writes them again.

use kube_harness_crds::condition::reasons;
use kube_harness_crds::{HarnessSessionStatus, SandboxTierStatus};
use kube_harness_operator::session::observe::WorkerState;
use kube_harness_operator::session::status::{
    status, Escalation, Observed, Seen, Worker, WorkerTierProblem,
};
use kube_harness_operator::tier::{tier_status, PoolSeen, TierObserved};
use serde_json::{json, Value};
use std::path::PathBuf;

fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/gitops/fixtures")
}

fn seen(worker: Worker) -> Observed {
    Observed::Session(Box::new(Seen {
        token_secret: "s-token".into(),
        token_secret_uid: None,
        worker_pod_uid: None,
        worker_pod: "s-worker".into(),
        workspace_claim: "s-workspace".into(),
        worker_port: 8080,
        address: "http://s-worker.ns.svc:8080".into(),
        escalation: Escalation::NoTier,
        worker,
    }))
}

fn running(state: WorkerState) -> Observed {
    seen(Worker::Running {
        state,
        report: None,
    })
}

fn failing(reason: &str, message: &str) -> Observed {
    running(WorkerState::Failing {
        reason: reason.into(),
        message: message.into(),
    })
}

/// The status after `steps` reconciles of generation 2, each from the last one's status.
fn session_after(steps: &[Observed]) -> HarnessSessionStatus {
    steps
        .iter()
        .fold(HarnessSessionStatus::default(), |old, o| {
            status(&old, Some(2), o).0
        })
}

/// The object as a health check sees it, with fixed transition times.
fn object(kind: &str, name: &str, generation: i64, status: Value) -> Value {
    let mut status = status;
    if let Some(conditions) = status["conditions"].as_array_mut() {
        for c in conditions {
            c["lastTransitionTime"] = json!("2026-01-01T00:00:00Z");
        }
    }
    json!({
        "apiVersion": "kubeharness.dev/v1alpha1",
        "kind": kind,
        "metadata": {"name": name, "generation": generation},
        "status": status,
    })
}

fn sessions() -> Vec<(&'static str, Value)> {
    let ready = running(WorkerState::Ready {
        ip: "10.0.0.7".into(),
    });
    let starting = running(WorkerState::Starting {
        reason: "PodPending".into(),
    });
    let hibernating = |suspended, pod_left| {
        seen(Worker::Hibernating {
            suspended,
            pod_left,
        })
    };
    let cases: Vec<(&str, i64, Vec<Observed>)> = vec![
        ("ready", 2, vec![starting.clone(), ready.clone()]),
        ("provisioning", 2, vec![starting.clone()]),
        ("stale-generation", 3, vec![ready.clone()]),
        (
            "quota-exceeded",
            2,
            vec![failing(
                reasons::QUOTA_EXCEEDED,
                "exceeded quota: team-quota, requested: pods=1, used: pods=1, limited: pods=1",
            )],
        ),
        (
            "image-pull",
            2,
            vec![failing("ErrImagePull", "no such image")],
        ),
        (
            "missing-tier",
            2,
            vec![Observed::NoWorkerTier(WorkerTierProblem::NotFound {
                tier: "gone".into(),
                namespace: "team-a".into(),
            })],
        ),
        (
            "suspending",
            2,
            vec![ready.clone(), hibernating(true, true)],
        ),
        (
            "suspended",
            2,
            vec![
                ready.clone(),
                hibernating(true, true),
                hibernating(true, false),
            ],
        ),
        (
            "hibernated",
            2,
            vec![ready.clone(), hibernating(false, false)],
        ),
        (
            "expiring",
            2,
            vec![ready.clone(), Observed::Expired { releasing: true }],
        ),
        (
            "expired",
            2,
            vec![ready, Observed::Expired { releasing: false }],
        ),
    ];
    let mut out: Vec<(&str, Value)> = cases
        .into_iter()
        .map(|(name, generation, steps)| {
            let status = serde_json::to_value(session_after(&steps)).unwrap();
            (name, object("HarnessSession", name, generation, status))
        })
        .collect();
    out.push((
        "new",
        json!({"apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessSession",
            "metadata": {"name": "new", "generation": 1}}),
    ));
    out
}

fn tiers() -> Vec<(&'static str, Value)> {
    let pool = |ready, failing: Option<(&str, &str)>| {
        Some(PoolSeen {
            size: 2,
            ready,
            updated: ready,
            selector: "kubeharness.dev/pool=t".into(),
            failing: failing.map(|(r, m)| (r.into(), m.into())),
        })
    };
    let valid = || (true, reasons::VALID, "Tier-0 worker tier".to_string());
    let cases: Vec<(&str, i64, TierObserved)> = vec![
        (
            "ready",
            1,
            TierObserved {
                check: valid(),
                pool: pool(2, None),
                matrix_version: Some("v1".into()),
            },
        ),
        (
            "pool-filling",
            1,
            TierObserved {
                check: valid(),
                pool: pool(1, None),
                matrix_version: Some("v1".into()),
            },
        ),
        (
            "stale-generation",
            2,
            TierObserved {
                check: valid(),
                pool: pool(2, None),
                matrix_version: Some("v1".into()),
            },
        ),
        (
            "pool-failing",
            1,
            TierObserved {
                check: valid(),
                pool: pool(0, Some(("ErrImageNeverPull", "no image"))),
                matrix_version: Some("v1".into()),
            },
        ),
        (
            "image-missing",
            1,
            TierObserved {
                check: (
                    false,
                    reasons::IMAGE_MISSING,
                    "template.image is empty".into(),
                ),
                pool: None,
                matrix_version: Some("v1".into()),
            },
        ),
    ];
    cases
        .into_iter()
        .map(|(name, generation, observed)| {
            let status = tier_status(&SandboxTierStatus::default(), Some(1), &observed);
            let status = serde_json::to_value(status).unwrap();
            (name, object("SandboxTier", name, generation, status))
        })
        .collect()
}

#[test]
fn the_committed_status_fixtures_are_what_the_operator_writes() {
    let bless = std::env::var_os("KH_BLESS").is_some();
    let mut stale = Vec::new();
    let all = sessions()
        .into_iter()
        .map(|(n, v)| (format!("harnesssession-{n}.json"), v))
        .chain(
            tiers()
                .into_iter()
                .map(|(n, v)| (format!("sandboxtier-{n}.json"), v)),
        );
    for (file, value) in all {
        let path = dir().join(&file);
        let text = serde_json::to_string_pretty(&value).unwrap() + "\n";
        if bless {
            std::fs::create_dir_all(dir()).unwrap();
            std::fs::write(&path, &text).unwrap();
        } else if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
            stale.push(file);
        }
    }
    assert!(
        stale.is_empty(),
        "stale fixtures under tests/gitops/fixtures: {stale:?}; run KH_BLESS=1 cargo test -p kube-harness-operator --test all kstatus_fixtures"
    );
}
