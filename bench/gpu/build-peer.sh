#!/bin/bash
# Device call on a cold machine carrying node.xz, nm.tar.xz and lsrc.tar.xz (no earlier build: the
# 64 MiB carry holds either the build or the source): the CUDA binding and llama-server from one
# CMake tree (build2.sh's build steps; nativegen's source patches applied by `engine build`, so
# llama-server has them too), packed as cuda-*.part for later calls, then the peer benchmark on the GPU side by side with
# llama-server (PEER_ONLY, default prefill,decode,latency). Run from the carried folder:
# `cd .gpu && bash app/bench/gpu/build-peer.sh`.
. app/bench/gpu/setup.sh
if [ ! -f "$NLC/llama/llama.cpp/CMakeLists.txt" ]; then
  tar xJf "$CARRY/lsrc.tar.xz" -C "$NLC/llama" && mv "$NLC/llama/src" "$NLC/llama/llama.cpp" && mkdir -p "$NLC/llama/llama.cpp/.git" && log "llama.cpp source unpacked"
fi
( timeout 400 node bin/nativegen.js engine build --gpu cuda ) > "$OUT/build-nlc.log" 2>&1; log "engine build: rc=$?"
grep -E "patch|done in" "$OUT/build-nlc.log"; cat "$BUILD/nativegen-patches.json"
( cmake -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF "$BUILD" \
  && cmake --build "$BUILD" --target llama-server --parallel 16 ) > "$OUT/build-tools.log" 2>&1; log "llama-server build: rc=$?"
mkdir -p "$NATIVEGEN_LLAMA_SERVER_DIR/bin"
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$LLAMA_LIBS" "$BUILD/bin/llama-server" > "$NATIVEGEN_LLAMA_SERVER_DIR/bin/llama-server"
chmod +x "$NATIVEGEN_LLAMA_SERVER_DIR/bin/llama-server"
echo '{"release":"v0.4.0","cpuVariant":"cuda sm_90 (the node-llama-cpp build tree)","cmakeArguments":[]}' > "$NATIVEGEN_LLAMA_SERVER_DIR/bin/build.json"
pack_cuda_build
export BENCH_BACKEND=cuda BENCH_MODEL=${BENCH_MODEL:-qwen3-0.6b-shape} PEER_THREADS=1 PEER_ROUNDS=${PEER_ROUNDS:-3}
node node_modules/tsx/dist/cli.mjs fixtures/cli.ts "$BENCH_MODEL" > /dev/null 2>&1
left=$(( 585 - ($(date +%s) - T0) )); log "peer with ${left}s"
( export PEER_ONLY=${PEER_ONLY:-prefill,decode,latency}; timeout "$left" node node_modules/tsx/dist/cli.mjs bench/run.ts peer ) > "$OUT/peer.log" 2>&1
echo "rc=$?" >> "$OUT/peer.log"; cp bench/results/peer.json "$OUT/peer.json" 2>/dev/null
grep -E "^\[.*\] [a-zA-Z.0-9]+: nativegen" "$OUT/peer.log" | sed 's/^\[[^]]*\] //'
log done
( cd "$OUT" && tar czf logs.tar.gz --remove-files $(ls | grep -v -e '\.part$' -e '^logs.tar.gz$') )
