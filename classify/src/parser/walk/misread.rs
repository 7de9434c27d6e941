//! Where tree-sitter-bash 0.25 reads a valid script differently from bash, and the script the walk
//! classifies instead: line continuations that join two tokens, and `!` before a compound command.

use super::heredoc::heredoc_is_quoted;
use super::preorder::{preorder, Visit};
use super::RESERVED;
use crate::parser::parse::node_text;
use tree_sitter::Node;

/// bash removes a backslash-newline outside quotes and comments before it reads words; tree-sitter-
/// bash skips it as a blank, so `g\⏎it` is two words to it and git to bash. Returns the script
/// with every such continuation between tokens removed when one joins two tokens, else `None`.
pub fn joined_continuations(root: Node, src: &str) -> Option<String> {
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

/// tree-sitter-bash 0.25 only accepts a simple command, test or subshell after `!`; with a compound
/// command (`! if …`, `! { …; }`, `! ! …`) it reads reserved words as command names. When that
/// happened, returns the script with every stand-alone `!` word blanked out (one pass, however long
/// a `! ! ! …` chain is), else `None`.
pub fn without_misparsed_negations(root: Node, src: &str) -> Option<String> {
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
