#!/usr/bin/env bash
# Installs the Debian packages the test cluster needs (idempotent: apt-get only when one is missing).
# Go (>= 1.24) and a Rust toolchain are expected to be present already. python3-yaml is for the
# chart rendering tests (charts/kube-harness/tests/render.sh); git is for the GitOps suite, which pushes
# the fleet to a git server in the cluster.
. "$(dirname "$0")/lib.sh"

KH_APT_PACKAGES=(containerd runc containernetworking-plugins iptables conntrack socat debootstrap
  buildah openssl curl iproute2 util-linux ca-certificates file musl-tools python3-yaml nftables git)
missing=()
for p in "${KH_APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "apt-get install ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q >/dev/null || die "apt-get update failed"
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null || die "apt-get install ${missing[*]} failed"
fi
command -v go >/dev/null || die "prerequisite missing: go (Go >= 1.24 toolchain)"
command -v cargo >/dev/null || die "prerequisite missing: cargo"
log "prerequisites present"
