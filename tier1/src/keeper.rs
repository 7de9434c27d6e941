//! The skills keeper of a Tier-1 pod (`kube-harness skills-keeper`) and the agent's line to it.
//!
//! In a pod the agent and its commands share uid 65532 and hold no capability, so nothing in the
//! agent's container can make a directory that commands cannot change (an owner chmods its own
//! files writable again). The kubelet can: the agent's container mounts the skills volume
//! read-only at `/.agents`, and the keeper, a second container of the pod, is the one writer of
//! that volume. It installs what the agent passes it (`skills::install`: every archive check,
//! then the whole content replaced).
//!
//! Who may talk to it: one connection, the first, on loopback. The agent makes it before it
//! serves anything, so before any command exists in the pod, and holds it for its life: it never
//! connects again (a lost keeper means no more skills in that pod), and the keeper stops listening
//! once it accepted, so a command finds nothing to connect to. The agent is not dumpable
//! (`PR_SET_DUMPABLE` 0), so a command of the same uid cannot ptrace it or take the connection out
//! of it. The keeper exits when that connection closes: the pod ends with its agent.
//!
//! Wire: a request is an 8-byte big-endian length and that many bytes of skills archive; the
//! answer a 4-byte big-endian length and JSON, `{"files", "bytes"}` or `{"error": {"code",
//! "message"}}` (`bad-archive` or `install-failed`).
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use super::skills::{self, InstallError, MAX_SKILLS_ARCHIVE_BYTES};
use kube_harness_protocol::tier1::BindReport;
use serde_json::{json, Value};
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Where the keeper listens in a pod (loopback: the pod's containers share it, nothing else).
pub const DEFAULT_ADDR: &str = "127.0.0.1:8079";
/// How long the agent waits for the keeper to listen at its start (the pod's containers start
/// one after the other).
pub const CONNECT_WAIT: Duration = Duration::from_secs(60);
/// Longest the agent waits for one install's answer before it counts the keeper as lost.
const ANSWER_WAIT: Duration = Duration::from_secs(120);
/// Most bytes of an answer.
const MAX_ANSWER_BYTES: u32 = 64 << 10;

/// Serves the first connection to `listener` until it closes, installing each skills archive it
/// sends into `dir`; stops listening once it accepted. `Ok` when the agent closed the connection.
pub fn serve(listener: TcpListener, dir: &Path) -> io::Result<()> {
    let (conn, peer) = listener.accept()?;
    drop(listener);
    tracing::info!(%peer, "skills keeper: the agent connected; no other connection is taken");
    serve_connection(conn, dir)
}

fn serve_connection(mut conn: TcpStream, dir: &Path) -> io::Result<()> {
    loop {
        let mut head = [0u8; 8];
        match conn.read_exact(&mut head) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(()),
            Err(e) => return Err(e),
        }
        let len = u64::from_be_bytes(head);
        if len > MAX_SKILLS_ARCHIVE_BYTES {
            // The agent spools with this limit: a frame over it is not the agent's.
            let why = format!(
                "a skills archive of {len} bytes, over the limit of {MAX_SKILLS_ARCHIVE_BYTES}"
            );
            let _ = answer(&mut conn, &Err(InstallError::BadArchive(why.clone())));
            return Err(io::Error::new(io::ErrorKind::InvalidData, why));
        }
        let started = Instant::now();
        let mut frame = (&mut conn).take(len);
        let installed = skills::install(io::BufReader::new(&mut frame), dir);
        // Whatever the unpack left of the frame (the tar's end blocks, or all of a refused one).
        io::copy(&mut frame, &mut io::sink())?;
        if frame.limit() > 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        match &installed {
            Ok(r) => tracing::info!(
                files = r.files,
                bytes = r.bytes,
                ms = started.elapsed().as_secs_f64() * 1e3,
                "skills installed"
            ),
            Err(e) => tracing::warn!("skills not installed: {e}"),
        }
        answer(&mut conn, &installed)?;
    }
}

fn answer(conn: &mut TcpStream, result: &Result<BindReport, InstallError>) -> io::Result<()> {
    let body = match result {
        Ok(r) => json!(r),
        Err(InstallError::BadArchive(m)) => {
            json!({"error": {"code": "bad-archive", "message": m}})
        }
        Err(InstallError::Io(m)) => json!({"error": {"code": "install-failed", "message": m}}),
    };
    let bytes = serde_json::to_vec(&body).map_err(io::Error::other)?;
    let len = u32::try_from(bytes.len()).map_err(io::Error::other)?;
    conn.write_all(&len.to_be_bytes())?;
    conn.write_all(&bytes)?;
    conn.flush()
}

/// The agent's connection to its keeper. `None` once lost: never made again.
pub struct Keeper {
    conn: Mutex<Option<TcpStream>>,
}

impl Keeper {
    /// Connects to the keeper at `addr`, trying until `wait` is over (it may not listen yet),
    /// and makes this process not dumpable (see the module's doc). Called before the agent
    /// serves anything.
    pub fn connect(addr: SocketAddr, wait: Duration) -> io::Result<Keeper> {
        if !addr.ip().is_loopback() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("the skills keeper must be on loopback, not {addr}"),
            ));
        }
        // SAFETY: prctl(PR_SET_DUMPABLE) changes only this process's own attribute.
        if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let deadline = Instant::now()
            .checked_add(wait)
            .unwrap_or_else(Instant::now);
        let conn = loop {
            match TcpStream::connect_timeout(&addr, Duration::from_secs(2)) {
                Ok(c) => break c,
                Err(e) if Instant::now() >= deadline => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("no skills keeper at {addr} within {wait:?}: {e}"),
                    ))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        conn.set_read_timeout(Some(ANSWER_WAIT))?;
        conn.set_write_timeout(Some(ANSWER_WAIT))?;
        conn.set_nodelay(true)?;
        Ok(Keeper {
            conn: Mutex::new(Some(conn)),
        })
    }

    /// Sends the `len` bytes of skills archive in `archive` (rewound) and returns the keeper's
    /// answer. Any failure of the line itself loses the keeper for good.
    pub fn install(&self, archive: &mut impl Read, len: u64) -> Result<BindReport, InstallError> {
        let mut guard = self.conn.lock().unwrap_or_else(|e| e.into_inner());
        let Some(conn) = guard.as_mut() else {
            return Err(InstallError::Io(
                "the skills keeper was lost earlier; this pod shows no new skills".into(),
            ));
        };
        match exchange(conn, archive, len) {
            Ok(answer) => answer,
            Err(e) => {
                *guard = None;
                Err(InstallError::Io(format!("lost the skills keeper: {e}")))
            }
        }
    }
}

/// One request and its answer; `Err` when the line failed.
fn exchange(
    conn: &mut TcpStream,
    archive: &mut impl Read,
    len: u64,
) -> io::Result<Result<BindReport, InstallError>> {
    conn.write_all(&len.to_be_bytes())?;
    let sent = io::copy(&mut archive.take(len), conn)?;
    if sent != len {
        return Err(io::ErrorKind::UnexpectedEof.into());
    }
    conn.flush()?;
    let mut head = [0u8; 4];
    conn.read_exact(&mut head)?;
    let size = u32::from_be_bytes(head);
    if size > MAX_ANSWER_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("an answer of {size} bytes"),
        ));
    }
    let mut body = Vec::new();
    conn.take(u64::from(size)).read_to_end(&mut body)?;
    let v: Value = serde_json::from_slice(&body).map_err(io::Error::other)?;
    if let Some(err) = v.get("error") {
        let message = err["message"].as_str().unwrap_or_default().to_string();
        return Ok(Err(match err["code"].as_str() {
            Some("bad-archive") => InstallError::BadArchive(message),
            _ => InstallError::Io(message),
        }));
    }
    serde_json::from_value(v).map(Ok).map_err(io::Error::other)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// A keeper on a thread, serving `dir`.
    fn keeper(dir: &Path) -> (SocketAddr, std::thread::JoinHandle<io::Result<()>>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let dir = dir.to_path_buf();
        (addr, std::thread::spawn(move || serve(listener, &dir)))
    }

    #[test]
    fn the_first_connection_is_the_only_one_and_installs_survive_a_refused_one() {
        let dir = tempfile::tempdir().unwrap();
        let (addr, served) = keeper(dir.path());
        let agent = Keeper::connect(addr, Duration::from_secs(5)).unwrap();

        let src = tempfile::tempdir().unwrap();
        std::fs::write(src.path().join("SKILL.md"), "# Skill\n").unwrap();
        let mut archive = Vec::new();
        let packed = skills::pack(Some(src.path()), &mut archive).unwrap();
        let len = archive.len() as u64;
        let r = agent.install(&mut &archive[..], len).unwrap();
        assert_eq!((r.files, r.bytes), (packed.entries, packed.total_bytes));
        assert_eq!(
            std::fs::read_to_string(dir.path().join("SKILL.md")).unwrap(),
            "# Skill\n"
        );
        // The keeper answered, so it took the agent's connection: nobody else gets in.
        // Linux may connect a socket to itself when nothing listens on a free port of the
        // ephemeral range (its source port picked equal to the destination): not the keeper.
        let late = TcpStream::connect_timeout(&addr, Duration::from_secs(1));
        let accepted = late
            .as_ref()
            .is_ok_and(|s| s.local_addr().ok() != s.peer_addr().ok());
        assert!(!accepted, "a second connection was accepted");
        // A refused archive is answered, the line stays, and the next install works.
        let junk = vec![7u8; 4096];
        let err = agent.install(&mut &junk[..], 4096).unwrap_err();
        assert!(matches!(err, InstallError::BadArchive(_)), "{err:?}");
        assert!(dir.path().join("SKILL.md").is_file());
        let mut empty = Vec::new();
        skills::pack(None, &mut empty).unwrap();
        let len = empty.len() as u64;
        agent.install(&mut &empty[..], len).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);

        // The agent going away ends the keeper.
        drop(agent);
        served.join().unwrap().unwrap();
    }

    #[test]
    fn a_frame_over_the_limit_ends_the_keeper() {
        let dir = tempfile::tempdir().unwrap();
        let (addr, served) = keeper(dir.path());
        let mut conn = TcpStream::connect(addr).unwrap();
        conn.write_all(&(MAX_SKILLS_ARCHIVE_BYTES + 1).to_be_bytes())
            .unwrap();
        let err = served.join().unwrap().unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    }
}
