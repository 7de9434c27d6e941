//! The substitutions bash runs in text: quoted text evaluated as arithmetic, substitutions
//! tree-sitter-bash leaves as text, and literal values that hold `$(` or a backquote (bash runs
//! them wherever the value is evaluated later).

use super::heredoc::stdin_script;
use super::preorder::{preorder, Visit};
use super::{clip, Scope, Walker, UNPARSED};
use crate::parser::kinds::{kinds, Class};
use crate::parser::literal::{literal, skeleton};
use crate::parser::parse::node_text;
use crate::reason::Reason;
use tree_sitter::Node;

impl Walker<'_> {
    /// Quoted text that bash evaluates as arithmetic, which expands `$(…)` and backquotes: array
    /// subscripts in the names `unset`, `declare` and `local` take (`unset 'a[$(git)]'`),
    /// `declare -i` values, `[[ -v NAME ]]` and `[[ … -eq … ]]` operands. Any quoted string under
    /// `node` holding a substitution is classified as the argument of `:`, which may escalate an
    /// `export X='$(…)'` or `[[ $x == '$(…)' ]]` that bash would leave alone.
    pub(super) fn evaluated_strings(&mut self, node: Node, src: &str, scope: Scope) {
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
            self.script(&format!(": {value}"), scope.nested());
        }
    }

    /// Command substitutions in a token tree-sitter-bash did not parse although bash expands it:
    /// `` ${x:-`git`} ``, `` ${x/`git`/} ``, `` [[ $x =~ `git` ]] ``, and single-quoted text inside
    /// a double-quoted `${…}` (`"${x:-'`git`'}"`, where the quotes are plain characters).
    pub(super) fn leftover_substitutions(&mut self, node: Node, src: &str, scope: Scope) {
        let text = node_text(node, src);
        if !text.contains('`') && !text.contains("$(") {
            return;
        }
        if node.kind_id() == kinds().raw_string && !in_double_quoted_expansion(node) {
            return;
        }
        self.substitutions_in(text, scope);
    }

    /// Classifies every `$(…)` and backquoted command in `text`, read as bash reads an unquoted
    /// word (a backslash escapes the next character).
    pub(super) fn substitutions_in(&mut self, text: &str, scope: Scope) {
        match scan_substitutions(text) {
            Ok(found) => {
                for script in found {
                    self.script(&script, scope.nested());
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
    pub(super) fn evaluated_value(&mut self, value: Node, src: &str, scope: Scope) {
        let kinds = kinds();
        if value.kind_id() == kinds.array {
            let mut cursor = value.walk();
            let elements: Vec<Node> = value.named_children(&mut cursor).collect();
            for element in elements {
                if element.kind_id() != kinds.array {
                    self.evaluated_value(element, src, scope);
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
            self.substitutions_in(&skeleton, scope);
        }
    }

    /// Literal arguments that become values: `set -- ARGS` (positional parameters), arguments of
    /// a function defined in the script, `printf -v NAME FORMAT ARGS`, and the here-string or
    /// heredoc `read`, `mapfile` and `readarray` read (see [`Walker::evaluated_value`]).
    pub(super) fn argument_values(&mut self, base: &str, node: Node, src: &str, scope: Scope) {
        let kinds = kinds();
        if matches!(base, "read" | "mapfile" | "readarray") {
            if let Some(Some(text)) = stdin_script(node, src) {
                if text.contains("$(") || text.contains('`') {
                    self.substitutions_in(&text, scope);
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
        if base == "set" || printf_v || scope.defines(base) {
            for arg in args {
                self.evaluated_value(arg, src, scope);
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
pub fn unescape_backquoted(body: &str, in_string: bool) -> String {
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
