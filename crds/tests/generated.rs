//! The committed CRD YAML (crds/*.yaml and the chart's copy) must be what the types generate, and
//! every field must carry a description so `kubectl explain` helps.

use kube_harness_crds::{crds, file_name, to_yaml};
use serde_json::Value;
use std::path::Path;

const DIRS: &[&str] = &["crds", "charts/kube-harness/crds"];

#[test]
fn committed_yaml_matches_the_types() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for crd in crds() {
        let want = to_yaml(&crd).unwrap();
        for dir in DIRS {
            let path = root.join(dir).join(file_name(&crd));
            if std::env::var_os("KH_UPDATE_CRDS").is_some() {
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(&path, &want).unwrap();
            }
            let got = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            assert!(
                got == want,
                "{} is stale: run `kube-harness crdgen --out crds --out charts/kube-harness/crds` (or this test with KH_UPDATE_CRDS=1)",
                path.display()
            );
        }
    }
}

/// Walks a structural schema: every property has a description, objects declare their type.
fn check_described(schema: &Value, path: &str, missing: &mut Vec<String>) {
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (name, sub) in props {
            let here = format!("{path}.{name}");
            // metadata/apiVersion/kind are described by Kubernetes itself.
            let standard =
                path.is_empty() && matches!(name.as_str(), "apiVersion" | "kind" | "metadata");
            if !standard
                && sub
                    .get("description")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty)
            {
                missing.push(here.clone());
            }
            check_described(sub, &here, missing);
        }
    }
    if let Some(items) = schema.get("items") {
        check_described(items, &format!("{path}[]"), missing);
    }
    if let Some(extra) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        check_described(extra, &format!("{path}{{}}"), missing);
    }
}

#[test]
fn every_field_is_described() {
    for crd in crds() {
        let crd = serde_json::to_value(&crd).unwrap();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let mut missing = Vec::new();
        check_described(schema, "", &mut missing);
        assert!(
            missing.is_empty(),
            "{}: fields without a description: {missing:?}",
            crd["metadata"]["name"]
        );
    }
}

#[test]
fn crds_have_status_short_names_columns_and_cel_rules() {
    for crd in crds() {
        let name = crd.metadata.name.clone().unwrap();
        let version = &crd.spec.versions[0];
        assert!(
            version
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref())
                .is_some(),
            "{name}: status subresource"
        );
        assert!(
            crd.spec
                .names
                .short_names
                .as_ref()
                .is_some_and(|s| !s.is_empty()),
            "{name}: short names"
        );
        assert!(
            version
                .additional_printer_columns
                .as_ref()
                .is_some_and(|c| c.len() >= 3),
            "{name}: printer columns"
        );
        let yaml = serde_yaml::to_string(&crd).unwrap();
        assert!(
            yaml.contains("x-kubernetes-validations"),
            "{name}: CEL rules"
        );
    }
}
