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
