//! Turning word-like nodes into the literal strings bash would see, where that is knowable without
//! running anything. Anything that expands at run time has no literal value (`None`).

use super::kinds::kinds;
use super::parse::node_text;
use tree_sitter::Node;

/// The literal value of a word-like node: quotes removed, escapes applied, concatenations joined.
pub fn literal(node: Node, src: &str) -> Option<String> {
    let mut out = String::new();
    append_literal(node, src, &mut out).then_some(out)
}

fn append_literal(node: Node, src: &str, out: &mut String) -> bool {
    let text = node_text(node, src);
    let kinds = kinds();
    let kind = node.kind_id();
    if kind == kinds.word || kind == kinds.number {
        unescape_unquoted(text, out);
        true
    } else if kind == kinds.raw_string {
        out.push_str(strip_pair(text, '\'', '\''));
        true
    } else if kind == kinds.string {
        let mut cursor = node.walk();
        let only_text = node
            .named_children(&mut cursor)
            .all(|c| c.kind_id() == kinds.string_content);
        if only_text {
            unescape_double_quoted(strip_pair(text, '"', '"'), out);
        }
        only_text
    } else if kind == kinds.concatenation || kind == kinds.command_name {
        let mut cursor = node.walk();
        let children: Vec<Node> = node.children(&mut cursor).collect();
        children.into_iter().all(|c| append_literal(c, src, out))
    } else {
        // `$'…'`, `$"…"`, expansions, substitutions, brace and arithmetic expansions: run-time
        // values.
        false
    }
}

/// The literal beginning of a word that expands at run time (`--to-command=` in
/// `--to-command="$C"`): quotes removed and escapes applied up to the first expansion.
pub fn literal_prefix(node: Node, src: &str) -> String {
    let mut out = String::new();
    append_prefix(node, src, &mut out);
    out
}

/// Appends what is literal from the start of `node`; returns whether all of it was.
fn append_prefix(node: Node, src: &str, out: &mut String) -> bool {
    let kinds = kinds();
    let kind = node.kind_id();
    if kind == kinds.concatenation {
        let mut cursor = node.walk();
        let children: Vec<Node> = node.children(&mut cursor).collect();
        children.into_iter().all(|c| append_prefix(c, src, out))
    } else if kind == kinds.string {
        let mut cursor = node.walk();
        let children: Vec<Node> = node.named_children(&mut cursor).collect();
        for child in children {
            if child.kind_id() != kinds.string_content {
                return false;
            }
            unescape_double_quoted(node_text(child, src), out);
        }
        true
    } else {
        let mut piece = String::new();
        let whole = append_literal(node, src, &mut piece);
        if whole {
            out.push_str(&piece);
        }
        whole
    }
}

fn strip_pair(text: &str, open: char, close: char) -> &str {
    let t = text.strip_prefix(open).unwrap_or(text);
    t.strip_suffix(close).unwrap_or(t)
}

/// Outside quotes a backslash quotes the next character, and backslash-newline disappears.
fn unescape_unquoted(text: &str, out: &mut String) {
    if !text.contains('\\') {
        out.push_str(text);
        return;
    }
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('\n') | None => {}
                Some(next) => out.push(next),
            }
        } else {
            out.push(c);
        }
    }
}

/// Inside double quotes a backslash only escapes `$`, `` ` ``, `"`, `\` and newline.
fn unescape_double_quoted(text: &str, out: &mut String) {
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.peek() {
                Some('$' | '`' | '"' | '\\') => out.push(chars.next().expect("peeked")),
                Some('\n') => {
                    chars.next();
                }
                _ => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
}

/// True when an unquoted word would undergo globbing, making a command name run-time dependent.
pub fn has_glob(text: &str) -> bool {
    let mut escaped = false;
    for c in text.chars() {
        match c {
            '\\' if !escaped => escaped = true,
            '*' | '?' if !escaped => return true,
            _ => escaped = false,
        }
    }
    false
}
