#!/usr/bin/env bash
# The whole cluster stage of CI: prerequisites, cluster up, project images loaded, the e2e suite run
# against it, and the cluster torn down on every exit path. Exits with the test suite's status.
# Env: KH_CACHE (build caches, kept between runs), KH_STATE (cluster state, removed at the end),
# CARGO_TARGET_DIR (cargo output), KH_CI_LOGS (where component logs are copied when something fails).
. "$(dirname "$0")/lib.sh"

logs_out="${KH_CI_LOGS:-/tmp/kube-harness-cluster-logs}"
finish() {
  local rc=$?
  trap - EXIT INT TERM
  if ((rc != 0)) && [[ -d $KH_STATE/logs ]]; then
    rm -rf "$logs_out"; mkdir -p "$logs_out"
    cp -a "$KH_STATE/logs/." "$logs_out/" 2>/dev/null || true
    log "cluster stage failed (exit $rc); component logs copied to $logs_out"
  fi
  "$KH_CLUSTER_DIR/down.sh" || { log "down.sh failed"; ((rc == 0)) && rc=1; }
  exit "$rc"
}
trap finish EXIT
trap 'exit 130' INT TERM

# The suites that gate CI.
read -r -a suites <<<"${KH_E2E_SUITES:---test smoke --test operator --test tier1 --test attack --test access --test warm --test persistent --test network --test gitops --test floods --test tenants}"
# The gitops suite (KH_E2E_SUITES="... --test gitops") needs Flux beside the cluster (tests/cluster/flux.sh,
# started by up.sh).
[[ " ${suites[*]} " == *" gitops "* ]] && export KH_FLUX=1

start=$SECONDS
"$KH_CLUSTER_DIR/prereqs.sh"
out=$("$KH_CLUSTER_DIR/up.sh")
kubeconfig=$(tail -n1 <<<"$out")
[[ $kubeconfig == KUBECONFIG=/* ]] || die "up.sh did not print KUBECONFIG=<path> last (got: $kubeconfig)"
export KUBECONFIG="${kubeconfig#KUBECONFIG=}"
log "cluster up in $((SECONDS - start))s"
"$KH_CLUSTER_DIR/images.sh"
HELM="$KH_BIN/helm" bash "$KH_REPO_ROOT/charts/kube-harness/tests/render.sh"
"$KH_CLUSTER_DIR/install-chart.sh"
# The e2e tests drive the same static binary the image carries, and the cluster's kubectl.
target_dir="${CARGO_TARGET_DIR:-$KH_REPO_ROOT/target}"
for bin in "$target_dir"/x86_64-unknown-linux-{musl,gnu}/release/kube-harness; do
  [[ -x $bin ]] && { export KH_KUBE_HARNESS_BIN="$bin"; break; }
done
[[ -n ${KH_KUBE_HARNESS_BIN:-} ]] || die "no static kube-harness binary under $target_dir"
export KH_KUBECTL="$KH_BIN/kubectl"
# The tests check container removal through the node's containerd too.
export KH_CONTAINERD_ADDRESS="$KH_CONTAINERD_SOCK"
cd "$KH_REPO_ROOT"
cargo test -p kube-harness-e2e "${suites[@]}" --no-run
# A bound on the whole suite, so a hung test fails the stage with the cluster logs instead of
# running CI into its own limit.
timeout --kill-after=30 "${KH_E2E_TIMEOUT:-3000}" \
  cargo test --no-fail-fast -p kube-harness-e2e "${suites[@]}" -- --ignored --test-threads=1 ||
  die "e2e suite failed or exceeded ${KH_E2E_TIMEOUT:-3000}s (exit $?)"
log "cluster stage passed in $((SECONDS - start))s"
