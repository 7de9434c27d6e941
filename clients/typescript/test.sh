#!/usr/bin/env bash
# The TypeScript SDK's tests: builds it with tsc and runs node:test against a real
# `kube-harness worker` on loopback (and a fake Kubernetes API server written in the tests).
# Dependencies come from the npm registry (package-lock.json), with npm's cache kept under the
# cache directory.
#
#   KH_BIN=target/debug/kube-harness bash clients/typescript/test.sh [TEST FILES...]
#
# Arguments go to `node --test` in place of `test/` (the cluster e2e runs `test/cluster.test.js`
# with KUBECONFIG, KH_E2E_NAMESPACE and KH_E2E_SESSION set).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${KH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kube-harness}"
: "${KH_BIN:?KH_BIN must name the kube-harness binary}"
command -v node >/dev/null || { echo "clients/typescript: node (>= 20) is missing" >&2; exit 2; }
cd "$here"
# npm ci (registry, or npm's cache) only when node_modules is missing or older than the lockfile;
# otherwise no network is needed.
if [ ! -x node_modules/.bin/tsc ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  npm ci --no-audit --no-fund --cache "$cache/npm" --loglevel=error
fi
npm run build --silent
[ $# -gt 0 ] || set -- test/
KH_BIN="$(realpath "$KH_BIN")" node --test "$@"
