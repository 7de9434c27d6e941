//! Loading the file store at start: verify every complete record, rebuild the index, and find
//! the one torn tail a crash may leave.
//!
//! Rules (after RocksDB's WAL recovery): a final fragment without a newline was never
//! acknowledged (acks follow the newline's fsync), so it is cut off; a complete record that fails
//! its checksum, or breaks its run's sequence, is damage, and that run is refused for replay.

use super::record;
use crate::store::index::Index;

/// What loading found.
pub struct Loaded {
    pub index: Index,
    /// Length of the complete records; anything after it is the torn tail.
    pub complete_len: u64,
    /// Damaged runs or store-wide damage, one line each, for the start-up log.
    pub problems: Vec<String>,
}

pub fn scan(data: &[u8]) -> Loaded {
    let complete_len = data
        .iter()
        .rposition(|&b| b == b'\n')
        .map(|p| p + 1)
        .unwrap_or(0);
    let mut index = Index::default();
    let mut problems = Vec::new();
    let lines = data[..complete_len]
        .strip_suffix(b"\n")
        .map(|d| d.split(|&b| b == b'\n').collect::<Vec<_>>())
        .unwrap_or_default();
    for (i, line) in lines.into_iter().enumerate() {
        let lineno = i + 1;
        match record::decode(line) {
            Ok(event) => {
                let log = index.runs.entry(event.run_id.clone()).or_default();
                if log.corrupt.is_some() {
                    continue;
                }
                let expected = log.events.len() as u64 + 1;
                let reason = if event.sequence != expected {
                    Some(format!(
                        "line {lineno}: sequence gap: expected {expected}, found {}",
                        event.sequence
                    ))
                } else if log.by_key.contains_key(&event.append_idempotency_key) {
                    Some(format!(
                        "line {lineno}: appendIdempotencyKey {:?} stored twice",
                        event.append_idempotency_key
                    ))
                } else {
                    None
                };
                match reason {
                    Some(reason) => {
                        problems.push(format!("run {}: {reason}", event.run_id));
                        log.corrupt = Some(reason);
                    }
                    None => index.insert(event),
                }
            }
            Err(bad) => match bad.run {
                Some(run) => {
                    let log = index.runs.entry(run.clone()).or_default();
                    if log.corrupt.is_none() {
                        let reason = format!("line {lineno}: {}", bad.reason);
                        problems.push(format!("run {run}: {reason}"));
                        log.corrupt = Some(reason);
                    }
                }
                None => {
                    if index.store_corrupt.is_none() {
                        let reason = format!(
                            "line {lineno}: {}; the record names no run, so no run's history can be trusted",
                            bad.reason
                        );
                        problems.push(format!("whole store: {reason}"));
                        index.store_corrupt = Some(reason);
                    }
                }
            },
        }
    }
    Loaded {
        index,
        complete_len: complete_len as u64,
        problems,
    }
}
