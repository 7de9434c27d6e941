//! Smoke tests of the test cluster itself: real pods on a real kubelet and containerd, logs through
//! the API server, Service DNS through CoreDNS and kube-proxy, and container removal on pod deletion.
//! They need a cluster (`tests/cluster/up.sh` + `tests/cluster/images.sh`, or kind): run with
//! `cargo test -p kube-harness-e2e -- --ignored --test-threads=1` and KUBECONFIG set.

use std::time::Duration;

use k8s_openapi::api::core::v1::{HTTPGetAction, Pod, Probe, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, LogParams, ObjectMeta, PostParams};
use kube::Api;
use kube_harness_e2e::namespace::with_namespace;
use kube_harness_e2e::pods::{
    command_pod, wait_deleted, wait_ready, wait_succeeded, with_readiness,
};
use kube_harness_e2e::wait::{self, Check};
use kube_harness_e2e::{node, smoke_image};

const POD_START: Duration = Duration::from_secs(90);

#[tokio::test]
#[ignore = "needs a cluster: see docs/testing.md"]
async fn pod_runs_a_command_and_its_logs_come_back_through_the_api_server() {
    with_namespace("logs", |client, ns| async move {
        let pods: Api<Pod> = Api::namespaced(client, &ns);
        // Computed in the pod, so the expected text cannot come from the manifest alone.
        let script = "echo \"product=$((6*7))\"; echo \"kernel=$(uname -s)\"; id -u";
        let pod = command_pod("hello", &smoke_image(), &["sh", "-c", script], &[]);
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
        wait_succeeded(&pods, "hello", POD_START)
            .await
            .unwrap_or_else(|e| panic!("{e}"));

        let logs = pods
            .logs("hello", &LogParams::default())
            .await
            .expect("read logs via the API server");
        assert_eq!(
            logs, "product=42\nkernel=Linux\n65532\n",
            "unexpected pod logs"
        );
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: see docs/testing.md"]
async fn a_pod_reaches_a_service_by_its_dns_name() {
    with_namespace("dns", |client, ns| async move {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
        let services: Api<Service> = Api::namespaced(client, &ns);

        // Server: serves a page naming itself, so the client proves which pod answered.
        let serve = "mkdir -p /tmp/www && echo \"hello from $HOSTNAME\" > /tmp/www/index.html \
                     && exec python3 -m http.server 8080 --bind 0.0.0.0 --directory /tmp/www";
        let probe = Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/".into()),
                port: IntOrString::Int(8080),
                ..Default::default()
            }),
            period_seconds: Some(1),
            ..Default::default()
        };
        let server = with_readiness(command_pod("web-0", &smoke_image(), &["sh", "-c", serve], &[("app", "web")]), probe);
        pods.create(&PostParams::default(), &server).await.expect("create server pod");

        let svc = Service {
            metadata: ObjectMeta {
                name: Some("web".into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                selector: Some([("app".to_string(), "web".to_string())].into()),
                ports: Some(vec![ServicePort {
                    port: 80,
                    target_port: Some(IntOrString::Int(8080)),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let svc = services.create(&PostParams::default(), &svc).await.expect("create service");
        let cluster_ip = svc.spec.and_then(|s| s.cluster_ip).expect("service has a cluster IP");
        if let Err(e) = wait_ready(&pods, "web-0", POD_START).await {
            let logs = pods.logs("web-0", &LogParams::default()).await.unwrap_or_default();
            panic!("{e}\nserver output:\n{logs}");
        }

        // Client: resolve the name through cluster DNS, then fetch through the Service's virtual IP.
        // Retries cover the seconds CoreDNS and kube-proxy take to see the new Service.
        let fqdn = format!("web.{ns}.svc.cluster.local");
        // Prints "<address> <name>" and the page only from the attempt that succeeded.
        let fetch = format!(
            "for i in $(seq 1 30); do \
               if addr=$(getent hosts {fqdn}) && page=$(curl -fsS --max-time 3 http://{fqdn}/ 2>/tmp/err); then \
                 printf '%s\\n%s\\n' \"$addr\" \"$page\"; exit 0; \
               fi; sleep 1; \
             done; echo 'gave up after 30 attempts:' >&2; cat /tmp/err >&2; exit 1"
        );
        let client_pod = command_pod("client", &smoke_image(), &["sh", "-c", &fetch], &[]);
        pods.create(&PostParams::default(), &client_pod).await.expect("create client pod");
        let waited = wait_succeeded(&pods, "client", POD_START).await;
        let logs = pods.logs("client", &LogParams::default()).await.unwrap_or_default();
        if let Err(e) = waited {
            panic!("{e}\nclient output:\n{logs}");
        }

        let mut lines = logs.lines();
        let resolved = lines.next().unwrap_or_default();
        assert_eq!(
            resolved.split_whitespace().collect::<Vec<_>>(),
            vec![cluster_ip.as_str(), fqdn.as_str()],
            "{fqdn} must resolve to the Service's cluster IP; client output:\n{logs}"
        );
        assert_eq!(lines.next(), Some("hello from web-0"), "page served through the Service; client output:\n{logs}");
    })
    .await;
}

#[tokio::test]
#[ignore = "needs a cluster: see docs/testing.md"]
async fn deleting_a_pod_removes_its_containers() {
    with_namespace("delete", |client, ns| async move {
        let pods: Api<Pod> = Api::namespaced(client, &ns);
        let pod = command_pod("sleeper", &smoke_image(), &["sleep", "infinity"], &[]);
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
        let running = wait_ready(&pods, "sleeper", POD_START)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let uid = running.metadata.uid.clone().expect("pod has a uid");

        // Positive control: the node's runtime has the sandbox and the app container right now.
        let before = node::containers_of_pod(&uid)
            .await
            .expect("list containers on the node");
        if let Some(ids) = &before {
            assert!(
                ids.len() >= 2,
                "expected sandbox + app container for pod {uid} in containerd, found {ids:?}"
            );
            let app = running
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|cs| cs.first())
                .and_then(|c| c.container_id.clone())
                .expect("running pod reports its container id");
            let app = app
                .strip_prefix("containerd://")
                .unwrap_or(&app)
                .to_string();
            assert!(
                ids.contains(&app),
                "container {app} reported by the API is not in containerd: {ids:?}"
            );
        } else {
            eprintln!("KH_CONTAINERD_ADDRESS unset: checking deletion through the API only");
        }

        pods.delete("sleeper", &DeleteParams::default())
            .await
            .expect("delete pod");
        wait_deleted(&pods, "sleeper", &uid, Duration::from_secs(60))
            .await
            .unwrap_or_else(|e| panic!("{e}"));

        if let Some(ids) = before {
            // The API object goes first. Kubelet stops the pod's processes right away; it removes
            // the stopped containers in its garbage collection, which runs once a minute.
            wait::until(
                &format!("processes of pod {uid} to stop"),
                Duration::from_secs(30),
                || async {
                    let live = node::live_tasks(&ids).await?.unwrap_or_default();
                    Ok(if live.is_empty() {
                        Check::Done(())
                    } else {
                        Check::Pending(format!("live tasks {live:?}"))
                    })
                },
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
            wait::until(
                &format!("containers of pod {uid} to leave containerd"),
                Duration::from_secs(150),
                || async {
                    let left = node::containers_of_pod(&uid).await?.unwrap_or_default();
                    Ok(if left.is_empty() {
                        Check::Done(())
                    } else {
                        Check::Pending(format!("{left:?}"))
                    })
                },
            )
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        }
    })
    .await;
}

/// The recipe "add a Tier-0 command" (docs/architecture.md) has three steps: the matrix, the
/// worker image, this test. Every command the newest capability matrix calls Tier-0 (gated by a
/// toggle or not) must be a program in the worker image: a command the matrix promises and the
/// image lacks would fail on Tier-0 as "not found" instead of escalating.
#[tokio::test]
#[ignore = "needs a cluster: see docs/testing.md"]
async fn the_worker_image_ships_every_tier0_command_of_the_matrix() {
    let matrix = kube_harness_classify::matrix::get(None).expect("the newest matrix");
    let t = &matrix.doc.tier0;
    let names: Vec<&str> = [&t.always, &t.network, &t.python, &t.javascript]
        .into_iter()
        .flatten()
        .map(String::as_str)
        .collect();
    assert!(names.len() > 20, "{names:?}");
    let script = format!(
        "for c in {}; do command -v \"$c\" >/dev/null || echo \"missing $c\"; done; echo checked",
        names.join(" ")
    );
    with_namespace("image", |client, ns| async move {
        let pods: Api<Pod> = Api::namespaced(client, &ns);
        let image = "localhost/kube-harness/worker:dev";
        let mut pod = command_pod("tools", image, &["bash", "-c", &script], &[]);
        if let Some(spec) = pod.spec.as_mut() {
            for c in &mut spec.containers {
                c.image_pull_policy = Some("Never".into());
            }
        }
        pods.create(&PostParams::default(), &pod)
            .await
            .expect("create pod");
        wait_succeeded(&pods, "tools", POD_START)
            .await
            .unwrap_or_else(|e| panic!("{e}"));
        let logs = pods
            .logs("tools", &LogParams::default())
            .await
            .expect("read logs via the API server");
        assert_eq!(
            logs, "checked\n",
            "commands the matrix promises and the image lacks"
        );
    })
    .await;
}
