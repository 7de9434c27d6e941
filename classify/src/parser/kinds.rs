//! Node kinds and field names of the grammar, resolved to numeric ids once per process.
//!
//! `Node::kind()` costs a `strlen` and a UTF-8 check per call, and `child_by_field_name` a search
//! of the field names; the walk asks both for every node of every script, which was a fifth of
//! its time. Comparing ids is one load.

use std::num::NonZeroU16 as FieldId;
use std::sync::OnceLock;
use tree_sitter::{Language, Node};

/// What the walk does with a named node.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Class {
    /// A node kind the grammar has but the walk was not written for: fails closed.
    Unknown,
    /// A structural node: visit its children.
    Descend,
    /// Cannot contain anything that runs: skip its children.
    Leaf,
    Command,
    DeclarationCommand,
    UnsetCommand,
    HeredocRedirect,
    /// `[[ … ]]`: a [`Class::Words`] whose arithmetic operands and `-v` names bash evaluates.
    TestCommand,
    /// Its children can only run something through a substitution (`$(…)`, `` `…` ``, `<(…)`),
    /// so they are skipped when its text has none (see [`may_hold_commands`]).
    Words,
    /// A token tree-sitter-bash leaves unparsed although bash expands it: a backquote inside
    /// `${x:-…}`, `${x/…/}`, a `=~` regex (see `walk::leftover_substitutions`).
    Text,
    /// `NAME=VALUE`: a [`Class::Words`] whose literal value may be evaluated later.
    Assignment,
    /// `$(…)` or `` `…` ``: backquotes unescape `\$`, `` \` `` and `\\` before parsing.
    CommandSubstitution,
    /// `for NAME in WORDS`: the words are the variable's values.
    ForStatement,
}

/// Named node kinds the walk understands, and what it does with each.
const CLASSES: &[(&str, Class)] = &[
    ("program", Class::Descend),
    ("command", Class::Command),
    ("command_name", Class::Words),
    ("declaration_command", Class::DeclarationCommand),
    ("unset_command", Class::UnsetCommand),
    ("function_definition", Class::Descend),
    ("comment", Class::Leaf),
    ("list", Class::Descend),
    ("pipeline", Class::Descend),
    ("subshell", Class::Descend),
    ("compound_statement", Class::Descend),
    ("negated_command", Class::Descend),
    ("if_statement", Class::Descend),
    ("elif_clause", Class::Descend),
    ("else_clause", Class::Descend),
    ("while_statement", Class::Descend),
    ("for_statement", Class::ForStatement),
    ("c_style_for_statement", Class::Descend),
    ("do_group", Class::Descend),
    ("case_statement", Class::Descend),
    ("case_item", Class::Descend),
    ("redirected_statement", Class::Descend),
    ("file_redirect", Class::Words),
    ("heredoc_redirect", Class::HeredocRedirect),
    ("herestring_redirect", Class::Words),
    ("heredoc_body", Class::Descend),
    ("heredoc_start", Class::Leaf),
    ("heredoc_end", Class::Leaf),
    ("heredoc_content", Class::Leaf),
    ("test_command", Class::TestCommand),
    ("variable_assignment", Class::Assignment),
    ("variable_assignments", Class::Words),
    ("command_substitution", Class::CommandSubstitution),
    ("process_substitution", Class::Descend),
    ("expansion", Class::Descend),
    ("simple_expansion", Class::Descend),
    ("arithmetic_expansion", Class::Descend),
    ("string", Class::Words),
    ("string_content", Class::Descend),
    ("raw_string", Class::Text),
    ("ansi_c_string", Class::Leaf),
    ("translated_string", Class::Descend),
    ("concatenation", Class::Words),
    ("word", Class::Text),
    ("number", Class::Leaf),
    ("array", Class::Descend),
    ("brace_expression", Class::Descend),
    ("binary_expression", Class::Descend),
    ("unary_expression", Class::Descend),
    ("postfix_expression", Class::Descend),
    ("ternary_expression", Class::Descend),
    ("parenthesized_expression", Class::Descend),
    ("subscript", Class::Descend),
    ("variable_name", Class::Descend),
    ("special_variable_name", Class::Descend),
    ("file_descriptor", Class::Descend),
    ("extglob_pattern", Class::Text),
    ("regex", Class::Text),
    ("test_operator", Class::Descend),
];

/// The grammar's ids for what the walk and the literal reader compare against.
pub struct Kinds {
    classes: Vec<Class>,
    pub word: u16,
    pub number: u16,
    pub raw_string: u16,
    pub string: u16,
    pub string_content: u16,
    pub concatenation: u16,
    pub command_name: u16,
    pub comment: u16,
    pub variable_assignment: u16,
    pub command_substitution: u16,
    pub process_substitution: u16,
    pub ansi_c_string: u16,
    pub array: u16,
    pub expansion: u16,
    pub heredoc_body: u16,
    pub for_statement: u16,
    pub declaration_command: u16,
    pub command: u16,
    pub field_variable: FieldId,
    pub field_name: FieldId,
    pub field_argument: FieldId,
    pub field_value: FieldId,
}

impl Kinds {
    fn new(language: &Language) -> Self {
        let mut classes = vec![Class::Unknown; language.node_kind_count()];
        // A kind name can have several ids (aliases), so every id is looked at by its name.
        for (id, class) in classes.iter_mut().enumerate() {
            let id = id as u16;
            if !language.node_kind_is_named(id) {
                continue;
            }
            let Some(name) = language.node_kind_for_id(id) else {
                continue;
            };
            if let Some((_, c)) = CLASSES.iter().find(|(n, _)| *n == name) {
                *class = *c;
            }
        }
        let id = |kind: &str| language.id_for_node_kind(kind, true);
        // The grammar is compiled in, so a missing field is a build mistake the unit tests catch.
        let field = |name: &str| {
            language
                .field_id_for_name(name)
                .unwrap_or_else(|| panic!("the bash grammar has no field `{name}`"))
        };
        Kinds {
            classes,
            word: id("word"),
            number: id("number"),
            raw_string: id("raw_string"),
            string: id("string"),
            string_content: id("string_content"),
            concatenation: id("concatenation"),
            command_name: id("command_name"),
            comment: id("comment"),
            variable_assignment: id("variable_assignment"),
            command_substitution: id("command_substitution"),
            process_substitution: id("process_substitution"),
            ansi_c_string: id("ansi_c_string"),
            array: id("array"),
            expansion: id("expansion"),
            heredoc_body: id("heredoc_body"),
            for_statement: id("for_statement"),
            declaration_command: id("declaration_command"),
            command: id("command"),
            field_variable: field("variable"),
            field_name: field("name"),
            field_argument: field("argument"),
            field_value: field("value"),
        }
    }

    /// What the walk does with a named node of this kind.
    pub fn class(&self, node: Node) -> Class {
        self.classes
            .get(usize::from(node.kind_id()))
            .copied()
            .unwrap_or(Class::Unknown)
    }
}

/// The ids of the grammar the classifier parses with.
pub fn kinds() -> &'static Kinds {
    static KINDS: OnceLock<Kinds> = OnceLock::new();
    KINDS.get_or_init(|| Kinds::new(&kube_harness_bash_grammar::LANGUAGE.into()))
}

/// Whether the text under a [`Class::Words`] node could run anything: only a command, process or
/// arithmetic substitution can, and each needs `$`, a backquote or `(` (`<(…)`, `>(…)`, and the
/// subshell tree-sitter-bash accepts as a command's last argument).
pub fn may_hold_commands(text: &str) -> bool {
    text.bytes().any(|b| matches!(b, b'$' | b'`' | b'('))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_named_kind_of_the_grammar_has_a_class() {
        let language: Language = kube_harness_bash_grammar::LANGUAGE.into();
        let kinds = kinds();
        for id in 0..language.node_kind_count() as u16 {
            let name = language.node_kind_for_id(id).unwrap_or_default();
            // Supertypes (`_expression`, …) never appear in a tree; ERROR is checked before the walk.
            if !language.node_kind_is_named(id) || name.starts_with('_') || name == "ERROR" {
                continue;
            }
            assert_ne!(
                kinds.classes[usize::from(id)],
                Class::Unknown,
                "node kind `{name}` has no class"
            );
        }
    }

    #[test]
    fn ids_and_fields_resolve() {
        let kinds = kinds();
        for id in [kinds.word, kinds.comment, kinds.string, kinds.concatenation] {
            assert_ne!(id, 0);
        }
        assert_ne!(kinds.field_name, kinds.field_argument);
    }

    #[test]
    fn substitutions_are_noticed() {
        for text in ["$(a)", "`a`", "<(a)", ">(a)", "\"x$(a)\"", "${X:-$(a)}"] {
            assert!(may_hold_commands(text), "{text}");
        }
        for text in ["-la", "/session/a.txt", "'quoted'", "a,b", "{1..3}"] {
            assert!(!may_hold_commands(text), "{text}");
        }
    }
}
