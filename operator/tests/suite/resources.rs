//! The objects a session owns, built from its spec (the worker's arguments parsed with the
//! worker's own argument type); reading worker pod states; tier checks.

use k8s_openapi::api::core::v1::Pod;
use kube_harness_crds::condition::reasons;
use kube_harness_crds::{HarnessSession, SandboxTierSpec};
use kube_harness_operator::session::observe::{started_ip, worker_state, WorkerState};
use kube_harness_operator::session::resources;
use kube_harness_operator::{tier, OperatorConfig};
use kube_harness_protocol::worker_args::{Escalation, SameSession, WorkerArgs};
use serde_json::json;

fn session(spec: serde_json::Value) -> HarnessSession {
    serde_json::from_value(json!({
        "apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessSession",
        "metadata": {"name": "s1", "namespace": "ns", "uid": "u1"},
        "spec": spec,
    }))
    .unwrap()
}

fn tier_spec(v: serde_json::Value) -> SandboxTierSpec {
    serde_json::from_value(v).unwrap()
}

#[test]
fn network_on_allows_all_egress_and_off_allows_only_dns_and_the_session_log() {
    let config = OperatorConfig::for_namespace("kh");
    let off = resources::network_policy(&session(json!({})), &config);
    let egress = off.spec.as_ref().unwrap().egress.clone().unwrap();
    assert_eq!(egress.len(), 2);
    assert!(egress.iter().all(|r| r.to.is_some()));
    let on = resources::network_policy(&session(json!({"runtime": {"network": true}})), &config);
    let egress = on.spec.unwrap().egress.unwrap();
    assert_eq!(egress.len(), 1);
    assert!(
        egress[0].to.is_none(),
        "one rule with no peers: all destinations"
    );
}

/// The NetworkPolicy's ingress peers besides the operator's (the first).
fn clients(spec: serde_json::Value) -> Vec<serde_json::Value> {
    let np = resources::network_policy(&session(spec), &OperatorConfig::for_namespace("kh"));
    let ingress = np.spec.unwrap().ingress.unwrap();
    assert_eq!(ingress.len(), 1, "one ingress rule, the worker port only");
    assert_eq!(ingress[0].ports.as_ref().unwrap().len(), 1);
    let from = ingress[0].from.clone().unwrap();
    let operator = serde_json::to_value(&from[0]).unwrap();
    assert_eq!(
        operator,
        json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kh"}},
               "podSelector": {"matchLabels": {"app.kubernetes.io/name": "kube-harness-operator"}}})
    );
    from[1..]
        .iter()
        .map(|p| serde_json::to_value(p).unwrap())
        .collect()
}

#[test]
fn access_admits_the_labelled_clients_by_default_and_exactly_the_listed_peers_otherwise() {
    let labelled = json!({"podSelector": {"matchLabels": {"kubeharness.dev/client": "true"}}});
    assert_eq!(clients(json!({})), vec![labelled]);
    assert_eq!(
        clients(json!({"access": {"clients": []}})),
        Vec::<serde_json::Value>::new()
    );
    let agents = json!({"podSelector": {"matchLabels": {"app": "agent"}}});
    let team = json!({"namespaceSelector": {"matchLabels": {"team": "a"}},
                      "podSelector": {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["x"]}]}});
    assert_eq!(
        clients(json!({"access": {"clients": [agents, team]}})),
        vec![agents.clone(), team.clone()]
    );
    // A peer with neither selector (refused by the CRD's CEL rule) would admit the whole
    // namespace: it is dropped, never passed on as an empty peer.
    assert_eq!(
        clients(json!({"access": {"clients": [{}, agents]}})),
        vec![agents]
    );
}

#[test]
fn the_service_selects_only_the_worker_pod_and_its_name_is_always_a_dns_label() {
    use kube_harness_operator::labels::worker_service;
    use kube_harness_operator::session::access;
    let s = session(json!({}));
    let svc = access::worker_service(&s, 8080);
    assert_eq!(svc.metadata.name.as_deref(), Some("s1-worker"));
    let spec = svc.spec.unwrap();
    let selector = spec.selector.unwrap();
    assert_eq!(selector["kubeharness.dev/role"], "worker");
    assert_eq!(selector["kubeharness.dev/session"], "s1");
    assert_eq!(spec.ports.unwrap()[0].port, 8080);
    assert_eq!(
        spec.publish_not_ready_addresses,
        Some(true),
        "the address works once the worker itself answers ready"
    );
    assert_eq!(access::address(&s, 8080), "http://s1-worker.ns.svc:8080");
    // Session names that are no DNS-1035 label (too long, a leading digit, dots) get a hashed one.
    for name in ["0abc", &"a".repeat(60), "a.b", "x".repeat(57).as_str()] {
        let got = worker_service(name);
        assert!(
            got.len() <= 63 && got.starts_with("hs-") && got.ends_with("-worker"),
            "{name}: {got}"
        );
        assert_ne!(
            got,
            worker_service(&format!("{name}z")),
            "distinct names, distinct Services"
        );
    }
    assert_eq!(
        worker_service(&"x".repeat(56)),
        format!("{}-worker", "x".repeat(56))
    );
}

#[test]
fn the_worker_pod_spec_follows_the_session_and_changes_hash_with_it() {
    let config = OperatorConfig::for_namespace("kh");
    let tier = tier_spec(
        json!({"level": 0, "template": {"image": "img:1", "runtimeClassName": "gvisor"}}),
    );
    let a = resources::worker_pod(&session(json!({})), &tier, &config, &[]);
    let b = resources::worker_pod(
        &session(json!({"runtime": {"python": false}})),
        &tier,
        &config,
        &[],
    );
    let hash =
        |p: &Pod| p.metadata.annotations.as_ref().unwrap()["kubeharness.dev/spec-hash"].clone();
    assert_ne!(
        hash(&a),
        hash(&b),
        "a toggle change must recreate the worker"
    );
    assert_eq!(
        hash(&a),
        hash(&resources::worker_pod(
            &session(json!({})),
            &tier,
            &config,
            &[]
        ))
    );
    let spec = b.spec.unwrap();
    assert_eq!(spec.runtime_class_name.as_deref(), Some("gvisor"));
    assert!(spec.containers[0]
        .args
        .as_ref()
        .unwrap()
        .contains(&"--python=false".to_string()));
    let with_log = OperatorConfig {
        session_log_url: Some("http://log:8080".into()),
        ..config
    };
    let p = resources::worker_pod(&session(json!({})), &tier, &with_log, &[]);
    let args = p.spec.unwrap().containers[0].args.clone().unwrap();
    assert!(
        args.windows(2)
            .any(|w| w == ["--session-log-url", "http://log:8080"]),
        "{args:?}"
    );
    // Its runs are scoped to this session object (namespace and UID), never shared.
    assert!(
        args.windows(2)
            .any(|w| w == ["--session-log-run-scope", "ns:u1"]),
        "{args:?}"
    );
}

#[test]
fn skills_become_files_under_agents() {
    let config = OperatorConfig::for_namespace("kh");
    let tier = tier_spec(json!({"level": 0, "template": {"image": "img"}}));
    let cm: k8s_openapi::api::core::v1::ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "tools"}, "data": {"SKILL.md": "x", "run.sh": "y"}
    }))
    .unwrap();
    let s = session(json!({"workspace": {"skills": [{"configMap": "tools", "path": "t"}]}}));
    let pod = resources::worker_pod(&s, &tier, &config, &[cm]);
    let vol = pod
        .spec
        .unwrap()
        .volumes
        .unwrap()
        .into_iter()
        .find(|v| v.name == "agents")
        .unwrap();
    let items = vol.projected.unwrap().sources.unwrap()[0]
        .config_map
        .clone()
        .unwrap()
        .items
        .unwrap();
    let paths: Vec<String> = items.into_iter().map(|i| i.path).collect();
    assert_eq!(paths, vec!["t/SKILL.md", "t/run.sh"]);
}

#[test]
fn persistent_dirs_mount_their_sources_where_only_the_worker_reads_them() {
    let config = OperatorConfig::for_namespace("kh");
    let s = session(json!({"workspace": {"persistentDirs": [
        {"name": "kb", "source": {"configMap": {"name": "kb-files"}}, "commit": "read-only"},
        {"name": "team", "source": {"claim": {"claimName": "team-pvc"}}, "commit": "read-only"},
        {"name": "notes", "source": {"claim": {"claimName": "user-pvc", "path": "u1/notes"}},
         "readOnlyPrefixes": ["policy"]},
        {"name": "drafts", "source": {"claim": {"claimName": "user-pvc"}}, "commit": "manual"},
    ]}}));
    let tier = tier_spec(json!({"level": 0, "template": {"image": "img"}}));
    let pod = resources::worker_pod(&s, &tier, &config, &[]);
    let spec = pod.spec.unwrap();
    let mounts: Vec<(String, String, Option<String>, bool)> = spec.containers[0]
        .volume_mounts
        .clone()
        .unwrap()
        .into_iter()
        .filter(|m| m.name.starts_with("persistent-") || m.mount_path.ends_with("manual-commits"))
        .map(|m| {
            (
                m.name,
                m.mount_path,
                m.sub_path,
                m.read_only.unwrap_or(false),
            )
        })
        .collect();
    let m = |n: &str, p: &str, sub: Option<&str>, ro| {
        (n.to_string(), p.to_string(), sub.map(String::from), ro)
    };
    assert_eq!(
        mounts,
        vec![
            m("persistent-0", "/persistent/kb", None, true),
            m(
                "persistent-1",
                "/var/run/kube-harness/sources/team",
                None,
                true
            ),
            m(
                "persistent-2",
                "/var/run/kube-harness/sources/notes",
                None,
                false
            ),
            m(
                "persistent-3",
                "/var/run/kube-harness/sources/drafts",
                None,
                false
            ),
            m(
                "workspace",
                "/var/run/kube-harness/manual-commits",
                Some("manual-commits"),
                false
            ),
        ]
    );
    let claims: Vec<(String, bool)> = spec
        .volumes
        .unwrap()
        .into_iter()
        .filter_map(|v| v.persistent_volume_claim)
        .map(|c| (c.claim_name, c.read_only.unwrap_or(false)))
        .collect();
    assert_eq!(
        claims,
        vec![
            ("s1-workspace".to_string(), false),
            ("team-pvc".into(), true),
            ("user-pvc".into(), false),
            ("user-pvc".into(), false)
        ]
    );
    let security = spec.security_context.unwrap();
    assert_eq!(
        (security.fs_group, security.run_as_user),
        (
            Some(i64::from(kube_harness_protocol::worker_args::SOURCES_GID)),
            Some(resources::worker_uid(&s))
        ),
        "one fsGroup for every session sharing a claim, its own uid still"
    );
    let args = parsed_worker_args(&s, &config);
    let dirs: Vec<String> = args
        .persistent_dir
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(
        dirs,
        [
            "kb:mounted",
            "team:read-only:team",
            "notes:after-turn:u1/notes",
            "drafts:manual:drafts"
        ]
    );
    assert_eq!(
        args.read_only_prefix,
        vec![std::path::PathBuf::from("/persistent/notes/policy")]
    );
    // Without Persistent Dirs: the session's own fsGroup, no extra mount.
    let plain = resources::worker_pod(&session(json!({})), &tier, &config, &[]);
    let plain = plain.spec.unwrap();
    let own = plain.security_context.unwrap();
    assert_eq!(own.fs_group, own.run_as_user);
    assert!(!plain.containers[0]
        .volume_mounts
        .as_ref()
        .unwrap()
        .iter()
        .any(|m| m.mount_path.starts_with("/var/run/kube-harness/")
            && !m.mount_path.ends_with("/token")));
}

#[test]
fn worker_states_are_read_from_pod_status() {
    let pod = |status: serde_json::Value| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p"}, "status": status})).unwrap()
    };
    assert_eq!(
        worker_state(&pod(
            json!({"phase": "Running", "podIP": "10.0.0.5", "conditions": [{"type": "Ready", "status": "True"}]})
        )),
        WorkerState::Ready {
            ip: "10.0.0.5".into()
        }
    );
    assert!(matches!(
        worker_state(&pod(json!({"phase": "Pending", "containerStatuses": [{"name": "worker", "image": "i", "imageID": "", "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ErrImageNeverPull", "message": "not present"}}}]}))),
        WorkerState::Failing { ref reason, .. } if reason == "ErrImageNeverPull"
    ));
    assert_eq!(
        worker_state(&pod(json!({"phase": "Failed"}))),
        WorkerState::Gone
    );
    assert!(matches!(
        worker_state(&pod(json!({"phase": "Running"}))),
        WorkerState::Starting { .. }
    ));
    // Running with an IP before the readiness probe passed: still Starting for the kubelet, but
    // the operator may ask the worker itself at that IP; not while a container waits or ended.
    let container = |state: serde_json::Value| json!({"name": "worker", "image": "i", "imageID": "", "ready": false, "restartCount": 0, "state": state});
    let running = pod(json!({"phase": "Running", "podIP": "10.0.0.6",
        "containerStatuses": [container(json!({"running": {}}))]}));
    assert!(matches!(
        worker_state(&running),
        WorkerState::Starting { .. }
    ));
    assert_eq!(started_ip(&running).as_deref(), Some("10.0.0.6"));
    for not_yet in [
        json!({"phase": "Pending", "podIP": "10.0.0.6", "containerStatuses": [container(json!({"waiting": {"reason": "ContainerCreating"}}))]}),
        json!({"phase": "Running", "podIP": "10.0.0.6", "containerStatuses": [container(json!({"terminated": {"exitCode": 1}}))]}),
        json!({"phase": "Running", "containerStatuses": [container(json!({"running": {}}))]}),
        json!({"phase": "Running", "podIP": "10.0.0.6", "containerStatuses": []}),
    ] {
        assert_eq!(started_ip(&pod(not_yet.clone())), None, "{not_yet}");
    }
}

#[test]
fn tiers_are_checked_against_the_matrix() {
    let ok = tier::check(&tier_spec(
        json!({"level": 1, "template": {"image": "rust:1"}, "capabilities": ["build-toolchain", "version-control"]}),
    ));
    assert!(ok.0, "{ok:?}");
    let no_escalation = tier::check(&tier_spec(
        json!({"level": 2, "template": {"image": "x"}, "capabilities": ["python"]}),
    ));
    assert_eq!(
        (no_escalation.0, no_escalation.1),
        (false, reasons::NO_ESCALATION_CAPABILITY)
    );
    let blank = tier::check(&tier_spec(json!({"level": 0, "template": {"image": " "}})));
    assert_eq!(blank.1, reasons::IMAGE_MISSING);
}

#[test]
fn each_session_runs_as_its_own_uid() {
    // RLIMIT_NPROC counts per uid across the node: sessions must not share one (issue 12).
    let config = OperatorConfig::for_namespace("kh");
    let tier = tier_spec(json!({"level": 0, "template": {"image": "img:1"}}));
    let with_uid = |uid: &str| {
        let mut s = session(json!({}));
        s.metadata.uid = Some(uid.into());
        s
    };
    let ids = |s: &HarnessSession| {
        let pod = resources::worker_pod(s, &tier, &config, &[]);
        let spec = pod.spec.unwrap();
        let psc = spec.security_context.unwrap();
        let csc = spec.containers[0].security_context.clone().unwrap();
        assert_eq!(psc.run_as_user, csc.run_as_user);
        assert_eq!(psc.run_as_user, psc.run_as_group);
        assert_eq!(psc.run_as_user, psc.fs_group);
        assert_eq!(psc.run_as_non_root, Some(true));
        psc.run_as_user.unwrap()
    };
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..1000 {
        let uid = ids(&with_uid(&format!("0b9e6f4a-0000-4000-8000-{i:012}")));
        assert!((resources::WORKER_UID_BASE
            ..resources::WORKER_UID_BASE + resources::WORKER_UID_SPAN)
            .contains(&uid));
        assert!(uid < i64::from(i32::MAX));
        seen.insert(uid);
    }
    assert_eq!(seen.len(), 1000, "uids collide");
    // Stable for one session (its files on the PVC stay its own across worker restarts).
    assert_eq!(ids(&with_uid("same")), ids(&with_uid("same")));
}

/// The worker binary's shape: `kube-harness worker …`, with the worker's own argument type.
#[derive(clap::Parser)]
struct WorkerCli {
    #[command(subcommand)]
    command: WorkerCommand,
}

#[derive(clap::Subcommand)]
enum WorkerCommand {
    Worker(WorkerArgs),
}

/// The worker container's arguments from the pod the operator builds, parsed as the worker
/// parses them, but blind to `KH_WORKER_*` variables of the test process (clap reads them when
/// the command is built, and the pod sets none).
fn parsed_worker_args(session: &HarnessSession, config: &OperatorConfig) -> WorkerArgs {
    use clap::{CommandFactory, FromArgMatches};
    let tier = tier_spec(json!({"level": 0, "template": {"image": "img:1"}}));
    let pod = resources::worker_pod(session, &tier, config, &[]);
    let args = pod.spec.unwrap().containers[0].args.clone().unwrap();
    let command = WorkerCli::command().mut_subcommand("worker", |c| {
        c.mut_args(|a| a.env(clap::builder::Resettable::Reset))
    });
    let matches = command
        .try_get_matches_from(std::iter::once("kube-harness".to_string()).chain(args.clone()))
        .unwrap_or_else(|e| panic!("the worker rejects {args:?}: {e}"));
    let WorkerCommand::Worker(parsed) = WorkerCli::from_arg_matches(&matches).unwrap().command;
    parsed
}

#[test]
fn the_worker_parses_the_arguments_the_operator_gives_it_into_what_the_session_asked_for() {
    let config = OperatorConfig::for_namespace("kh");
    // What every session's worker gets: its name, the mounted token, the operator's port.
    let base = || {
        let mut a = WorkerArgs::new("/var/run/kube-harness/token/token");
        a.session = "s1".into();
        a
    };

    // A session with nothing set: the defaults, and the very arguments the operator has always
    // written (the pod's spec hash, and so every running worker, stays as it was).
    let plain = session(json!({}));
    assert_eq!(parsed_worker_args(&plain, &config), base());
    assert_eq!(
        resources::worker_args(&plain, &config),
        [
            "worker",
            "--listen",
            "0.0.0.0:8080",
            "--token-file",
            "/var/run/kube-harness/token/token",
            "--session",
            "s1",
            "--python=true",
            "--javascript=true",
            "--network=false",
            "--same-session",
            "queue",
        ]
    );

    // Toggles, deny commands and the same-session policy.
    let strict = session(json!({
        "runtime": {"python": false, "javascript": false, "network": true},
        "policy": {"denyCommands": ["rm", "curl"]},
        "sameSession": "reject",
    }));
    let mut want = base();
    want.python = false;
    want.javascript = false;
    want.network = true;
    want.deny_command = vec!["rm".into(), "curl".into()];
    want.same_session = SameSession::Reject;
    assert_eq!(parsed_worker_args(&strict, &config), want);

    // An escalation tier: pod escalation through the tier API, when the operator serves one.
    let escalating = session(json!({"escalation": {"tier": "toolchain"}}));
    assert_eq!(parsed_worker_args(&escalating, &config), base());
    let with_tier_api = OperatorConfig {
        tier_api_url: Some("http://kh-operator.kh:8081".into()),
        worker_port: 9090,
        ..OperatorConfig::for_namespace("kh")
    };
    let mut want = base();
    want.listen = "0.0.0.0:9090".parse().unwrap();
    want.escalation = Escalation::Pod;
    want.tier_api_url = Some("http://kh-operator.kh:8081".into());
    want.session_namespace = Some("ns".into());
    assert_eq!(parsed_worker_args(&escalating, &with_tier_api), want);
    let mut want_plain = base();
    want_plain.listen = want.listen;
    assert_eq!(
        parsed_worker_args(&plain, &with_tier_api),
        want_plain,
        "no escalation tier, no escalation"
    );

    // A session log: its URL, the mounted token, and runs scoped to this session object.
    let with_log = OperatorConfig {
        session_log_url: Some("http://log:8080".into()),
        ..OperatorConfig::for_namespace("kh")
    };
    let mut want = base();
    want.session_log_url = Some("http://log:8080".into());
    want.session_log_token_file = Some("/var/run/kube-harness/token/session-log-token".into());
    want.session_log_run_scope = Some("ns:u1".into());
    assert_eq!(parsed_worker_args(&plain, &with_log), want);
}
