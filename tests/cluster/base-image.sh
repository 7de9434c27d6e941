#!/usr/bin/env bash
# Makes the base image the project's Containerfiles start FROM (debian:bookworm-slim) without a
# registry: a minbase debootstrap of Debian bookworm, cached as a tarball, imported into buildah's
# local storage under the public name so `FROM debian:bookworm-slim` resolves with --pull=never.
. "$(dirname "$0")/lib.sh"

base_ref="docker.io/library/debian:${KH_DEBIAN_SUITE}-slim"
tarball="$KH_CACHE/rootfs-$KH_DEBIAN_SUITE.tar"

for tool in debootstrap buildah; do
  command -v "$tool" >/dev/null || die "prerequisite missing: $tool (apt-get install -y $tool)"
done

if [[ ! -s $tarball ]]; then
  mkdir -p "$KH_CACHE"
  work=$(mktemp -d "$KH_CACHE/rootfs.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  dlog="$KH_CACHE/debootstrap.log"
  log "debootstrap $KH_DEBIAN_SUITE minbase (log: $dlog)"
  debootstrap --variant=minbase "$KH_DEBIAN_SUITE" "$work/root" http://deb.debian.org/debian >"$dlog" 2>&1 \
    || die "debootstrap failed (log: $dlog)"
  # Same apt sources and slimming the official image has, so Containerfiles behave alike.
  cat >"$work/root/etc/apt/sources.list.d/debian.sources" <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: $KH_DEBIAN_SUITE $KH_DEBIAN_SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $KH_DEBIAN_SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  rm -f "$work/root/etc/apt/sources.list"
  rm -rf "$work/root/var/lib/apt/lists/"* "$work/root/var/cache/apt/"*.bin "$work/root/var/cache/apt/archives/"*.deb \
    "$work/root/usr/share/doc/"* "$work/root/usr/share/man/"* "$work/root/var/log/"*
  tar --numeric-owner --xattrs -C "$work/root" -cf "$tarball.tmp" . || die "could not write $tarball"
  mv "$tarball.tmp" "$tarball"
fi

# Re-import when the tarball is newer than the image (or the image is missing).
stamp="$KH_CACHE/buildah/base-image.sha"
sum=$(stat -c '%s %Y' "$tarball")
if bah inspect --type image "$base_ref" >/dev/null 2>&1 && [[ -f $stamp && "$(cat "$stamp")" == "$sum" ]]; then
  log "base image $base_ref cached"
  exit 0
fi
log "importing $tarball as $base_ref"
ctr=$(bah from scratch)
bah add "$ctr" "$tarball" / >/dev/null
bah config --cmd '["bash"]' --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
bah commit --rm -q "$ctr" "$base_ref" >/dev/null
printf '%s' "$sum" >"$stamp"
log "base image $base_ref ready"
