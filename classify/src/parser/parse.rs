//! One tree-sitter-bash parser per thread (the vendored grammar in classify/grammar/bash), with the
//! bounds that keep classification from hanging: a size cap and, for larger inputs, a wall-clock
//! budget enforced by tree-sitter's progress callback.

use std::borrow::Cow;
use std::cell::RefCell;
use std::time::{Duration, Instant};
use tree_sitter::{ParseOptions, ParseState, Parser, Tree};

/// Scripts larger than this are not parsed at all (`classifier-unavailable`).
pub const MAX_SCRIPT_BYTES: usize = 256 * 1024;
/// Scripts at least this large are parsed under [`PARSE_BUDGET`]; smaller ones are parsed directly,
/// because checking the clock costs more than they take.
const BUDGETED_FROM_BYTES: usize = 4 * 1024;
/// Upper bound on one parse.
pub const PARSE_BUDGET: Duration = Duration::from_millis(500);

#[derive(Debug)]
pub enum ParseError {
    TooLarge(usize),
    TimedOut,
    Unavailable(String),
}

thread_local! {
    static PARSER: RefCell<Option<Parser>> = const { RefCell::new(None) };
}

fn new_parser() -> Result<Parser, ParseError> {
    let mut parser = Parser::new();
    parser
        .set_language(&kube_harness_bash_grammar::LANGUAGE.into())
        .map_err(|e| ParseError::Unavailable(format!("tree-sitter-bash grammar: {e}")))?;
    Ok(parser)
}

/// Upstream tree-sitter-bash 0.25.1's external scanner passed the lookahead code point to
/// `isdigit()`, which is only defined for single bytes: past ASCII it read outside glibc's ctype
/// table and could crash the process (`echo {` followed by a high code point; found by the
/// arbitrary-bytes property test). The vendored scanner (classify/grammar/bash) tests digits by range
/// now; this guard stays as defence in depth against the next such bug in C code that sees every
/// script, at the cost of one `is_ascii` scan for ASCII scripts. The parser gets an ASCII stand-in
/// of the same length: every non-ASCII byte becomes `x`, a word character as the original is to
/// bash. Byte offsets are unchanged and a multi-byte character becomes a run of word bytes that no
/// token boundary splits, so the walk reads the original text at the tree's ranges.
fn ascii_stand_in(script: &str) -> Cow<'_, str> {
    if script.is_ascii() {
        return Cow::Borrowed(script);
    }
    let bytes: Vec<u8> = script
        .bytes()
        .map(|b| if b.is_ascii() { b } else { b'x' })
        .collect();
    Cow::Owned(String::from_utf8(bytes).expect("ASCII bytes are UTF-8"))
}

/// Parses `script`; the tree may still contain ERROR or MISSING nodes, which the caller checks.
pub fn parse(script: &str) -> Result<Tree, ParseError> {
    if script.len() > MAX_SCRIPT_BYTES {
        return Err(ParseError::TooLarge(script.len()));
    }
    let script = ascii_stand_in(script);
    let script = script.as_ref();
    PARSER.with(|cell| {
        let mut slot = cell
            .try_borrow_mut()
            .map_err(|_| ParseError::Unavailable("parser re-entered".into()))?;
        if slot.is_none() {
            *slot = Some(new_parser()?);
        }
        let parser = slot.as_mut().expect("parser was just set");
        let tree = if script.len() < BUDGETED_FROM_BYTES {
            parser.parse(script, None)
        } else {
            let deadline = Instant::now() + PARSE_BUDGET;
            let mut over_budget = |_: &ParseState| Instant::now() > deadline;
            let bytes = script.as_bytes();
            let options = ParseOptions::new().progress_callback(&mut over_budget);
            parser.parse_with_options(
                &mut |offset, _| bytes.get(offset..).unwrap_or_default(),
                None,
                Some(options),
            )
        };
        match tree {
            Some(tree) => Ok(tree),
            None => {
                // A cancelled parse leaves state behind; start the next one clean.
                parser.reset();
                Err(ParseError::TimedOut)
            }
        }
    })
}

/// The original text under `node`. The tree was built from the ASCII stand-in, so a range can end
/// inside a multi-byte character (an ERROR node cut through a run of stand-in bytes, found by the
/// arbitrary-bytes property test); the range is widened to the enclosing character boundaries
/// rather than slicing mid-character, which would panic.
pub fn node_text<'s>(node: tree_sitter::Node, src: &'s str) -> &'s str {
    let range = node.byte_range();
    let mut start = range.start.min(src.len());
    let mut end = range.end.clamp(start, src.len());
    while !src.is_char_boundary(start) {
        start -= 1;
    }
    while !src.is_char_boundary(end) {
        end += 1;
    }
    &src[start..end]
}
