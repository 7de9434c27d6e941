//! `kube-harness ping [-n NS] SESSION [--count N] [--route R,...]`: run `true` in the session over
//! each route, interleaved, and print the round trip's p50, p95 and max. It tells an agent's
//! operator which route a pod gets and what it costs (docs/operator.md, "In-cluster data path").

use crate::reach::{self, Direct};
use anyhow::{bail, Context};
use clap::{Args, ValueEnum};
use kube_harness_client::{Connected, Route};
use kube_harness_worker::protocol::worker_api::ExecRequest;
use kube_harness_worker::protocol::WorkerClient;
use serde_json::json;
use std::process::ExitCode;
use std::time::{Duration, Instant};

#[derive(Args)]
pub struct PingArgs {
    /// Namespace of the session (default: the kubeconfig's namespace).
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// Name of the HarnessSession (not with --worker-url).
    #[arg(required_unless_present = "worker_url")]
    session: Option<String>,
    /// Round trips per route (after 5 unmeasured ones).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    count: u32,
    /// Routes to compare, in turn each round: auto (what `exec` would take), address, pod-ip
    /// (status.workerEndpoint, bypassing the Service), port-forward.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "auto")]
    route: Vec<PingRoute>,
    /// How long to wait for the session to be Ready (waking it if hibernated).
    #[arg(long, default_value_t = 180)]
    wait: u64,
    /// Print the figures (and every sample, sorted) as one line of JSON.
    #[arg(long)]
    json: bool,
    /// With --worker-url and --token-file: that worker only (route `direct`), no cluster.
    #[command(flatten)]
    direct: Direct,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum PingRoute {
    Auto,
    Address,
    PodIp,
    PortForward,
}

/// One route under test: its client (and what keeps a tunnel open).
struct Probe {
    name: String,
    worker: WorkerClient,
    _connected: Option<Connected>,
    samples: Vec<Duration>,
}

pub fn run(args: PingArgs) -> anyhow::Result<ExitCode> {
    tokio::runtime::Runtime::new()?.block_on(ping(args))
}

async fn ping(args: PingArgs) -> anyhow::Result<ExitCode> {
    let mut probes = match args.direct.client()? {
        Some(worker) => vec![Probe::new("direct".into(), worker, None)],
        None => routes(&args).await?,
    };
    for probe in &mut probes {
        for _ in 0..5 {
            probe.once().await?;
        }
        probe.samples.clear();
    }
    for _ in 0..args.count {
        for probe in &mut probes {
            probe.once().await?;
        }
    }
    let rows: Vec<_> = probes.iter().map(Probe::summary).collect();
    if args.json {
        println!(
            "{}",
            serde_json::to_string(
                &json!({ "session": args.session, "count": args.count, "routes": rows })
            )?
        );
    } else {
        println!(
            "{:<26} {:>6} {:>9} {:>9} {:>9}",
            "route", "n", "p50 ms", "p95 ms", "max ms"
        );
        for r in &rows {
            println!(
                "{:<26} {:>6} {:>9.2} {:>9.2} {:>9.2}",
                r["route"].as_str().unwrap_or_default(),
                r["n"],
                r["p50Ms"].as_f64().unwrap_or_default(),
                r["p95Ms"].as_f64().unwrap_or_default(),
                r["maxMs"].as_f64().unwrap_or_default()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// One probe per route asked for, on the session found through the API server.
async fn routes(args: &PingArgs) -> anyhow::Result<Vec<Probe>> {
    let session = args
        .session
        .as_deref()
        .context("name a session (or give --worker-url and --token-file)")?;
    let handle = reach::handle(args.namespace.clone(), session).await?;
    let wait = Duration::from_secs(args.wait);
    let mut probes = Vec::new();
    for route in dedup(&args.route) {
        let probe = match route {
            PingRoute::PodIp => {
                let ready = handle.ready(wait).await?;
                let token = handle.token(&ready).await?;
                let endpoint = ready
                    .status
                    .and_then(|s| s.worker_endpoint)
                    .context("the session shows no status.workerEndpoint")?;
                let worker = WorkerClient::new(format!("http://{endpoint}"), token)?;
                Probe::new("pod-ip".into(), worker, None)
            }
            other => {
                let via = match other {
                    PingRoute::Address => Route::Address,
                    PingRoute::PortForward => Route::PortForward,
                    _ => Route::Auto,
                };
                let connected = handle.connect_via(wait, via).await?;
                let name = match other {
                    PingRoute::Auto => format!("auto ({})", connected.route.as_str()),
                    _ => connected.route.as_str().to_string(),
                };
                Probe::new(name, connected.worker.clone(), Some(connected))
            }
        };
        probes.push(probe);
    }
    Ok(probes)
}

fn dedup(routes: &[PingRoute]) -> Vec<PingRoute> {
    let mut out: Vec<PingRoute> = Vec::new();
    for r in routes {
        if !out.contains(r) {
            out.push(*r);
        }
    }
    out
}

impl Probe {
    fn new(name: String, worker: WorkerClient, connected: Option<Connected>) -> Probe {
        Probe {
            name,
            worker,
            _connected: connected,
            samples: Vec::new(),
        }
    }

    /// One `true`, timed; anything but exit 0 on Tier-0 is an error, never a sample.
    async fn once(&mut self) -> anyhow::Result<()> {
        let started = Instant::now();
        let response = self
            .worker
            .exec(&ExecRequest::new("true"))
            .await
            .with_context(|| format!("route {}", self.name))?;
        let took = started.elapsed();
        let o = &response.outcome;
        if o.exit_code != 0 || o.tier != 0 {
            bail!(
                "route {}: `true` answered exit {} on tier {}: {}",
                self.name,
                o.exit_code,
                o.tier,
                o.stderr.trim()
            );
        }
        self.samples.push(took);
        Ok(())
    }

    fn summary(&self) -> serde_json::Value {
        let mut ms: Vec<f64> = self.samples.iter().map(|d| d.as_secs_f64() * 1e3).collect();
        ms.sort_by(f64::total_cmp);
        let pick = |q: f64| ms[((ms.len() as f64 * q).ceil() as usize).clamp(1, ms.len()) - 1];
        json!({
            "route": self.name,
            "n": ms.len(),
            "p50Ms": pick(0.50),
            "p95Ms": pick(0.95),
            "maxMs": ms.last().copied().unwrap_or_default(),
            "samplesMs": ms,
        })
    }
}
