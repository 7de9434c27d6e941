//! `kube-harness skills-keeper`: the second container of a Tier-1 pod, the one writer of the
//! volume the agent's container mounts read-only at `/.agents` (docs/tier1.md). It takes one
//! loopback connection, the agent's, installs the skills the agent passes it, and exits when
//! that connection closes.

use anyhow::Context;
use kube_harness_worker::api;
use kube_harness_worker::tier1::keeper;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct SkillsKeeperArgs {
    /// Loopback address to take the agent's one connection on.
    #[arg(long, default_value = keeper::DEFAULT_ADDR)]
    listen: SocketAddr,
    /// The volume shown read-only at /.agents in the agent's container.
    #[arg(long, value_name = "DIR")]
    dir: PathBuf,
}

pub fn run(args: SkillsKeeperArgs) -> anyhow::Result<ExitCode> {
    if !args.listen.ip().is_loopback() {
        anyhow::bail!(
            "--listen {}: the keeper listens on loopback only",
            args.listen
        );
    }
    if !args.dir.is_dir() {
        anyhow::bail!("--dir {}: not a directory", args.dir.display());
    }
    let listener = std::net::TcpListener::bind(args.listen)
        .with_context(|| format!("binding {}", args.listen))?;
    tracing::info!(addr = %args.listen, dir = %args.dir.display(), "skills keeper listening");
    let (done, served) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = done.send(keeper::serve(listener, &args.dir));
    });
    // The container's PID 1: without a handler SIGTERM would be ignored, and the pod's deletion
    // would wait out its grace period.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let outcome = rt.block_on(async {
        tokio::select! {
            served = served => served.ok(),
            () = api::shutdown_signal() => None,
        }
    });
    match outcome {
        Some(Err(e)) => Err(anyhow::Error::new(e).context("serving the agent")),
        _ => Ok(ExitCode::SUCCESS),
    }
}
