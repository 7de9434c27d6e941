//! Compiles the generated parser and the hand-written external scanner, as tree-sitter-bash's own
//! build script does, with one difference: the optimiser stays on for the lexer.
//!
//! tree-sitter-cli puts `#pragma GCC optimize ("O0")` (and the clang/MSVC equivalents) at the top
//! of any parser.c with a large lexer, to save compile time. Lexing is about a third of the parse
//! work on agent commands (callgrind), so the build compiles a copy of parser.c without those three
//! lines (about 10 s more of C compilation, once). src/parser.c itself stays exactly what
//! `tree-sitter generate` writes, so `regenerate.sh --check` can compare it byte for byte.

use std::path::{Path, PathBuf};

const O0_PRAGMAS: [&str; 3] = [
    "#pragma optimize(\"\", off)",
    "#pragma clang optimize off",
    "#pragma GCC optimize (\"O0\")",
];

fn main() {
    let src = Path::new("src");
    let parser = src.join("parser.c");
    println!("cargo:rerun-if-changed={}", parser.display());
    println!("cargo:rerun-if-changed=src/scanner.c");
    println!("cargo:rerun-if-changed=src/tree_sitter");

    let text = std::fs::read_to_string(&parser).expect("read src/parser.c");
    let kept: Vec<&str> = text
        .lines()
        .filter(|line| !O0_PRAGMAS.contains(&line.trim()))
        .collect();
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("parser.c");
    std::fs::write(&out, kept.join("\n") + "\n").expect("write the optimisable parser.c");

    cc::Build::new()
        .std("c11")
        .include(src)
        .flag_if_supported("-Wno-unused-value")
        .flag_if_supported("-Wno-unused-parameter")
        .warnings(false)
        .file(out)
        .file(src.join("scanner.c"))
        .compile("kube-harness-bash-grammar");
}
