#!/usr/bin/env bash
# Download the Debian packages the text corpus is built from (condensation/data/corpus.py).
# Nothing is installed: `apt-get download` only fetches the .deb files, which the
# pipeline later unpacks with `dpkg-deb -x`.
#
#   bash tools/fetch_debs.sh [DEST_DIR]      (default: resources/debs in the repository)
#
# Needs root (or a user apt lets download) on Debian bookworm with deb.debian.org reachable.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="${1:-$repo_root/resources/debs}"
packages=(r-cran-janeaustenr python3.11-doc)

mkdir -p "$dest"
cd "$dest"

# Run as root, apt drops privileges to _apt for downloads and warns when _apt cannot write
# here; downloading as the calling user is what we want, so say so and skip the warning.
apt_download=(apt-get download -q -o APT::Sandbox::User=root)

updated=0
for pkg in "${packages[@]}"; do
    # apt-get download names files <pkg>_<version>_<arch>.deb
    existing=( "${pkg}"_*.deb )
    if [[ -e "${existing[0]}" ]]; then
        # A run killed mid-download can leave a truncated file: check it decompresses fully.
        if dpkg-deb --fsys-tarfile "${existing[0]}" > /dev/null 2>&1; then
            echo "fetch_debs: ${pkg}: already present (${existing[0]}), skipping"
            continue
        fi
        echo "fetch_debs: ${pkg}: ${existing[0]} is damaged; removing it and downloading again"
        rm -f -- "${existing[0]}"
    fi
    echo "fetch_debs: ${pkg}: downloading into $(pwd)"
    if ! "${apt_download[@]}" "$pkg"; then
        # A fresh machine has empty package lists; refresh them once and retry.
        if [[ "$updated" -eq 1 ]]; then
            echo "fetch_debs: ${pkg}: download failed even after apt-get update" >&2
            exit 1
        fi
        echo "fetch_debs: ${pkg}: download failed; running apt-get update and retrying"
        apt-get update -qq
        updated=1
        "${apt_download[@]}" "$pkg"
    fi
    fetched=( "${pkg}"_*.deb )
    if [[ ! -e "${fetched[0]}" ]]; then
        echo "fetch_debs: ${pkg}: apt-get reported success but no ${pkg}_*.deb appeared" >&2
        exit 1
    fi
    echo "fetch_debs: ${pkg}: got ${fetched[0]}"
done
echo "fetch_debs: done; .deb files in $(pwd)"
