#!/bin/bash
# Device call 2: the CUDA build (node-llama-cpp's binding through `nativegen engine build --gpu
# cuda`, then llama-server and llama-bench from the SAME cmake tree, sharing its libggml-cuda),
# the build packed into $OUT (cuda-*.part), the benchmark model, llama-bench, then
# `npm run test:gpu` with what is left of the call's 10 minutes.
# Run from the carried folder: `cd .gpu && bash app/bench/gpu/build2.sh`. DRY=1: no GPU.
. app/bench/gpu/setup.sh
if [ -f "$CARRY/lsrc.tar.xz" ] && [ ! -f "$NLC/llama/llama.cpp/CMakeLists.txt" ]; then
  tar xJf "$CARRY/lsrc.tar.xz" -C "$NLC/llama" && mv "$NLC/llama/src" "$NLC/llama/llama.cpp" && mkdir -p "$NLC/llama/llama.cpp/.git" && log "llama.cpp source unpacked"
fi
nvidia-smi --query-gpu=index,name,memory.total,memory.free,driver_version,compute_cap --format=csv | tee "$OUT/gpu.txt"
if [ "${DRY:-0}" = 1 ]; then node bin/nativegen.js engine build --gpu cuda --dry-run; ls "$NLC/llama/llama.cpp/tools/ui"; exit 0; fi
if [ ! -f "$BUILD/Release/llama-addon.node" ]; then
  log "engine build: start"
  ( time timeout 420 node bin/nativegen.js engine build --gpu cuda ) > "$OUT/build-nlc.log" 2>&1; echo "rc=$?" >> "$OUT/build-nlc.log"
  log "engine build: $(tail -1 "$OUT/build-nlc.log")"; grep -E "^real|engine build" "$OUT/build-nlc.log"
fi
if [ ! -x "$BUILD/bin/llama-server" ]; then
  ( cmake -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF "$BUILD" \
    && time cmake --build "$BUILD" --target llama-server llama-bench --parallel 16 ) > "$OUT/build-tools.log" 2>&1; echo "rc=$?" >> "$OUT/build-tools.log"
  log "tools: $(tail -1 "$OUT/build-tools.log")"; grep -E "^real|Error|error:" "$OUT/build-tools.log" | head -5
fi
ls -la "$BUILD/bin"
# llama-server where bench/peer/LlamaServer.ts looks for a built one (NATIVEGEN_LLAMA_SERVER_DIR).
mkdir -p "$NATIVEGEN_LLAMA_SERVER_DIR/bin"
printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$LLAMA_LIBS" "$BUILD/bin/llama-server" > "$NATIVEGEN_LLAMA_SERVER_DIR/bin/llama-server"
chmod +x "$NATIVEGEN_LLAMA_SERVER_DIR/bin/llama-server"
echo '{"release":"v0.4.0","cpuVariant":"cuda sm_90 (the node-llama-cpp build tree)","cmakeArguments":[]}' > "$NATIVEGEN_LLAMA_SERVER_DIR/bin/build.json"
( cd "$BUILD" && extra=$(for f in bin/*.so*; do [ -e "Release/${f#bin/}" ] || echo "$f"; done) && tar cf - Release bin/llama-server bin/llama-bench $extra | xz -T16 -6 | split -b 15m -d - "$OUT/cuda-" ) && for f in "$OUT"/cuda-??; do mv "$f" "$f.part"; done
log "packed: $(ls -la "$OUT" | grep part | awk '{print $5}' | tr '\n' ' ')"
node node_modules/tsx/dist/cli.mjs fixtures/cli.ts qwen3-0.6b-shape > "$OUT/model.txt" 2>&1
M="$W/models/qwen3-0.6b-shape.gguf"
LD_LIBRARY_PATH="$LLAMA_LIBS" timeout 90 "$BUILD/bin/llama-bench" -m "$M" -ngl 99 -p 512,4000 -n 128 -r 3 -o md > "$OUT/llama-bench.md" 2>&1
LD_LIBRARY_PATH="$LLAMA_LIBS" GGML_CUDA_DISABLE_GRAPHS=1 timeout 60 "$BUILD/bin/llama-bench" -m "$M" -ngl 99 -p 0 -n 128 -r 3 -o md > "$OUT/llama-bench-nographs.md" 2>&1
tail -4 "$OUT/llama-bench.md"; tail -2 "$OUT/llama-bench-nographs.md"; log "llama-bench"
left=$(( 575 - ($(date +%s) - T0) ))
log "test:gpu with ${left}s"
timeout "$left" node node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts --reporter=verbose > "$OUT/test-gpu.log" 2>&1; echo "rc=$?" >> "$OUT/test-gpu.log"
grep -E "✓|×|↓|Test Files|Tests |rc=" "$OUT/test-gpu.log" | tail -30; log done
# The device returns at most 8 files: every log in one archive beside the build parts.
( cd "$OUT" && tar czf logs.tar.gz --remove-files $(ls | grep -v -e '\.part$' -e '^logs.tar.gz$') )
