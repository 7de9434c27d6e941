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
    } else if kind == kinds.ansi_c_string {
        let body = text.strip_prefix('$').unwrap_or(text);
        decode_ansi_c(strip_pair(body, '\'', '\''), out);
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
        // `$"…"`, expansions, substitutions, brace and arithmetic expansions: run-time values.
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

/// The literal text of a word with every run-time part left out: `'$'"$y"'(git)'` is `$(git)`
/// (the run-time part may be empty). Substitutions are left out too: their commands are the
/// walk's own.
pub fn skeleton(node: Node, src: &str) -> String {
    let mut out = String::new();
    append_skeleton(node, src, &mut out);
    out
}

fn append_skeleton(node: Node, src: &str, out: &mut String) {
    let kinds = kinds();
    let kind = node.kind_id();
    if kind == kinds.concatenation || kind == kinds.string {
        let mut cursor = node.walk();
        let children: Vec<Node> = node.named_children(&mut cursor).collect();
        if kind == kinds.string && children.is_empty() {
            return;
        }
        for child in children {
            if child.kind_id() == kinds.string_content {
                unescape_double_quoted(node_text(child, src), out);
            } else {
                append_skeleton(child, src, out);
            }
        }
    } else {
        append_literal(node, src, out);
    }
}

/// Bash's `$'…'` as a word: escapes decoded ([`crate::ansi_c`]), and the word ends at a NUL.
fn decode_ansi_c(text: &str, out: &mut String) {
    let bytes = crate::ansi_c::decode(text.as_bytes());
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    out.push_str(&String::from_utf8_lossy(&bytes[..end]));
}

fn strip_pair(text: &str, open: char, close: char) -> &str {
    let t = text.strip_prefix(open).unwrap_or(text);
    t.strip_suffix(close).unwrap_or(t)
}

/// Outside quotes a backslash quotes the next character, and backslash-newline disappears.
pub fn unescape_unquoted(text: &str, out: &mut String) {
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
pub fn unescape_double_quoted(text: &str, out: &mut String) {
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

/// The text of `node` with every quoted part replaced by `q`, so that [`has_glob`] sees only what
/// bash would expand: `g{i,}t` keeps its braces, `'g{i,}t'` and `"*"` do not.
pub fn unquoted_shape(node: Node, src: &str) -> String {
    let kinds = kinds();
    let start = node.start_byte();
    let mut quoted: Vec<(usize, usize)> = Vec::new();
    let mut stack = vec![node];
    while let Some(n) = stack.pop() {
        let k = n.kind_id();
        if k == kinds.string || k == kinds.raw_string || k == kinds.ansi_c_string {
            quoted.push((n.start_byte(), n.end_byte()));
            continue;
        }
        let mut cursor = n.walk();
        stack.extend(n.children(&mut cursor));
    }
    quoted.sort_unstable();
    let mut out = String::new();
    let mut at = start;
    for (from, to) in quoted {
        out.push_str(src.get(at..from).unwrap_or_default());
        out.push('q');
        at = to;
    }
    out.push_str(src.get(at..node.end_byte()).unwrap_or_default());
    out
}

/// True when an unquoted word would undergo brace or pathname expansion (`g{i,}t`, `g{i..i}t`,
/// `/usr/bin/gi?`, `gi[t]`), making a command name run-time dependent. A lone `[` or `{` (the
/// test builtin, a group) is not an expansion.
pub fn has_glob(text: &str) -> bool {
    let mut escaped = false;
    let mut brace: Option<usize> = None;
    let mut bracket = false;
    for (i, c) in text.char_indices() {
        match c {
            '\\' if !escaped => escaped = true,
            '*' | '?' if !escaped => return true,
            '[' if !escaped => {
                bracket = true;
                escaped = false;
            }
            ']' if !escaped && bracket => return true,
            '{' if !escaped => {
                brace = Some(i);
                escaped = false;
            }
            '}' if !escaped => {
                if let Some(open) = brace {
                    let inner = text.get(open..i).unwrap_or_default();
                    if inner.contains(',') || inner.contains("..") {
                        return true;
                    }
                }
                escaped = false;
            }
            _ => escaped = false,
        }
    }
    false
}

/// The words of `text` as bash would join them, for the fail-closed scan of text the walk cannot
/// read (a script that does not parse): unquoted blanks and operators separate words, quotes are
/// removed and escapes applied (`"g"it`, `gi''t`, `g\it`, `g\⏎it` and `$'\x67it'` are all git).
/// `$(`, `${`, `` ` ``, `=` and a closing `)` or `}` end a word too, since what follows them may
/// be a command name or a value.
pub fn shell_words(text: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut chars = text.chars().peekable();
    let mut in_double = false;
    let finish = |word: &mut String, words: &mut Vec<String>| {
        if !word.is_empty() {
            words.push(std::mem::take(word));
        }
    };
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') | None => {}
                Some(next) if in_double && !matches!(next, '$' | '`' | '"' | '\\') => {
                    word.push('\\');
                    word.push(next);
                }
                Some(next) => word.push(next),
            },
            '"' => in_double = !in_double,
            '\'' if !in_double => {
                for q in chars.by_ref() {
                    if q == '\'' {
                        break;
                    }
                    word.push(q);
                }
            }
            '$' if !in_double && chars.peek() == Some(&'\'') => {
                chars.next();
                let mut body = String::new();
                while let Some(q) = chars.next() {
                    match q {
                        '\\' => {
                            body.push('\\');
                            if let Some(n) = chars.next() {
                                body.push(n);
                            }
                        }
                        '\'' => break,
                        _ => body.push(q),
                    }
                }
                decode_ansi_c(&body, &mut word);
            }
            '$' | '`' | '=' | ')' | '}' => finish(&mut word, &mut words),
            c if !in_double && (c.is_whitespace() || "|&;(<>{".contains(c)) => {
                finish(&mut word, &mut words)
            }
            c => word.push(c),
        }
    }
    finish(&mut word, &mut words);
    words
}
