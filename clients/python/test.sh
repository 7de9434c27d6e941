#!/usr/bin/env bash
# The Python SDK's tests: pytest against a real `kube-harness worker` on loopback. Installs httpx,
# kubernetes and pytest from PyPI into a virtualenv kept under the cache directory (reused when present).
#
#   KH_BIN=target/debug/kube-harness bash clients/python/test.sh [PYTEST ARGS...]
#
# Arguments go to pytest in place of `tests` (the cluster e2e runs `tests/test_cluster.py`).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
cache="${KH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kube-harness}"
venv="$cache/python-sdk-venv"
: "${KH_BIN:?KH_BIN must name the kube-harness binary}"
python="${PYTHON:-python3}"
if ! "$venv/bin/python" -c 'import httpx, kubernetes, pytest' 2>/dev/null; then
  echo "clients/python: making $venv (httpx, kubernetes, pytest from PyPI)" >&2
  rm -rf "$venv"
  "$python" -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check 'httpx>=0.27,<1' 'kubernetes>=29' 'pytest>=8'
fi
cd "$here"
[ $# -gt 0 ] || set -- tests
KH_BIN="$(realpath "$KH_BIN")" PYTHONPATH="$here/src" "$venv/bin/python" -m pytest -q -p no:cacheprovider "$@"
