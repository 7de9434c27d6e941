//! The skills keeper as a real process for the tests: the test binary re-run with a filter that
//! selects only its (ignored) `tier1_keeper_child` test, which serves the keeper on 127.0.0.1
//! over a directory and prints the address; optionally as uid 65532, as in a pod.

use kube_harness_tier1::keeper;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

#[test]
#[ignore = "entry point of the keeper child process"]
fn tier1_keeper_child() {
    let Some(dir) = std::env::var_os("KH_TEST_KEEPER_DIR") else {
        return;
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    println!("KH-KEEPER-LISTENING {}", listener.local_addr().unwrap());
    keeper::serve(listener, Path::new(&dir)).unwrap();
}

fn child_test() -> String {
    let module = module_path!();
    let within = module.split_once("::").map_or("", |(_, rest)| rest);
    format!("{within}::tier1_keeper_child")
}

/// A running keeper process.
pub struct KeeperProcess {
    pub child: Child,
    pub addr: SocketAddr,
}

impl KeeperProcess {
    /// Waits up to `within` for the keeper to exit; `true` when it did, successfully.
    pub fn exits_cleanly(&mut self, within: Duration) -> bool {
        let deadline = std::time::Instant::now() + within;
        while std::time::Instant::now() < deadline {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl Drop for KeeperProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts a keeper over `dir`, as uid 65532 when `as_65532` (through `setpriv`; root only).
pub fn spawn_keeper(dir: &Path, as_65532: bool) -> KeeperProcess {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = if as_65532 {
        let mut c = Command::new("setpriv");
        c.args(["--reuid", "65532", "--regid", "65532", "--clear-groups"])
            .arg(&exe);
        c
    } else {
        Command::new(&exe)
    };
    cmd.args([
        child_test().as_str(),
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("KH_TEST_KEEPER_DIR", dir)
    .stdin(Stdio::null())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    let mut child = cmd.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if let Some((_, addr)) = line.split_once("KH-KEEPER-LISTENING ") {
                let _ = tx.send(addr.trim().to_string());
            }
        }
    });
    let Ok(addr) = rx.recv_timeout(Duration::from_secs(30)) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("the keeper child did not print its address within 30 s");
    };
    KeeperProcess {
        child,
        addr: addr.parse().unwrap(),
    }
}
