//! The CRDs' rules for what becomes a name, a path, a flag or a label, in Rust: the operator
//! checks a HarnessSession with them before it acts on it, so an object stored before the rules
//! existed (or under a CRD that lacks them) gets a condition, never a bad request or an error
//! loop. Each function matches the CEL rule of the same field (`session.rs`), and
//! `crds/tests/apiserver.rs` checks both against a real API server.

use crate::selector::{MAX_KEY, MAX_MATCH_EXPRESSIONS, MAX_MATCH_LABELS, MAX_VALUE, MAX_VALUES};
use crate::HarnessSession;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Longest HarnessSession name: it is the value of its pods' `kubeharness.dev/session` label.
pub const MAX_SESSION_NAME: usize = 63;

/// A DNS-1123 subdomain (the name of a SandboxTier, ConfigMap, claim or StorageClass).
pub fn dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(dns_label_part)
}

fn dns_label_part(part: &str) -> bool {
    let b = part.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_digit() || c.is_ascii_lowercase() || *c == b'-')
}

/// A relative path of plain names, none `.` and none starting with `..` (a skill's directory
/// under /.agents; it becomes a ConfigMap volume item path, which the API server refuses with a
/// `..` at the start of any element, `..data` included).
pub fn relative_path(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('/').all(|seg| {
            !seg.is_empty()
                && seg != "."
                && !seg.starts_with("..")
                && seg
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
        })
}

/// A command name for `policy.denyCommands`: never a flag, a path or a list.
pub fn command_name(s: &str) -> bool {
    let ok = |c: u8| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'+' | b'.' | b'-');
    !s.is_empty() && s.len() <= 128 && !s.starts_with('-') && s.bytes().all(ok)
}

/// A selector within the bounds of `crate::selector`.
pub fn bounded_selector(s: &LabelSelector) -> bool {
    let labels = s.match_labels.as_ref();
    let exprs = s.match_expressions.as_deref().unwrap_or_default();
    labels.is_none_or(|l| {
        l.len() <= MAX_MATCH_LABELS as usize
            && l.iter()
                .all(|(k, v)| k.len() <= MAX_KEY as usize && v.len() <= MAX_VALUE as usize)
    }) && exprs.len() <= MAX_MATCH_EXPRESSIONS as usize
        && exprs.iter().all(|e| {
            let values = e.values.as_deref().unwrap_or_default();
            e.key.len() <= MAX_KEY as usize
                && values.len() <= MAX_VALUES as usize
                && values.iter().all(|v| v.len() <= MAX_VALUE as usize)
        })
}

/// What in `session` the CRD's rules refuse (today's rules; the object may predate them), each
/// naming the field; empty when the operator may act on it.
pub fn problems(session: &HarnessSession) -> Vec<String> {
    let mut out = Vec::new();
    let name = session.metadata.name.as_deref().unwrap_or_default();
    if name.len() > MAX_SESSION_NAME {
        out.push(format!(
            "metadata.name is {} characters; at most {MAX_SESSION_NAME} (it is a label value of the session's pods)",
            name.len()
        ));
    }
    let spec = &session.spec;
    let mut name_of = |field: String, value: &str| {
        if !dns_subdomain(value) {
            out.push(format!("{field} {value:?} is not a valid object name"));
        }
    };
    name_of("workerTier".into(), &spec.worker_tier);
    if let Some(t) = spec.escalation.as_ref().and_then(|e| e.tier.as_deref()) {
        if !t.is_empty() {
            name_of("escalation.tier".into(), t);
        }
    }
    if let Some(class) = &spec.workspace.storage_class_name {
        name_of("workspace.storageClassName".into(), class);
    }
    for (i, skill) in spec.workspace.skills.iter().enumerate() {
        name_of(
            format!("workspace.skills[{i}].configMap"),
            &skill.config_map,
        );
    }
    for (i, dir) in spec.workspace.persistent_dirs.iter().enumerate() {
        if let Some(c) = &dir.source.claim {
            name_of(
                format!("workspace.persistentDirs[{i}].source.claim.claimName"),
                &c.claim_name,
            );
        }
        if let Some(c) = &dir.source.config_map {
            name_of(
                format!("workspace.persistentDirs[{i}].source.configMap.name"),
                &c.name,
            );
        }
    }
    let dirs: Vec<&str> = spec
        .workspace
        .skills
        .iter()
        .map(|s| s.path.as_deref().unwrap_or(&s.config_map))
        .collect();
    for (i, dir) in dirs.iter().enumerate() {
        if !relative_path(dir) {
            out.push(format!(
                "workspace.skills[{i}].path {dir:?} is not a relative path of plain names under /.agents"
            ));
        }
        let clash = dirs
            .iter()
            .enumerate()
            .any(|(j, other)| j != i && (other == dir || other.starts_with(&format!("{dir}/"))));
        if clash {
            out.push(format!(
                "workspace.skills[{i}]: directory {dir:?} is another skill's too, or holds one"
            ));
        }
    }
    for (i, deny) in spec.policy.deny_commands.iter().enumerate() {
        if !command_name(deny) {
            out.push(format!(
                "policy.denyCommands[{i}] {deny:?} is not a command name"
            ));
        }
    }
    if let Some(access) = &spec.access {
        if access.clients.len() > 16 {
            out.push(format!(
                "access.clients has {} entries; at most 16",
                access.clients.len()
            ));
        }
        for (i, c) in access.clients.iter().enumerate() {
            let selectors = [c.pod_selector.as_ref(), c.namespace_selector.as_ref()];
            if selectors
                .into_iter()
                .flatten()
                .any(|s| !bounded_selector(s))
            {
                out.push(format!(
                    "access.clients[{i}]: a selector is over its bounds ({MAX_MATCH_LABELS} matchLabels, {MAX_MATCH_EXPRESSIONS} matchExpressions of {MAX_VALUES} values)"
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_paths_and_commands() {
        for ok in ["tier0", "rust-1", "a.b", "a", "0"] {
            assert!(dns_subdomain(ok), "{ok}");
        }
        for bad in [
            "",
            "../sandboxtiers/x",
            "A",
            "-a",
            "a-",
            "a..b",
            ".a",
            "a/b",
            "a_b",
        ] {
            assert!(!dns_subdomain(bad), "{bad}");
        }
        for ok in ["skills", "a/b", "my.skill", "a_b-c", ".a", "a..b", "a/.b"] {
            assert!(relative_path(ok), "{ok}");
        }
        for bad in [
            "",
            "../session",
            "/etc",
            "a/../b",
            ".",
            "a//b",
            "a/",
            "a b",
            "a/.",
            "..data",
            "a/..data",
            "..a/b",
        ] {
            assert!(!relative_path(bad), "{bad}");
        }
        for ok in ["git", "g++", "python3.11", "apt-get", "_x"] {
            assert!(command_name(ok), "{ok}");
        }
        for bad in ["", "--network=true", "-x", "a,b", "/bin/sh", "a b", "a=b"] {
            assert!(!command_name(bad), "{bad}");
        }
    }
}
