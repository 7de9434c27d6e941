#!/usr/bin/env bash
# Builds the images the cluster itself needs (pause sandbox, CoreDNS) from binaries built here and
# prints their archive paths as NAME=PATH lines. Cached by content; cheap when nothing changed.
. "$(dirname "$0")/lib.sh"
go_env
ctx="$KH_CACHE/cluster-images"
mkdir -p "$ctx/pause" "$ctx/coredns"
(cd "$KH_CLUSTER_DIR/pause" && go build -trimpath -buildvcs=false -ldflags "-s -w" -o "$ctx/pause/pause" .) || die "go build of pause failed"
cp -u "$KH_BIN/coredns" "$ctx/coredns/coredns"
echo "pause=$(build_image pause "$ctx/pause" "$KH_CLUSTER_DIR/images/pause/Containerfile")"
echo "coredns=$(build_image coredns "$ctx/coredns" "$KH_CLUSTER_DIR/images/coredns/Containerfile")"
