//! What a command reads on stdin: a heredoc's or here-string's text, and the backquoted commands
//! tree-sitter-bash leaves as text in an unquoted heredoc body.

use crate::parser::literal::literal;
use crate::parser::parse::node_text;
use tree_sitter::Node;

/// The script a shell command reads from a heredoc or here-string: `Some(Some(text))` when literal,
/// `Some(None)` when it expands at run time, `None` when stdin is not redirected that way.
pub fn stdin_script(command: Node, src: &str) -> Option<Option<String>> {
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
pub fn heredoc_is_quoted(redirect: Node, src: &str) -> bool {
    let mut cursor = redirect.walk();
    let quoted = redirect
        .named_children(&mut cursor)
        .find(|n| n.kind() == "heredoc_start")
        .is_some_and(|s| node_text(s, src).contains(['\'', '"', '\\']));
    quoted
}

/// Backquoted command substitutions in an unquoted heredoc body, which tree-sitter-bash leaves as
/// plain text: `Err` when a backquote is unterminated.
pub fn heredoc_backticks(redirect: Node, src: &str) -> Result<Vec<String>, ()> {
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
