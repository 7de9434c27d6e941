# Shared helpers for the test-cluster scripts. Sourced, never executed.
# shellcheck shell=bash
# shellcheck disable=SC2034 # constants used by the scripts that source this file
set -euo pipefail

KH_CLUSTER_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
KH_REPO_ROOT="$(cd "$KH_CLUSTER_DIR/../.." && pwd)"
# shellcheck source=versions.sh
. "$KH_CLUSTER_DIR/versions.sh"

# Build caches live outside the checkout and survive down.sh; keyed by version inside.
KH_CACHE="${KH_CACHE:-/var/cache/kube-harness}"
# Runtime state of one cluster (PKI, logs, pids, etcd data); removed by down.sh.
KH_STATE="${KH_STATE:-/var/lib/kube-harness-cluster}"
KH_BIN="$KH_CACHE/k8s-$KH_K8S_VERSION/bin"

log() { printf '[%s] %s\n' "$(date -u +%H:%M:%S)" "$*" >&2; }
die() { printf 'ERROR: %s\n' "$*" >&2; exit 1; }

# wait_until SECONDS DESCRIPTION CMD...: polls CMD every 0.5 s; returns 1 after SECONDS.
wait_until() {
  local timeout=$1 what=$2; shift 2
  local deadline=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    if ((SECONDS >= deadline)); then
      log "timed out after ${timeout}s waiting for $what"
      return 1
    fi
    sleep 0.5
  done
}

go_env() {
  export GOMODCACHE="$KH_CACHE/go/mod" GOCACHE="$KH_CACHE/go/build"
  export GOFLAGS="${KH_GOFLAGS:--p=2}" GOTOOLCHAIN=local CGO_ENABLED=0
}

# buildah with its image storage kept in the cache (the imported base image survives down.sh).
bah() {
  buildah --root "$KH_CACHE/buildah/root" --runroot "$KH_CACHE/buildah/run" --storage-driver overlay "$@"
}

KH_BASE_IMAGE="docker.io/library/debian:${KH_DEBIAN_SUITE}-slim"

# build_image NAME CONTEXT CONTAINERFILE: builds localhost/kube-harness/NAME:dev with buildah unless an
# archive for the same content (Containerfile, context files, base image id) is cached; prints the
# path of the docker-archive, which both `ctr images import` and `docker load` accept.
build_image() {
  local name=$1 ctx=$2 file=$3 tag="localhost/kube-harness/$1:dev"
  local key out blog
  key=$({
    cat "$file"
    (cd "$ctx" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum)
    bah images -q --no-trunc "$KH_BASE_IMAGE" 2>/dev/null || true
  } | sha256sum | cut -c1-16)
  out="$KH_CACHE/images/$name-$key.tar"
  if [[ -s $out ]]; then
    log "image $tag cached ($out)"
  else
    mkdir -p "$KH_CACHE/images"
    blog="$KH_CACHE/images/$name.build.log"
    log "building image $tag (log: $blog)"
    bah bud --pull=never --network host -f "$file" -t "$tag" "$ctx" >"$blog" 2>&1 \
      || die "building image $tag failed (log: $blog)"
    rm -f "$KH_CACHE/images/$name-"*.tar
    bah push -q "$tag" "docker-archive:$out.tmp:$tag" >>"$blog" 2>&1 || die "saving image $tag failed (log: $blog)"
    mv "$out.tmp" "$out"
  fi
  printf '%s\n' "$out"
}

KH_CONTAINERD_SOCK="$KH_STATE/containerd/containerd.sock"
kh_ctr() { ctr --address "$KH_CONTAINERD_SOCK" -n k8s.io "$@"; }

# load_image ARCHIVE NAME: imports ARCHIVE into the cluster's containerd once per cluster lifetime.
load_image() {
  local archive=$1 name=$2 mark="$KH_STATE/images/$2.loaded"
  [[ -S $KH_CONTAINERD_SOCK ]] || die "containerd is not running (socket $KH_CONTAINERD_SOCK missing): run tests/cluster/up.sh first"
  if [[ -f $mark && "$(cat "$mark")" == "$archive" ]]; then return 0; fi
  mkdir -p "$KH_STATE/images"
  kh_ctr images import "$archive" >/dev/null || die "ctr images import $archive failed"
  printf '%s' "$archive" >"$mark"
  log "loaded localhost/kube-harness/$name:dev into containerd"
}

# Network layout. Pods live on our own bridge; every component binds to loopback or the bridge's
# address, which is also the node IP. Neither range collides with the host's 192.0.2.0/24.
KH_BRIDGE=khbr0
KH_POD_CIDR=10.244.0.0/24
KH_NODE_IP=10.244.0.1
KH_SERVICE_CIDR=10.96.0.0/16
KH_SERVICE_IP_API=10.96.0.1
KH_DNS_IP=10.96.0.10
KH_NODE_NAME=kh-node
KH_CLUSTER_DOMAIN=cluster.local
KH_KUBECONFIG="$KH_STATE/admin.kubeconfig"
# Host sysctls that up.sh or kubelet/kube-proxy change; saved by up.sh and restored by down.sh.
KH_SYSCTLS=(net.ipv4.ip_forward net.bridge.bridge-nf-call-iptables vm.overcommit_memory vm.panic_on_oom
  kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes
  net.ipv4.conf.all.route_localnet)

pidfile() { printf '%s/pids/%s.pid' "$KH_STATE" "$1"; }
logfile() { printf '%s/logs/%s.log' "$KH_STATE" "$1"; }

# running NAME: true when NAME's pid file names a live process of the binary recorded with it
# (guards against pid reuse: never signal a process we did not start).
running() {
  local f; f=$(pidfile "$1")
  [[ -f $f ]] || return 1
  local pid exe; { read -r pid; read -r exe; } <"$f"
  [[ -n $pid && "$(readlink "/proc/$pid/exe" 2>/dev/null)" == "$exe" ]]
}

# stop NAME [SECONDS]: SIGTERM, then SIGKILL after SECONDS (default 15); removes the pid file.
stop() {
  local name=$1 grace=${2:-15} f pid
  f=$(pidfile "$name")
  [[ -f $f ]] || return 0
  if running "$name"; then
    pid=$(head -n1 "$f")
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + grace))
    while running "$name" && ((SECONDS < deadline)); do sleep 0.2; done
    if running "$name"; then
      log "$name did not exit within ${grace}s of SIGTERM; sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      deadline=$((SECONDS + 5))
      while running "$name" && ((SECONDS < deadline)); do sleep 0.2; done
    fi
  fi
  rm -f "$f"
}

kh_kubectl() { "$KH_BIN/kubectl" --kubeconfig "$KH_KUBECONFIG" --request-timeout=10s "$@"; }

# cluster_lock: serializes up.sh/down.sh runs on this machine (one cluster per KH_STATE). Children
# (up.sh running down.sh) inherit the held lock through KH_LOCK_HELD.
cluster_lock() {
  [[ -n ${KH_LOCK_HELD:-} ]] && return 0
  local lock
  lock="/run/kube-harness-cluster.$(printf '%s' "$KH_STATE" | sha256sum | cut -c1-8).lock"
  exec 9>"$lock"
  flock -w 600 9 || die "another up.sh/down.sh holds $lock for more than 600s"
  export KH_LOCK_HELD=1
}
