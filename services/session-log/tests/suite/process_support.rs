//! The real server binary as a child process: started with a token, killed (SIGKILL), restarted
//! with the same flags, and measured (its peak and current resident memory).

use super::common::{fast_retries, TOKEN};
use kube_harness_session_log::SessionLogClient;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const SERVER: &str = env!("CARGO_BIN_EXE_kh-session-log-test-server");
pub struct ServerProcess {
    pub child: Child,
    args: Vec<String>,
    pub log: PathBuf,
    pub base_url: String,
}

impl ServerProcess {
    pub async fn start(store: &str, dir: &Path, name: &str) -> Self {
        Self::start_with(store, dir, name, &[]).await
    }

    /// As [`ServerProcess::start`], with more flags.
    pub async fn start_with(store: &str, dir: &Path, name: &str, extra: &[&str]) -> Self {
        let token_file = dir.join("token");
        std::fs::write(&token_file, TOKEN).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let args = vec![
            "--store".to_string(),
            store.to_string(),
            "--listen".into(),
            format!("127.0.0.1:{port}"),
            "--token-file".into(),
            token_file.display().to_string(),
        ];
        let args = [args, extra.iter().map(|a| a.to_string()).collect()].concat();
        let log = dir.join(format!("{name}.log"));
        let mut server = Self {
            child: spawn(&args, &log),
            args,
            log,
            base_url: format!("http://127.0.0.1:{port}"),
        };
        server.wait_healthy().await;
        server
    }

    pub fn kill(&mut self) {
        self.child.kill().unwrap(); // SIGKILL
        self.child.wait().unwrap();
    }

    pub async fn restart(&mut self) {
        self.child = spawn(&self.args, &self.log);
        self.wait_healthy().await;
    }

    pub async fn wait_healthy(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(20);
        let http = reqwest::Client::new();
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "server exited with {status}; log:\n{}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            if let Ok(r) = http.get(format!("{}/healthz", self.base_url)).send().await {
                if r.status().is_success() {
                    return;
                }
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "server not healthy in 20 s; log:\n{}",
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    pub fn client(&self) -> SessionLogClient {
        SessionLogClient::new(&self.base_url, Some(TOKEN.into()), fast_retries()).unwrap()
    }
}

impl ServerProcess {
    /// The process's peak resident memory (`VmHWM` of /proc/PID/status), in KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        status_kib(self.child.id(), "VmHWM:")
    }

    /// The process's resident memory now (`VmRSS`), in KiB.
    pub fn rss_kib(&self) -> u64 {
        status_kib(self.child.id(), "VmRSS:")
    }
}

/// A `kB` line of /proc/PID/status.
pub fn status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(args: &[String], log: &Path) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    Command::new(SERVER)
        .args(args)
        .env("KUBE_HARNESS_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("cannot start kh-session-log-test-server")
}
