#!/usr/bin/env bash
# The Argo CD health checks (examples/gitops/argocd/*.lua) against the operator's statuses
# (tests/gitops/fixtures), with Debian's Lua 5.4 (installed when missing and root).
set -euo pipefail
cd "$(dirname "$0")/../.."
if ! command -v lua5.4 >/dev/null; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lua5.4 >/dev/null
  else
    echo "argocd-health.sh: missing lua5.4 (apt-get install -y lua5.4)" >&2
    exit 2
  fi
fi
python3 tests/gitops/argocd_health.py lua5.4
