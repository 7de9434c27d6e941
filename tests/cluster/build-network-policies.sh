#!/usr/bin/env bash
# Builds the NetworkPolicy agent sigs.k8s.io/kube-network-policies ($KH_NETPOL_VERSION; the agent
# kind's own CNI runs) from the Go module proxy into $KH_CACHE/kube-network-policies-<version>/bin,
# once per recipe. Re-running with the cache present is a no-op. Same wrapper-module pattern as
# build-binaries.sh: a module requiring exactly the released version, whose tools.go imports the
# agent's main package (the module's ./cmd; its Dockerfile builds that package as /bin/netpol).
. "$(dirname "$0")/lib.sh"

command -v go >/dev/null || die "prerequisite missing: go (Go >= 1.24 toolchain) is needed to build kube-network-policies"
go_env

KH_NETPOL_DIR="$KH_CACHE/kube-network-policies-$KH_NETPOL_VERSION"
stamp="$KH_NETPOL_DIR/.complete"
# Bump KH_NETPOL_BUILD_REV when the recipe below changes in a way that changes the binary.
KH_NETPOL_BUILD_REV=1
recipe="$KH_NETPOL_VERSION rev$KH_NETPOL_BUILD_REV"
if [[ -f $stamp && "$(cat "$stamp")" == "$recipe" ]]; then
  log "kube-network-policies cached in $KH_NETPOL_DIR/bin"
  exit 0
fi

mod=sigs.k8s.io/kube-network-policies
pkg=$mod/cmd
src="$KH_NETPOL_DIR/src"
rm -rf "$KH_NETPOL_DIR/bin" "$src"
mkdir -p "$KH_NETPOL_DIR/bin" "$src"
blog="$KH_NETPOL_DIR/build.log"
: >"$blog"
log "building kube-network-policies $KH_NETPOL_VERSION into $KH_NETPOL_DIR/bin (log: $blog)"
start=$SECONDS
printf 'module khwrap\n\ngo 1.24.0\n\nrequire %s %s\n' "$mod" "$KH_NETPOL_VERSION" >"$src/go.mod"
printf '//go:build tools\n\n// Package tools pins the program this module builds.\npackage tools\n\nimport _ "%s"\n' "$pkg" >"$src/tools.go"
(cd "$src" && go mod tidy) >>"$blog" 2>&1 || die "go mod tidy failed in $src (log: $blog)"
(cd "$src" && go build -trimpath -ldflags "-s -w" -o "$KH_NETPOL_DIR/bin/kube-network-policies" "$pkg") >>"$blog" 2>&1 \
  || die "go build of kube-network-policies failed (log: $blog)"
printf '%s' "$recipe" >"$stamp"
log "kube-network-policies ready in $KH_NETPOL_DIR/bin ($((SECONDS - start))s)"
