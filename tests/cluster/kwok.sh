#!/usr/bin/env bash
# kwok (sigs.k8s.io/kwok) on the running test cluster: fake nodes whose pods become Running and
# Ready without a kubelet, for the scale bench (tests/e2e/src/bin/scale-bench.rs). Not part of
# the gating CI.
#
#   tests/cluster/kwok.sh build          builds cmd/kwok once into $KH_CACHE/kwok-<version>/
#   tests/cluster/kwok.sh start [N]      runs kwok as a host process and creates N fake nodes (4)
#   tests/cluster/kwok.sh stop           deletes the fake nodes (and their pods) and stops kwok
#   tests/cluster/kwok.sh status         the fake nodes and whether kwok runs
#
# The fake nodes are labelled and tainted kwok.x-k8s.io/node=fake (NoSchedule), so only pods that
# select and tolerate them land there. Each has its own spec.podCIDR (10.250.<i*16>.0/20, 4,096
# pod IPs) in a range nothing routes to: a pod there has an address nobody answers on.
. "$(dirname "$0")/lib.sh"

KH_KWOK_VERSION=v0.8.0
KWOK_DIR="$KH_CACHE/kwok-$KH_KWOK_VERSION"
KWOK_BIN="$KWOK_DIR/kwok"
KWOK_STATE="$KH_STATE/kwok"
FAKE_LABEL=kwok.x-k8s.io/node
FAKE_VALUE=fake

kwok_build() {
  if [[ -x $KWOK_BIN && "$(cat "$KWOK_DIR/.complete" 2>/dev/null)" == "$KH_KWOK_VERSION" ]]; then
    log "kwok $KH_KWOK_VERSION cached ($KWOK_BIN)"
    return 0
  fi
  command -v go >/dev/null || die "prerequisite missing: go (the kwok $KH_KWOK_VERSION module needs Go >= 1.26)"
  go_env
  mkdir -p "$KWOK_DIR"
  local blog="$KWOK_DIR/build.log"
  log "building kwok $KH_KWOK_VERSION into $KWOK_DIR (log: $blog); a few minutes on 2 cores"
  GOBIN="$KWOK_DIR" go install -trimpath -ldflags "-s -w" \
    "sigs.k8s.io/kwok/cmd/kwok@$KH_KWOK_VERSION" >"$blog" 2>&1 \
    || die "go install sigs.k8s.io/kwok/cmd/kwok@$KH_KWOK_VERSION failed (log: $blog)"
  # The stock stages ship in the module (kustomize/stage); the config below embeds them.
  go mod download -json "sigs.k8s.io/kwok@$KH_KWOK_VERSION" >"$KWOK_DIR/module.json" 2>>"$blog" \
    || die "go mod download sigs.k8s.io/kwok@$KH_KWOK_VERSION failed (log: $blog)"
  printf '%s' "$KH_KWOK_VERSION" >"$KWOK_DIR/.complete"
  log "kwok ready: $KWOK_BIN"
}

# The module's source directory (for its stock Stage manifests).
module_dir() {
  sed -n 's/.*"Dir": "\(.*\)",/\1/p' "$KWOK_DIR/module.json"
}

# Writes kwok's configuration: manage the labelled nodes, keep their Lease renewed, and play the
# "fast" stages (node initialize + heartbeat, pod ready / complete / delete).
write_config() {
  local src; src=$(module_dir)
  [[ -d $src/kustomize/stage ]] || die "kwok module source missing at '$src': run tests/cluster/kwok.sh build"
  mkdir -p "$KWOK_STATE"
  {
    cat <<YAML
apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  manageAllNodes: false
  manageNodesWithLabelSelector: '$FAKE_LABEL=$FAKE_VALUE'
  nodeLeaseDurationSeconds: 40
  nodeLeaseParallelism: 2
  podPlayStageParallelism: 4
  nodePlayStageParallelism: 2
  enablePodsOnNodeSyncListPager: false
  enablePodsOnNodeSyncStreamWatch: true
  cidr: 10.250.255.0/24
  nodeIP: 10.250.255.1
YAML
    local f
    for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
      pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
      [[ -f $src/kustomize/stage/$f ]] || die "stage $f missing in $src"
      printf -- '---\n'
      cat "$src/kustomize/stage/$f"
    done
  } >"$KWOK_STATE/kwok.yaml"
}

cluster_up() {
  [[ -f $KH_KUBECONFIG ]] || die "no test cluster ($KH_KUBECONFIG missing): run tests/cluster/up.sh first"
  kh_kubectl get --raw /readyz >/dev/null 2>&1 || die "the test cluster's API server does not answer ($KH_KUBECONFIG)"
}

nodes_yaml() {
  local n=$1 i
  for ((i = 0; i < n; i++)); do
    cat <<YAML
---
apiVersion: v1
kind: Node
metadata:
  name: kwok-node-$i
  labels:
    $FAKE_LABEL: $FAKE_VALUE
    kubernetes.io/hostname: kwok-node-$i
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
  annotations:
    node.alpha.kubernetes.io/ttl: "0"
spec:
  podCIDR: 10.250.$((i * 16)).0/20
  podCIDRs: [10.250.$((i * 16)).0/20]
  taints:
  - {key: $FAKE_LABEL, value: $FAKE_VALUE, effect: NoSchedule}
YAML
  done
}

all_ready() {
  local want=$1 got
  got=$(kh_kubectl get nodes -l "$FAKE_LABEL=$FAKE_VALUE" \
    -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}' | grep -c '^True$' || true)
  [[ $got -ge $want ]]
}

kwok_start() {
  local n=${1:-4}
  [[ $n =~ ^[0-9]+$ ]] && ((n >= 1 && n <= 15)) || die "node count must be 1..15 (each gets a /20 of 10.250.0.0/16), got '$n'"
  [[ -x $KWOK_BIN ]] || die "kwok is not built: run tests/cluster/kwok.sh build"
  cluster_up
  write_config
  mkdir -p "$KH_STATE/pids" "$KH_STATE/logs"
  if running kwok; then
    log "kwok already runs (pid $(head -n1 "$(pidfile kwok)"))"
  else
    # setsid: kwok outlives this script, like the cluster's other components.
    setsid "$KWOK_BIN" --kubeconfig "$KH_KUBECONFIG" --config "$KWOK_STATE/kwok.yaml" -v WARN \
      >"$(logfile kwok)" 2>&1 </dev/null &
    printf '%s\n%s\n' "$!" "$(readlink -f "$KWOK_BIN")" >"$(pidfile kwok)"
    sleep 1
    running kwok || die "kwok exited at start (log: $(logfile kwok)): $(tail -n 5 "$(logfile kwok)")"
    log "kwok started (pid $(head -n1 "$(pidfile kwok)"), log $(logfile kwok))"
  fi
  nodes_yaml "$n" | kh_kubectl apply -f - >/dev/null || die "creating $n fake nodes failed"
  wait_until 60 "$n fake nodes Ready" all_ready "$n" \
    || die "the fake nodes did not become Ready within 60s (kwok log: $(logfile kwok))"
  log "kwok: $n fake nodes Ready (label and taint $FAKE_LABEL=$FAKE_VALUE)"
}

no_fake_nodes() {
  [[ -z "$(kh_kubectl get nodes -l "$FAKE_LABEL=$FAKE_VALUE" -o name 2>/dev/null)" ]]
}

kwok_stop() {
  if [[ -f $KH_KUBECONFIG ]] && kh_kubectl get --raw /readyz >/dev/null 2>&1; then
    # Pods bound to a fake node would stay Terminating forever without kwok: delete them while
    # kwok still runs (its pod-delete stage finishes them), then the nodes.
    local pods
    pods=$(kh_kubectl get pods -A --field-selector spec.nodeName!=,status.phase!=Unknown \
      -o jsonpath='{range .items[*]}{.metadata.namespace}{" "}{.metadata.name}{" "}{.spec.nodeName}{"\n"}{end}' \
      | awk '$3 ~ /^kwok-node-/ {print $1" "$2}')
    if [[ -n $pods ]]; then
      log "deleting $(wc -l <<<"$pods") pods still on fake nodes"
      while read -r ns name; do
        kh_kubectl -n "$ns" delete pod "$name" --grace-period=0 --force --wait=false >/dev/null 2>&1 || true
      done <<<"$pods"
    fi
    kh_kubectl delete nodes -l "$FAKE_LABEL=$FAKE_VALUE" --wait=false >/dev/null || log "deleting the fake nodes failed"
    wait_until 60 "the fake nodes to go" no_fake_nodes || log "fake nodes left: $(kh_kubectl get nodes -l "$FAKE_LABEL=$FAKE_VALUE" -o name)"
  else
    log "the cluster does not answer: only stopping kwok"
  fi
  stop kwok
  log "kwok stopped"
}

kwok_status() {
  if running kwok; then echo "kwok: running (pid $(head -n1 "$(pidfile kwok)"))"; else echo "kwok: not running"; fi
  kh_kubectl get nodes -l "$FAKE_LABEL=$FAKE_VALUE" 2>/dev/null || true
}

case ${1:-} in
  build) kwok_build ;;
  start) shift; kwok_start "$@" ;;
  stop) kwok_stop ;;
  status) kwok_status ;;
  *) die "usage: $0 build | start [NODES] | stop | status" ;;
esac
