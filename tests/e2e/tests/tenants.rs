//! Two tenants on one cluster (issue 30, items 4, 5 and 7): each a ServiceAccount bound, in its own
//! namespace only, to the built-in `edit` role and the chart's `<release>-user` role, acting
//! through impersonation. What one did to the operator then, and what it gets now. Run with
//! `--ignored` against a cluster with the chart installed (docs/testing.md).

use k8s_openapi::api::core::v1::{Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client, ResourceExt};
use kube_harness_crds::condition::reasons;
use kube_harness_crds::HarnessSession;
use kube_harness_e2e::harness;
use kube_harness_e2e::namespace::with_namespace;
use kube_harness_e2e::tiers::{toolchain_tier, with_tier};
use kube_harness_e2e::wait::{self, Check};
use serde_json::json;
use std::time::Duration;

const READY: Duration = Duration::from_secs(180);

/// The chart's user ClusterRole (`<fullname>-user`; the e2e release is `kube-harness`).
fn user_role() -> String {
    std::env::var("KH_USER_ROLE").unwrap_or_else(|_| "kube-harness-user".into())
}

/// A client acting as tenant `ns`: ServiceAccount `tenant` there, bound there to `edit` and the
/// chart's user role, nothing anywhere else.
async fn tenant(admin: &Client, ns: &str) -> Client {
    harness::restrict(admin, ns).await.unwrap();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), ns);
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "tenant"}})).unwrap();
    accounts
        .create(&PostParams::default(), &account)
        .await
        .unwrap();
    for (name, role) in [
        ("tenant-edit", "edit".to_string()),
        ("tenant-user", user_role()),
    ] {
        bind_tenant(admin, ns, name, "ClusterRole", &role).await;
    }
    let mut config = kube::Config::infer().await.unwrap();
    config.auth_info.impersonate = Some(format!("system:serviceaccount:{ns}:tenant"));
    config.auth_info.impersonate_groups = Some(vec![
        "system:serviceaccounts".into(),
        format!("system:serviceaccounts:{ns}"),
        "system:authenticated".into(),
    ]);
    Client::try_from(config).unwrap()
}

/// Binds the tenant's ServiceAccount in `ns` to the role `kind`/`role` (binding `name`).
async fn bind_tenant(admin: &Client, ns: &str, name: &str, kind: &str, role: &str) {
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": ns}]
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(admin.clone(), ns)
        .create(&PostParams::default(), &binding)
        .await
        .unwrap();
}

/// The demo session named `name`, as `client` creates it in `ns`.
async fn create_session(
    client: &Client,
    ns: &str,
    name: &str,
    escalation: Option<&str>,
) -> HarnessSession {
    let mut s = harness::example_session("demo.yaml", name).unwrap();
    s.spec.escalation = escalation.map(|t| kube_harness_crds::session::Escalation {
        tier: Some(t.into()),
    });
    Api::<HarnessSession>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &s)
        .await
        .unwrap_or_else(|e| panic!("creating {ns}/{name}: {e}"))
}

/// Item 4: the tenant deletes its session's worker pod and at once creates one of the same name,
/// labels, owner reference and hash. The operator deletes the impostor, never records its uid,
/// and the session is Ready again on a pod of its own.
#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_worker_pod_a_tenant_replaces_is_deleted_and_never_trusted() {
    with_namespace("tenant-pod", |admin, ns| async move {
        let client = tenant(&admin, &ns).await;
        create_session(&client, &ns, "victim", None).await;
        harness::wait_ready(&admin, &ns, "victim", READY)
            .await
            .unwrap();
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let real = pods.get("victim-worker").await.unwrap();
        let mut impostor_uid = None;
        for _ in 0..10 {
            let mut fake = real.clone();
            fake.metadata = kube::api::ObjectMeta {
                name: real.metadata.name.clone(),
                labels: real.metadata.labels.clone(),
                annotations: real.metadata.annotations.clone(),
                owner_references: real.metadata.owner_references.clone(),
                ..Default::default()
            };
            fake.status = None;
            if let Some(spec) = fake.spec.as_mut() {
                spec.node_name = None;
            }
            let _ = pods
                .delete(
                    "victim-worker",
                    &DeleteParams {
                        grace_period_seconds: Some(0),
                        ..Default::default()
                    },
                )
                .await;
            match pods.create(&PostParams::default(), &fake).await {
                Ok(made) => {
                    impostor_uid = made.uid();
                    break;
                }
                // The operator's own pod won the name first: try again.
                Err(kube::Error::Api(e)) if e.code == 409 => {
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("the tenant may create pods in its namespace: {e}"),
            }
        }
        let impostor = impostor_uid.expect("the tenant made a pod of the worker's name");
        let sessions: Api<HarnessSession> = Api::namespaced(admin.clone(), &ns);
        wait::until(
            "the impostor deleted, the session Ready on its own pod",
            READY,
            || async {
                let pod = Api::<Pod>::namespaced(admin.clone(), &ns)
                    .get_opt("victim-worker")
                    .await?;
                let s = sessions.get("victim").await?;
                let status = s.status.clone().unwrap_or_default();
                assert_ne!(
                    status.worker_pod_uid.as_deref(),
                    Some(impostor.as_str()),
                    "the impostor was recorded as the session's worker"
                );
                let ready = kube_harness_crds::condition::is_true(
                    &status.conditions,
                    kube_harness_crds::condition::types::READY,
                );
                Ok(match pod.and_then(|p| p.uid()) {
                    Some(uid)
                        if uid != impostor
                            && ready
                            && status.worker_pod_uid == Some(uid.clone()) =>
                    {
                        Check::Done(())
                    }
                    other => {
                        Check::Pending(format!("pod uid {other:?}, {}", harness::conditions_of(&s)))
                    }
                })
            },
        )
        .await
        .unwrap();
    })
    .await;
}

/// Item 5: a tier granted to tenant A only. Tenant B's session naming it reads exactly as one
/// naming a tier that does not exist (no way to enumerate tiers); tenant A's may use it.
#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_tier_granted_to_one_tenant_is_no_tier_to_another() {
    with_namespace("tenant-a", |admin, ns_a| async move {
        with_namespace("tenant-b", |_, ns_b| async move {
            let tier_name = format!("{ns_a}-only");
            let mut tier = toolchain_tier(&tier_name);
            tier.spec.namespace_selector = Some(
                serde_json::from_value(
                    json!({"matchLabels": {"kubernetes.io/metadata.name": ns_a.clone()}}),
                )
                .unwrap(),
            );
            with_tier(&admin, tier, || async {
                let a = tenant(&admin, &ns_a).await;
                let b = tenant(&admin, &ns_b).await;
                create_session(&a, &ns_a, "granted", Some(&tier_name)).await;
                create_session(&b, &ns_b, "probe", Some(&tier_name)).await;
                create_session(&b, &ns_b, "missing", Some("kh-e2e-no-such-tier")).await;
                let escalated = |ns: String, name: &'static str| {
                    let admin = admin.clone();
                    async move {
                        harness::wait_condition(&admin, &ns, name, "Escalated", "decided", |c| {
                            !c.reason.is_empty()
                        })
                        .await
                        .unwrap()
                    }
                };
                let probe = escalated(ns_b.clone(), "probe").await;
                let missing = escalated(ns_b.clone(), "missing").await;
                assert_eq!(
                    probe.reason,
                    reasons::ESCALATION_TIER_NOT_FOUND,
                    "{probe:?}"
                );
                assert_eq!(
                    (
                        probe.status.as_str(),
                        probe.message.replace(&tier_name, "T")
                    ),
                    (
                        missing.status.as_str(),
                        missing.message.replace("kh-e2e-no-such-tier", "T")
                    ),
                    "tenant B tells an existing tier from a missing one"
                );
                let granted = harness::wait_condition(
                    &admin,
                    &ns_a,
                    "granted",
                    "Escalated",
                    "Tier1Available",
                    |c| c.reason == reasons::TIER1_AVAILABLE,
                )
                .await
                .unwrap();
                assert_eq!(granted.reason, reasons::TIER1_AVAILABLE);
            })
            .await;
        })
        .await;
    })
    .await;
}

/// Item 7: what the tenant wrote that broke the operator is refused by the API server, naming
/// the field; a token Secret the tenant made before its session is refused with a condition, and
/// the session gets its own token once it is gone.
#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_tenants_bad_input_is_refused_and_a_planted_token_secret_is_never_used() {
    with_namespace("tenant-input", |admin, ns| async move {
        let client = tenant(&admin, &ns).await;
        let sessions: Api<HarnessSession> = Api::namespaced(client.clone(), &ns);
        let base = |name: &str, spec: serde_json::Value| {
            json!({"apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessSession",
                   "metadata": {"name": name}, "spec": spec})
        };
        let clients: Vec<_> = (0..17)
            .map(|i| json!({"podSelector": {"matchLabels": {"app": format!("a{i}")}}}))
            .collect();
        let refused = [
            (
                base("t", json!({"escalation": {"tier": "../sandboxtiers/x"}})),
                "escalation.tier",
            ),
            (
                base(
                    "s1",
                    json!({"workspace": {"skills": [{"configMap": "c", "path": "../session"}]}}),
                ),
                "path",
            ),
            (
                base(
                    "s2",
                    json!({"workspace": {"skills": [{"configMap": "c", "path": "/etc"}]}}),
                ),
                "path",
            ),
            (
                base("d", json!({"policy": {"denyCommands": ["--network=true"]}})),
                "denyCommands",
            ),
            (base(&"a".repeat(70), json!({})), "63"),
            (
                base("c", json!({"access": {"clients": clients}})),
                "clients",
            ),
        ];
        for (object, field) in refused {
            let s: HarnessSession = serde_json::from_value(object.clone()).unwrap();
            match sessions.create(&PostParams::default(), &s).await {
                Err(kube::Error::Api(e)) => {
                    assert!(e.message.contains(field), "{field}: {}", e.message)
                }
                other => panic!("{object} was not refused: {other:?}"),
            }
        }

        // The planted Secret: the tenant's chosen token, made before the session.
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let planted: Secret = serde_json::from_value(json!({
            "metadata": {"name": "planted-token"},
            "stringData": {"token": "chosen-by-the-tenant"}
        }))
        .unwrap();
        secrets
            .create(&PostParams::default(), &planted)
            .await
            .unwrap();
        create_session(&client, &ns, "planted", None).await;
        let ready =
            harness::wait_condition(&admin, &ns, "planted", "Ready", "TokenSecretRefused", |c| {
                c.reason == reasons::TOKEN_SECRET_REFUSED
            })
            .await
            .unwrap();
        assert!(ready.message.contains("planted-token"), "{ready:?}");
        let worker = Api::<Pod>::namespaced(admin.clone(), &ns)
            .get_opt("planted-worker")
            .await
            .unwrap();
        assert!(worker.is_none(), "a worker pod mounts the tenant's Secret");
        secrets
            .delete("planted-token", &DeleteParams::default())
            .await
            .unwrap();
        harness::wait_ready(&admin, &ns, "planted", READY)
            .await
            .unwrap();
        let own = Api::<Secret>::namespaced(admin.clone(), &ns)
            .get("planted-token")
            .await
            .unwrap();
        let token = own.data.unwrap_or_default().remove("token").unwrap();
        assert_ne!(
            token.0,
            b"chosen-by-the-tenant".to_vec(),
            "the tenant chose the token"
        );
    })
    .await;
}

/// Issue 36, T8: Tier-1 turn records (HarnessTurns) live in the tenant's namespace. The tenant can
/// list them (the user role) but not write them; and granted every verb on them in its namespace
/// (as a namespace admin role with `*` would), the chart's ValidatingAdmissionPolicy still refuses
/// its create, so it can neither plant nor replay a record.
#[tokio::test]
#[ignore = "needs a cluster with the chart installed"]
async fn a_tenant_can_read_but_never_write_turn_records() {
    use k8s_openapi::api::rbac::v1::Role;
    use kube_harness_crds::HarnessTurn;
    with_namespace("tenant-turns", |admin, ns| async move {
        let client = tenant(&admin, &ns).await;
        let turns: Api<HarnessTurn> = Api::namespaced(client.clone(), &ns);
        turns.list(&Default::default()).await.expect("the user role reads turn records");
        let planted: HarnessTurn = serde_json::from_value(json!({
            "apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessTurn",
            "metadata": {"name": "demo-turn-0000000000000001",
                         "labels": {"kubeharness.dev/role": "tier1"}},
            "spec": {"session": "demo", "turn": "t", "pod": "t1-mine"}}))
        .unwrap();
        let code = |r: Result<HarnessTurn, kube::Error>| match r {
            Err(kube::Error::Api(e)) => (e.code, e.message),
            other => panic!("a tenant's turn record was taken: {other:?}"),
        };
        let (status, _) = code(turns.create(&PostParams::default(), &planted).await);
        assert_eq!(status, 403, "RBAC: the tenant may not create turn records");
        // Granted every verb on them in its namespace: the admission policy refuses.
        let role: Role = serde_json::from_value(json!({"metadata": {"name": "turn-writer"},
            "rules": [{"apiGroups": ["kubeharness.dev"], "resources": ["harnessturns"], "verbs": ["*"]}]}))
        .unwrap();
        Api::<Role>::namespaced(admin.clone(), &ns)
            .create(&PostParams::default(), &role)
            .await
            .unwrap();
        bind_tenant(&admin, &ns, "turn-writer", "Role", "turn-writer").await;
        let refused = wait::until("the admission policy's refusal", Duration::from_secs(30), || {
            let (turns, planted) = (turns.clone(), planted.clone());
            async move {
                Ok(match turns.create(&PostParams::default(), &planted).await {
                    Err(kube::Error::Api(e)) if e.message.contains("Kube Harness operator only") => {
                        Check::Done(e)
                    }
                    // RBAC caches take a moment to see the new binding.
                    Err(kube::Error::Api(e)) if e.code == 403 => Check::Pending(e.message),
                    other => panic!("a tenant's turn record was taken: {other:?}"),
                })
            }
        })
        .await
        .unwrap();
        assert_eq!(refused.code, 403, "{refused:?}");
    })
    .await;
}
