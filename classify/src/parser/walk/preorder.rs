//! The one traversal every part of the walk uses. A leaf.

use tree_sitter::Node;

/// What a pre-order visit does after a node.
pub enum Visit {
    Children,
    Skip,
    Stop,
}

/// Pre-order traversal with one cursor: no recursion, so a deeply nested tree cannot overflow the
/// stack.
pub fn preorder<'t>(root: Node<'t>, mut visit: impl FnMut(Node<'t>) -> Visit) {
    let mut cursor = root.walk();
    loop {
        match visit(cursor.node()) {
            Visit::Stop => return,
            Visit::Children if cursor.goto_first_child() => continue,
            Visit::Children | Visit::Skip => {}
        }
        loop {
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return;
            }
        }
    }
}
