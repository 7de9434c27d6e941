//! Reads of the file store: each event's record is loaded from its position in the data file
//! (`pread`, no shared cursor, so reads run in parallel with each other and with the writer) and
//! verified as recovery verifies it. A record that fails its checksum, or is not the event the
//! index says is there, is damage: the read fails with `RunCorrupt` instead of returning it.

use super::record;
use super::shared::Position;
use crate::model::{RunId, StoredEvent};
use crate::store::types::StoreError;
use std::fs::File;
use std::os::unix::fs::FileExt;

/// Event `sequence` of `run`, from its record at `at`.
pub fn load(
    file: &File,
    run: &RunId,
    sequence: u64,
    at: Position,
) -> Result<StoredEvent, StoreError> {
    let corrupt = |reason: String| StoreError::RunCorrupt {
        run: run.to_string(),
        reason: format!(
            "record of sequence {sequence} at byte {}: {reason}",
            at.offset
        ),
    };
    let len = usize::try_from(at.len).map_err(|_| corrupt("record too long".into()))?;
    let mut line = vec![0; len];
    file.read_exact_at(&mut line, at.offset)
        .map_err(|e| corrupt(format!("cannot be read: {e}")))?;
    if line.pop() != Some(b'\n') {
        return Err(corrupt("record does not end its line".into()));
    }
    let event = record::decode(&line).map_err(|bad| corrupt(bad.reason))?;
    if event.run_id != run.as_str() || event.sequence != sequence {
        return Err(corrupt(format!(
            "holds run {:?} sequence {} instead",
            event.run_id, event.sequence
        )));
    }
    Ok(event)
}

/// The events at `positions`, which are `run`'s from sequence `first` on.
pub fn load_page(
    file: &File,
    run: &RunId,
    first: u64,
    positions: &[Position],
) -> Result<Vec<StoredEvent>, StoreError> {
    positions
        .iter()
        .zip(first..)
        .map(|(&at, sequence)| load(file, run, sequence, at))
        .collect()
}
