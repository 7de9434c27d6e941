//! One fresh namespace per test, deleted afterwards even when the test panics.

use std::panic::AssertUnwindSafe;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::FutureExt;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, Client};

use crate::wait::{self, Check};
use crate::Result;

/// Creates namespace `kh-e2e-<prefix>-<unique>`, waits for its default ServiceAccount (pods are
/// rejected at admission until the controller-manager creates it), runs `body`, then deletes the
/// namespace whether `body` returned or panicked, re-raising the panic afterwards.
pub async fn with_namespace<F, Fut>(prefix: &str, body: F)
where
    F: FnOnce(Client, String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let client = Client::try_default().await.expect(
        "no usable KUBECONFIG: run tests/cluster/up.sh (or kind) first, see docs/testing.md",
    );
    let name = unique_name(prefix);
    create(&client, &name)
        .await
        .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
    let outcome = AssertUnwindSafe(body(client.clone(), name.clone()))
        .catch_unwind()
        .await;
    let namespaces: Api<Namespace> = Api::all(client);
    if let Err(e) = namespaces.delete(&name, &DeleteParams::background()).await {
        eprintln!("warning: deleting namespace {name}: {e}");
    }
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}

fn unique_name(prefix: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("kh-e2e-{prefix}-{:x}{:x}", std::process::id(), nanos)
}

async fn create(client: &Client, name: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(
                [(
                    "app.kubernetes.io/part-of".to_string(),
                    "kube-harness-e2e".to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        ..Default::default()
    };
    namespaces.create(&PostParams::default(), &ns).await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    wait::until(
        &format!("ServiceAccount {name}/default"),
        Duration::from_secs(30),
        || async {
            Ok(match accounts.get_opt("default").await? {
                Some(_) => Check::Done(()),
                None => Check::Pending("not created yet".into()),
            })
        },
    )
    .await
}
