# shellcheck shell=bash disable=SC2034
# Pinned versions of everything the test cluster is built from. Sourced by the other scripts.
# Kubernetes 1.34 is the newest minor that still runs on cgroup v1 with Debian 12's containerd 1.6
# (1.35 drops cgroup v1 support in kubelet by default and needs containerd >= 2.0).
KH_K8S_VERSION=v1.34.4
# k8s.io staging modules are tagged v0.<minor>.<patch> for Kubernetes v1.<minor>.<patch>.
KH_K8S_STAGING_VERSION=v0.34.4
KH_ETCD_VERSION=v3.6.16
# NetworkPolicy agent (sigs.k8s.io/kube-network-policies, the one kind's CNI uses): build-network-policies.sh.
KH_NETPOL_VERSION=v0.8.0
KH_HELM_VERSION=v3.19.5
KH_COREDNS_VERSION=v1.13.2
KH_DEBIAN_SUITE=bookworm
# Flux's source-controller and kustomize-controller (tests/cluster/build-flux.sh, flux.sh). v1.9.6 is
# the newest release whose build graph the Go module proxy here serves: v1.10.x needs module versions
# it refuses (403 "not available": fluxcd/pkg/apis/crypto v0.5.0, masktoken v0.10.0, spiffe v0.2.0,
# artifact v0.27.1, http/transport v0.9.0, sigstore/cosign/v3 v3.1.4, go-containerregistry k8schain).
KH_FLUX_VERSION=v1.9.6
# Extra replaces for source-controller's wrapper module, on top of the ones its go.mod carries:
# fluxcd/pkg/artifact v0.18.3 is refused by the proxy, v0.18.1 is served (same minor; patch bumps).
KH_FLUX_SOURCE_REPLACES="github.com/fluxcd/pkg/artifact => github.com/fluxcd/pkg/artifact v0.18.1"
