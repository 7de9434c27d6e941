//! How `kube-harness local trace|doctor` and `kube-harness trace|doctor` (a cluster session,
//! read from its session log through the worker) show a session's events: one printing and one
//! count for both.

use kube_harness_worker::runtime::{event::Payload, TraceEvent};
use std::io::Write;
use std::process::ExitCode;

/// The events as JSON lines, or one line each for people.
pub fn print(out: &mut impl Write, events: &[TraceEvent], json: bool) -> std::io::Result<()> {
    if !json {
        return print_pretty(out, events);
    }
    for e in events {
        serde_json::to_writer(&mut *out, e)?;
        writeln!(out)?;
    }
    Ok(())
}

/// What `doctor` counts: dispose failures (a failure: exit 1), refusals and time-outs.
pub fn doctor(
    out: &mut impl Write,
    session: &str,
    events: &[TraceEvent],
) -> std::io::Result<ExitCode> {
    let (mut dispose, mut refused, mut timeouts) = (0, 0, 0);
    for e in events {
        match e.payload() {
            Ok(Payload::DisposeFailed(_)) => dispose += 1,
            Ok(Payload::TierRefused(_)) => refused += 1,
            Ok(Payload::CommandCompleted(done)) if done.timed_out => timeouts += 1,
            _ => {}
        }
    }
    writeln!(out, "session {session}: {} events", events.len())?;
    writeln!(out, "  dispose failures: {dispose}")?;
    writeln!(out, "  refusals:         {refused}")?;
    writeln!(out, "  timeouts:         {timeouts}")?;
    writeln!(out, "{dispose} failure(s)")?;
    Ok(if dispose == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// One line per event for people; long runs of file events (a merged repository) are summarised.
fn print_pretty(out: &mut impl Write, events: &[TraceEvent]) -> std::io::Result<()> {
    const SHOWN: usize = 3;
    let line = |out: &mut dyn Write, e: &TraceEvent| {
        let data = pretty(&e.data);
        writeln!(out, "{} #{:<3} {:<34} {data}", e.turn_id, e.seq, e.kind)
    };
    // Runs of `harness.file.*` events (the truncation summary too) group by type and source.
    let source = |e: &TraceEvent| match e.payload().ok()? {
        Payload::FileTruncated(t) => Some(t.source),
        p => p.file().map(|f| f.source),
    };
    let mut i = 0;
    while i < events.len() {
        let first = &events[i];
        let first_source = source(first);
        let same = |o: &TraceEvent| {
            first_source.is_some()
                && o.kind == first.kind
                && o.turn_id == first.turn_id
                && source(o) == first_source
        };
        let run = events[i..].iter().take_while(|o| same(o)).count().max(1);
        let shown = if run > SHOWN + 1 { SHOWN } else { run };
        for e in &events[i..i + shown] {
            line(out, e)?;
        }
        if run > shown {
            let source = first_source.map_or("", |s| s.as_str());
            writeln!(
                out,
                "{} …    {} more {} ({source})",
                first.turn_id,
                run - shown,
                first.kind
            )?;
        }
        i += run;
    }
    Ok(())
}

/// One line per event for people: the interesting fields only.
fn pretty(data: &serde_json::Value) -> String {
    let field = |k: &str| data.get(k).filter(|v| !v.is_null());
    let mut parts = Vec::new();
    for key in [
        "tier",
        "command",
        "exitCode",
        "durationMs",
        "path",
        "reason",
        "signal",
        "error",
        "stayedOnTier0",
    ] {
        if let Some(v) = field(key) {
            let text = match v.as_str() {
                Some(s) => format!("{s:?}"),
                None => v.to_string(),
            };
            parts.push(format!("{key}={text}"));
        }
    }
    parts.join(" ")
}
