//! The bound on how many [`Inner`] commands one tool's program may add. A leaf shared by the
//! readers.

use crate::parser::inner::Inner;

/// Commands followed in one tool's program; past this, the rest of it is one run-time command.
/// Bounds the work on programs made of thousands of `system(` calls.
pub(super) const MAX_FOUND: usize = 64;

pub(super) fn too_many(out: &mut Vec<Inner>) -> bool {
    if out.len() < MAX_FOUND {
        return false;
    }
    out.push(Inner::dynamic(format!(
        "more than {MAX_FOUND} commands in one program"
    )));
    true
}
