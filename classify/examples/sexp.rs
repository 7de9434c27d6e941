//! Prints tree-sitter-bash's tree for a script: `cargo run -p kube-harness-worker --example sexp -- 'SCRIPT'`.
fn main() {
    let script = std::env::args().nth(1).unwrap_or_default();
    let mut parser = tree_sitter::Parser::new();
    parser
        .set_language(&kube_harness_bash_grammar::LANGUAGE.into())
        .expect("grammar loads");
    let tree = parser.parse(&script, None).expect("parse");
    print(tree.root_node(), &script, 0, None);
}

fn print(node: tree_sitter::Node, src: &str, depth: usize, field: Option<&str>) {
    let text = &src[node.byte_range()];
    let text: String = text.chars().take(40).collect();
    println!(
        "{}{}{}{} {:?}",
        "  ".repeat(depth),
        field.map(|f| format!("{f}: ")).unwrap_or_default(),
        if node.is_named() { "" } else { "'" },
        node.kind(),
        text
    );
    let mut cursor = node.walk();
    for (i, child) in node.children(&mut cursor).enumerate() {
        print(child, src, depth + 1, node.field_name_for_child(i as u32));
    }
}
