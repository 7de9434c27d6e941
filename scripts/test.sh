#!/usr/bin/env bash
# The project's test command (the README's): starts a throwaway PostgreSQL on loopback for the
# store tests, runs every workspace test, then the Python and TypeScript SDKs' suites against the
# worker it built and the Argo CD health checks (Lua 5.4), and stops what it started. On a fresh Debian machine it
# installs the packages the tests need first (as root; otherwise it says what is missing).
#
#   bash scripts/test.sh              # all workspace tests
#   bash scripts/test.sh -p kube-harness-worker   # extra arguments go to `cargo test`
set -euo pipefail
cd "$(dirname "$0")/.."

need_packages=()
command -v bash >/dev/null || need_packages+=(bash)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need_packages+=(postgresql)
command -v curl >/dev/null || need_packages+=(curl)
command -v git >/dev/null || need_packages+=(git)   # the local Tier-1 tests run real git and make
command -v make >/dev/null || need_packages+=(make)
command -v unshare >/dev/null || need_packages+=(util-linux)
command -v python3 >/dev/null && python3 -c 'import venv, ensurepip' 2>/dev/null || need_packages+=(python3 python3-venv)
command -v node >/dev/null && command -v npm >/dev/null || need_packages+=(nodejs npm)
command -v lua5.4 >/dev/null || need_packages+=(lua5.4)   # the Argo CD health checks (docs/gitops.md)
if ((${#need_packages[@]})); then
  if [ "$(id -u)" = 0 ]; then
    echo "test.sh: installing ${need_packages[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_packages[@]}" >/dev/null
  else
    echo "test.sh: missing packages: ${need_packages[*]} (apt-get install -y ${need_packages[*]})" >&2
    exit 2
  fi
fi

pg_out=$(bash tests/services/postgres.sh start)
export "$(tail -n1 <<<"$pg_out")"
trap 'bash tests/services/postgres.sh stop >/dev/null 2>&1 || true' EXIT
echo "test.sh: PostgreSQL for tests at $KH_TEST_POSTGRES_URL" >&2

# Two cores: keep test binaries from oversubscribing them.
cargo test --workspace "$@"

# The SDKs against the worker cargo just built (only for the whole suite, not `-p …`): Python
# (httpx, pytest from PyPI into a cached venv) and TypeScript (tsc and node:test; npm registry).
if [ "$#" -eq 0 ]; then
  export KH_BIN="${CARGO_TARGET_DIR:-target}/debug/kube-harness"
  bash clients/python/test.sh
  bash clients/typescript/test.sh
  # The Argo CD health checks against the statuses the operator writes (fixtures kept current by
  # the operator's tests above).
  bash tests/gitops/argocd-health.sh
fi
