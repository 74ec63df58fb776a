#!/usr/bin/env bash
# Pack a Docker engine for the GPU machine from this machine's Debian packages.
#   scripts/gpu/fetch-docker-packages.sh OUTDIR
# Downloads the packages with `apt-get download` (this machine's apt sources; no URL here),
# unpacks them with `dpkg -x`, keeps only what an engine needs (dockerd, containerd,
# containerd-shim-runc-v2, runc, docker-init, the docker CLI and libdevmapper.so.1.02.1, which
# Debian's dockerd links), and writes OUTDIR/docker-engine.tar.xz with a MANIFEST inside
# (package versions, .deb and file sha256s) plus OUTDIR/docker-engine.tar.xz.sha256.
# The archive is reproducible: same packages, same bytes.
# OUTDIR should be an ignored folder of the repository (e.g. scratch/docker-engine) so that the
# device tool can carry it; scripts/gpu/docker-up.sh looks there by default.
# DOCKER_EXTRA_PACKAGES="pkg ..." adds packages whose shared libraries (lib*.so.*) are kept too,
# for a library the GPU machine turns out to lack (docker-up.sh checks with ldd there).
set -euo pipefail

if [ $# -ne 1 ]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
mkdir -p "$1"
outdir=$(cd "$1" && pwd)
if git -C "$outdir" rev-parse --show-toplevel >/dev/null 2>&1 \
   && ! git -C "$outdir" check-ignore -q "$outdir/docker-engine.tar.xz"; then
  echo "warning: $1 is inside the repository but not ignored: the archive must not be committed" >&2
fi

packages=(docker.io containerd runc libdevmapper1.02.1 tini)
read -r -a extra <<<"${DOCKER_EXTRA_PACKAGES:-}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs" "$work/root" "$work/stage/docker-engine/bin" "$work/stage/docker-engine/lib"

(cd "$work/debs" && apt-get download -q "${packages[@]}" "${extra[@]}" >/dev/null 2>"$work/apt.err") || {
  cat "$work/apt.err" >&2
  echo "apt-get download failed (run 'apt-get update' first?)" >&2
  exit 1
}
for deb in "$work"/debs/*.deb; do
  dpkg -x "$deb" "$work/root"
done

stage=$work/stage/docker-engine
# Find one file of the unpacked packages by name in a bin, sbin or lib folder (Debian 12 puts
# them in usr/bin, usr/sbin and lib/x86_64-linux-gnu; /etc/default/docker is not the CLI).
pick() {
  local found
  found=$(find "$work/root" \( -type f -o -type l \) -name "$1" \
            -regex '.*/\(usr/\)?\(s?bin\|lib\(/x86_64-linux-gnu\)?\)/[^/]*' | sort | head -1)
  if [ -z "$found" ]; then
    echo "not found in the packages: $1" >&2
    exit 1
  fi
  cp -L "$found" "$2"
}
for b in dockerd containerd containerd-shim-runc-v2 runc docker; do
  pick "$b" "$stage/bin/$b"
done
pick docker-init "$stage/bin/docker-init"   # a link to tini-static in Debian: copy the target
pick libdevmapper.so.1.02.1 "$stage/lib/libdevmapper.so.1.02.1"
for deb in "${extra[@]}"; do
  dpkg -c "$work"/debs/"${deb}"_*.deb | awk '{print $6}' | grep -E '/lib[^/]*\.so\.[0-9.]+$' | while read -r f; do
    cp -L "$work/root/${f#./}" "$stage/lib/"
  done
done
chmod 0755 "$stage"/bin/*
chmod 0644 "$stage"/lib/*

{
  echo "# docker engine for the GPU machine, from Debian packages (apt-get download + dpkg -x)"
  echo "## packages (name version deb-sha256)"
  for deb in "$work"/debs/*.deb; do
    printf '%s %s %s\n' "$(dpkg-deb -f "$deb" Package)" "$(dpkg-deb -f "$deb" Version)" \
      "$(sha256sum "$deb" | cut -d' ' -f1)"
  done
  echo "## files (sha256 path)"
  (cd "$stage" && find bin lib -type f | sort | xargs sha256sum)
} >"$stage/MANIFEST"

archive=$outdir/docker-engine.tar.xz
# Fixed order, owners and times, and an explicit xz block size (the output then does not depend
# on the number of threads): the archive's sha256 only changes when the packages do.
tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -C "$work/stage" -cf - docker-engine \
  | xz -6 -T0 --block-size=16MiB >"$archive.part"
mv "$archive.part" "$archive"
(cd "$outdir" && sha256sum docker-engine.tar.xz >docker-engine.tar.xz.sha256)
size=$(stat -c %s "$archive")
sed -n '/^## packages/,/^## files/p' "$stage/MANIFEST" | grep -v '^##' >&2
echo "$archive: $((size / 1048576)) MiB" >&2
if [ "$size" -gt $((60 * 1048576)) ]; then
  echo "warning: over 60 MiB, too close to what one device call can carry" >&2
fi
cut -d' ' -f1 "$outdir/docker-engine.tar.xz.sha256"
