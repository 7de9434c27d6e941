//! Which SandboxTiers a namespace may use (issue 30): a tier serves the namespaces its
//! `spec.namespaceSelector` selects (`{}`: all; unset: none). One function for the session
//! reconcile and the tier API's open, so both refuse the same sessions with the same words, and
//! a tier a namespace may not use reads exactly as one that does not exist: a tenant cannot
//! learn which tiers there are from a condition or an answer.

use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use kube_harness_crds::valid::dns_subdomain;
use kube_harness_crds::SandboxTier;
use std::collections::BTreeMap;

/// What a session is told about a tier it may not use, whether or not it exists.
pub fn not_usable(tier: &str, namespace: &str) -> String {
    format!("SandboxTier {tier} does not exist or is not granted to namespace {namespace}")
}

/// `tier` (as read, `None` when there is none of its name) if namespace `ns` may use it; `None`
/// when it does not exist or is not granted. Reads the namespace's labels only for a selector
/// that is neither `{}` nor unset (one GET of the namespace).
pub async fn usable<T>(
    client: &kube::Client,
    ns: &str,
    tier: Option<T>,
) -> Result<Option<T>, kube::Error>
where
    T: std::borrow::Borrow<SandboxTier>,
{
    let Some(tier) = tier else {
        return Ok(None);
    };
    let spec = &tier.borrow().spec;
    let granted = match spec.grants_without_labels() {
        Some(all_or_none) => all_or_none,
        None => {
            let labels = namespace_labels(client, ns).await?;
            spec.grants(&labels)
        }
    };
    Ok(granted.then_some(tier))
}

/// The labels of namespace `ns` (empty when it cannot be found).
async fn namespace_labels(
    client: &kube::Client,
    ns: &str,
) -> Result<BTreeMap<String, String>, kube::Error> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let mut labels = namespaces
        .get_opt(ns)
        .await?
        .and_then(|n| n.metadata.labels)
        .unwrap_or_default();
    // Set by the API server on every namespace; also when a test's namespace lacks it.
    labels.insert("kubernetes.io/metadata.name".into(), ns.into());
    Ok(labels)
}

/// Whether `name` can be a SandboxTier's name at all: a name that cannot (`../sandboxtiers/x`)
/// is never put into an API path; it is simply no tier.
pub fn plausible(name: &str) -> bool {
    dns_subdomain(name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tier(selector: serde_json::Value) -> SandboxTier {
        let mut spec = json!({"level": 1, "template": {"image": "x"}});
        if !selector.is_null() {
            spec["namespaceSelector"] = selector;
        }
        serde_json::from_value(json!({
            "apiVersion": "kubeharness.dev/v1alpha1", "kind": "SandboxTier",
            "metadata": {"name": "rust"}, "spec": spec
        }))
        .unwrap()
    }

    #[test]
    fn unset_grants_none_empty_grants_all_and_a_selector_reads_the_labels() {
        let team = BTreeMap::from([("team".to_string(), "a".to_string())]);
        let none = tier(serde_json::Value::Null);
        assert_eq!(none.spec.grants_without_labels(), Some(false));
        assert!(!none.spec.grants(&team));
        let all = tier(json!({}));
        assert_eq!(all.spec.grants_without_labels(), Some(true));
        assert!(all.spec.grants(&BTreeMap::new()));
        let some = tier(json!({"matchLabels": {"team": "a"}}));
        assert_eq!(some.spec.grants_without_labels(), None);
        assert!(some.spec.grants(&team));
        assert!(!some.spec.grants(&BTreeMap::new()));
        let expr = tier(
            json!({"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["a"]}]}),
        );
        assert!(!expr.spec.grants(&team));
        assert!(!plausible("../sandboxtiers/x") && plausible("rust"));
    }

    #[tokio::test]
    async fn a_tier_without_a_grant_is_none_like_a_missing_one() {
        let (service, _handle) = tower_test::mock::pair::<
            http::Request<kube::client::Body>,
            http::Response<kube::client::Body>,
        >();
        let client = kube::Client::new(service, "default");
        let t = std::sync::Arc::new(tier(serde_json::Value::Null));
        assert!(usable(&client, "team-a", Some(t)).await.unwrap().is_none());
        let t = std::sync::Arc::new(tier(json!({})));
        assert!(usable(&client, "team-a", Some(t)).await.unwrap().is_some());
        let missing: Option<std::sync::Arc<SandboxTier>> = None;
        assert!(usable(&client, "team-a", missing).await.unwrap().is_none());
    }
}
