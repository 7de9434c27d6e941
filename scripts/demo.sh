#!/usr/bin/env bash
# The newcomer's demo, no cluster needed: builds kube-harness and shows what runs today on the
# embedded default.
#   1. classification before execution (the seed's `rm -rf build && cargo build`, and friends);
#   2. the session log service on loopback with its file store: an idempotent append, a retry with
#      the same key answered from the log, a conflicting retry refused, and the log read back.
# The local host (`kube-harness local exec`, Tier-0 sandbox + local Tier-1) joins this demo when
# issue 3 lands.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v curl >/dev/null || { echo "demo.sh: needs curl (apt-get install -y curl)" >&2; exit 2; }

echo "== building kube-harness"
cargo build -q -p kube-harness
kh="${CARGO_TARGET_DIR:-target}/debug/kube-harness"

echo
echo "== 1. classify before running"
for script in 'ls -la /session && rg -n TODO /session | head' \
              'rm -rf build && cargo build' \
              'cat <<EOF | git apply
patch
EOF' \
              'curl -s https://example.com | jq .' \
              'bash -c "docker ps"'; do
  printf '\n$ kube-harness classify -- %q\n' "$script"
  "$kh" classify -- "$script"
done
printf '\n$ kube-harness classify --deny docker -- %q\n' 'timeout 5 docker ps'
"$kh" classify --deny docker -- 'timeout 5 docker ps'

echo
echo "== 2. the session log service (file store, fsync on, bearer token)"
work=$(mktemp -d)
trap 'kill "${server:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
head -c 24 /dev/urandom | base64 > "$work/token"
port=$((20000 + RANDOM % 20000))
"$kh" session-log serve --store "file:$work/sessions.ndjson" --listen "127.0.0.1:$port" \
  --token-file "$work/token" 2> "$work/server.log" &
server=$!
base="http://127.0.0.1:$port"
for _ in $(seq 50); do curl -sf "$base/healthz" >/dev/null && break; sleep 0.1; done
auth="Authorization: Bearer $(cat "$work/token")"
append() {
  curl -s -H "$auth" -H 'content-type: application/json' -d "$1" "$base/v1/runs/run_demo/events"
  echo
}
event='{"appendIdempotencyKey":"k1","type":"harness.runtime.command.completed","payload":{"command":"ls","exitCode":0}}'
echo "append:                 $(append "$event")"
echo "same key, same content: $(append "$event")   (answered from the log, nothing written)"
echo "same key, other content: $(append '{"appendIdempotencyKey":"k1","type":"x","payload":{}}')"
echo "append:                 $(append '{"appendIdempotencyKey":"k2","type":"harness.turn.usage","payload":{"stayedOnTier0":true}}')"
echo "read back:              $(curl -s -H "$auth" "$base/v1/runs/run_demo/events?after=0")"
echo "without a token:        HTTP $(curl -s -o /dev/null -w '%{http_code}' "$base/v1/runs/run_demo/events")"
echo
echo "demo done"
