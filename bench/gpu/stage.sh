#!/bin/bash
# Run HERE (not on the device): stage what a device call carries into DEST (default
# /work/main/.gpu, ignored by git there): this worktree's files under app/, and the packs
# (node.xz, nm.tar.xz, lsrc.tar.xz, cuda-*.part) from PACKS (default /tmp/gpu5). Prints the size.
set -eu
SRC=$(cd "$(dirname "$0")/../.." && pwd)
DEST=${DEST:-/work/main/.gpu}
PACKS=${PACKS:-/tmp/gpu5}
mkdir -p "$DEST/app"
rm -rf "$DEST/app"/*
# TRIM=1: only what the device scripts run (sources, benchmarks, fixtures, test/gpu and the test
# support they import), to leave room for carried cuda-*.part beside node and node_modules.
( cd "$SRC" && git ls-files -co --exclude-standard | grep -v '^docs/images/' \
  | { if [ -n "${TRIM:-}" ]; then grep -E '^(src/|bin/|bench/|fixtures/|test/(support|gpu|store|cli|conversations)/|test/globalSetup|package.json|tsconfig|vitest)' | grep -v '^bench/results/'; else cat; fi } \
  | tar cf - -T - ) | tar xf - -C "$DEST/app"
for f in node.xz nm.tar.xz ${WITH_SOURCE:+lsrc.tar.xz}; do cp -u "$PACKS/$f" "$DEST/"; done
[ -n "${WITH_SOURCE:-}" ] || rm -f "$DEST/lsrc.tar.xz"
if [ -n "${WITH_CUDA:-}" ]; then cp -u "$PACKS"/cuda-*.part "$DEST/"; else rm -f "$DEST"/cuda-*.part; fi
du -sh "$DEST"; du -sh "$DEST"/* | sort -h | tail
