//! Where variables get their values: every value a script gives a variable that makes a tool run
//! something ([`hidden::VARIABLES`]: `TAR_OPTIONS`, `BASH_ENV`, …), however it gives it, and
//! whether a `${x@P}` prompt expansion's value is literal text the walk has already seen.

use super::heredoc::stdin_script;
use super::preorder::{preorder, Visit};
use super::{clip, Args, Scope, Walker};
use crate::parser::hidden;
use crate::parser::inner::{Inner, Seen};
use crate::parser::kinds::kinds;
use crate::parser::literal::literal;
use crate::parser::parse::node_text;
use crate::reason::Reason;
use tree_sitter::Node;

impl Walker<'_> {
    /// Variables that make a tool run something the command line does not show:
    /// `TAR_OPTIONS='--to-command=git' tar -xf a.tar`, `BASH_ENV=f bash -c ls`, … Every value
    /// the script gives one, however it gives it, is classified with the commands, since the
    /// script can use it later: an assignment (`X=v cmd`, `export X=v`, `env X=v cmd`,
    /// `${X:=v}`), a `for` loop, `read`/`mapfile` (from a literal here-string or heredoc; run-time
    /// input is dynamic), `printf -v` (dynamic: the value is formatted at run time, and a denied
    /// command in its literal arguments refuses), and a nameref to it (`declare -n r=X; r=v`).
    pub(super) fn variables(&mut self, root: Node, src: &str, scope: Scope) {
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
            self.run("the environment", item, Args::NONE, None, scope);
        }
    }

    /// `read X`, `mapfile X`, `readarray X` and `printf -v X …` for a variable `target` knows.
    pub(super) fn variable_setters(
        &self,
        command: Node,
        src: &str,
        target: &dyn Fn(&str) -> Option<String>,
        found: &mut Vec<Inner>,
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
                found.push(Inner::Dynamic {
                    detail: format!("{variable} set by printf -v at run time"),
                    seen: Seen::Pieces(args.iter().flatten().cloned().collect()),
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

    /// `${x@P}` expands the value of x as a prompt, running its substitutions. A value the script
    /// set literally was classified where it was set ([`Walker::evaluated_value`]); any other
    /// value (command output, `read`, the environment, an indirection) is only known at run time.
    /// One pass over the script finds every such expansion and how each variable is set.
    pub(super) fn prompt_expansions(&mut self, root: Node, src: &str) {
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
    pub(super) fn of(root: Node, src: &'s str) -> Self {
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
    pub(super) fn only_literal(&self, name: &str) -> bool {
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
