//! The verdicts: what the matrix says of a command name, and what the deny policy and a policy
//! rule say of a command, of the words of text the walk cannot read as commands, and of the
//! arguments of a command it cannot see into.

use super::{basename, clip, Walker};
use crate::matrix::Entry;
use crate::options::CommandUse;
use crate::parser::hidden;
use crate::parser::literal::shell_words;
use crate::reason::{Reason, Toggle};

impl Walker<'_> {
    /// Under a deny policy, the literal arguments of a command the classifier cannot see into (an
    /// unknown program, a script file, a run-time name, a wrapper whose command is only known at
    /// run time): one naming a denied command refuses, since such a command may run its
    /// arguments (`frobnicate-wrapper git status`, `$RUN git`) and escalating would run it.
    pub(super) fn deny_in_args(&mut self, args: &[Option<String>]) {
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

    /// Fails closed for text the walk cannot read as commands (a script that could not be parsed,
    /// the visible part of a command only known at run time): any word naming a denied command
    /// refuses, since escalating would run it on the next tier.
    pub(super) fn deny_mentions(&mut self, text: &str, in_what: &str) {
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
    pub(super) fn via_sh(&mut self) {
        self.policy("sh", &[]);
    }

    /// Deny entries match by basename, so `/usr/bin/docker` in the list denies `docker` too.
    pub(super) fn is_denied(&self, base: &str) -> bool {
        let deny = &self.opts.policy.deny_commands;
        deny.iter().any(|d| basename(d) == base)
    }

    pub(super) fn policy(&mut self, base: &str, args: &[Option<String>]) {
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
    pub(super) fn lookup(&mut self, name: &str) {
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
