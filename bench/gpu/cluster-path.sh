#!/bin/bash
# Device call, CPU only: the cluster's own path without an engine (bench/_cluster-path.ts: a
# runner over a Provider that answers at once), local and remote, on the device machine's cores.
# Carry .cores (node.xz, nm.tar.xz, sqlite.tar.xz; bench/gpu/packs.sh):
# `bash bench/gpu/cluster-path.sh` from the repository root (the device call's working directory), carry [".cores"].
cd .cores && . app/bench/gpu/setup.sh >/dev/null 2>&1
export UV_THREADPOOL_SIZE=1
for mode in local remote; do
  timeout 120 node --import tsx bench/_cluster-path.ts "${TURNS:-300}" "$mode" 2>&1 | grep -v "^timestamp" | tail -22 > "$OUT/path-$mode.txt"
  echo "== $mode"; cat "$OUT/path-$mode.txt"
done
