//! What one command runs: its name judged by the matrix and the policy, a shell's `-c` script or
//! stdin, `eval` and `source`, `find -exec`, `python -m`, and the inner commands of wrappers and
//! of tools that run commands from their arguments ([`Inner`], classified by [`Walker::run`]).

use super::heredoc::stdin_script;
use super::{basename, clip, Args, Scope, Site, Walker, MAX_NESTING, RESERVED, SHELLS, UNPARSED};
use crate::matrix::Entry;
use crate::parser::hidden;
use crate::parser::inner::{Inner, Seen};
use crate::parser::kinds::kinds;
use crate::parser::literal::{has_glob, literal, literal_prefix, unquoted_shape};
use crate::parser::parse::node_text;
use crate::parser::wrappers;
use crate::reason::Reason;
use tree_sitter::Node;

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

impl Walker<'_> {
    /// A `command` node of the script.
    pub(super) fn command(&mut self, node: Node, src: &str, scope: Scope) {
        let kinds = kinds();
        let Some(name_node) = node.child_by_field_id(kinds.field_name.get()) else {
            return;
        };
        let text = node_text(name_node, src);
        let site = Some(Site { node, src });
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
            || (matches!(base, "set" | "printf") || scope.defines(base))
                && node_text(node, src).contains(['$', '`']);
        if sets_values {
            self.argument_values(base, node, src, scope);
        }
        let policy = &self.opts.policy;
        let wants_args = policy.rule.is_some() || !policy.deny_commands.is_empty();
        if !(wants_args || needs_args(base, || node_text(node, src))) {
            return self.words(&name, Args::NONE, site, scope);
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
        self.words(&name, args, site, scope);
    }

    /// Classifies one command given as words: a name and its (literal or run-time) arguments.
    pub(super) fn words(&mut self, name: &str, all: Args, site: Option<Site>, scope: Scope) {
        if name.is_empty() {
            return self.add(Reason::UnknownCommand {
                command: String::new(),
            });
        }
        let args = all.lit;
        if scope.depth > MAX_NESTING {
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
        if !is_path && scope.defines(base) {
            return; // A call to a function defined in the script: its body was walked.
        }
        match base {
            // tree-sitter-bash reads `! { cmd; }` as a command named `{` with `cmd` as its first
            // argument (and `! ! cmd` as a command named `!`), and the closing `}` as a command.
            "{" | "!" if !is_path => self.inner(base, all, site, scope),
            "}" if !is_path => {}
            b if !is_path && RESERVED.contains(&b) => {
                self.deny_mentions(site.map_or(name, Site::text), UNPARSED);
                self.add(Reason::ClassifierUnavailable {
                    detail: format!("tree-sitter-bash read the reserved word `{b}` as a command"),
                });
            }
            b if SHELLS.contains(&b) => self.shell(b, args, site, scope),
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
                    Some(words) => self.script(&words.join(" "), scope.nested()),
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
                    self.inner(base, all.range(start, end), site, scope);
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
                let stdin = || site.and_then(|s| stdin_script(s.node, s.src));
                for found in hidden::find(t, all.view, &stdin) {
                    self.run(t, found, all, site, scope);
                }
            }
            w if wrappers::is_wrapper(w) => {
                // `coproc` is a keyword of bash itself.
                if w != "coproc" {
                    self.lookup(w);
                }
                for inner in wrappers::inner_command(w, args) {
                    self.run(w, inner, all, site, scope);
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

    /// One command that `runner` (a wrapper, or a tool that runs commands from its arguments, or
    /// "the environment" for a variable such as `BASH_ENV`) runs; `all` are the runner's own
    /// arguments, which [`Inner::At`] and [`Inner::Joined`] index.
    pub(super) fn run(
        &mut self,
        runner: &str,
        inner: Inner,
        all: Args,
        site: Option<Site>,
        scope: Scope,
    ) {
        match inner {
            Inner::At(i) => self.inner(runner, all.from(i), site, scope),
            Inner::Env(words) => {
                // env reads the words of `-S` as its own arguments again (`env -S 'env -S …'`):
                // each round is a nesting level.
                self.words("env", Args::literal(&words), site, scope.nested())
            }
            Inner::Joined(start, end) => {
                let words: Option<Vec<&str>> = all.lit[start..end.min(all.lit.len())]
                    .iter()
                    .map(|w| w.as_deref())
                    .collect();
                match words {
                    Some(words) => self.script(&words.join(" "), scope.new_shell()),
                    None => self.run(runner, Inner::wrapped_at_run_time(), all, site, scope),
                }
            }
            Inner::Shell(script) => {
                self.via_sh();
                self.script(&script, scope.new_shell())
            }
            Inner::SameShell(script) => self.script(&script, scope.nested()),
            Inner::StdinShell => {
                self.via_sh();
                self.shell("sh", &[], site, scope)
            }
            Inner::Program(program) => self.words(&program, Args::NONE, None, scope.new_shell()),
            Inner::Dynamic { detail, seen } => {
                let reason = Reason::DynamicCommand {
                    command: runner.to_string(),
                    detail,
                };
                match seen {
                    Seen::Arguments => {
                        self.deny_in_args(all.lit);
                        self.add(reason)
                    }
                    Seen::Pieces(pieces) => {
                        self.add(reason);
                        for piece in pieces {
                            self.deny_mentions(&piece, "a command only known at run time");
                        }
                    }
                }
            }
            Inner::Opaque(what) => self.add(Reason::OpaqueScript {
                command: clip(&what),
            }),
        }
    }

    /// A command carried as arguments by a wrapper: `words[0]` is its name.
    pub(super) fn inner(&mut self, wrapper: &str, words: Args, site: Option<Site>, scope: Scope) {
        match words.lit.first() {
            Some(Some(name)) if !has_glob(name) => {
                self.words(name, words.from(1), site, scope.nested())
            }
            Some(_) => self.run(wrapper, Inner::wrapped_at_run_time(), words, site, scope),
            None => {}
        }
    }

    /// `bash -c 'SCRIPT'` is re-parsed; `bash FILE` is opaque; a shell reading a heredoc or
    /// here-string is re-parsed from it; any other stdin script is opaque.
    pub(super) fn shell(
        &mut self,
        base: &str,
        args: &[Option<String>],
        site: Option<Site>,
        scope: Scope,
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
                Some(Some(script)) => self.script(script, scope.new_shell()),
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
            match site.and_then(|s| stdin_script(s.node, s.src)) {
                Some(Some(script)) => self.script(&script, scope.new_shell()),
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
