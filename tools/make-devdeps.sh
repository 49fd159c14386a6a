#!/usr/bin/env bash
# make-devdeps.sh - builds .devdeps/deps.tgz, the bundle of Debian libraries that the bare GPU
# machine lacks (it has nvcc and python but none of our apt -dev packages, and cannot install any).
#
# Usage (repository root, on the dev machine): tools/make-devdeps.sh [OUT_DIR]   (default .devdeps)
# Then pass `.devdeps` to the device tool's `carry`; bench/train_throughput/gpu_env.sh and
# bench/kda_kernel/device_run.sh unpack it to /tmp/kdadeps and point CPATH / LIBRARY_PATH /
# LD_LIBRARY_PATH at it, with no Makefile change.
#
# What goes in: for every package below, its headers (flattened into include/, so the
# multiarch openblas-openmp headers are found as <cblas.h>) and its shared libraries with their
# soname links (flattened into lib/). The list is tools/install-deps.sh's build libraries plus the
# runtime libraries they pull in that a stock CUDA image may lack (libgfortran, libquadmath for
# OpenBLAS). Optional packages (the CPU collective engine, when installed) are added if present.
# A manifest (MANIFEST.txt: package, version, file) goes into the bundle so a run can say what it
# built against. The bundle is written to a temp name and renamed: a failed run leaves no
# half-written deps.tgz.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-.devdeps}
required=(libopenblas-openmp-dev libopenblas0-openmp libzstd-dev libzstd1 libsnappy-dev libsnappy1v5
    libyaml-dev libyaml-0-2 zlib1g-dev zlib1g libgfortran5 libquadmath0)
optional=(libgloo-dev libgloo0 libopenmpi-dev libopenmpi3)

installed() { dpkg-query -W -f='${Status}' "$1" 2> /dev/null | grep -q "install ok installed"; }
missing=()
for p in "${required[@]}"; do installed "$p" || missing+=("$p"); done
if [ ${#missing[@]} -ne 0 ]; then
    echo "make-devdeps: not installed: ${missing[*]} (run tools/install-deps.sh first)" >&2
    exit 1
fi
pkgs=("${required[@]}")
for p in "${optional[@]}"; do installed "$p" && pkgs+=("$p"); done

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/include" "$stage/lib"
: > "$stage/MANIFEST.txt"
for p in "${pkgs[@]}"; do
    ver=$(dpkg-query -W -f='${Version}' "$p")
    while IFS= read -r f; do
        [ -f "$f" ] || [ -L "$f" ] || continue
        case "$f" in
        /usr/include/*)
            rel=${f#/usr/include/}
            rel=${rel#x86_64-linux-gnu/}
            rel=${rel#openblas-openmp/}
            mkdir -p "$stage/include/$(dirname "$rel")"
            cp -P "$f" "$stage/include/$rel"
            ;;
        /usr/lib/x86_64-linux-gnu/*.so | /usr/lib/x86_64-linux-gnu/*.so.*)
            # keep the soname chain; a link pointing outside its folder is resolved to a file
            base=$(basename "$f")
            if [ -L "$f" ] && [ "$(dirname "$(readlink -f "$f")")" != "$(dirname "$f")" ]; then
                cp -L "$f" "$stage/lib/$base"
            else
                cp -P "$f" "$stage/lib/$base"
            fi
            ;;
        /usr/lib/x86_64-linux-gnu/*/*.so | /usr/lib/x86_64-linux-gnu/*/*.so.*)
            cp -P "$f" "$stage/lib/$(basename "$f")"
            ;;
        *) continue ;;
        esac
        echo "$p $ver $f" >> "$stage/MANIFEST.txt"
    done < <(dpkg -L "$p")
done
# every link in lib/ must resolve inside the bundle
for l in "$stage"/lib/*; do
    if [ -L "$l" ] && [ ! -e "$l" ]; then
        echo "make-devdeps: dangling link in bundle: $(basename "$l") -> $(readlink "$l")" >&2
        exit 1
    fi
done
for h in cblas.h zstd.h snappy-c.h yaml.h zlib.h; do
    [ -f "$stage/include/$h" ] || { echo "make-devdeps: $h missing from bundle" >&2; exit 1; }
done
for so in libopenblas.so libzstd.so libsnappy.so libyaml.so libz.so libgfortran.so.5; do
    [ -e "$stage/lib/$so" ] || { echo "make-devdeps: $so missing from bundle" >&2; exit 1; }
done
mkdir -p "$OUT"
tar czf "$OUT/deps.tgz.tmp" -C "$stage" .
mv "$OUT/deps.tgz.tmp" "$OUT/deps.tgz"
echo "make-devdeps: $OUT/deps.tgz ($(du -h "$OUT/deps.tgz" | cut -f1), ${#pkgs[@]} packages: ${pkgs[*]})"
