//! Which nodes of a script hold commands: the script is parsed (and re-parsed where
//! tree-sitter-bash misreads it), then one pre-order pass hands every node to the part of the
//! walk that answers for it. A node kind with no rule makes the classifier unavailable.

use super::heredoc::heredoc_backticks;
use super::misread::{joined_continuations, without_misparsed_negations};
use super::preorder::{preorder, Visit};
use super::substitution::unescape_backquoted;
use super::{clip, Scope, Walker, MAX_NESTING, MAX_PARSED_BYTES, UNPARSED};
use crate::parser::hidden;
use crate::parser::kinds::{kinds, may_hold_commands, Class};
use crate::parser::parse::{self, node_text, ParseError, MAX_SCRIPT_BYTES, PARSE_BUDGET};
use crate::reason::Reason;
use tree_sitter::Node;

impl Walker<'_> {
    /// Parses and walks one script; `scope` holds the functions visible from an enclosing script
    /// (`eval`).
    pub fn script(&mut self, script: &str, scope: Scope) {
        if scope.depth > MAX_NESTING {
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
                    return self.script(&joined, scope.nested());
                }
                if let Some(rewritten) = without_misparsed_negations(tree.root_node(), script) {
                    // Negation does not change which commands may run, so dropping it is sound.
                    // Each round counts as a nesting level, which bounds `! ! ! … if` chains.
                    return self.script(&rewritten, scope.nested());
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
        let mut visible = scope.functions.to_vec();
        collect_functions(root, script, &mut visible);
        let scope = Scope {
            functions: &visible,
            ..scope
        };
        self.walk(root, script, scope);
        if hidden::VARIABLES.iter().any(|v| script.contains(v)) {
            self.variables(root, script, scope);
        }
        if script.contains("@P}") {
            self.prompt_expansions(root, script);
        }
    }

    pub(super) fn walk(&mut self, root: Node, src: &str, scope: Scope) {
        preorder(root, |node| {
            if self.enter(node, src, scope) {
                Visit::Children
            } else {
                Visit::Skip
            }
        });
    }

    /// Handles one node on the way down; returns whether to visit its children.
    pub(super) fn enter(&mut self, node: Node, src: &str, scope: Scope) -> bool {
        if !node.is_named() {
            return false;
        }
        let class = kinds().class(node);
        match class {
            Class::Command => {
                self.command(node, src, scope);
                may_hold_commands(node_text(node, src))
            }
            Class::DeclarationCommand => {
                if let Some(keyword) = node.child(0) {
                    self.lookup(keyword.kind());
                }
                self.evaluated_strings(node, src, scope);
                may_hold_commands(node_text(node, src))
            }
            Class::UnsetCommand => {
                self.lookup("unset");
                self.evaluated_strings(node, src, scope);
                may_hold_commands(node_text(node, src))
            }
            Class::TestCommand => {
                self.evaluated_strings(node, src, scope);
                may_hold_commands(node_text(node, src))
            }
            Class::HeredocRedirect => {
                match heredoc_backticks(node, src) {
                    Ok(scripts) => {
                        for script in scripts {
                            self.script(&script, scope.nested());
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
                self.leftover_substitutions(node, src, scope);
                node.child_count() > 0
            }
            Class::Assignment => {
                let text = node_text(node, src);
                if !may_hold_commands(text) {
                    return false;
                }
                if let Some(value) = node.child_by_field_id(kinds().field_value.get()) {
                    self.evaluated_value(value, src, scope);
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
                            self.script(&inner, scope.nested());
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
                    self.evaluated_value(value, src, scope);
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
