//! Building a sandbox: clear errors for bad configuration, a truthful host probe, and the
//! gated runtimes working under the default limits.

use super::util::*;
use kube_harness_sandbox::{
    probe, Limits, Presentation, SandboxConfig, SandboxError, Tier0Sandbox,
};
use kube_harness_workspace::WorkspaceSpec;
use std::path::PathBuf;
use std::time::Duration;

fn err(config: SandboxConfig) -> String {
    match Tier0Sandbox::new(config) {
        Ok(_) => panic!("expected an error"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn bad_configurations_are_refused_with_clear_messages() {
    let data = Data::new();
    // Direct needs the mounts at their harness paths.
    let canonical = WorkspaceSpec::canonical(data.root(), toggles(false), vec![]);
    let e = err(SandboxConfig::new(canonical.clone(), Presentation::Direct));
    assert!(
        e.contains("Presentation::Direct needs backing_path == harness_path"),
        "{e}"
    );
    // A missing backing directory.
    let mut spec = canonical.clone();
    spec.mounts[0].backing_path = data.path("nope");
    let e = err(SandboxConfig::new(spec, Presentation::Namespace));
    assert!(e.contains("mount /session") && e.contains("nope"), "{e}");
    // A read-only prefix outside its mount.
    let spec = WorkspaceSpec::canonical(data.root(), toggles(false), vec!["/etc".into()]);
    let e = err(SandboxConfig::new(spec, Presentation::Namespace));
    assert!(e.contains("read-only prefix /etc"), "{e}");
    // `..` in a path.
    let mut spec = canonical.clone();
    spec.mounts[0].backing_path = data.path("session/../artifacts");
    let e = err(SandboxConfig::new(spec, Presentation::Namespace));
    assert!(e.contains("`..`"), "{e}");
    // A zero timeout.
    let mut config = SandboxConfig::new(canonical, Presentation::Namespace);
    config.limits.timeout = Duration::ZERO;
    assert!(matches!(
        Tier0Sandbox::new(config),
        Err(SandboxError::BadLimits(_))
    ));
}

#[test]
fn probe_reports_what_this_host_has() {
    let caps = probe();
    // The CI machines enforce landlock (ABI >= 5) and run the tests as root.
    assert!(caps.landlock_abi.is_some_and(|v| v >= 1), "{caps:?}");
    assert!(caps.seccomp, "{caps:?}");
    assert_eq!(caps.is_root, unsafe { libc::geteuid() } == 0);
    if caps.is_root {
        assert!(caps.mount_namespace, "{caps:?}");
        assert!(caps.namespace_detail.is_empty());
    }
    // The error texts name what is missing.
    let e = SandboxError::LandlockUnavailable.to_string();
    assert!(
        e.contains("CONFIG_SECURITY_LANDLOCK") && e.contains("lsm="),
        "{e}"
    );
    let e = SandboxError::NamespaceUnavailable {
        detail: "unshare(CLONE_NEWNS|CLONE_NEWUSER) failed: Operation not permitted".into(),
    }
    .to_string();
    assert!(
        e.contains("user namespaces") && e.contains("Presentation::Direct"),
        "{e}"
    );
}

#[test]
fn python_and_node_run_under_the_default_limits() {
    let data = Data::new();
    let sb = ns_sandbox(&data, false, vec![]);
    assert_eq!(sb.limits(), &Limits::default());
    let mut script = String::from("python3 -c 'print(6*7)'\n");
    let node = sb.tools().iter().any(|t| t == "node");
    if node {
        script.push_str("node -e 'console.log(6*7)'\n");
    }
    let o = rt().block_on(sb.run(&inv(&script, "/session")));
    assert_eq!(o.exit_code, 0, "{}", show(&o));
    let want = if node { "42\n42\n" } else { "42\n" };
    assert_eq!(text(&o.stdout), want, "{}", show(&o));
}

#[test]
fn read_only_prefix_that_does_not_exist_yet_cannot_be_created() {
    let data = Data::new();
    std::fs::create_dir_all(data.path("persistent/user")).unwrap();
    let sb = ns_sandbox(&data, false, vec![PathBuf::from("/persistent/company")]);
    let o = rt().block_on(sb.run(&inv(
        "mkdir /persistent/company 2>/dev/null && echo MADE || echo denied; echo ok > /persistent/user/f && echo user-ok",
        "/persistent",
    )));
    let out = text(&o.stdout);
    assert!(
        out.contains("denied") && out.contains("user-ok"),
        "{}",
        show(&o)
    );
    assert!(!data.path("persistent/company").exists());
}
