//! The AST walk: finds every command a script would run, wherever tree-sitter-bash puts it, and
//! turns each into a reason. Unknown syntax is never skipped silently: it makes the classifier
//! unavailable for that script, which escalates.

use super::hidden::{self, Hidden};
use super::kinds::{kinds, may_hold_commands, Class};
use super::literal::{has_glob, literal, literal_prefix, shell_words, skeleton, unquoted_shape};
use super::parse::{self, node_text, ParseError, MAX_SCRIPT_BYTES, PARSE_BUDGET};
use super::wrappers::{self, Inner};
use crate::matrix::{Entry, Matrix};
use crate::options::{ClassifyOptions, CommandUse};
use crate::reason::{Reason, Toggle};
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

/// Names whose arguments matter to classification (computed lazily: most commands need none);
/// `text` is the command's text.
fn needs_args<'s>(base: &str, text: impl FnOnce() -> &'s str) -> bool {
    SHELLS.contains(&base)
        || wrappers::is_wrapper(base)
        || (hidden::runs_commands(base) && hidden::may_run(base, text()))
        || matches!(
            base,
            "eval" | "source" | "." | "find" | "python" | "python3" | "{" | "!"
        )
}

/// A command's arguments: `lit` as literal values (`None` where only known at run time), and
/// `view`, the same for the tools that run commands but with a run-time argument's literal
/// beginning kept (see [`hidden::RUN_TIME`]). Both have one entry per argument.
#[derive(Clone, Copy)]
struct Args<'a> {
    lit: &'a [Option<String>],
    view: &'a [Option<String>],
}

impl<'a> Args<'a> {
    fn from(self, start: usize) -> Args<'a> {
        Args {
            lit: &self.lit[start..],
            view: &self.view[start..],
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

    /// Parses and walks one script; `functions` are those visible from an enclosing script (`eval`).
    pub fn script(&mut self, script: &str, depth: usize, functions: &[String]) {
        if depth > MAX_NESTING {
            self.deny_mentions(script, UNPARSED);
            return self.add(Reason::ClassifierUnavailable {
                detail: format!("scripts nested more than {MAX_NESTING} levels deep"),
            });
        }
        self.parsed_bytes += script.len();
        if self.parsed_bytes > MAX_PARSED_BYTES {
            self.deny_mentions(script, UNPARSED);
            return self.add(Reason::ClassifierUnavailable {
                detail: format!("nested scripts add up to more than {MAX_PARSED_BYTES} bytes"),
            });
        }
        let tree = match parse::parse(script) {
            Ok(tree) => {
                if let Some(joined) = joined_continuations(tree.root_node(), script) {
                    // bash removes a backslash-newline before it splits words (`g\⏎it` is git);
                    // tree-sitter-bash reads it as a space between two words.
                    return self.script(&joined, depth + 1, functions);
                }
                if let Some(rewritten) = without_misparsed_negations(tree.root_node(), script) {
                    // Negation does not change which commands may run, so dropping it is sound.
                    // Each round counts as a nesting level, which bounds `! ! ! … if` chains.
                    return self.script(&rewritten, depth + 1, functions);
                }
                tree
            }

            Err(ParseError::TooLarge(len)) => {
                self.deny_mentions(script, UNPARSED);
                return self.add(Reason::ClassifierUnavailable {
                    detail: format!("script is {len} bytes; the limit is {MAX_SCRIPT_BYTES}"),
                });
            }
            Err(ParseError::TimedOut) => {
                self.deny_mentions(script, UNPARSED);
                return self.add(Reason::ParseFailed {
                    detail: format!("parsing took longer than {} ms", PARSE_BUDGET.as_millis()),
                });
            }
            Err(ParseError::Unavailable(detail)) => {
                return self.add(Reason::ClassifierUnavailable { detail })
            }
        };
        let root = tree.root_node();
        if root.has_error() {
            self.deny_mentions(script, UNPARSED);
            return self.add(Reason::ParseFailed {
                detail: describe_error(root, script),
            });
        }
        let mut cursor = root.walk();
        if root
            .named_children(&mut cursor)
            .any(|n| n.kind_id() != kinds().comment)
        {
            self.saw_statement = true;
        }
        let mut visible = functions.to_vec();
        collect_functions(root, script, &mut visible);
        self.walk(root, script, depth, &visible);
        if hidden::VARIABLES.iter().any(|v| script.contains(v)) {
            self.variables(root, script, depth, &visible);
        }
        if script.contains("@P}") {
            self.prompt_expansions(root, script);
        }
    }

    /// Variables that make a tool run something the command line does not show:
    /// `TAR_OPTIONS='--to-command=git' tar -xf a.tar`, `BASH_ENV=f bash -c ls`, … Every value
    /// the script gives one, however it gives it, is classified with the commands, since the
    /// script can use it later: an assignment (`X=v cmd`, `export X=v`, `env X=v cmd`,
    /// `${X:=v}`), a `for` loop, `read`/`mapfile` (from a literal here-string or heredoc; run-time
    /// input is dynamic), `printf -v` (dynamic: the value is formatted at run time, and a denied
    /// command in its literal arguments refuses), and a nameref to it (`declare -n r=X; r=v`).
    fn variables(&mut self, root: Node, src: &str, depth: usize, functions: &[String]) {
        let names = namerefs(root, src);
        let target = |name: &str| -> Option<String> {
            let name = name.split('[').next().unwrap_or(name);
            if hidden::VARIABLES.contains(&name) {
                return Some(name.to_string());
            }
            names
                .iter()
                .find(|(alias, _)| alias == name)
                .map(|(_, t)| t.clone())
        };
        let kinds = kinds();
        let mut found = Vec::new();
        preorder(root, |node| {
            let kind = node.kind_id();
            if kind == kinds.variable_assignment {
                let name = node.child_by_field_id(kinds.field_name.get());
                let value = node.child_by_field_id(kinds.field_value.get());
                if let Some(name) = name.and_then(|n| target(node_text(n, src))) {
                    let value = match value {
                        Some(v) => literal(v, src),
                        None => Some(String::new()),
                    };
                    // `declare -n r=TAR_OPTIONS` (or `r=TAR_OPTIONS` for a declared reference)
                    // names its target: that is not a value.
                    let retargets = value.as_deref().is_some_and(|v| {
                        !hidden::VARIABLES.contains(&name.as_str()) || target(v).is_some()
                    }) && names.iter().any(|(a, _)| {
                        node.child_by_field_id(kinds.field_name.get())
                            .is_some_and(|n| node_text(n, src) == a)
                    });
                    if !retargets {
                        found.extend(hidden::variable(&name, value.as_deref()));
                    }
                }
                return Visit::Skip;
            }
            if kind == kinds.for_statement {
                let variable = node.child_by_field_id(kinds.field_variable.get());
                if let Some(name) = variable.and_then(|v| target(node_text(v, src))) {
                    let mut cursor = node.walk();
                    let values: Vec<Node> = node
                        .children_by_field_id(kinds.field_value, &mut cursor)
                        .collect();
                    for value in values {
                        found.extend(hidden::variable(&name, literal(value, src).as_deref()));
                    }
                }
                return Visit::Children;
            }
            if kind == kinds.expansion {
                // `${X:=v}` and `${X=v}` assign v when X is unset (or empty).
                let text = node_text(node, src);
                let variable = node.child(1).filter(|c| c.kind() == "variable_name");
                let written = variable.map(|v| node_text(v, src)).unwrap_or_default();
                if let Some(name) = variable.and_then(|v| target(node_text(v, src))) {
                    let after = text
                        .strip_prefix("${")
                        .and_then(|t| t.strip_prefix(written))
                        .unwrap_or_default();
                    if after.starts_with(":=") || after.starts_with('=') {
                        let mut cursor = node.walk();
                        let parts: Option<Vec<String>> = node
                            .named_children(&mut cursor)
                            .skip(1)
                            .map(|p| literal(p, src))
                            .collect();
                        let value = parts.map(|p| p.concat());
                        found.extend(hidden::variable(&name, value.as_deref()));
                    }
                }
                return Visit::Children;
            }
            if kind == kinds.command {
                self.variable_setters(node, src, &target, &mut found);
                return Visit::Children;
            }
            if kind == kinds.word || kind == kinds.concatenation || kind == kinds.raw_string {
                // `env TAR_OPTIONS=… tar`, `export 'BASH_ENV=…'`.
                if let Some(word) = literal(node, src) {
                    if let Some((name, value)) = word.split_once('=') {
                        if let Some(name) = target(name) {
                            found.extend(hidden::variable(&name, Some(value)));
                        }
                    }
                }
                return Visit::Skip;
            }
            Visit::Children
        });
        for item in found {
            self.hidden("the environment", item, depth, functions);
        }
    }

    /// `read X`, `mapfile X`, `readarray X` and `printf -v X …` for a variable `target` knows.
    fn variable_setters(
        &self,
        command: Node,
        src: &str,
        target: &dyn Fn(&str) -> Option<String>,
        found: &mut Vec<Hidden>,
    ) {
        let kinds = kinds();
        let Some(name) = command
            .child_by_field_id(kinds.field_name.get())
            .and_then(|n| literal(n, src))
        else {
            return;
        };
        if !matches!(name.as_str(), "read" | "mapfile" | "readarray" | "printf") {
            return;
        }
        let mut cursor = command.walk();
        let args: Vec<Option<String>> = command
            .children_by_field_id(kinds.field_argument, &mut cursor)
            .map(|a| literal(a, src))
            .collect();
        let mut set = Vec::new();
        for (i, arg) in args.iter().enumerate() {
            let Some(arg) = arg else { continue };
            if name == "printf" {
                let variable = match arg.strip_prefix("-v") {
                    Some("") => args.get(i + 1).cloned().flatten(),
                    Some(v) => Some(v.to_string()),
                    None => None,
                };
                set.extend(variable.and_then(|v| target(&v)));
            } else if !arg.starts_with('-') {
                set.extend(target(arg));
            }
        }
        for variable in set {
            if name == "printf" {
                found.push(Hidden::Dynamic {
                    detail: format!("{variable} set by printf -v at run time"),
                    fragments: args.iter().flatten().cloned().collect(),
                });
                continue;
            }
            match stdin_script(command, src) {
                Some(Some(text)) => {
                    for line in text.lines().filter(|l| !l.trim().is_empty()) {
                        found.extend(hidden::variable(&variable, Some(line.trim())));
                    }
                }
                _ => found.extend(hidden::variable(&variable, None)),
            }
        }
    }

    fn walk(&mut self, root: Node, src: &str, depth: usize, functions: &[String]) {
        preorder(root, |node| {
            if self.enter(node, src, depth, functions) {
                Visit::Children
            } else {
                Visit::Skip
            }
        });
    }

    /// Handles one node on the way down; returns whether to visit its children.
    fn enter(&mut self, node: Node, src: &str, depth: usize, functions: &[String]) -> bool {
        if !node.is_named() {
            return false;
        }
        let class = kinds().class(node);
        match class {
            Class::Command => {
                self.command(node, src, depth, functions);
                may_hold_commands(node_text(node, src))
            }
            Class::DeclarationCommand => {
                if let Some(keyword) = node.child(0) {
                    self.lookup(keyword.kind());
                }
                self.evaluated_strings(node, src, depth, functions);
                may_hold_commands(node_text(node, src))
            }
            Class::UnsetCommand => {
                self.lookup("unset");
                self.evaluated_strings(node, src, depth, functions);
                may_hold_commands(node_text(node, src))
            }
            Class::TestCommand => {
                self.evaluated_strings(node, src, depth, functions);
                may_hold_commands(node_text(node, src))
            }
            Class::HeredocRedirect => {
                match heredoc_backticks(node, src) {
                    Ok(scripts) => {
                        for script in scripts {
                            self.script(&script, depth + 1, functions);
                        }
                    }
                    Err(()) => self.add(Reason::ParseFailed {
                        detail: "unterminated backquote in a heredoc".into(),
                    }),
                }
                true
            }
            Class::Words => may_hold_commands(node_text(node, src)),
            Class::Text => {
                self.leftover_substitutions(node, src, depth, functions);
                node.child_count() > 0
            }
            Class::Assignment => {
                let text = node_text(node, src);
                if !may_hold_commands(text) {
                    return false;
                }
                if let Some(value) = node.child_by_field_id(kinds().field_value.get()) {
                    self.evaluated_value(value, src, depth, functions);
                }
                true
            }
            Class::CommandSubstitution => {
                let text = node_text(node, src);
                match text.strip_prefix('`').and_then(|t| t.strip_suffix('`')) {
                    Some(body) if body.contains('\\') => {
                        // Inside backquotes `\$`, `` \` `` and `\\` (and `\"` in a double-quoted
                        // string) lose their backslash before the body is parsed, so
                        // `` `echo \`git\`` `` nests a substitution tree-sitter reads as text.
                        let in_string =
                            node.parent().is_some_and(|p| p.kind_id() == kinds().string);
                        let inner = unescape_backquoted(body, in_string);
                        if inner != body {
                            self.script(&inner, depth + 1, functions);
                            return false;
                        }
                        true
                    }
                    _ => true,
                }
            }
            Class::ForStatement => {
                let mut cursor = node.walk();
                let values: Vec<Node> = node
                    .children_by_field_id(kinds().field_value, &mut cursor)
                    .collect();
                for value in values {
                    self.evaluated_value(value, src, depth, functions);
                }
                true
            }
            Class::Leaf => false,
            Class::Descend => true,
            Class::Unknown => {
                self.add(Reason::ClassifierUnavailable {
                    detail: format!("unsupported syntax `{}`", node.kind()),
                });
                false
            }
        }
    }

    fn command(&mut self, node: Node, src: &str, depth: usize, functions: &[String]) {
        let kinds = kinds();
        let Some(name_node) = node.child_by_field_id(kinds.field_name.get()) else {
            return;
        };
        let text = node_text(name_node, src);
        let name = match literal(name_node, src) {
            Some(name) if !has_glob(&unquoted_shape(name_node, src)) => name,
            _ => {
                self.add(Reason::DynamicCommand {
                    command: clip(text),
                    detail: "the command name is only known at run time".into(),
                });
                if !self.opts.policy.deny_commands.is_empty() {
                    let mut cursor = node.walk();
                    let lit: Vec<Option<String>> = node
                        .children_by_field_id(kinds.field_argument, &mut cursor)
                        .map(|arg| literal(arg, src))
                        .collect();
                    self.deny_in_args(&lit);
                }
                return;
            }
        };
        let base = basename(&name);
        let sets_values = matches!(base, "read" | "mapfile" | "readarray")
            || (matches!(base, "set" | "printf") || functions.iter().any(|f| f == base))
                && node_text(node, src).contains(['$', '`']);
        if sets_values {
            self.argument_values(base, node, src, depth, functions);
        }
        let policy = &self.opts.policy;
        let wants_args = policy.rule.is_some() || !policy.deny_commands.is_empty();
        if !(wants_args || needs_args(base, || node_text(node, src))) {
            let none = Args {
                lit: &[],
                view: &[],
            };
            return self.words(&name, none, Some(node), src, depth, functions);
        }
        let mut cursor = node.walk();
        let lit: Vec<Option<String>> = node
            .children_by_field_id(kinds.field_argument, &mut cursor)
            .map(|arg| literal(arg, src))
            .collect();
        // The tools that run commands also get the literal beginning of run-time arguments.
        let view: Option<Vec<Option<String>>> = lit.contains(&None).then(|| {
            let mut cursor = node.walk();
            node.children_by_field_id(kinds.field_argument, &mut cursor)
                .zip(&lit)
                .map(|(arg, l)| match l {
                    Some(text) => Some(text.clone()),
                    None => {
                        let prefix = literal_prefix(arg, src);
                        (!prefix.is_empty()).then(|| format!("{prefix}{}", hidden::RUN_TIME))
                    }
                })
                .collect()
        });
        let args = Args {
            lit: &lit,
            view: view.as_deref().unwrap_or(&lit),
        };
        self.words(&name, args, Some(node), src, depth, functions);
    }

    /// Classifies one command given as words: a name and its (literal or run-time) arguments.
    fn words(
        &mut self,
        name: &str,
        all: Args,
        node: Option<Node>,
        src: &str,
        depth: usize,
        functions: &[String],
    ) {
        if name.is_empty() {
            return self.add(Reason::UnknownCommand {
                command: String::new(),
            });
        }
        let args = all.lit;
        if depth > MAX_NESTING {
            // A chain of wrappers (`nohup nohup … git`, thousands long) is nesting too: each one
            // is a level, which also bounds the recursion (it overflowed the stack before).
            self.deny_mentions(name, UNPARSED);
            self.deny_in_args(args);
            return self.add(Reason::ClassifierUnavailable {
                detail: format!("commands nested more than {MAX_NESTING} levels deep"),
            });
        }
        let base = basename(name);
        let is_path = name.contains('/');
        if is_path {
            let known = SHELLS.contains(&base)
                || wrappers::is_wrapper(base)
                || matches!(self.matrix.lookup(base), Some(e) if e != Entry::Builtin);
            if !known {
                self.deny_in_args(args);
                return self.add(Reason::OpaqueScript {
                    command: clip(name),
                });
            }
        }
        self.policy(base, args);
        if !is_path && functions.iter().any(|f| f == base) {
            return; // A call to a function defined in the script: its body was walked.
        }
        match base {
            // tree-sitter-bash reads `! { cmd; }` as a command named `{` with `cmd` as its first
            // argument (and `! ! cmd` as a command named `!`), and the closing `}` as a command.
            "{" | "!" if !is_path => self.inner(base, all, node, src, depth, functions),
            "}" if !is_path => {}
            b if !is_path && RESERVED.contains(&b) => {
                self.deny_mentions(node.map_or(name, |n| node_text(n, src)), UNPARSED);
                self.add(Reason::ClassifierUnavailable {
                    detail: format!("tree-sitter-bash read the reserved word `{b}` as a command"),
                });
            }
            b if SHELLS.contains(&b) => self.shell(b, args, node, src, depth),
            "eval" => {
                self.lookup("eval");
                if args.is_empty() {
                    return;
                }
                match args
                    .iter()
                    .map(|a| a.as_deref())
                    .collect::<Option<Vec<_>>>()
                {
                    Some(words) => self.script(&words.join(" "), depth + 1, functions),
                    None => self.add(Reason::DynamicCommand {
                        command: "eval".into(),
                        detail: "eval of a run-time value".into(),
                    }),
                }
            }
            "source" | "." => {
                self.deny_in_args(args);
                self.add(Reason::OpaqueScript {
                    command: clip(&format!(
                        "{base} {}",
                        args.first()
                            .and_then(|a| a.as_deref())
                            .unwrap_or("<run-time value>")
                    )),
                })
            }
            "find" => {
                self.lookup("find");
                for (start, end) in wrappers::find_exec_commands(args) {
                    let words = Args {
                        lit: &all.lit[start..end],
                        view: &all.view[start..end],
                    };
                    self.inner(base, words, node, src, depth, functions);
                }
            }
            "python" | "python3" => {
                self.lookup(base);
                if let Some(module) = python_module(args) {
                    if let Some(reason) = self.matrix.python_module(module) {
                        self.add(Reason::NeedsRealExec {
                            command: format!("{base} -m {module}"),
                            reason,
                        });
                    }
                }
            }
            t if hidden::runs_commands(t) => {
                self.lookup(t);
                let stdin = || node.and_then(|n| stdin_script(n, src));
                for found in hidden::find(t, all.view, &stdin) {
                    self.hidden(t, found, depth, functions);
                }
            }
            w if wrappers::is_wrapper(w) => {
                // `coproc` is a keyword of bash itself.
                if w != "coproc" {
                    self.lookup(w);
                }
                for inner in wrappers::inner_command(w, args) {
                    self.wrapped(w, inner, all, node, src, depth, functions);
                }
            }
            _ => {
                if self.matrix.lookup(base).is_none() {
                    self.deny_in_args(args);
                }
                self.lookup(base)
            }
        }
    }

    /// One thing a wrapper runs.
    #[allow(clippy::too_many_arguments)]
    fn wrapped(
        &mut self,
        wrapper: &str,
        inner: Inner,
        all: Args,
        node: Option<Node>,
        src: &str,
        depth: usize,
        functions: &[String],
    ) {
        let dynamic = |detail: &str| Reason::DynamicCommand {
            command: wrapper.to_string(),
            detail: detail.into(),
        };
        match inner {
            Inner::At(i) => self.inner(wrapper, all.from(i), node, src, depth, functions),
            Inner::Dynamic => {
                self.deny_in_args(all.lit);
                self.add(dynamic("the wrapped command is only known at run time"))
            }
            Inner::Env(words) => {
                // env reads the words of `-S` as its own arguments again (`env -S 'env -S …'`):
                // each round is a nesting level.
                let args = Args {
                    lit: &words,
                    view: &words,
                };
                self.words("env", args, node, src, depth + 1, functions)
            }
            Inner::Shell(text) => {
                self.via_sh();
                self.script(&text, depth + 1, &[])
            }
            Inner::Joined(start, end) => {
                let words: Option<Vec<&str>> = all.lit[start..end.min(all.lit.len())]
                    .iter()
                    .map(|w| w.as_deref())
                    .collect();
                match words {
                    Some(words) => self.script(&words.join(" "), depth + 1, &[]),
                    None => {
                        self.deny_in_args(all.lit);
                        self.add(dynamic("the wrapped command is only known at run time"))
                    }
                }
            }
            Inner::StdinShell => {
                self.via_sh();
                self.shell("sh", &[], node, src, depth)
            }
            Inner::Program(program) => {
                let none = Args {
                    lit: &[],
                    view: &[],
                };
                self.words(&program, none, None, "", depth + 1, &[])
            }
            Inner::Opaque(what) => self.add(Reason::OpaqueScript {
                command: clip(&what),
            }),
        }
    }

    /// A command carried as arguments by a wrapper: `words[0]` is its name.
    fn inner(
        &mut self,
        wrapper: &str,
        words: Args,
        node: Option<Node>,
        src: &str,
        depth: usize,
        functions: &[String],
    ) {
        match words.lit.first() {
            Some(Some(name)) if !has_glob(name) => {
                self.words(name, words.from(1), node, src, depth + 1, functions)
            }
            Some(_) => {
                self.deny_in_args(words.lit);
                self.add(Reason::DynamicCommand {
                    command: wrapper.to_string(),
                    detail: "the wrapped command is only known at run time".into(),
                })
            }
            None => {}
        }
    }

    /// Quoted text that bash evaluates as arithmetic, which expands `$(…)` and backquotes: array
    /// subscripts in the names `unset`, `declare` and `local` take (`unset 'a[$(git)]'`),
    /// `declare -i` values, `[[ -v NAME ]]` and `[[ … -eq … ]]` operands. Any quoted string under
    /// `node` holding a substitution is classified as the argument of `:`, which may escalate an
    /// `export X='$(…)'` or `[[ $x == '$(…)' ]]` that bash would leave alone.
    fn evaluated_strings(&mut self, node: Node, src: &str, depth: usize, functions: &[String]) {
        let text = node_text(node, src);
        // Not `$(`: quoting can split it (`'a[$''(git)]'`), but not hide the `$`. Unquoted
        // substitutions are parsed as such, and the walk finds their commands.
        if !text.contains(['$', '`']) || !text.contains(['\'', '"', '\\']) {
            return;
        }
        let kinds = kinds();
        let mut found = Vec::new();
        preorder(node, |n| {
            let kind = n.kind_id();
            // A substitution's commands are the walk's own; its quoted text is not evaluated
            // here (`export V=$(awk '{print | "echo $(x)"}')`: the awk program is awk's).
            if kind == kinds.command_substitution || kind == kinds.process_substitution {
                return Visit::Skip;
            }
            let word_like = [
                kinds.concatenation,
                kinds.raw_string,
                kinds.string,
                kinds.word,
            ];
            if word_like.contains(&kind) {
                if let Some(value) = literal(n, src) {
                    if value.contains("$(") || value.contains('`') {
                        found.push(value);
                    }
                }
                Visit::Skip
            } else {
                Visit::Children
            }
        });
        for value in found {
            self.script(&format!(": {value}"), depth + 1, functions);
        }
    }

    /// Command substitutions in a token tree-sitter-bash did not parse although bash expands it:
    /// `` ${x:-`git`} ``, `` ${x/`git`/} ``, `` [[ $x =~ `git` ]] ``, and single-quoted text inside
    /// a double-quoted `${…}` (`"${x:-'`git`'}"`, where the quotes are plain characters).
    fn leftover_substitutions(
        &mut self,
        node: Node,
        src: &str,
        depth: usize,
        functions: &[String],
    ) {
        let text = node_text(node, src);
        if !text.contains('`') && !text.contains("$(") {
            return;
        }
        if node.kind_id() == kinds().raw_string && !in_double_quoted_expansion(node) {
            return;
        }
        self.substitutions_in(text, depth, functions);
    }

    /// Classifies every `$(…)` and backquoted command in `text`, read as bash reads an unquoted
    /// word (a backslash escapes the next character).
    fn substitutions_in(&mut self, text: &str, depth: usize, functions: &[String]) {
        match scan_substitutions(text) {
            Ok(found) => {
                for script in found {
                    self.script(&script, depth + 1, functions);
                }
            }
            Err(()) => {
                self.deny_mentions(text, UNPARSED);
                self.add(Reason::ParseFailed {
                    detail: format!("unterminated substitution in `{}`", clip(text)),
                });
            }
        }
    }

    /// Literal text that becomes a variable's value (an assignment, an array element, a `for`
    /// word, what `read` reads from a here-string, …). Bash runs the substitutions in such a
    /// value wherever it is later evaluated (`x='a[$(git)]'; echo $((x))`, `${x@P}`,
    /// `[[ $x -eq 1 ]]`, `declare -i`, `let`, `${a[x]}`, `${s:x:1}`), which the walk cannot
    /// follow, so a value holding `$(` or a backquote is classified as code where it is set. The
    /// literal parts are joined with run-time parts left out (`'$'"$e"'(git)'`), and a
    /// substitution's own quoted text is not a value (`x=$(awk '{print $(NF)}')`).
    fn evaluated_value(&mut self, value: Node, src: &str, depth: usize, functions: &[String]) {
        let kinds = kinds();
        if value.kind_id() == kinds.array {
            let mut cursor = value.walk();
            let elements: Vec<Node> = value.named_children(&mut cursor).collect();
            for element in elements {
                if element.kind_id() != kinds.array {
                    self.evaluated_value(element, src, depth, functions);
                }
            }
            return;
        }
        let text = node_text(value, src);
        // `$(` needs a `$` however it is written (`\$\(`, `$'\x24('` too).
        if !text.contains(['$', '`']) {
            return;
        }
        let skeleton = skeleton(value, src);
        if skeleton.contains("$(") || skeleton.contains('`') {
            self.substitutions_in(&skeleton, depth, functions);
        }
    }

    /// `${x@P}` expands the value of x as a prompt, running its substitutions. A value the script
    /// set literally was classified where it was set ([`Walker::evaluated_value`]); any other
    /// value (command output, `read`, the environment, an indirection) is only known at run time.
    /// One pass over the script finds every such expansion and how each variable is set.
    fn prompt_expansions(&mut self, root: Node, src: &str) {
        let kinds = kinds();
        let mut found: Vec<(&str, Option<&str>)> = Vec::new();
        preorder(root, |node| {
            if node.kind_id() == kinds.expansion {
                let text = node_text(node, src);
                if text.ends_with("@P}") {
                    let name = node.named_child(0).and_then(|c| match c.kind() {
                        "variable_name" => Some(node_text(c, src)),
                        "subscript" => c.child_by_field_name("name").map(|n| node_text(n, src)),
                        _ => None,
                    });
                    found.push((text, name.filter(|_| !text.starts_with("${!"))));
                }
            }
            Visit::Children
        });
        if found.is_empty() {
            return;
        }
        let origins = ValueOrigins::of(root, src);
        for (text, name) in found {
            if !name.is_some_and(|n| origins.only_literal(n)) {
                self.add(Reason::DynamicCommand {
                    command: clip(text),
                    detail: "a prompt expansion (`@P`) of a value only known at run time".into(),
                });
            }
        }
    }

    /// Literal arguments that become values: `set -- ARGS` (positional parameters), arguments of
    /// a function defined in the script, `printf -v NAME FORMAT ARGS`, and the here-string or
    /// heredoc `read`, `mapfile` and `readarray` read (see [`Walker::evaluated_value`]).
    fn argument_values(
        &mut self,
        base: &str,
        node: Node,
        src: &str,
        depth: usize,
        functions: &[String],
    ) {
        let kinds = kinds();
        if matches!(base, "read" | "mapfile" | "readarray") {
            if let Some(Some(text)) = stdin_script(node, src) {
                if text.contains("$(") || text.contains('`') {
                    self.substitutions_in(&text, depth, functions);
                }
            }
            return;
        }
        let mut cursor = node.walk();
        let args: Vec<Node> = node
            .children_by_field_id(kinds.field_argument, &mut cursor)
            .collect();
        let printf_v = base == "printf"
            && args
                .iter()
                .any(|a| literal(*a, src).is_some_and(|l| l.starts_with("-v")));
        if base == "set" || printf_v || functions.iter().any(|f| f == base) {
            for arg in args {
                self.evaluated_value(arg, src, depth, functions);
            }
        }
    }

    /// Under a deny policy, the literal arguments of a command the classifier cannot see into (an
    /// unknown program, a script file, a run-time name, a wrapper whose command is only known at
    /// run time): one naming a denied command refuses, since such a command may run its
    /// arguments (`frobnicate-wrapper git status`, `$RUN git`) and escalating would run it.
    fn deny_in_args(&mut self, args: &[Option<String>]) {
        if self.opts.policy.deny_commands.is_empty() {
            return;
        }
        for arg in args.iter().flatten() {
            self.deny_mentions(
                arg,
                "an argument of a command the classifier cannot see into",
            );
        }
    }

    /// A command `tool` runs from its arguments (`awk 'BEGIN{system("git")}'`, `sed '1e git'`, …).
    fn hidden(&mut self, tool: &str, found: Hidden, depth: usize, functions: &[String]) {
        match found {
            Hidden::Shell(script) => {
                self.via_sh();
                self.script(&script, depth + 1, &[])
            }
            Hidden::SameShell(script) => self.script(&script, depth + 1, functions),
            Hidden::Program(name) => {
                let none = Args {
                    lit: &[],
                    view: &[],
                };
                self.words(&name, none, None, "", depth + 1, &[])
            }
            Hidden::Dynamic { detail, fragments } => {
                self.add(Reason::DynamicCommand {
                    command: tool.to_string(),
                    detail,
                });
                for fragment in fragments {
                    self.deny_mentions(&fragment, "a command only known at run time");
                }
            }
            Hidden::Opaque(command) => self.add(Reason::OpaqueScript {
                command: clip(&command),
            }),
        }
    }

    /// `bash -c 'SCRIPT'` is re-parsed; `bash FILE` is opaque; a shell reading a heredoc or
    /// here-string is re-parsed from it; any other stdin script is opaque.
    fn shell(
        &mut self,
        base: &str,
        args: &[Option<String>],
        node: Option<Node>,
        src: &str,
        depth: usize,
    ) {
        self.lookup(base);
        let (mut dash_c, mut dash_s, mut i) = (false, false, 0);
        while let Some(Some(arg)) = args.get(i) {
            if arg == "--" || arg == "-" {
                i += 1;
                break;
            }
            if arg.starts_with("--") {
                if arg == "--rcfile" || arg == "--init-file" {
                    i += 1;
                }
                i += 1;
                continue;
            }
            if arg.len() > 1 && (arg.starts_with('-') || arg.starts_with('+')) {
                let letters = &arg[1..];
                dash_c |= letters.contains('c');
                dash_s |= letters.contains('s');
                if letters.contains('o') || letters.contains('O') {
                    i += 1;
                }
                i += 1;
                continue;
            }
            break;
        }
        if dash_c {
            match args.get(i) {
                Some(Some(script)) => self.script(script, depth + 1, &[]),
                Some(None) => self.add(Reason::DynamicCommand {
                    command: base.to_string(),
                    detail: "the -c script is only known at run time".into(),
                }),
                None => {}
            }
        } else if !dash_s && i < args.len() {
            self.deny_in_args(&args[i..]);
            let file = args[i].as_deref().unwrap_or("<run-time value>");
            self.add(Reason::OpaqueScript {
                command: clip(&format!("{base} {file}")),
            });
        } else {
            match node.and_then(|n| stdin_script(n, src)) {
                Some(Some(script)) => self.script(&script, depth + 1, &[]),
                Some(None) => self.add(Reason::DynamicCommand {
                    command: base.to_string(),
                    detail: "the script on stdin is only known at run time".into(),
                }),
                None => self.add(Reason::OpaqueScript {
                    command: format!("{base} (script on stdin)"),
                }),
            }
        }
    }

    /// Fails closed for text the walk cannot read as commands (a script that could not be parsed,
    /// the visible part of a command only known at run time): any word naming a denied command
    /// refuses, since escalating would run it on the next tier.
    fn deny_mentions(&mut self, text: &str, in_what: &str) {
        if self.opts.policy.deny_commands.is_empty() {
            return;
        }
        let joined = shell_words(text);
        let words = hidden::words(text).chain(joined.iter().map(String::as_str));
        let mut denied = Vec::new();
        for word in words {
            let base = basename(word);
            if self.is_denied(base) && !denied.contains(&base) {
                denied.push(base);
            }
        }
        for base in denied {
            self.add(Reason::PolicyBlocked {
                command: base.to_string(),
                rule: format!("denyCommands (named in {in_what})"),
            });
        }
    }

    /// A tool or wrapper that runs text with `/bin/sh -c` (awk `system()`, sqlite3 `.shell`,
    /// `find -exec sh -c` …) runs `sh`: a deny policy naming `sh` refuses it like any other use
    /// (on Tier-0 the sandbox cannot execute a denied shell anyway: issue 29).
    fn via_sh(&mut self) {
        self.policy("sh", &[]);
    }

    /// Deny entries match by basename, so `/usr/bin/docker` in the list denies `docker` too.
    fn is_denied(&self, base: &str) -> bool {
        let deny = &self.opts.policy.deny_commands;
        deny.iter().any(|d| basename(d) == base)
    }

    fn policy(&mut self, base: &str, args: &[Option<String>]) {
        if self.is_denied(base) {
            self.add(Reason::PolicyBlocked {
                command: base.to_string(),
                rule: "denyCommands".into(),
            });
        }
        if let Some(rule) = &self.opts.policy.rule {
            if let Some(name) = rule(&CommandUse { name: base, args }) {
                self.add(Reason::PolicyBlocked {
                    command: base.to_string(),
                    rule: name,
                });
            }
        }
    }

    /// Classifies a bare command name by the matrix.
    fn lookup(&mut self, name: &str) {
        match self.matrix.lookup(name) {
            Some(Entry::Builtin | Entry::Tier0(None)) => self.add_tier0(name),
            Some(Entry::Tier0(Some(toggle))) => {
                let runtime = &self.opts.runtime;
                let enabled = match toggle {
                    Toggle::Network => runtime.network,
                    Toggle::Python => runtime.python,
                    Toggle::Javascript => runtime.javascript,
                };
                if enabled {
                    self.add_tier0(name);
                } else {
                    self.add(Reason::CapabilityDisabled {
                        command: name.to_string(),
                        toggle,
                    });
                }
            }
            Some(Entry::RealExec(reason)) => self.add(Reason::NeedsRealExec {
                command: name.to_string(),
                reason,
            }),
            None => self.add(Reason::UnknownCommand {
                command: clip(name),
            }),
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

/// `python3 -m MODULE …` → `MODULE`.
fn python_module(args: &[Option<String>]) -> Option<&str> {
    let mut iter = args.iter();
    while let Some(Some(arg)) = iter.next() {
        if arg == "-m" {
            return iter.next().and_then(|m| m.as_deref());
        }
        if let Some(module) = arg.strip_prefix("-m") {
            return Some(module);
        }
        if arg == "-c" || !arg.starts_with('-') {
            return None;
        }
    }
    None
}

/// The script a shell command reads from a heredoc or here-string: `Some(Some(text))` when literal,
/// `Some(None)` when it expands at run time, `None` when stdin is not redirected that way.
fn stdin_script(command: Node, src: &str) -> Option<Option<String>> {
    // A here-string sits on the command itself; a heredoc on the enclosing redirected_statement.
    let mut redirects: Vec<Node> = {
        let mut cursor = command.walk();
        command
            .children_by_field_name("redirect", &mut cursor)
            .collect()
    };
    // tree-sitter-bash hangs `a && bash <<EOF` (and `a | bash <<EOF`) on the whole list: the heredoc
    // is the last command's.
    let mut node = command;
    while let Some(parent) = node.parent() {
        let last = parent
            .named_child_count()
            .checked_sub(1)
            .and_then(|i| parent.named_child(i));
        match parent.kind() {
            "list" | "pipeline" if last == Some(node) => node = parent,
            "negated_command" => node = parent,
            "redirected_statement" if parent.child_by_field_name("body") == Some(node) => {
                let mut cursor = parent.walk();
                redirects.extend(parent.children_by_field_name("redirect", &mut cursor));
                break;
            }
            _ => break,
        }
    }
    redirects
        .into_iter()
        .find_map(|redirect| match redirect.kind() {
            "heredoc_redirect" => Some(heredoc_text(redirect, src)),
            "herestring_redirect" => Some(redirect.named_child(0).and_then(|n| literal(n, src))),
            _ => None,
        })
}

/// A heredoc's body when it is data (quoted delimiter, or nothing in it expands), else `None`.
fn heredoc_text(redirect: Node, src: &str) -> Option<String> {
    let Some(body) = heredoc_body(redirect) else {
        return Some(String::new());
    };
    let text = node_text(body, src);
    let mut cursor = body.walk();
    let expands = body
        .named_children(&mut cursor)
        .any(|n| n.kind() != "heredoc_content")
        || text.contains('`');
    (heredoc_is_quoted(redirect, src) || !expands).then(|| text.to_string())
}

fn heredoc_body(redirect: Node) -> Option<Node> {
    let mut cursor = redirect.walk();
    let body = redirect
        .named_children(&mut cursor)
        .find(|n| n.kind() == "heredoc_body");
    body
}

/// `<<'EOF'`, `<<"EOF"` and `<<\EOF` make the body plain data.
fn heredoc_is_quoted(redirect: Node, src: &str) -> bool {
    let mut cursor = redirect.walk();
    let quoted = redirect
        .named_children(&mut cursor)
        .find(|n| n.kind() == "heredoc_start")
        .is_some_and(|s| node_text(s, src).contains(['\'', '"', '\\']));
    quoted
}

/// Backquoted command substitutions in an unquoted heredoc body, which tree-sitter-bash leaves as
/// plain text: `Err` when a backquote is unterminated.
fn heredoc_backticks(redirect: Node, src: &str) -> Result<Vec<String>, ()> {
    let Some(body) = heredoc_body(redirect) else {
        return Ok(Vec::new());
    };
    if heredoc_is_quoted(redirect, src) || !node_text(body, src).contains('`') {
        return Ok(Vec::new());
    }
    // Blank out what tree-sitter already parsed (`$(…)`, `${…}`), then scan the rest.
    let mut text: Vec<u8> = src.as_bytes()[body.byte_range()].to_vec();
    let mut cursor = body.walk();
    for child in body.named_children(&mut cursor) {
        if child.kind() != "heredoc_content" {
            let start = child.start_byte() - body.start_byte();
            let end = child.end_byte() - body.start_byte();
            text[start..end].fill(b' ');
        }
    }
    let mut found = Vec::new();
    let mut current: Option<Vec<u8>> = None;
    let mut bytes = text.into_iter();
    while let Some(b) = bytes.next() {
        match (b, current.as_mut()) {
            (b'\\', Some(inner)) => {
                if let Some(next) = bytes.next() {
                    inner.push(next);
                }
            }
            (b'\\', None) => {
                bytes.next();
            }
            (b'`', Some(_)) => {
                let inner = current.take().expect("inside backquotes");
                found.push(String::from_utf8_lossy(&inner).into_owned());
            }
            (b'`', None) => current = Some(Vec::new()),
            (_, Some(inner)) => inner.push(b),
            (_, None) => {}
        }
    }
    match current {
        Some(_) => Err(()),
        None => Ok(found),
    }
}

/// tree-sitter-bash 0.25 only accepts a simple command, test or subshell after `!`; with a compound
/// command (`! if …`, `! { …; }`, `! ! …`) it reads reserved words as command names. When that
/// happened, returns the script with every stand-alone `!` word blanked out (one pass, however long
/// a `! ! ! …` chain is), else `None`.
fn without_misparsed_negations(root: Node, src: &str) -> Option<String> {
    if !src.contains('!') || !has_misparsed_negation(root, src) {
        return None;
    }
    let bytes = src.as_bytes();
    let mut out = bytes.to_vec();
    for (i, &b) in bytes.iter().enumerate() {
        let starts_word = i == 0 || bytes[i - 1].is_ascii_whitespace() || bytes[i - 1] == b';';
        let ends_word = bytes.get(i + 1).is_none_or(|n| n.is_ascii_whitespace());
        if b == b'!' && starts_word && ends_word {
            out[i] = b' ';
        }
    }
    // Only ASCII bytes were replaced by ASCII bytes, so the text is still UTF-8.
    String::from_utf8(out).ok()
}

fn has_misparsed_negation(root: Node, src: &str) -> bool {
    let mut found = false;
    preorder(root, |node| {
        let misread = node.kind() == "negated_command"
            && node
                .named_child(0)
                .filter(|c| c.kind() == "command")
                .and_then(|c| c.child_by_field_name("name"))
                .is_some_and(|n| {
                    // After `! {` tree-sitter-bash may even take `{ [[` for one word.
                    let name = node_text(n, src);
                    let first = name.split_whitespace().next().unwrap_or(name);
                    RESERVED.contains(&first) || first == "!" || first == "{"
                });
        found |= misread;
        if misread {
            Visit::Stop
        } else {
            Visit::Children
        }
    });
    found
}

/// Function names defined anywhere in the script: calls to them are not unknown commands.
fn collect_functions(root: Node, src: &str, out: &mut Vec<String>) {
    if !src.contains("()") && !src.contains("function") {
        return;
    }
    preorder(root, |node| {
        if node.kind() == "function_definition" {
            if let Some(name) = node.child_by_field_name("name") {
                out.push(node_text(name, src).to_string());
            }
        }
        Visit::Children
    });
}

/// Locates the first ERROR or MISSING node for the `parse-failed` detail.
fn describe_error(root: Node, src: &str) -> String {
    let mut found = None;
    preorder(root, |node| {
        if node.is_error() || node.is_missing() {
            let at = node.start_position();
            let what = if node.is_missing() {
                format!("missing `{}`", node.kind())
            } else {
                format!("unexpected `{}`", clip(node_text(node, src)))
            };
            found = Some(format!(
                "syntax error at line {}, column {}: {what}",
                at.row + 1,
                at.column + 1
            ));
            Visit::Stop
        } else if node.has_error() {
            Visit::Children
        } else {
            Visit::Skip
        }
    });
    found.unwrap_or_else(|| "syntax error".into())
}

/// What a pre-order visit does after a node.
enum Visit {
    Children,
    Skip,
    Stop,
}

/// Pre-order traversal with one cursor: no recursion, so a deeply nested tree cannot overflow the
/// stack.
fn preorder<'t>(root: Node<'t>, mut visit: impl FnMut(Node<'t>) -> Visit) {
    let mut cursor = root.walk();
    loop {
        match visit(cursor.node()) {
            Visit::Stop => return,
            Visit::Children if cursor.goto_first_child() => continue,
            Visit::Children | Visit::Skip => {}
        }
        loop {
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return;
            }
        }
    }
}

/// Whether single quotes under `node` are plain characters: inside a `${…}` that is itself inside
/// double quotes or an unquoted heredoc body.
fn in_double_quoted_expansion(node: Node) -> bool {
    let kinds = kinds();
    let mut saw_expansion = false;
    let mut current = node;
    // Bounded: past this many levels the text is scanned anyway (it may only over-approximate).
    for _ in 0..64 {
        let Some(parent) = current.parent() else {
            return false;
        };
        let kind = parent.kind_id();
        if kind == kinds.expansion {
            saw_expansion = true;
        } else if kind == kinds.string || kind == kinds.heredoc_body {
            return saw_expansion;
        } else if !matches!(
            kinds.class(parent),
            Class::Words | Class::Text | Class::Descend
        ) {
            return false;
        }
        current = parent;
    }
    true
}

/// Inside backquotes a backslash only escapes `$`, `` ` `` and `\\` (and `"` in a double-quoted
/// string); bash removes it before parsing the body.
fn unescape_backquoted(body: &str, in_string: bool) -> String {
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, chars.peek()) {
            ('\\', Some(&next))
                if matches!(next, '$' | '`' | '\\') || (in_string && next == '"') =>
            {
                out.push(next);
                chars.next();
            }
            _ => out.push(c),
        }
    }
    out
}

/// The scripts of the command substitutions in `text`, read as bash reads an unquoted word: a
/// backslash escapes the next character, `` `…` `` is a command (its body unescaped as in
/// backquotes) and `$(…)` is returned as `: $(…)` (a command or arithmetic substitution for the
/// parser to tell apart). `Err` when one is not closed.
fn scan_substitutions(text: &str) -> Result<Vec<String>, ()> {
    let b = text.as_bytes();
    let mut found = Vec::new();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'`' => {
                let mut j = i + 1;
                while j < b.len() && b[j] != b'`' {
                    j += if b[j] == b'\\' { 2 } else { 1 };
                }
                if j >= b.len() {
                    return Err(());
                }
                found.push(unescape_backquoted(&text[i + 1..j], true));
                i = j + 1;
            }
            b'$' if b.get(i + 1) == Some(&b'(') => {
                let mut depth = 0usize;
                let mut j = i + 1;
                let end = loop {
                    let Some(&c) = b.get(j) else {
                        return Err(());
                    };
                    match c {
                        b'\\' => j += 1,
                        b'\'' => {
                            j += 1;
                            while b.get(j).is_some_and(|&q| q != b'\'') {
                                j += 1;
                            }
                        }
                        b'(' => depth += 1,
                        b')' => {
                            depth -= 1;
                            if depth == 0 {
                                break j;
                            }
                        }
                        _ => {}
                    }
                    j += 1;
                };
                found.push(format!(": {}", &text[i..=end]));
                i = end + 1;
            }
            _ => i += 1,
        }
    }
    Ok(found)
}

/// bash removes a backslash-newline outside quotes and comments before it reads words; tree-sitter-
/// bash skips it as a blank, so `g\⏎it` is two words to it and git to bash. Returns the script
/// with every such continuation between tokens removed when one joins two tokens, else `None`.
fn joined_continuations(root: Node, src: &str) -> Option<String> {
    if !src.contains("\\\n") {
        return None;
    }
    let bytes = src.as_bytes();
    let mut remove = Vec::new();
    let mut joins = false;
    for (i, _) in src.match_indices("\\\n") {
        let escaped = bytes[..i].iter().rev().take_while(|&&b| b == b'\\').count() % 2 == 1;
        if escaped {
            continue;
        }
        // In single quotes, `$'…'`, a comment or a quoted heredoc body it is text (and a word's
        // own escapes are read by `literal`). Anywhere else bash removes it: in a gap
        // tree-sitter skipped, in double quotes or an unquoted heredoc (`"$\⏎(git)"`), or in a
        // token it misread (`$\⏎(…)` as a variable named `\⏎`).
        let in_token = root.descendant_for_byte_range(i, i + 2).is_some_and(|n| {
            let covers = n.start_byte() <= i && i + 2 <= n.end_byte();
            covers
                && match n.kind() {
                    "raw_string" | "comment" | "ansi_c_string" | "word" => true,
                    "heredoc_body" | "heredoc_content" => {
                        let mut up = n.parent();
                        while let Some(p) = up.filter(|p| p.kind() != "heredoc_redirect") {
                            up = p.parent();
                        }
                        up.is_some_and(|r| heredoc_is_quoted(r, src))
                    }
                    _ => false,
                }
        });
        if in_token {
            continue;
        }
        remove.push(i);
        let before = i.checked_sub(1).map(|j| bytes[j]);
        let after = bytes.get(i + 2);
        joins |= before.is_some_and(|b| !b.is_ascii_whitespace())
            && after.is_some_and(|b| !b.is_ascii_whitespace());
    }
    if !joins {
        return None;
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut last = 0;
    for i in remove {
        out.extend_from_slice(&bytes[last..i]);
        last = i + 2;
    }
    out.extend_from_slice(&bytes[last..]);
    // Only ASCII pairs were removed, so the text is still UTF-8.
    String::from_utf8(out).ok()
}

/// How the variables of one script get their values, for [`Walker::prompt_expansions`].
struct ValueOrigins<'s> {
    /// Every variable assigned, and whether all its values are literal text (assignments,
    /// arrays, `for` lists).
    assigned: std::collections::HashMap<&'s str, bool>,
    /// Words that may name a variable a command sets (`read x`, `printf -v x`, `declare -n r=x`).
    named: std::collections::HashSet<&'s str>,
    /// The script runs code the walk does not read as this script (`eval`, `source`, `.`).
    hidden_code: bool,
}

impl<'s> ValueOrigins<'s> {
    fn of(root: Node, src: &'s str) -> Self {
        let kinds = kinds();
        let mut origins = ValueOrigins {
            assigned: std::collections::HashMap::new(),
            named: std::collections::HashSet::new(),
            hidden_code: src.contains("eval") || src.contains("source") || src.contains(". "),
        };
        let literal_value = |v: Node| {
            if v.kind_id() == kinds.array {
                let mut cursor = v.walk();
                let all = v
                    .named_children(&mut cursor)
                    .all(|e| literal(e, src).is_some());
                all
            } else {
                literal(v, src).is_some()
            }
        };
        preorder(root, |node| {
            let kind = node.kind_id();
            if kind == kinds.variable_assignment {
                let target = node.child_by_field_name("name").map(|n| {
                    if n.kind() == "subscript" {
                        n.child_by_field_name("name").unwrap_or(n)
                    } else {
                        n
                    }
                });
                if let Some(target) = target {
                    let ok = node
                        .child_by_field_id(kinds.field_value.get())
                        .is_none_or(literal_value);
                    *origins
                        .assigned
                        .entry(node_text(target, src))
                        .or_insert(true) &= ok;
                }
            } else if kind == kinds.for_statement {
                if let Some(v) = node.child_by_field_id(kinds.field_variable.get()) {
                    let mut cursor = node.walk();
                    let ok = node
                        .children_by_field_id(kinds.field_value, &mut cursor)
                        .all(|v| literal(v, src).is_some());
                    *origins.assigned.entry(node_text(v, src)).or_insert(true) &= ok;
                }
            } else if kind == kinds.word {
                // An argument (`read x`, `printf -vx`) or a value (`declare -n r=x`: x may be set
                // through r) that names the variable.
                let word = node_text(node, src);
                origins.named.insert(word);
                if let Some(v) = word.strip_prefix("-v") {
                    origins.named.insert(v);
                }
            }
            Visit::Children
        });
        origins
    }

    /// Whether every value `name` gets in the script is literal text, so
    /// [`Walker::evaluated_value`] saw it. No assignment at all (the environment), a run-time
    /// value, the name given to a command (`read`, `printf -v`, `mapfile`, a nameref) or code
    /// the walk does not read as this script (`eval`, `source`) is not.
    fn only_literal(&self, name: &str) -> bool {
        !self.hidden_code
            && !self.named.contains(name)
            && self.assigned.get(name).copied().unwrap_or(false)
    }
}

/// Namerefs to the variables of [`hidden::VARIABLES`]: `declare -n r=TAR_OPTIONS` (also `local`,
/// `typeset`, chains of them, and `r=TAR_OPTIONS` assigned to a name declared `-n` earlier) as
/// (alias, variable) pairs.
fn namerefs(root: Node, src: &str) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = Vec::new();
    if !src.contains("-n") && !src.contains("-rn") {
        return found;
    }
    // (name, value) of every assignment, and the names declared with -n.
    let mut assignments: Vec<(String, Option<String>)> = Vec::new();
    let mut declared: Vec<String> = Vec::new();
    let kinds = kinds();
    preorder(root, |node| {
        if node.kind_id() == kinds.declaration_command {
            let mut cursor = node.walk();
            let children: Vec<Node> = node.named_children(&mut cursor).collect();
            let is_ref = children.iter().any(|c| {
                let t = node_text(*c, src);
                t.starts_with('-') && t.contains('n')
            });
            if is_ref {
                for c in children {
                    let name = match c.kind() {
                        "variable_assignment" => c.child_by_field_name("name"),
                        "variable_name" => Some(c),
                        _ => None,
                    };
                    declared.extend(name.map(|n| node_text(n, src).to_string()));
                }
            }
        }
        if node.kind_id() == kinds.variable_assignment {
            if let Some(name) = node.child_by_field_name("name") {
                let value = node
                    .child_by_field_name("value")
                    .and_then(|v| literal(v, src));
                assignments.push((node_text(name, src).to_string(), value));
            }
        }
        Visit::Children
    });
    // A reference's target is any value it is given; follow chains (r2 -> r1 -> TAR_OPTIONS).
    loop {
        let before = found.len();
        for (name, value) in &assignments {
            if !declared.contains(name) {
                continue;
            }
            let Some(value) = value else { continue };
            let target = if hidden::VARIABLES.contains(&value.as_str()) {
                Some(value.clone())
            } else {
                found
                    .iter()
                    .find(|(a, _)| a == value)
                    .map(|(_, t)| t.clone())
            };
            if let Some(target) = target {
                if !found.iter().any(|(a, t)| a == name && *t == target) {
                    found.push((name.clone(), target));
                }
            }
        }
        if found.len() == before {
            return found;
        }
    }
}
