fn main() {
    let scripts = ["ls -la /session", "rg -n 'TODO' src | head -20", "rm -rf build && cargo build --release", "cat package.json | jq '.dependencies | keys[]'", "find . -name '*.rs' -exec wc -l {} + | sort -n | tail -5", "for f in *.md; do echo \"$f\"; grep -c foo \"$f\"; done", "sqlite3 db.sqlite 'select count(*) from users' > /artifacts/count.txt"];
    let mut parser = tree_sitter::Parser::new();
    parser.set_language(&tree_sitter_bash::LANGUAGE.into()).unwrap();
    let n = 200_000;
    let t = std::time::Instant::now();
    let mut nodes = 0usize;
    for i in 0..n {
        let s = scripts[i % scripts.len()];
        let tree = parser.parse(s, None).unwrap();
        nodes += tree.root_node().child_count();
    }
    let el = t.elapsed();
    println!("{} parses in {:?}: {:.0}/s, {:.2}us each ({nodes})", n, el, n as f64 / el.as_secs_f64(), el.as_secs_f64()*1e6/n as f64);
}
