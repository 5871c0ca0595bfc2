#!/bin/bash
# Device call 1: the CUDA build for this GPU (node-llama-cpp's binding through `nativegen engine
# build --gpu cuda`, then llama-server and llama-bench from the SAME cmake tree, so they share its
# libggml-cuda), the benchmark model, a llama-bench reference, the build packed into $OUT
# (cuda-*.part, < 16 MiB each) for a later call, and a first `npm run test:gpu`.
# Run from the carried folder: `cd .gpu && bash app/bench/gpu/build.sh`. DRY=1: no GPU (CPU build steps are skipped).
. app/bench/gpu/setup.sh
if [ -f "$CARRY/lsrc.tar.xz" ] && [ ! -f "$NLC/llama/llama.cpp/CMakeLists.txt" ]; then
  tar xJf "$CARRY/lsrc.tar.xz" -C "$NLC/llama" && mkdir -p "$NLC/llama/llama.cpp/.git" && log "llama.cpp source unpacked"
fi
nvidia-smi --query-gpu=index,name,memory.total,memory.free,driver_version,compute_cap --format=csv | tee "$OUT/gpu.txt"
cmake --version | head -1; nvcc --version | tail -2
if [ "${DRY:-0}" = 1 ]; then node bin/nativegen.js engine build --gpu cuda --dry-run; exit 0; fi
log "engine build: start"
( time timeout 460 node bin/nativegen.js engine build --gpu cuda ) > "$OUT/build-nlc.log" 2>&1; echo "rc=$?" >> "$OUT/build-nlc.log"
log "engine build: $(tail -1 "$OUT/build-nlc.log")"; tail -4 "$OUT/build-nlc.log"
( cmake -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF "$BUILD" \
  && time cmake --build "$BUILD" --target llama-server llama-bench --parallel 16 ) > "$OUT/build-tools.log" 2>&1; echo "rc=$?" >> "$OUT/build-tools.log"
log "tools: $(tail -1 "$OUT/build-tools.log")"; tail -3 "$OUT/build-tools.log"
ls -la "$BUILD/Release" "$BUILD/bin" | head -50
# Pack: the Release folder plus the two tools and the libraries only bin/ has (the tools run with
# LD_LIBRARY_PATH=bin:Release, and Release holds copies of the shared ones).
( cd "$BUILD" && extra=$(for f in bin/*.so*; do [ -e "Release/${f#bin/}" ] || echo "$f"; done) && tar cf - Release bin/llama-server bin/llama-bench $extra | xz -T16 -6 | split -b 15m -d - "$OUT/cuda-" ) && for f in "$OUT"/cuda-??; do mv "$f" "$f.part"; done
ls -la "$OUT"; log "packed"
node node_modules/tsx/dist/cli.mjs fixtures/cli.ts qwen3-0.6b-shape | tee "$OUT/model.txt"
M="$W/models/qwen3-0.6b-shape.gguf"; ls -la "$W/models"
LD_LIBRARY_PATH="$LLAMA_LIBS" timeout 120 "$BUILD/bin/llama-bench" -m "$M" -ngl 99 -p 512,4000 -n 128 -r 3 -o md 2>&1 | tee "$OUT/llama-bench.md" | tail -8
log "llama-bench"
timeout 200 node node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts > "$OUT/test-gpu-1.log" 2>&1; echo "rc=$?" >> "$OUT/test-gpu-1.log"
tail -30 "$OUT/test-gpu-1.log"; log done
