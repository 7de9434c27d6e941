#!/usr/bin/env bash
# Builds the cluster's Go binaries (Kubernetes components, etcd, helm, CoreDNS) from the Go module
# proxy into $KH_CACHE/k8s-<version>/bin, once per version set. Re-running with the cache present is a
# no-op. Each program is built from a small wrapper module so its dependency graph is exactly the one
# upstream released (k8s.io/kubernetes cannot be `go install`ed: its go.mod replaces the staging
# modules with ./staging paths, so the wrapper pins each one to the matching v0.x tag instead).
. "$(dirname "$0")/lib.sh"

command -v go >/dev/null || die "prerequisite missing: go (Go >= 1.24 toolchain) is needed to build the cluster binaries"
go_env

stamp="$KH_BIN/.complete"
# Bump KH_BUILD_REV when the build recipe below changes in a way that changes the binaries.
KH_BUILD_REV=1
recipe="$KH_K8S_VERSION $KH_ETCD_VERSION $KH_HELM_VERSION $KH_COREDNS_VERSION rev$KH_BUILD_REV"
if [[ -f $stamp && "$(cat "$stamp")" == "$recipe" ]]; then
  log "binaries cached in $KH_BIN"
  exit 0
fi

src="$KH_CACHE/k8s-$KH_K8S_VERSION/src"
mkdir -p "$KH_BIN" "$src"
blog="$KH_CACHE/k8s-$KH_K8S_VERSION/build.log"
log "building Go binaries into $KH_BIN (log: $blog); a cold build takes tens of minutes on 2 cores"

# wrapper DIR MODULE VERSION [REPLACES] PKG...: creates a module requiring MODULE@VERSION whose
# tools.go imports the main packages, then resolves the full graph with `go mod tidy`.
wrapper() {
  local dir=$1 mod=$2 ver=$3 replaces=$4; shift 4
  mkdir -p "$dir"
  {
    printf 'module khwrap\n\ngo 1.24.0\n\nrequire %s %s\n' "$mod" "$ver"
    [[ -n $replaces ]] && printf '\nreplace (\n%s\n)\n' "$replaces"
  } >"$dir/go.mod"
  {
    printf '//go:build tools\n\n// Package tools pins the programs this module builds.\npackage tools\n\nimport (\n'
    local p; for p in "$@"; do printf '\t_ "%s"\n' "$p"; done
    printf ')\n'
  } >"$dir/tools.go"
  (cd "$dir" && go mod tidy) >>"$blog" 2>&1 || die "go mod tidy failed in $dir (log: $blog)"
}

# The staging modules are exactly the replace block of k8s.io/kubernetes's own go.mod.
k8smod=$(go mod download -json "k8s.io/kubernetes@$KH_K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
[[ -f $k8smod ]] || die "could not download k8s.io/kubernetes@$KH_K8S_VERSION from the Go proxy"
replaces=$(sed -n '/^replace (/,/^)/p' "$k8smod" | awk -v v="$KH_K8S_STAGING_VERSION" '/=> \.\/staging/ {printf "\t%s => %s %s\n", $1, $1, v}')
[[ -n $replaces ]] || die "no staging replace block found in $k8smod"

k8s_cmds=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
k8s_pkgs=(); for c in "${k8s_cmds[@]}"; do k8s_pkgs+=("k8s.io/kubernetes/cmd/$c"); done
wrapper "$src/kubernetes" k8s.io/kubernetes "$KH_K8S_VERSION" "$replaces" "${k8s_pkgs[@]}"

# Same version stamps hack/lib/version.sh sets for a release build.
minor=${KH_K8S_VERSION#v1.}; minor=${minor%%.*}
commit=$(printf '%s' "$KH_K8S_VERSION" | sha1sum | cut -c1-40)
vflags=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  vflags+=" -X $p.gitVersion=$KH_K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
  vflags+=" -X $p.gitTreeState=clean -X $p.gitCommit=$commit -X $p.buildDate=1970-01-01T00:00:00Z"
done
log "go build ${k8s_cmds[*]} ($KH_K8S_VERSION)"
(cd "$src/kubernetes" && go build -trimpath -ldflags "-s -w$vflags" -o "$KH_BIN/" "${k8s_pkgs[@]}") >>"$blog" 2>&1 \
  || die "go build of Kubernetes $KH_K8S_VERSION failed (log: $blog)"

wrapper "$src/etcd" go.etcd.io/etcd/server/v3 "$KH_ETCD_VERSION" "" go.etcd.io/etcd/server/v3
log "go build etcd $KH_ETCD_VERSION"
(cd "$src/etcd" && go build -trimpath -ldflags "-s -w" -o "$KH_BIN/etcd" go.etcd.io/etcd/server/v3) >>"$blog" 2>&1 \
  || die "go build of etcd failed (log: $blog)"

wrapper "$src/helm" helm.sh/helm/v3 "$KH_HELM_VERSION" "" helm.sh/helm/v3/cmd/helm
log "go build helm $KH_HELM_VERSION"
(cd "$src/helm" && go build -trimpath -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$KH_HELM_VERSION" \
  -o "$KH_BIN/helm" helm.sh/helm/v3/cmd/helm) >>"$blog" 2>&1 || die "go build of helm failed (log: $blog)"

wrapper "$src/coredns" github.com/coredns/coredns "$KH_COREDNS_VERSION" "" github.com/coredns/coredns
log "go build coredns $KH_COREDNS_VERSION"
(cd "$src/coredns" && go build -trimpath -ldflags "-s -w" -o "$KH_BIN/coredns" github.com/coredns/coredns) >>"$blog" 2>&1 \
  || die "go build of CoreDNS failed (log: $blog)"

printf '%s' "$recipe" >"$stamp"
log "binaries ready in $KH_BIN: $(cd "$KH_BIN" && echo *)"
