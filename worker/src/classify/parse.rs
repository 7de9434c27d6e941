//! One tree-sitter-bash parser per thread, with the bounds that keep classification from hanging:
//! a size cap and, for larger inputs, a wall-clock budget enforced by tree-sitter's progress callback.

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
        .set_language(&tree_sitter_bash::LANGUAGE.into())
        .map_err(|e| ParseError::Unavailable(format!("tree-sitter-bash grammar: {e}")))?;
    Ok(parser)
}

/// Parses `script`; the tree may still contain ERROR or MISSING nodes, which the caller checks.
pub fn parse(script: &str) -> Result<Tree, ParseError> {
    if script.len() > MAX_SCRIPT_BYTES {
        return Err(ParseError::TooLarge(script.len()));
    }
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
