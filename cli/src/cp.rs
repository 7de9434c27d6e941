//! `kube-harness cp [-n NS] SESSION:/session/x ./x` and back, as `kubectl cp` does: a file
//! through the worker's `PUT`/`GET /v1/files`, a directory as one tar through `/v1/archive`
//! (docs/worker-api.md, "Files"), streamed both ways.
//! With `--worker-url` and `--token-file` it talks to a worker directly (a local
//! `kube-harness worker`, or one reached another way) instead of finding the session through the
//! API server.

use crate::reach::{connect, Direct, Via};
use anyhow::{bail, Context};
use clap::Args;
use kube_harness_worker::protocol::WorkerClient;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(Args)]
pub struct CpArgs {
    /// Namespace of the session (default: the kubeconfig's namespace).
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// Where from: `SESSION:/session/…` (or `/artifacts/…`, `/persistent/…`) or a local file.
    src: String,
    /// Where to: a local path, or `SESSION:/harness/path`. Exactly one side is a session's.
    dst: String,
    /// How long to wait for the session to be Ready (waking it if hibernated).
    #[arg(long, default_value_t = 180)]
    wait: u64,
    /// Route to the worker.
    #[arg(long, value_enum, default_value_t = Via::Auto)]
    via: Via,
    #[command(flatten)]
    direct: Direct,
}

/// One side of a copy.
#[derive(Debug, PartialEq)]
enum Side {
    Local(PathBuf),
    Session { name: String, path: String },
}

/// `NAME:/path` is a session's when NAME could be a Kubernetes name (no `/`, not empty) and the
/// path is absolute; anything else is local (`./a:b` stays local, as with `kubectl cp`).
fn side(text: &str) -> Side {
    if let Some((name, path)) = text.split_once(':') {
        let name_ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.');
        if name_ok && path.starts_with('/') {
            return Side::Session {
                name: name.to_string(),
                path: path.to_string(),
            };
        }
    }
    Side::Local(PathBuf::from(text))
}

pub fn run(args: CpArgs) -> anyhow::Result<ExitCode> {
    tokio::runtime::Runtime::new()?.block_on(copy(args))
}

async fn copy(args: CpArgs) -> anyhow::Result<ExitCode> {
    let (session, upload, remote, local) = match (side(&args.src), side(&args.dst)) {
        (Side::Local(local), Side::Session { name, path }) => (name, true, path, local),
        (Side::Session { name, path }, Side::Local(local)) => (name, false, path, local),
        (Side::Session { .. }, Side::Session { .. }) => {
            bail!("both sides are a session's; copy through a local file")
        }
        (Side::Local(_), Side::Local(_)) => {
            bail!("neither side is a session's: one of them must be SESSION:/session/…")
        }
    };
    // The tunnel (when there is one) lives as long as this.
    let (worker, _connected) = match args.direct.client()? {
        Some(worker) => (worker, None),
        None => {
            let connected = connect(args.namespace.clone(), &session, args.wait, args.via).await?;
            (connected.worker.clone(), Some(connected))
        }
    };
    if upload {
        put(&worker, &local, &remote).await?;
    } else {
        get(&worker, &remote, &local).await?;
    }
    Ok(ExitCode::SUCCESS)
}

async fn put(worker: &WorkerClient, local: &Path, remote: &str) -> anyhow::Result<()> {
    let meta = std::fs::metadata(local).with_context(|| format!("{}", local.display()))?;
    if meta.is_dir() {
        return put_dir(worker, local, remote).await;
    }
    if !meta.is_file() {
        bail!(
            "{} is neither a regular file nor a directory",
            local.display()
        );
    }
    let file = tokio::fs::File::open(local)
        .await
        .with_context(|| format!("opening {}", local.display()))?;
    worker
        .write_file(remote, file)
        .await
        .with_context(|| format!("writing {remote}"))?;
    Ok(())
}

/// A local directory as one tar (symlinks as symlinks), spooled, then unpacked by the worker.
async fn put_dir(worker: &WorkerClient, local: &Path, remote: &str) -> anyhow::Result<()> {
    let spool = tempfile::tempfile().context("spooling the directory")?;
    let dir = local.to_path_buf();
    let spool = tokio::task::spawn_blocking(move || -> anyhow::Result<std::fs::File> {
        let mut builder = tar::Builder::new(spool);
        builder.follow_symlinks(false);
        builder
            .append_dir_all(".", &dir)
            .with_context(|| format!("packing {}", dir.display()))?;
        let mut spool = builder.into_inner()?;
        std::io::Seek::rewind(&mut spool)?;
        Ok(spool)
    })
    .await??;
    let written = worker
        .write_archive(remote, tokio::fs::File::from_std(spool))
        .await
        .with_context(|| format!("writing {remote}"))?;
    // Modes the worker did not keep (setuid bits, an existing directory's): said, not an error.
    for warning in &written.warnings {
        eprintln!("kube-harness cp: {warning}");
    }
    Ok(())
}

/// Downloads into a new file beside `local` and renames it into place: an interrupted copy
/// leaves nothing half-written at the name. A remote directory comes as a tar, unpacked into
/// `local` (created if missing; the tar crate keeps every entry inside it).
async fn get(worker: &WorkerClient, remote: &str, local: &Path) -> anyhow::Result<()> {
    match get_file(worker, remote, local).await {
        Err(e)
            if e.downcast_ref::<kube_harness_worker::protocol::WorkerClientError>()
                .and_then(|e| e.code())
                == Some("not-a-file") =>
        {
            get_dir(worker, remote, local).await
        }
        other => other,
    }
}

async fn get_dir(worker: &WorkerClient, remote: &str, local: &Path) -> anyhow::Result<()> {
    let spool = tempfile::tempfile().context("spooling the archive")?;
    let mut out = tokio::fs::File::from_std(spool.try_clone()?);
    worker
        .read_archive_into(remote, &mut out)
        .await
        .with_context(|| format!("reading {remote}"))?;
    drop(out);
    let dst = local.to_path_buf();
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        let mut spool = spool;
        std::io::Seek::rewind(&mut spool)?;
        std::fs::create_dir_all(&dst)?;
        tar::Archive::new(spool)
            .unpack(&dst)
            .with_context(|| format!("unpacking into {}", dst.display()))
    })
    .await?
}

async fn get_file(worker: &WorkerClient, remote: &str, local: &Path) -> anyhow::Result<()> {
    let local = if local.is_dir() {
        let name = Path::new(remote)
            .file_name()
            .context("the remote path names no file")?;
        local.join(name)
    } else {
        local.to_path_buf()
    };
    let dir = match local.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let temp = tempfile::NamedTempFile::new_in(&dir)
        .with_context(|| format!("creating a file in {}", dir.display()))?;
    let mut out = tokio::fs::File::from_std(temp.reopen()?);
    worker
        .read_file_into(remote, &mut out)
        .await
        .with_context(|| format!("reading {remote}"))?;
    temp.persist(&local)
        .with_context(|| format!("placing {}", local.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{side, Side};
    use std::path::PathBuf;

    #[test]
    fn a_session_side_needs_a_name_and_an_absolute_path() {
        assert_eq!(
            side("s1:/session/x"),
            Side::Session {
                name: "s1".into(),
                path: "/session/x".into()
            }
        );
        for local in [
            "./a:b",
            "x",
            "/abs:/p",
            "s1:rel",
            ":/session/x",
            "S1:/session/x",
        ] {
            assert_eq!(side(local), Side::Local(PathBuf::from(local)), "{local}");
        }
    }
}
