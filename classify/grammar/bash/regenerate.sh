#!/usr/bin/env bash
# Regenerates src/parser.c, src/grammar.json and src/node-types.json from grammar.js with
# tree-sitter-cli 0.25.10 (the version that generated upstream tree-sitter-bash 0.25.1, ABI 15).
#   classify/grammar/bash/regenerate.sh          write the generated files into src/
#   classify/grammar/bash/regenerate.sh --check  exit 1 if they differ from the committed ones
# Needs node (grammar.js is evaluated by it) and a `tree-sitter` 0.25.10 on PATH; without one it
# builds it from crates.io into $KH_CACHE (default /var/cache/kube-harness), about 5 minutes on two
# cores. The npm package tree-sitter-cli downloads its binary from GitHub at install time, so it is
# not used here.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version=0.25.10
cache="${KH_CACHE:-/var/cache/kube-harness}"

cli="$(command -v tree-sitter || true)"
if [[ -z "$cli" || "$("$cli" --version)" != "tree-sitter $version" ]]; then
  cli="$cache/tree-sitter-cli-$version/bin/tree-sitter"
  if [[ ! -x "$cli" ]]; then
    cargo install tree-sitter-cli --version "$version" --locked \
      --root "$cache/tree-sitter-cli-$version" --target-dir "$cache/tree-sitter-cli-target"
  fi
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cp "$here/grammar.js" "$here/tree-sitter.json" "$work/"
(cd "$work" && "$cli" generate >/dev/null)

status=0
for f in parser.c grammar.json node-types.json; do
  if [[ "${1:-}" == "--check" ]]; then
    if ! cmp -s "$work/src/$f" "$here/src/$f"; then
      echo "src/$f differs from what grammar.js generates; run $0" >&2
      status=1
    fi
  else
    cp "$work/src/$f" "$here/src/$f"
  fi
done
[[ "${1:-}" == "--check" && $status -eq 0 ]] && echo "src/ matches grammar.js (tree-sitter $version)"
exit $status
