#!/usr/bin/env bash
# Builds Flux's source-controller and kustomize-controller ($KH_FLUX_VERSION) from the Go module proxy
# into $KH_CACHE/flux-<version>/bin and copies their CRDs (shipped in the modules' config/crd/bases)
# into $KH_CACHE/flux-<version>/crds, once per recipe. Re-running with the cache present is a no-op.
# Same wrapper-module pattern as build-binaries.sh: each controller is built from a module requiring
# exactly the released version, with the replace directives of its own go.mod carried over (its
# `./api` replace becomes the tagged api submodule; the go-digest replace is copied as is).
. "$(dirname "$0")/lib.sh"

command -v go >/dev/null || die "prerequisite missing: go (Go >= 1.26 toolchain) is needed to build the Flux controllers"
go_env

KH_FLUX_DIR="$KH_CACHE/flux-$KH_FLUX_VERSION"
stamp="$KH_FLUX_DIR/.complete"
# Bump KH_FLUX_BUILD_REV when the recipe below changes in a way that changes the binaries or CRDs.
KH_FLUX_BUILD_REV=1
recipe="$KH_FLUX_VERSION $(go env GOVERSION) [$KH_FLUX_SOURCE_REPLACES] rev$KH_FLUX_BUILD_REV"
if [[ -f $stamp && "$(cat "$stamp")" == "$recipe" ]]; then
  log "flux controllers cached in $KH_FLUX_DIR"
  exit 0
fi

src="$KH_FLUX_DIR/src"
rm -rf "$KH_FLUX_DIR/bin" "$KH_FLUX_DIR/crds"
mkdir -p "$KH_FLUX_DIR/bin" "$KH_FLUX_DIR/crds" "$src"
blog="$KH_FLUX_DIR/build.log"
: >"$blog"
log "building Flux $KH_FLUX_VERSION controllers into $KH_FLUX_DIR/bin (log: $blog); cold, this takes ~20 min on 2 cores"
start=$SECONDS

for ctl in source-controller kustomize-controller; do
  mod="github.com/fluxcd/$ctl"
  info=$(go mod download -json "$mod@$KH_FLUX_VERSION" 2>>"$blog") || die "could not download $mod@$KH_FLUX_VERSION (log: $blog)"
  gomod=$(sed -n 's/.*"GoMod": "\(.*\)",/\1/p' <<<"$info")
  moddir=$(sed -n 's/.*"Dir": "\(.*\)",/\1/p' <<<"$info")
  [[ -f $gomod && -d $moddir ]] || die "no go.mod/source for $mod@$KH_FLUX_VERSION"
  # Every replace directive (single-line or in a block) whose target is a module version is copied;
  # local-path replaces (`=> ./api`) are dropped, so the require of the tagged api submodule stands.
  replaces=$(awk '
    /^replace \(/ { inblock = 1; next }
    inblock && /^\)/ { inblock = 0; next }
    { line = $0; sub(/\/\/.*/, "", line) }
    inblock && line ~ /=>/ { r = line }
    !inblock && line ~ /^replace .*=>/ { r = line; sub(/^replace /, "", r) }
    r != "" { sub(/^[ \t]+/, "", r); sub(/[ \t]+$/, "", r); n = split(r, f, /[ \t]+/)
              if (f[n - 1] !~ /^\./ && f[n] ~ /^v/) print "\t" r; r = "" }' "$gomod")
  [[ $ctl == source-controller && -n $KH_FLUX_SOURCE_REPLACES ]] && replaces+=$'\n\t'"$KH_FLUX_SOURCE_REPLACES"
  dir="$src/$ctl"
  mkdir -p "$dir"
  {
    printf 'module khwrap\n\ngo 1.24.0\n\nrequire %s %s\n' "$mod" "$KH_FLUX_VERSION"
    [[ -n $replaces ]] && printf '\nreplace (\n%s\n)\n' "$replaces"
  } >"$dir/go.mod"
  printf '//go:build tools\n\n// Package tools pins the program this module builds.\npackage tools\n\nimport _ "%s"\n' "$mod" >"$dir/tools.go"
  # -e: tidy also resolves the controllers' test-only modules (gittestserver, helmtestserver), some of
  # which the proxy does not serve; a module the build itself needs still fails `go build` below.
  (cd "$dir" && go mod tidy -e) >>"$blog" 2>&1 || die "go mod tidy failed in $dir (log: $blog)"
  log "go build $ctl $KH_FLUX_VERSION"
  (cd "$dir" && go build -trimpath -ldflags "-s -w" -o "$KH_FLUX_DIR/bin/$ctl" "$mod") >>"$blog" 2>&1 \
    || die "go build of $ctl failed (log: $blog)"
  cp "$moddir"/config/crd/bases/*.yaml "$KH_FLUX_DIR/crds/"
done
chmod -R u+w "$KH_FLUX_DIR/crds"

printf '%s' "$recipe" >"$stamp"
log "flux controllers ready in $KH_FLUX_DIR/bin ($(( SECONDS - start ))s): $(cd "$KH_FLUX_DIR/bin" && echo *)"
