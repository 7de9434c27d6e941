//! `kube-harness sessions [-n NS | -A]`: HarnessSessions with phase, readiness, tier and usage.

use anyhow::Context;
use clap::Args;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use kube_harness_crds::condition::types;
use kube_harness_crds::HarnessSession;
use std::process::ExitCode;

#[derive(Args)]
pub struct SessionsArgs {
    /// Namespace (default: the kubeconfig's namespace).
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// Every namespace.
    #[arg(short = 'A', long, conflicts_with = "namespace")]
    all_namespaces: bool,
}

pub fn run(args: SessionsArgs) -> anyhow::Result<ExitCode> {
    tokio::runtime::Runtime::new()?.block_on(list(args))
}

async fn list(args: SessionsArgs) -> anyhow::Result<ExitCode> {
    let client = kube::Client::try_default()
        .await
        .context("no Kubernetes configuration (KUBECONFIG or in-cluster)")?;
    let api: Api<HarnessSession> = if args.all_namespaces {
        Api::all(client)
    } else {
        let ns = args
            .namespace
            .unwrap_or_else(|| client.default_namespace().to_string());
        Api::namespaced(client, &ns)
    };
    let sessions = api.list(&ListParams::default()).await?;
    println!(
        "{:<16} {:<28} {:<13} {:<6} {:<5} {:<6} {:<8}",
        "NAMESPACE", "NAME", "PHASE", "READY", "TIER", "TURNS", "TIER0"
    );
    for s in sessions {
        let status = s.status.clone().unwrap_or_default();
        let ready = status
            .conditions
            .iter()
            .find(|c| c.type_ == types::READY)
            .map_or("-", |c| c.status.as_str())
            .to_string();
        let usage = status.usage.clone().unwrap_or_default();
        println!(
            "{:<16} {:<28} {:<13} {:<6} {:<5} {:<6} {:<8}",
            s.namespace().unwrap_or_default(),
            s.name_any(),
            status.phase.map_or("-", |p| p.as_str()),
            ready,
            status.current_tier.map_or("-".into(), |t| t.to_string()),
            usage.turns,
            usage.tier0_share.unwrap_or_else(|| "-".into()),
        );
    }
    Ok(ExitCode::SUCCESS)
}
