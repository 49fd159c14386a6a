#!/usr/bin/env bash
# install-deps.sh - installs the Debian packages kda.c builds against, when missing.
# Why each one is needed: docs/dependencies.md.
set -euo pipefail
pkgs=(build-essential pkg-config libopenblas-dev libopenblas-openmp-dev zlib1g-dev libzstd-dev libsnappy-dev libyaml-dev python3 libgloo-dev iproute2 openmpi-bin)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
echo "installing: ${missing[*]}"
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
