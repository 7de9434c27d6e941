#!/usr/bin/env bash
# Flux beside the test cluster: source-controller and kustomize-controller ($KH_FLUX_VERSION, built
# from Go modules by build-flux.sh) as host processes with the admin kubeconfig, like the cluster's
# own components (pid and log files in $KH_STATE; down.sh stops them).
#   tests/cluster/flux.sh up     builds (once), applies Flux's CRDs, starts both controllers
#   tests/cluster/flux.sh down   stops them (the CRDs and objects stay until the cluster goes)
# up.sh runs `flux.sh up` when KH_FLUX=1 (ci.sh sets it when the gitops suite runs), so the
# other suites do not pay for it. On loopback, kustomize-controller fetches the artifacts
# source-controller serves at http://127.0.0.1:$KH_FLUX_STORAGE_PORT (its --storage-adv-addr). Being on
# the host, source-controller reaches in-cluster git servers by Service ClusterIP or pod IP (the
# host does not resolve cluster DNS names); see docs/gitops.md.
. "$(dirname "$0")/lib.sh"

KH_FLUX_DIR="$KH_CACHE/flux-$KH_FLUX_VERSION"
KH_FLUX_STORAGE_PORT=${KH_FLUX_STORAGE_PORT:-9790}
FLUX_NS=flux-system
# name:metrics-port:health-port
CONTROLLERS=(source-controller:9791:9792 kustomize-controller:9793:9794)

flux_start() {
  local name=$1 bin=$2; shift 2
  log "starting $name (log: $(logfile "$name"))"
  setsid env KUBECONFIG="$KH_KUBECONFIG" RUNTIME_NAMESPACE="$FLUX_NS" "$bin" "$@" \
    >>"$(logfile "$name")" 2>&1 </dev/null 9>&- &
  printf '%s\n%s\n' "$!" "$(readlink -f "$bin")" >"$(pidfile "$name")"
}

flux_healthy() {
  local name=$1 port=$2 deadline=$((SECONDS + 60))
  until curl -fsS --max-time 2 "http://127.0.0.1:$port/readyz" >/dev/null 2>&1; do
    running "$name" || die "$name exited at start (log: $(logfile "$name")): $(tail -n 5 "$(logfile "$name")")"
    ((SECONDS < deadline)) || die "$name not ready after 60s (log: $(logfile "$name")): $(tail -n 5 "$(logfile "$name")")"
    sleep 0.5
  done
}

flux_up() {
  [[ -f $KH_KUBECONFIG ]] && kh_kubectl get --raw /readyz >/dev/null 2>&1 \
    || die "the cluster is not up (no $KH_KUBECONFIG answering): run tests/cluster/up.sh first"
  "$KH_CLUSTER_DIR/build-flux.sh"
  mkdir -p "$KH_STATE"/{logs,pids} "$KH_STATE/flux/storage"
  kh_kubectl apply --server-side --force-conflicts -f "$KH_FLUX_DIR/crds/" >/dev/null || die "applying Flux's CRDs failed"
  kh_kubectl wait --for condition=established --timeout=60s \
    crd/gitrepositories.source.toolkit.fluxcd.io crd/kustomizations.kustomize.toolkit.fluxcd.io >/dev/null \
    || die "Flux's CRDs were not established within 60s"
  kh_kubectl create namespace "$FLUX_NS" --dry-run=client -o yaml | kh_kubectl apply -f - >/dev/null
  local spec name mport hport
  for spec in "${CONTROLLERS[@]}"; do
    IFS=: read -r name mport hport <<<"$spec"
    running "$name" && continue
    for port in $mport $hport; do
      [[ -z $(ss -Hltn "sport = :$port") ]] || die "port $port (needed by $name) is in use: $(ss -Hltnp "sport = :$port" | head -n1)"
    done
    local args=(--metrics-addr "127.0.0.1:$mport" --health-addr "127.0.0.1:$hport"
      --enable-leader-election=false --watch-all-namespaces=true --log-level info --log-encoding console)
    if [[ $name == source-controller ]]; then
      [[ -z $(ss -Hltn "sport = :$KH_FLUX_STORAGE_PORT") ]] || die "port $KH_FLUX_STORAGE_PORT (source-controller's artifact storage) is in use"
      args+=(--storage-path "$KH_STATE/flux/storage" --storage-addr "127.0.0.1:$KH_FLUX_STORAGE_PORT"
        --storage-adv-addr "127.0.0.1:$KH_FLUX_STORAGE_PORT")
    fi
    flux_start "$name" "$KH_FLUX_DIR/bin/$name" "${args[@]}"
  done
  for spec in "${CONTROLLERS[@]}"; do
    IFS=: read -r name mport hport <<<"$spec"
    flux_healthy "$name" "$hport"
  done
  log "flux $KH_FLUX_VERSION up: source-controller (artifacts at 127.0.0.1:$KH_FLUX_STORAGE_PORT), kustomize-controller"
}

flux_down() {
  local spec
  for spec in "${CONTROLLERS[@]}"; do stop "${spec%%:*}"; done
}

case ${1:-} in
  up) flux_up ;;
  down) flux_down ;;
  *) die "usage: $0 up|down" ;;
esac
