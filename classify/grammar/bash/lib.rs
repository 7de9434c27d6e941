//! tree-sitter-bash 0.25.1, vendored for the classifier with two changes (see README.md):
//!
//! - the `pipeline` rule is left-recursive and unambiguous, so the parser no longer forks (GLR)
//!   on every `|`: upstream declares `[$.pipeline]` as a conflict, which made `a | b | c` cost 20
//!   times `a | b`;
//! - the external scanner tests digits with an ASCII-only check instead of `isdigit()`, which is
//!   undefined (and crashes with glibc) for code points past one byte.
//!
//! The node kinds, fields and tree shapes are upstream's, pipelines included (still one flat
//! `pipeline` node per pipeline).

use tree_sitter_language::LanguageFn;

extern "C" {
    fn tree_sitter_bash() -> *const ();
}

/// The grammar, for `tree_sitter::Parser::set_language(&LANGUAGE.into())`.
pub const LANGUAGE: LanguageFn = unsafe { LanguageFn::from_raw(tree_sitter_bash) };

/// The generated `node-types.json`: every node kind and field of the grammar.
pub const NODE_TYPES: &str = include_str!("src/node-types.json");
