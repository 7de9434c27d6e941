#!/usr/bin/env python3
"""Reports module cycles inside one Rust crate: `scripts/module-cycles.py operator/src`.

Each .rs file under the src dir is a node (`lib.rs`/`main.rs` is the crate root; `a.rs` and
`a/mod.rs` are module `a`; `a/b.rs` is `a::b`; `src/bin/` is skipped: those are other crates).
An edge A -> B means a file A names something defined in file B, through

  - a `use` tree (`use crate::a::b::{C, d::E}`, `use super::x::Y`, `use self::..`, and 2018
    relative paths that start with a child module);
  - a path in code (`crate::a::f()`, `super::x::Y`, or `m::f()` where `m` was imported as a
    module by a `use`).

A path is resolved to the longest known module prefix. When that module only re-exports the
name (`pub use sub::Y;`, `pub use sub::*;`), the edge goes on to the module that defines it, so
`crate::Error` counts as a use of error.rs, not of lib.rs. `mod x;` declarations are structure,
not dependencies, and are not edges; neither is a `pub use` the file's own code does not use
(a re-export), nor importing a module itself (`use crate::tier1;`): only what is then used
through it. Comments and string literals are ignored; inline modules
(`mod tests { use super::*; }`) resolve `super` from where they sit.

Prints each strongly connected component of more than one file with the edges that form it
(file:line of a reference each) and exits 1 if there is any; exits 0 and says so otherwise.
`--self-test` runs the script on small made-up crates with known answers. No dependencies
beyond python3.
"""

import os
import re
import sys
from collections import defaultdict

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def strip(src):
    """Source with comments and string/char literals blanked (newlines kept, for line numbers)."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif src.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if src.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif src.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "r" and re.match(r'r#*"', src[i:]) and not re.match(r"[A-Za-z0-9_]", src[i - 1 : i] or " "):
            m = re.match(r'r(#*)"', src[i:])
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0)))
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif c == "'":
            # A char literal ('x', '\n', '\u{1F}'), else a lifetime or label.
            m = re.match(r"'(\\(u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'])'", src[i:])
            if m:
                out.append(" " * len(m.group(0)))
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


class Module:
    def __init__(self, path, file):
        self.path = path  # tuple of segments; () is the crate root
        self.file = file
        self.children = set()
        self.reexports = {}  # name -> (line, absolute path tuple) ; "*" -> list of such


def module_files(src):
    """{module path tuple: file} for every .rs file under src."""
    mods = {}
    for root, dirs, files in os.walk(src):
        rel = os.path.relpath(root, src)
        parts = () if rel == "." else tuple(rel.split(os.sep))
        if parts[:1] == ("bin",):
            dirs[:] = []
            continue
        for f in files:
            if not f.endswith(".rs"):
                continue
            stem = f[:-3]
            if not parts and stem in ("lib", "main"):
                if stem == "main" and () in mods:
                    continue
                path = ()
            elif stem == "mod":
                path = parts
            else:
                path = parts + (stem,)
            mods[path] = os.path.join(root, f)
    return mods


def tokens(code):
    """(kind, text, line) for identifiers, `::` and single punctuation."""
    line = 1
    for m in re.finditer(r"\n|::|" + IDENT + r"|\S", code):
        t = m.group(0)
        if t == "\n":
            line += 1
            continue
        yield ("ident" if re.match(IDENT, t) else "punct", t, line)


def parse_use_tree(toks, i):
    """Parses a use tree at toks[i]; returns (list of (segments, alias or None or '*'), next i)."""
    prefix = []
    while i < len(toks):
        kind, t, _ = toks[i]
        if t == "{":
            items, i = [], i + 1
            while i < len(toks) and toks[i][1] != "}":
                sub, i = parse_use_tree(toks, i)
                items += [(prefix + s, a) for s, a in sub]
                if i < len(toks) and toks[i][1] == ",":
                    i += 1
            return items, i + 1
        if t == "*":
            return [(prefix, "*")], i + 1
        if kind == "ident":
            prefix.append(t)
            i += 1
            if i < len(toks) and toks[i][1] == "::":
                i += 1
                continue
            if i + 1 < len(toks) and toks[i][1] == "as":
                return [(prefix, toks[i + 1][1])], i + 2
            return [(prefix, None)], i
        return [(prefix, None)], i
    return [(prefix, None)], i


class Crate:
    def __init__(self, src):
        self.src = src
        self.mods = {p: Module(p, f) for p, f in module_files(src).items()}
        for p in self.mods:
            if p:
                parent = self.mods.get(p[:-1])
                if parent:
                    parent.children.add(p[-1])
        self.parsed = {}
        for p, m in self.mods.items():
            with open(m.file, encoding="utf-8") as fh:
                self.parsed[p] = list(tokens(strip(fh.read())))
        self.uses = {p: self.scan_uses(p) for p in self.mods}
        for p, uses in self.uses.items():
            for public, scope, segs, alias, line in uses:
                if not public or scope != p:
                    continue
                absolute = self.absolute(scope, segs)
                if absolute is None:
                    continue
                if alias == "*":
                    self.mods[p].reexports.setdefault("*", []).append((line, absolute))
                else:
                    name = alias or (absolute[-1] if absolute else None)
                    if name and name != "self":
                        self.mods[p].reexports[name] = (line, absolute)

    def scan_uses(self, path):
        """[(public, scope module path, segments, alias, line)] for every `use` in the file."""
        toks = self.parsed[path]
        out, stack, depth = [], [], 0
        i = 0
        while i < len(toks):
            kind, t, line = toks[i]
            if t == "mod" and i + 2 < len(toks) and toks[i + 2][1] == "{":
                stack.append((toks[i + 1][1], depth + 1))
                depth += 1
                i += 3
                continue
            if t == "{":
                depth += 1
            elif t == "}":
                if stack and stack[-1][1] == depth:
                    stack.pop()
                depth -= 1
            elif t == "use" and kind == "ident":
                public = self.is_public(toks, i)
                scope = path + tuple(s for s, _ in stack)
                items, j = parse_use_tree(toks, i + 1)
                for segs, alias in items:
                    out.append((public, scope, segs, alias, line))
                i = j
                continue
            i += 1
        return out

    @staticmethod
    def is_public(toks, i):
        j = i - 1
        if j >= 0 and toks[j][1] == ")":
            while j >= 0 and toks[j][1] != "(":
                j -= 1
            j -= 1
        return j >= 0 and toks[j][1] == "pub"

    def file_scope(self, scope):
        """The module path of the file that holds `scope` (inline modules live in a file)."""
        while scope not in self.mods:
            scope = scope[:-1]
        return scope

    def absolute(self, scope, segs):
        """Segments resolved against `scope` to crate-absolute ones, or None if external."""
        if not segs:
            return None
        head, rest = segs[0], list(segs[1:])
        if head == "crate":
            base = ()
        elif head == "self":
            base = scope
        elif head == "super":
            base = scope[:-1]
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
        else:
            fs = self.file_scope(scope)
            if fs == scope and head in self.mods[fs].children:
                base, rest = scope, [head] + rest
            else:
                return None
        return tuple(base) + tuple(rest)

    def resolve(self, absolute, seen=None):
        """The (file module, line of the re-export followed or None) that defines `absolute`."""
        seen = seen or set()
        cut = len(absolute)
        while absolute[:cut] not in self.mods:
            cut -= 1
        mod = absolute[:cut]
        rest = absolute[cut:]
        if not rest or (mod, rest[0]) in seen:
            return mod
        seen.add((mod, rest[0]))
        m = self.mods[mod]
        if rest[0] in m.reexports:
            _, target = m.reexports[rest[0]]
            return self.resolve(target + tuple(rest[1:]), seen)
        for _, target in m.reexports.get("*", []):
            # A glob re-export: follow it if the name is a module below the target, or if the
            # target module's file defines the name.
            t = self.resolve(target + tuple(rest), seen)
            if t != self.file_scope(target) or self.defines(t, rest[0]):
                return t
        return mod

    def defines(self, mod, name):
        toks = self.parsed[mod]
        kw = {"fn", "struct", "enum", "trait", "type", "const", "static", "mod", "union", "macro_rules"}
        return any(
            toks[k][1] in kw and k + 1 < len(toks) and toks[k + 1][1].lstrip("!") == name
            for k in range(len(toks))
        ) or any(
            toks[k][1] == "macro_rules" and k + 2 < len(toks) and toks[k + 2][1] == name
            for k in range(len(toks))
        )

    def is_module(self, absolute):
        return absolute in self.mods

    def edges(self):
        """{(from file module, to file module): first line of a reference}."""
        found = {}

        def add(src, dst, line):
            if src != dst and (src, dst) not in found:
                found[(src, dst)] = line

        for path in self.mods:
            aliases = defaultdict(dict)  # scope -> {local name: absolute module path}
            local = self.code_idents(path)
            for public, scope, segs, alias, line in self.uses[path]:
                absolute = self.absolute(scope, segs)
                if absolute is None:
                    continue
                # A re-export that the file's own code does not use is no dependency of the
                # file: references through it are resolved to the defining file instead.
                reexport_only = public and scope == path and (
                    alias == "*" or (alias or segs[-1]) not in local
                )
                if alias == "*":
                    if not reexport_only:
                        add(path, self.resolve(absolute), line)
                    for child in self.mods.get(absolute, Module((), "")).children:
                        aliases[scope][child] = absolute + (child,)
                    continue
                if absolute and absolute[-1] == "self":
                    absolute = absolute[:-1]
                if self.is_module(absolute):
                    aliases[scope][alias or absolute[-1]] = absolute
                elif not reexport_only:
                    add(path, self.resolve(absolute), line)
            self.code_paths(path, aliases, add)
        return found

    def code_idents(self, path):
        """Identifiers of the file outside `use` items."""
        out, toks, i = set(), self.parsed[path], 0
        while i < len(toks):
            if toks[i][1] == "use" and toks[i][0] == "ident":
                while i < len(toks) and toks[i][1] != ";":
                    i += 1
            elif toks[i][0] == "ident":
                out.add(toks[i][1])
            i += 1
        return out

    def code_paths(self, path, aliases, add):
        toks = self.parsed[path]
        stack, depth, i = [], 0, 0
        while i < len(toks):
            kind, t, line = toks[i]
            if t == "mod" and i + 2 < len(toks) and toks[i + 2][1] == "{":
                stack.append((toks[i + 1][1], depth + 1))
                depth += 1
                i += 3
                continue
            if t == "{":
                depth += 1
            elif t == "}":
                if stack and stack[-1][1] == depth:
                    stack.pop()
                depth -= 1
            if t == "use" and kind == "ident":
                # Already counted: skip to the end of the use item.
                while i < len(toks) and toks[i][1] != ";":
                    i += 1
                continue
            prev = toks[i - 1][1] if i else ""
            if kind == "ident" and prev != "::" and i + 1 < len(toks) and toks[i + 1][1] == "::":
                segs, j = [t], i + 1
                while j + 1 < len(toks) and toks[j][1] == "::" and toks[j + 1][0] == "ident":
                    segs.append(toks[j + 1][1])
                    j += 2
                scope = path + tuple(s for s, _ in stack)
                absolute = None
                if segs[0] in ("crate", "self", "super"):
                    absolute = self.absolute(scope, segs)
                else:
                    s = scope
                    while True:
                        if segs[0] in aliases.get(s, {}):
                            absolute = aliases[s][segs[0]] + tuple(segs[1:])
                            break
                        if s == path or not s:
                            break
                        s = s[:-1]
                    if absolute is None:
                        absolute = self.absolute(scope, segs)
                if absolute is not None:
                    add(path, self.resolve(absolute), line)
                i = j
                continue
            i += 1


def sccs(nodes, graph):
    """Tarjan's strongly connected components."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    sys.setrecursionlimit(10000)

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def cycles_of(src):
    """(the crate, {(from, to): line}, [components of more than one module path])."""
    crate = Crate(src)
    found = crate.edges()
    graph = defaultdict(set)
    for a, b in found:
        graph[a].add(b)
    return crate, found, graph, [c for c in sccs(crate.mods, graph) if len(c) > 1]


SELF_TESTS = [
    # (name, {file: text}, expected components as sets of module paths joined by "::")
    ("use cycle", {"lib.rs": "mod a; mod b;", "a.rs": "use crate::b::B; pub struct A;",
                   "b.rs": "pub struct B; fn f() { let _ = crate::a::A; }"}, [{"a", "b"}]),
    ("one way", {"lib.rs": "mod a; mod b;", "a.rs": "use crate::b::B;", "b.rs": "pub struct B;"}, []),
    ("through re-exports of the root",
     {"lib.rs": "mod a; mod b; pub use a::A; pub use b::B;",
      "a.rs": "pub struct A; fn f() -> crate::B { todo!() }",
      "b.rs": "pub struct B; use crate::A;\nfn g(_: A) {}"}, [{"a", "b"}]),
    ("re-export only: no edge from the root",
     {"lib.rs": "mod a; pub use a::A; pub struct R;", "a.rs": "pub struct A; use crate::R;"}, []),
    ("mod.rs code and a child",
     {"lib.rs": "mod m;", "m/mod.rs": "mod c; pub fn top() { c::leaf() } pub struct T;",
      "m/c.rs": "use super::T; pub fn leaf() {}"}, [{"m", "m::c"}]),
    ("foo.rs + foo/ layout, inline tests",
     {"lib.rs": "mod foo;", "foo.rs": "mod bar; pub fn f() {}\n#[cfg(test)] mod tests { use super::*; }",
      "foo/bar.rs": "use super::f;\nmod tests { use super::*; }"}, []),
    ("comments and strings are not references",
     {"lib.rs": "mod a; mod b;", "a.rs": "// crate::b::B\npub struct A; const S: &str = \"crate::b::x\";",
      "b.rs": "use crate::a::A; /* crate::a */ pub struct B; fn c() -> char { '\\'' }"}, []),
    ("module alias then a path",
     {"lib.rs": "mod a; mod b;", "a.rs": "use crate::b;\npub struct A; fn f() { b::g() }",
      "b.rs": "pub fn g() { let _ = super::a::A; }"}, [{"a", "b"}]),
]


def self_test():
    import tempfile
    failures = 0
    for name, files, want in SELF_TESTS:
        with tempfile.TemporaryDirectory() as src:
            for rel_path, text in files.items():
                path = os.path.join(src, rel_path)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                with open(path, "w", encoding="utf-8") as fh:
                    fh.write(text + "\n")
            _, _, _, got = cycles_of(src)
            got = sorted(sorted("::".join(p) or "crate" for p in c) for c in got)
            expected = sorted(sorted(c) for c in want)
            if got != expected:
                failures += 1
                print(f"FAIL {name}: got {got}, want {expected}")
    print(f"{len(SELF_TESTS) - failures}/{len(SELF_TESTS)} self-tests passed")
    return 1 if failures else 0


def main(argv):
    if argv[1:] == ["--self-test"]:
        return self_test()
    if len(argv) != 2 or not os.path.isdir(argv[1]):
        print("usage: module-cycles.py SRC_DIR | --self-test", file=sys.stderr)
        return 2
    crate, found, graph, cycles = cycles_of(argv[1])
    rel = lambda p: os.path.relpath(crate.mods[p].file, argv[1])
    for comp in cycles:
        members = set(comp)
        print("cycle: " + ", ".join(rel(p) for p in comp))
        for a in comp:
            for b in sorted(graph[a] & members):
                print(f"  {rel(a)}:{found[(a, b)]} -> {rel(b)}")
    if cycles:
        return 1
    print(f"no module cycles among {len(crate.mods)} files ({len(found)} edges) in {argv[1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
