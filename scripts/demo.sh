#!/usr/bin/env bash
# The newcomer's demo on the embedded default, the local host (no cluster):
#   1. Tier-0 commands in a session's sandbox (landlock, seccomp, namespaces: needs root or user
#      namespaces), with files tracked;
#   2. one command that needs a real toolchain (git) escalates to the local Tier-1: the workspace is
#      handed over, the command runs there, and the repository is merged back into the session;
#   3. a refused command (policy), and the session's trace, printed readably.
# Data goes to a fresh temp dir (pass a directory to keep it).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== building kube-harness"
cargo build -q -p kube-harness
# As cargo reads it: an absolute CARGO_TARGET_DIR, or one relative to the repository root (here).
kh="${CARGO_TARGET_DIR:-target}/debug/kube-harness"
data="${1:-$(mktemp -d)/.little-harness}"
run() {
  printf "\n\$ kube-harness local exec --session demo %s-- '%s'\n" "${2:-}" "$1"
  # shellcheck disable=SC2086
  "$kh" local --data-dir "$data" exec --session demo ${2:-} -- "$1" || echo "(exit $?)"
}

echo "== the local host, data in $data"
caps=""; [ "$(id -u)" = 0 ] && caps=", with every capability"
echo "   Tier-0 commands run in the sandbox. The escalated one (git) runs on the local Tier-1,"
echo "   which is this machine's own toolchain as $(id -un)$caps, on a copy of the"
echo "   workspace: not a sandbox (--tier1 none refuses escalation instead)."
run 'mkdir -p /session/notes && printf "%s\n" alpha beta gamma > /session/notes/list.txt && wc -l /session/notes/list.txt'
run 'cd /session/notes && sort -r list.txt | head -2 && export NOTE=kept'
run 'pwd && echo "NOTE=$NOTE" && env | wc -l && cat /etc/shadow 2>&1 | head -1 && echo x > /usr/x 2>&1 | head -1'
run 'git init -q repo && cd repo && cp ../list.txt . && git add -A && git -c user.name=demo -c user.email=demo@example.com commit -qm "first" && git log --oneline | wc -l'
run 'ls -a /session/notes/repo | head -5'
run 'docker ps' '--deny docker '

echo
echo "== the trace (kube-harness local trace demo)"
"$kh" local --data-dir "$data" trace demo
echo
"$kh" local --data-dir "$data" doctor demo || true
