#!/usr/bin/env bash
# Installs (or upgrades) the project's Helm chart into the running test cluster, as a user would:
# CRDs applied server-side first (Helm never upgrades crds/), then `helm upgrade --install --wait`
# with the image loaded by images.sh. The release namespace enforces the restricted Pod Security
# Standard, so the chart's own pods prove they comply. Env: KH_RELEASE_NAMESPACE (kube-harness).
. "$(dirname "$0")/lib.sh"

ns="${KH_RELEASE_NAMESPACE:-kube-harness}"
chart="$KH_REPO_ROOT/charts/kube-harness"
helm() { "$KH_BIN/helm" --kubeconfig "$KH_KUBECONFIG" "$@"; }

kh_kubectl apply --server-side --force-conflicts -f "$chart/crds/" >/dev/null || die "applying the CRDs failed"
kh_kubectl wait --for condition=established --timeout=60s \
  crd/harnesssessions.kubeharness.dev crd/sandboxtiers.kubeharness.dev \
  crd/harnessturns.kubeharness.dev >/dev/null
kh_kubectl create namespace "$ns" --dry-run=client -o yaml | kh_kubectl apply -f - >/dev/null
kh_kubectl label --overwrite namespace "$ns" pod-security.kubernetes.io/enforce=restricted >/dev/null
existed=no
helm status kube-harness -n "$ns" >/dev/null 2>&1 && existed=yes
log "helm upgrade --install kube-harness ($ns)"
if ! helm upgrade --install kube-harness "$chart" -n "$ns" \
  --set image.pullPolicy=Never --wait --timeout 5m >/dev/null; then
  kh_kubectl -n "$ns" get pods -o wide >&2 || true
  kh_kubectl -n "$ns" describe pods 2>&1 | tail -n 60 >&2 || true
  kh_kubectl -n "$ns" logs -l app.kubernetes.io/name=kube-harness-operator --tail=50 >&2 || true
  die "helm install of the chart failed"
fi
# The image keeps its tag (`:dev`) when images.sh rebuilds it, so upgrading a running release
# changes no pod spec and the old binary would keep running: restart the deployments then.
if [[ $existed == yes ]]; then
  for deploy in $(kh_kubectl -n "$ns" get deploy -o name); do
    kh_kubectl -n "$ns" rollout restart "$deploy" >/dev/null
  done
  for deploy in $(kh_kubectl -n "$ns" get deploy -o name); do
    kh_kubectl -n "$ns" rollout status "$deploy" --timeout 5m >/dev/null || die "$deploy did not roll out"
  done
  log "restarted the release's deployments (the image may have changed under its tag)"
fi
log "chart installed: $(kh_kubectl -n "$ns" get deploy -o name | tr '\n' ' ')"
