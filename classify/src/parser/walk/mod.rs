//! The AST walk: finds every command a script would run, wherever tree-sitter-bash puts it, and
//! turns each into a reason. Unknown syntax is never skipped silently: it makes the classifier
//! unavailable for that script, which escalates.
//!
//! One question per file: `traverse.rs` which nodes of a parsed script hold commands (and
//! `misread.rs` where tree-sitter-bash reads bash differently), `command.rs` what one command
//! runs (its name, a shell's script, a wrapper's or a tool's inner commands), `heredoc.rs` what
//! a command reads on stdin, `substitution.rs` the substitutions bash runs in text and values,
//! `origin.rs` where variables get the values that make tools run something, and `policy.rs`
//! the verdicts (the matrix and the deny policy). `preorder.rs` is the traversal they share.
//! This file holds the walker's state and what every part uses.

mod command;
mod heredoc;
mod misread;
mod origin;
mod policy;
mod preorder;
mod substitution;
mod traverse;

use super::parse::MAX_SCRIPT_BYTES;
use crate::matrix::Matrix;
use crate::options::ClassifyOptions;
use crate::reason::Reason;
use tree_sitter::Node;

/// Nested scripts (`bash -c`, `eval`, `env -S`, heredocs fed to a shell) deeper than this are not
/// followed: the script escalates as `classifier-unavailable`.
pub const MAX_NESTING: usize = 16;

/// All the parsing one classification may do, nested scripts included.
const MAX_PARSED_BYTES: usize = 2 * MAX_SCRIPT_BYTES;

/// Reserved words: as a command name they mean tree-sitter-bash misread the script.
const RESERVED: &[&str] = &[
    "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "for", "case", "esac",
    "in", "select", "function", "[[", "]]",
];

const UNPARSED: &str = "a script that could not be parsed";

const SHELLS: &[&str] = &["bash", "sh", "dash", "zsh", "ksh", "mksh", "ash"];

/// Where a script or command is walked: how deeply it is nested (scripts in scripts, wrappers
/// around wrappers) and the functions visible there.
#[derive(Clone, Copy)]
pub struct Scope<'f> {
    depth: usize,
    functions: &'f [String],
}

impl Scope<'static> {
    /// A script given to the classifier.
    pub const TOP: Scope<'static> = Scope {
        depth: 0,
        functions: &[],
    };
}

impl<'f> Scope<'f> {
    /// One level deeper in the same shell: its functions stay visible (`eval`, a substitution,
    /// a wrapped command, code the shell evaluates).
    fn nested(self) -> Scope<'f> {
        Scope {
            depth: self.depth + 1,
            ..self
        }
    }

    /// One level deeper in a new shell (`bash -c`, a tool's `/bin/sh -c`): the script's
    /// functions are not visible there.
    fn new_shell(self) -> Scope<'static> {
        Scope {
            depth: self.depth + 1,
            functions: &[],
        }
    }

    /// Whether `name` is a function defined in the script.
    fn defines(&self, name: &str) -> bool {
        self.functions.iter().any(|f| f == name)
    }
}

/// A command node and the script it is in, when the command was written in the script (a
/// program a wrapper or tool starts by name has none).
#[derive(Clone, Copy)]
struct Site<'t> {
    node: Node<'t>,
    src: &'t str,
}

impl<'t> Site<'t> {
    fn text(self) -> &'t str {
        super::parse::node_text(self.node, self.src)
    }
}

/// A command's arguments: `lit` as literal values (`None` where only known at run time), and
/// `view`, the same for the tools that run commands but with a run-time argument's literal
/// beginning kept (see [`super::hidden::RUN_TIME`]). Both have one entry per argument.
#[derive(Clone, Copy)]
struct Args<'a> {
    lit: &'a [Option<String>],
    view: &'a [Option<String>],
}

impl<'a> Args<'a> {
    const NONE: Args<'static> = Args {
        lit: &[],
        view: &[],
    };

    /// Both as the same words (`env -S`'s split words).
    fn literal(words: &'a [Option<String>]) -> Args<'a> {
        Args {
            lit: words,
            view: words,
        }
    }

    fn from(self, start: usize) -> Args<'a> {
        Args {
            lit: &self.lit[start..],
            view: &self.view[start..],
        }
    }

    fn range(self, start: usize, end: usize) -> Args<'a> {
        Args {
            lit: &self.lit[start..end],
            view: &self.view[start..end],
        }
    }
}

/// Collects reasons across a script and all scripts nested in it.
pub struct Walker<'o> {
    matrix: &'static Matrix,
    opts: &'o ClassifyOptions,
    reasons: Vec<Reason>,
    tier0: Vec<String>,
    saw_statement: bool,
    /// Bytes parsed so far, nested scripts included: bounds `eval eval eval …` re-parsing.
    parsed_bytes: usize,
}

impl<'o> Walker<'o> {
    pub fn new(matrix: &'static Matrix, opts: &'o ClassifyOptions) -> Self {
        Walker {
            matrix,
            opts,
            reasons: Vec::new(),
            tier0: Vec::new(),
            saw_statement: false,
            parsed_bytes: 0,
        }
    }

    /// The reasons found, with Tier-0 support last (or `empty-script` when nothing would run).
    pub fn finish(mut self) -> Vec<Reason> {
        if self.reasons.is_empty() && self.tier0.is_empty() && !self.saw_statement {
            return vec![Reason::EmptyScript];
        }
        if !self.tier0.is_empty() || self.reasons.is_empty() {
            self.reasons.push(Reason::Tier0Supported {
                commands: self.tier0,
            });
        }
        self.reasons
    }

    fn add(&mut self, reason: Reason) {
        if !self.reasons.contains(&reason) {
            self.reasons.push(reason);
        }
    }

    fn add_tier0(&mut self, name: &str) {
        if !self.tier0.iter().any(|n| n == name) {
            self.tier0.push(name.to_string());
        }
    }
}

fn basename(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// Keeps reason strings bounded whatever the input.
fn clip(text: &str) -> String {
    const MAX: usize = 120;
    if text.len() <= MAX {
        return text.to_string();
    }
    let mut end = MAX;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}
