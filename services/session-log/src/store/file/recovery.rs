//! Loading the file store at start: verify every complete record and index it, streaming the
//! file one record at a time (the index keeps each event's position, never its body, so a reload
//! after a crash needs no more memory than the index: issue 30), and find the one torn tail a
//! crash may leave.
//!
//! Rules (after RocksDB's WAL recovery): a final fragment without a newline was never
//! acknowledged (acks follow the newline's fsync), so it is cut off; a complete record that fails
//! its checksum, or breaks its run's sequence, is damage, and that run is refused for replay.

use super::record;
use super::shared::Position;
use crate::store::index::{key_hash, Index};
use std::io::{self, BufRead, Read};

/// Longest line read whole: far above any record the payload limit allows. A longer line is
/// damage (its run cannot be named) and is skipped without being held.
const MAX_LINE: u64 = 64 * 1024 * 1024;

/// What loading found.
pub struct Loaded {
    pub index: Index<Position>,
    /// Length of the complete records; anything after it is the torn tail.
    pub complete_len: u64,
    /// Length of the whole file as read.
    pub file_len: u64,
    /// Damaged runs or store-wide damage, one line each, for the start-up log.
    pub problems: Vec<String>,
}

pub fn scan(mut input: impl BufRead) -> io::Result<Loaded> {
    let mut loaded = Loaded {
        index: Index::default(),
        complete_len: 0,
        file_len: 0,
        problems: Vec::new(),
    };
    let mut line = Vec::new();
    let mut lineno = 0;
    loop {
        line.clear();
        let n = (&mut input).take(MAX_LINE).read_until(b'\n', &mut line)? as u64;
        if n == 0 {
            return Ok(loaded);
        }
        loaded.file_len += n;
        let mut len = n;
        if line.last() != Some(&b'\n') && n == MAX_LINE {
            // Too long to hold: skip to its end without keeping it.
            let (skipped, ended) = skip_line(&mut input)?;
            loaded.file_len += skipped;
            if !ended {
                return Ok(loaded); // the torn tail
            }
            len += skipped;
            lineno += 1;
            store_damage(
                &mut loaded,
                lineno,
                "record longer than any the server writes",
            );
            loaded.complete_len += len;
            continue;
        }
        if line.last() != Some(&b'\n') {
            // The torn tail: no newline, never acknowledged.
            return Ok(loaded);
        }
        lineno += 1;
        let at = Position {
            offset: loaded.complete_len,
            len,
        };
        loaded.complete_len += len;
        index_record(&mut loaded, lineno, &line[..line.len() - 1], at);
    }
}

/// Reads to the end of an over-long line: the bytes read (its newline included) and whether it
/// had a newline (else it ran to the end of the file: the torn tail).
fn skip_line(input: &mut impl BufRead) -> io::Result<(u64, bool)> {
    let mut skipped = 0;
    loop {
        let buf = input.fill_buf()?;
        if buf.is_empty() {
            return Ok((skipped, false));
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                input.consume(i + 1);
                return Ok((skipped + i as u64 + 1, true));
            }
            None => {
                let n = buf.len();
                input.consume(n);
                skipped += n as u64;
            }
        }
    }
}

fn store_damage(loaded: &mut Loaded, lineno: usize, reason: &str) {
    if loaded.index.store_corrupt.is_none() {
        let reason = format!(
            "line {lineno}: {reason}; the record names no run, so no run's history can be trusted"
        );
        loaded.problems.push(format!("whole store: {reason}"));
        loaded.index.store_corrupt = Some(reason);
    }
}

fn index_record(loaded: &mut Loaded, lineno: usize, line: &[u8], at: Position) {
    let index = &mut loaded.index;
    match record::decode(line) {
        Ok(event) => {
            let log = index.runs.entry(event.run_id.clone()).or_default();
            if log.corrupt.is_some() {
                return;
            }
            let expected = log.events.len() as u64 + 1;
            let reason = if event.sequence != expected {
                Some(format!(
                    "line {lineno}: sequence gap: expected {expected}, found {}",
                    event.sequence
                ))
            } else if log
                .by_key
                .contains_key(&key_hash(&event.append_idempotency_key))
            {
                Some(format!(
                    "line {lineno}: appendIdempotencyKey {:?} stored twice",
                    event.append_idempotency_key
                ))
            } else {
                None
            };
            match reason {
                Some(reason) => {
                    loaded
                        .problems
                        .push(format!("run {}: {reason}", event.run_id));
                    log.corrupt = Some(reason);
                }
                None => index.insert(
                    &event.run_id,
                    event.sequence,
                    &event.append_idempotency_key,
                    at,
                ),
            }
        }
        Err(bad) => match bad.run {
            Some(run) => {
                let log = index.runs.entry(run.clone()).or_default();
                if log.corrupt.is_none() {
                    let reason = format!("line {lineno}: {}", bad.reason);
                    loaded.problems.push(format!("run {run}: {reason}"));
                    log.corrupt = Some(reason);
                }
            }
            None => store_damage(loaded, lineno, &bad.reason),
        },
    }
}
