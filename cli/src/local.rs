//! `kube-harness local …`: the local host, no cluster. `exec` runs one command as one turn of a
//! session; `sessions`, `trace` and `doctor` read the data directory without running anything;
//! `commit` applies a `manual` Persistent Dir commit.

use crate::toggles::ToggleArgs;
use crate::trace_view;
use anyhow::Context;
use clap::{Args, Subcommand};
use kube_harness_worker::local::{
    self, data_dir::DEFAULT_DATA_DIR, DataDir, FileTrace, LocalTurn, PersistentDir, SameSession,
};
use kube_harness_worker::runtime::{event::Payload, NextTier};
use kube_harness_worker::tier1::LocalTier1;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct LocalArgs {
    /// The local host's data directory.
    #[arg(long, global = true, default_value = DEFAULT_DATA_DIR, value_name = "DIR")]
    data_dir: PathBuf,
    /// Root that `project:` Persistent Dir sources must stay inside.
    #[arg(long, global = true, default_value = ".", value_name = "DIR")]
    project_root: PathBuf,
    #[command(subcommand)]
    command: LocalCommand,
}

#[derive(Subcommand, Debug)]
enum LocalCommand {
    /// Run a script as one turn of a session (created on first use) and print its output.
    Exec(ExecArgs),
    /// List sessions.
    Sessions,
    /// Print a session's trace.
    Trace {
        session: String,
        #[arg(long, default_value = "pretty", value_parser = ["pretty", "json"])]
        format: String,
    },
    /// Check a session's trace: dispose failures are failures (exit 1); refusals and timeouts are
    /// listed for information.
    Doctor { session: String },
    /// List a session's files under /session and /persistent, with sizes.
    Files { session: String },
    /// List a session's artifacts (/artifacts).
    Artifacts { session: String },
    /// The change history of one harness path, from the trace.
    Diff {
        session: String,
        #[arg(long)]
        path: String,
    },
    /// One line per turn across all sessions: commands, exit codes, tiers, refusals.
    Outcomes,
    /// Commit a `manual` Persistent Dir as it was at the end of a turn.
    Commit {
        #[arg(long)]
        session: String,
        #[arg(long)]
        turn: String,
        /// The Persistent Dir, as given to `exec --persistent-dir`.
        #[arg(long = "persistent-dir", value_name = "HARNESS_DIR=SOURCE[:POLICY]")]
        dir: String,
    },
}

#[derive(Args, Debug)]
struct ExecArgs {
    /// The session to run in: 1-128 of [A-Za-z0-9_.-].
    #[arg(long)]
    session: String,
    #[command(flatten)]
    toggles: ToggleArgs,
    /// The higher tier to escalate to: `host` (this machine's toolchain, in a private mount
    /// namespace, with the workspace handed over and merged back; not a sandbox: it runs with
    /// this user's rights, as root with every capability) or `none` (refuse with 126).
    #[arg(long, default_value = "host", value_parser = ["host", "none"])]
    tier1: String,
    /// A second turn for a busy session waits (`queue`) or fails (`reject`).
    #[arg(long, default_value = "queue", value_parser = ["queue", "reject"])]
    same_session: String,
    /// At most N sessions run turns at once on this data directory (others wait).
    #[arg(long, value_name = "N")]
    max_concurrent_sessions: Option<usize>,
    /// `/persistent/NAME=SOURCE[:read-only|after-turn|manual]`; SOURCE is relative to the data
    /// directory, or `project:PATH` relative to --project-root (repeatable).
    #[arg(long = "persistent-dir", value_name = "HARNESS_DIR=SOURCE[:POLICY]")]
    persistent_dirs: Vec<String>,
    /// Print {"exitCode", "stdout", "stderr", "tier", "turnId", "events"} instead of the output.
    #[arg(long)]
    json: bool,
    #[arg(last = true, required = true, value_name = "SCRIPT")]
    script: Vec<String>,
}

pub fn run(args: LocalArgs) -> anyhow::Result<ExitCode> {
    let data = DataDir::open(&args.data_dir)?;
    match args.command {
        LocalCommand::Exec(exec) => run_exec(&data, args.project_root, exec),
        LocalCommand::Sessions => {
            for id in data.sessions()? {
                println!("{id}");
            }
            Ok(ExitCode::SUCCESS)
        }
        LocalCommand::Trace { session, format } => {
            let dir = data.existing_session(&session)?;
            let events = FileTrace::read(&dir.trace_path())?;
            trace_view::print(&mut std::io::stdout().lock(), &events, format == "json")?;
            Ok(ExitCode::SUCCESS)
        }
        LocalCommand::Doctor { session } => {
            let dir = data.existing_session(&session)?;
            let events = FileTrace::read(&dir.trace_path())?;
            Ok(trace_view::doctor(
                &mut std::io::stdout().lock(),
                &session,
                &events,
            )?)
        }
        LocalCommand::Files { session } => {
            let dir = data.existing_session(&session)?;
            list_tree(&dir.root, &["session", "persistent"])
        }
        LocalCommand::Artifacts { session } => {
            let dir = data.existing_session(&session)?;
            list_tree(&dir.root, &["artifacts"])
        }
        LocalCommand::Diff { session, path } => {
            let dir = data.existing_session(&session)?;
            let events = FileTrace::read(&dir.trace_path())?;
            let mut found = false;
            for e in &events {
                let Ok(payload) = e.payload() else { continue };
                let Some(file) = payload.file().filter(|f| f.path == path) else {
                    continue;
                };
                found = true;
                let change = e.kind.trim_start_matches("harness.file.");
                println!(
                    "{} #{:<3} {change:<8} tier={} source=\"{}\" size={}",
                    e.turn_id,
                    e.seq,
                    file.tier,
                    file.source.as_str(),
                    file.size
                );
            }
            if !found {
                println!("no recorded changes of {path} in session {session}");
            }
            Ok(ExitCode::SUCCESS)
        }
        LocalCommand::Outcomes => {
            for id in data.sessions()? {
                let dir = data.existing_session(&id)?;
                let Ok(events) = FileTrace::read(&dir.trace_path()) else {
                    println!("{id}: unreadable trace");
                    continue;
                };
                let mut turns: Vec<&str> = events.iter().map(|e| e.turn_id.as_str()).collect();
                turns.dedup();
                for turn in turns {
                    let (mut codes, mut refused, mut usage) = (Vec::new(), 0, None);
                    for e in events.iter().filter(|e| e.turn_id == turn) {
                        match e.payload() {
                            Ok(Payload::CommandCompleted(done)) => {
                                codes.push(format!("{}@t{}", done.exit_code, done.tier));
                            }
                            Ok(Payload::TierRefused(_)) => refused += 1,
                            Ok(Payload::TurnUsage(u)) if usage.is_none() => usage = Some(u),
                            _ => {}
                        }
                    }
                    println!(
                        "{id} {turn} commands=[{}] refused={refused} stayedOnTier0={}",
                        codes.join(" "),
                        usage.map_or("?".into(), |u| u.stayed_on_tier0.to_string())
                    );
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        LocalCommand::Commit { session, turn, dir } => {
            let dir = PersistentDir::parse(&dir)?;
            local::commit_manual(&data, &session, &turn, &dir, &args.project_root)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn run_exec(data: &DataDir, project_root: PathBuf, args: ExecArgs) -> anyhow::Result<ExitCode> {
    let persistent_dirs = args
        .persistent_dirs
        .iter()
        .map(|d| PersistentDir::parse(d))
        .collect::<Result<Vec<_>, _>>()?;
    let turn = LocalTurn {
        session: args.session,
        runtime: args.toggles.runtime(),
        deny: args.toggles.deny,
        same_session: args
            .same_session
            .parse::<SameSession>()
            .map_err(anyhow::Error::msg)?,
        max_concurrent_sessions: args.max_concurrent_sessions,
        persistent_dirs,
        project_root,
        next_tier: match args.tier1.as_str() {
            "host" => Some(Arc::new(LocalTier1::default()) as Arc<dyn NextTier>),
            _ => None,
        },
    };
    let script = args.script.join(" ");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let result = rt.block_on(local::run_turn(data, &turn, &script))?;
    let o = &result.outcome;
    if args.json {
        let json = serde_json::json!({
            "exitCode": o.exit_code,
            "stdout": o.stdout,
            "stderr": o.stderr,
            "tier": o.tier,
            "turnId": result.turn_id,
            "events": result.events,
        });
        println!("{json}");
    } else {
        std::io::stdout().write_all(o.stdout.as_bytes())?;
        std::io::stderr().write_all(o.stderr.as_bytes())?;
    }
    Ok(ExitCode::from(o.exit_code.clamp(0, 255) as u8))
}

/// Prints `SIZE HARNESS_PATH` for every non-directory under the named session subfolders (their
/// sizes as lstat reports them: a symlink's is its target's length).
///
/// Commands write these trees: below each subfolder (a mount root, made by the host) every
/// directory is opened relative to its parent without following symlinks
/// (`workspace::safe_fs`), so a symlink is listed, never entered, and paths longer than PATH_MAX
/// still list. Names are printed with control, format and invisible characters, backslashes and
/// bytes that are not UTF-8 escaped ([`escaped`]), so a file name can neither drive the terminal
/// nor pass for another.
fn list_tree(root: &std::path::Path, subdirs: &[&str]) -> anyhow::Result<ExitCode> {
    use kube_harness_worker::workspace::safe_fs::{self, WalkError};
    use kube_harness_worker::workspace::EntryKind;
    use std::os::unix::ffi::OsStrExt;
    let mut out = std::io::stdout().lock();
    for sub in subdirs {
        let base = root.join(sub);
        let root_fd =
            safe_fs::open_root(&base).with_context(|| format!("opening {}", base.display()))?;
        let mut stack = vec![PathBuf::new()];
        let mut files = Vec::new();
        while let Some(rel) = stack.pop() {
            let dir = match safe_fs::open_dir_beneath(&root_fd, &rel) {
                Ok(fd) => fd,
                // Gone or replaced by a non-directory since it was listed: nothing below it.
                Err(WalkError::Missing | WalkError::Blocked | WalkError::NotDir) => continue,
                Err(WalkError::Io(e)) => {
                    return Err(anyhow::Error::new(e)
                        .context(format!("listing {}", base.join(&rel).display())))
                }
            };
            let names = safe_fs::list_dir(&dir)
                .with_context(|| format!("listing {}", base.join(&rel).display()))?;
            for name in names {
                let Some(st) = safe_fs::stat_at(&dir, &name)? else {
                    continue;
                };
                let child = rel.join(&name);
                if safe_fs::kind_of(&st) == Some(EntryKind::Dir) {
                    stack.push(child);
                } else {
                    let harness = std::path::Path::new("/").join(sub).join(&child);
                    files.push((
                        shown_name(harness.as_os_str().as_bytes()),
                        u64::try_from(st.st_size).unwrap_or(0),
                    ));
                }
            }
        }
        files.sort();
        for (path, size) in files {
            writeln!(out, "{size:>10} {path}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A file name for a terminal: visible UTF-8 as it is; what does not show as itself as a Rust
/// escape (`\u{1b}`, `\u{200b}`, `\\`), bytes that are not UTF-8 as `\xNN`.
fn shown_name(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if escaped(c) {
                out.extend(c.escape_default());
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Whether a name's character is printed escaped: controls (Cc); format characters (Cf: the
/// zero-width space and joiners, the bidirectional controls such as U+202E, the byte order
/// mark); line and paragraph separators (Zl, Zp); every space but the plain one (Zs: U+00A0,
/// U+3000, ...); the Hangul fillers, letters that show as nothing; and the backslash that begins
/// an escape. Any of them would let two different names print alike, or a name move the text
/// around it.
fn escaped(c: char) -> bool {
    use unicode_general_category::{get_general_category, GeneralCategory};
    if c == '\\' || matches!(c, '\u{115f}' | '\u{1160}' | '\u{3164}' | '\u{ffa0}') {
        return true;
    }
    match get_general_category(c) {
        GeneralCategory::Control
        | GeneralCategory::Format
        | GeneralCategory::LineSeparator
        | GeneralCategory::ParagraphSeparator => true,
        GeneralCategory::SpaceSeparator => c != ' ',
        _ => false,
    }
}
