#!/usr/bin/env bash
# kubernetes-sigs/agent-sandbox beside Kube Harness on the running test cluster, for the side-by-side
# bench (tests/e2e/src/bin/peer-bench.rs, docs/performance.md). A benchmark only: nothing in the
# product uses it, and it is not part of the gating CI.
#
#   tests/cluster/peers/agent-sandbox.sh build   # go build the controller once into the cache
#   tests/cluster/peers/agent-sandbox.sh start   # build, install its CRDs, run the controller
#   tests/cluster/peers/agent-sandbox.sh stop    # delete its objects, stop it, remove its CRDs
#   tests/cluster/peers/agent-sandbox.sh status  # running or not, and what was built from what
#
# Source: KH_PEER_AGENT_SANDBOX_SRC (default /work/shared/peers/agent-sandbox), only read. The binary
# goes to $KH_CACHE/peers/agent-sandbox-<hash of the source tree>/ and is reused while the source is
# unchanged. The controller runs as a host process with the cluster's admin kubeconfig, like the
# cluster's own components (pid and log under $KH_STATE). No image and no registry: its Sandbox pods
# use whatever image the bench names (the worker image already loaded into the node).
#
# Differences from its release manifests, and why: the controller runs outside the cluster, so its
# webhook server is off (--enable-webhook=false) and the CRDs are installed with
# `conversion: {strategy: None}` instead of the conversion webhook, as the controller's own start-up
# message asks for that mode. The conversion webhook only converts between v1alpha1 and v1beta1;
# the bench uses v1beta1 (the storage version) only, so no request of the bench would reach it.
# Leader election is off (one replica). Metrics are off; the health probe listens on loopback.
. "$(dirname "$0")/../lib.sh"

SRC="${KH_PEER_AGENT_SANDBOX_SRC:-/work/shared/peers/agent-sandbox}"
NAME=agent-sandbox
PROBE_ADDR="${KH_PEER_PROBE_ADDR:-127.0.0.1:18481}"
INFO="$KH_STATE/peers/$NAME.info"
CRDS=(agents.x-k8s.io_sandboxes extensions.agents.x-k8s.io_sandboxclaims
  extensions.agents.x-k8s.io_sandboxtemplates extensions.agents.x-k8s.io_sandboxwarmpools)
KINDS=(sandboxclaims.extensions.agents.x-k8s.io sandboxwarmpools.extensions.agents.x-k8s.io
  sandboxtemplates.extensions.agents.x-k8s.io sandboxes.agents.x-k8s.io)

src_hash() {
  [[ -f $SRC/go.mod && -d $SRC/cmd/agent-sandbox-controller ]] \
    || die "no agent-sandbox source at $SRC (set KH_PEER_AGENT_SANDBOX_SRC)"
  (cd "$SRC" && find . -type f -print0 | sort -z | xargs -0 sha256sum) | sha256sum | cut -c1-16
}

out_dir() { printf '%s/peers/%s-%s' "$KH_CACHE" "$NAME" "$(src_hash)"; }

build() {
  command -v go >/dev/null || die "prerequisite missing: go (the agent-sandbox controller is Go)"
  local out bin blog hash gover
  hash=$(src_hash)
  out=$(out_dir)
  bin="$out/agent-sandbox-controller"
  if [[ -x $bin && -f $out/.complete ]]; then
    log "agent-sandbox controller cached ($bin)"
    return 0
  fi
  go_env
  mkdir -p "$out"
  blog="$out/build.log"
  gover=$(sed -n 's/^go \(.*\)/\1/p' "$SRC/go.mod")
  log "go build agent-sandbox-controller from $SRC (go.mod: go $gover; log: $blog); a cold build downloads its modules and takes minutes"
  # The source is read-only: go.sum must already be complete (-mod=readonly), the output goes to
  # the cache. The version stamps say where it came from, since the tree has no git metadata.
  (cd "$SRC" && go build -mod=readonly -trimpath \
    -ldflags "-s -w -X sigs.k8s.io/agent-sandbox/internal/version.gitVersion=src-$hash -X sigs.k8s.io/agent-sandbox/internal/version.gitSHA=$hash" \
    -o "$bin.tmp" ./cmd/agent-sandbox-controller) >"$blog" 2>&1 \
    || die "go build of agent-sandbox-controller failed (log: $blog)"
  mv "$bin.tmp" "$bin"
  # CRDs as the bench installs them: the release CRDs with conversion strategy None (see above).
  mkdir -p "$out/crds"
  local c
  for c in "${CRDS[@]}"; do
    awk '
      /^  conversion:$/ { print "  conversion:"; print "    strategy: None"; skip = 1; next }
      skip && /^    / { next }
      { skip = 0; print }
    ' "$SRC/k8s/crds/$c.yaml" >"$out/crds/$c.yaml"
    grep -q '^    strategy: None$' "$out/crds/$c.yaml" || die "could not rewrite the conversion of $c.yaml (has its layout changed?)"
    grep -q 'strategy: Webhook' "$out/crds/$c.yaml" && die "$c.yaml still names the conversion webhook"
  done
  printf 'source=%s\nsource_sha256_16=%s\ngo_mod_go=%s\ncontroller_runtime=%s\nclient_go=%s\nbuilt_with=%s\n' \
    "$SRC" "$hash" "$gover" \
    "$(awk '$1 == "sigs.k8s.io/controller-runtime" {print $2}' "$SRC/go.mod")" \
    "$(awk '$1 == "k8s.io/client-go" {print $2}' "$SRC/go.mod")" \
    "$(go version | awk '{print $3}')" >"$out/version"
  : >"$out/.complete"
  log "built $bin"
}

need_cluster() {
  [[ -f $KH_KUBECONFIG ]] || die "no cluster: $KH_KUBECONFIG missing (the test cluster must be up)"
  kh_kubectl get --raw /readyz >/dev/null 2>&1 || die "the API server does not answer /readyz (is the test cluster up?)"
}

established() {
  local k
  for k in "${KINDS[@]}"; do
    [[ "$(kh_kubectl get crd "$k" -o jsonpath='{.status.conditions[?(@.type=="Established")].status}' 2>/dev/null)" == True ]] \
      || return 1
  done
}

# Established is not yet served: the API server's discovery documents follow a moment later, and
# the controller, which maps each kind through discovery once at start-up, exits with "no matches
# for kind" if it starts before them. So: every kind listed by discovery, in its group.
discoverable() {
  local k
  for k in "${KINDS[@]}"; do
    kh_kubectl api-resources --api-group="${k#*.}" -o name 2>/dev/null | grep -qx "$k" || return 1
  done
}

# start_failed MESSAGE: leaves nothing behind (controller, CRDs), shows the log's end, exits 1.
start_failed() {
  printf 'ERROR: %s\n' "$1" >&2
  if [[ -f $(logfile "$NAME") ]]; then
    printf -- '--- last lines of %s ---\n' "$(logfile "$NAME")" >&2
    tail -n 10 "$(logfile "$NAME")" >&2
  fi
  stop_controller
  local k
  for k in "${KINDS[@]}"; do kh_kubectl delete crd "$k" --ignore-not-found --wait=false >/dev/null 2>&1 || true; done
  exit 1
}

start() {
  need_cluster
  build
  local out
  out=$(out_dir)
  mkdir -p "$KH_STATE/peers" "$KH_STATE/logs" "$KH_STATE/pids"
  if running "$NAME"; then
    if [[ "$(head -n2 "$(pidfile "$NAME")" | tail -n1)" == "$out/agent-sandbox-controller" ]]; then
      log "$NAME already running (pid $(head -n1 "$(pidfile "$NAME")"))"
      return 0
    fi
    log "$NAME is running an older build; restarting it"
    stop_controller
  fi
  log "installing the agent-sandbox CRDs"
  local c
  for c in "${CRDS[@]}"; do
    kh_kubectl apply --server-side --force-conflicts -f "$out/crds/$c.yaml" >/dev/null \
      || start_failed "kubectl apply of $c failed"
  done
  wait_until 60 "the agent-sandbox CRDs to be Established" established \
    || start_failed "the agent-sandbox CRDs did not become Established within 60s"
  wait_until 60 "the agent-sandbox kinds to be served by discovery" discoverable \
    || start_failed "the agent-sandbox kinds were not in the API server's discovery within 60s"
  log "starting $NAME (log: $(logfile "$NAME"))"
  local log_from
  log_from=$(stat -c %s "$(logfile "$NAME")" 2>/dev/null || echo 0)
  setsid "$out/agent-sandbox-controller" --kubeconfig "$KH_KUBECONFIG" --extensions \
    --leader-elect=false --enable-webhook=false --metrics-bind-address=0 \
    --health-probe-bind-address="$PROBE_ADDR" \
    >>"$(logfile "$NAME")" 2>&1 </dev/null 9>&- &
  printf '%s\n%s\n' "$!" "$out/agent-sandbox-controller" >"$(pidfile "$NAME")"
  # Ready once /readyz answers and its four controllers (sandbox, claim, template, warm pool)
  # report their workers started (informers synced), in this start's part of the log.
  local deadline=$((SECONDS + 60))
  until curl -fsS --max-time 2 "http://$PROBE_ADDR/readyz" >/dev/null 2>&1 \
    && (($(tail -c +$((log_from + 1)) "$(logfile "$NAME")" | grep -c '"msg":"Starting workers"') >= 4)); do
    running "$NAME" || start_failed "$NAME exited during start-up"
    ((SECONDS < deadline)) || start_failed "$NAME did not get ready (/readyz on $PROBE_ADDR, its four controllers started) within 60s"
    sleep 0.5
  done
  { cat "$out/version"; printf 'binary=%s\npid=%s\n' "$out/agent-sandbox-controller" "$(head -n1 "$(pidfile "$NAME")")"; } >"$INFO"
  log "$NAME running (pid $(head -n1 "$(pidfile "$NAME")"), versions in $INFO)"
}

stop_controller() {
  stop "$NAME" 15
  rm -f "$INFO"
}

# stop_all: deletes every object of its kinds while the controller still runs (it has no finalizers,
# but its pods are owned through its objects), stops it, then removes its CRDs. With the cluster
# gone it only stops the controller.
stop_all() {
  if ! [[ -f $KH_KUBECONFIG ]] || ! kh_kubectl get --raw /readyz >/dev/null 2>&1; then
    stop_controller
    log "the API server does not answer: $NAME stopped, its CRDs (if any) left to the cluster's teardown"
    return 0
  fi
  local k
  for k in "${KINDS[@]}"; do
    if kh_kubectl get crd "$k" >/dev/null 2>&1; then
      kh_kubectl delete "$k" --all-namespaces --all --wait=true --timeout=60s >/dev/null \
        || log "warning: deleting every $k took longer than 60s"
    fi
  done
  stop_controller
  log "removing the agent-sandbox CRDs"
  for k in "${KINDS[@]}"; do
    kh_kubectl delete crd "$k" --ignore-not-found --wait=true --timeout=60s >/dev/null \
      || die "deleting crd/$k did not finish within 60s"
  done
  log "$NAME stopped and its CRDs removed"
}

status() {
  if running "$NAME"; then
    printf 'running (pid %s)\n' "$(head -n1 "$(pidfile "$NAME")")"
    [[ -f $INFO ]] && cat "$INFO"
  else
    printf 'not running\n'
    return 1
  fi
}

case "${1:-}" in
  build) build ;;
  start) start ;;
  stop) stop_all ;;
  status) status ;;
  *) die "usage: $0 build|start|stop|status" ;;
esac
