#!/usr/bin/env bash
# Builds the project's images from the current checkout (images/*/Containerfile) with buildah on top
# of the locally imported debian:bookworm-slim, and loads them into the running cluster's containerd.
# Tags: localhost/kube-harness/<dir>:dev. Cheap when nothing changed: each image is cached as an
# archive keyed by a hash of its Containerfile and build context (including the kube-harness binary).
. "$(dirname "$0")/lib.sh"

"$KH_CLUSTER_DIR/base-image.sh"

# The worker image carries a static kube-harness: musl if its C toolchain works, else static glibc.
target_dir="${KH_CARGO_TARGET_DIR:-${CARGO_TARGET_DIR:-$KH_REPO_ROOT/target}}"
blog="$KH_CACHE/images/kube-harness.cargo.log"
mkdir -p "$KH_CACHE/images"
log "cargo build --release -p kube-harness (static; log: $blog)"
if (cd "$KH_REPO_ROOT" && CARGO_TARGET_DIR="$target_dir" cargo build --release -p kube-harness \
  --target x86_64-unknown-linux-musl) >"$blog" 2>&1; then
  bin="$target_dir/x86_64-unknown-linux-musl/release/kube-harness"
else
  log "musl build failed (see $blog); trying static glibc"
  (cd "$KH_REPO_ROOT" && CARGO_TARGET_DIR="$target_dir" RUSTFLAGS='-C target-feature=+crt-static' \
    cargo build --release -p kube-harness --target x86_64-unknown-linux-gnu) >>"$blog" 2>&1 \
    || die "cargo build of kube-harness failed (log: $blog)"
  bin="$target_dir/x86_64-unknown-linux-gnu/release/kube-harness"
fi
if file "$bin" 2>/dev/null | grep -q 'dynamically linked'; then
  die "$bin is dynamically linked; the worker image needs a static binary"
fi

ctx_root="$KH_CACHE/image-context"
archives=()
for dir in "$KH_REPO_ROOT"/images/*/; do
  name=$(basename "$dir")
  [[ -f $dir/Containerfile ]] || continue
  ctx="$ctx_root/$name"
  rm -rf "$ctx"; mkdir -p "$ctx"
  cp -a "$dir". "$ctx/"
  rm -f "$ctx/Containerfile" "$ctx/.gitignore"
  [[ $name == worker ]] && install -m 0755 "$bin" "$ctx/kube-harness"
  archives+=("$name=$(build_image "$name" "$ctx" "$dir/Containerfile")")
done

if [[ -S $KH_CONTAINERD_SOCK ]]; then
  for a in "${archives[@]}"; do load_image "${a#*=}" "${a%%=*}"; done
else
  log "cluster not running: images built but not loaded (run up.sh, then this again)"
fi
for a in "${archives[@]}"; do echo "localhost/kube-harness/${a%%=*}:dev ${a#*=}"; done
