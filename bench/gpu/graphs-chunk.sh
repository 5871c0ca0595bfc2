#!/bin/bash
# Device call: is the CUDA graph abort tied to many short prefill calls? The engine suites that
# aborted, graphs on, with the tests' workers prefilling in 512-token chunks (a GPU's default in
# `serve`) instead of 128 (NATIVEGEN_TEST_PREFILL_CHUNK; cases that count 128-token chunks fail on
# their assertions, so the figure is the number of aborts). Carry node.xz, nm.tar.xz, cuda-*.part,
# nlc-cpu.tar.xz: `cd .gpu && bash app/bench/gpu/graphs-chunk.sh` (CHUNKS, LIMIT per run, FILES;
# BUILD_DECIDES=1: graphs as the build's patches decide; TEST_GPU=1: then test:gpu).
. app/bench/gpu/setup.sh
run() { # name, seconds, then env assignments
  local name=$1 limit=$2; shift 2
  ( export NATIVEGEN_TEST_ENGINE_BACKEND=cuda "$@"
    # Graphs on by the variable, or (BUILD_DECIDES=1) as the build's record of nativegen's patches decides.
    [ "${BUILD_DECIDES:-0}" = 1 ] || export GGML_CUDA_DISABLE_GRAPHS=0
    timeout "$limit" node node_modules/vitest/vitest.mjs run ${FILES:-test/native-worker.test.ts test/supervision.test.ts test/provider/conversations.test.ts test/provider/tools.test.ts} --reporter=verbose ) > "$OUT/suites-$name.log" 2>&1
  echo "rc=$?" >> "$OUT/suites-$name.log"
  log "suites $name: $(grep -c 'illegal instruction' "$OUT/suites-$name.log") illegal-instruction lines; $(grep -c 'SIGABRT' "$OUT/suites-$name.log") SIGABRT lines; $(grep -E '^ +Tests ' "$OUT/suites-$name.log")"
  grep -E "×" "$OUT/suites-$name.log" | head -12
}
log "build's patches: $(cat "$BUILD/nativegen-patches.json" 2>/dev/null || echo none)"
for c in ${CHUNKS:-512}; do run chunk$c ${LIMIT:-200} NATIVEGEN_TEST_PREFILL_CHUNK=$c; done
if [ "${TEST_GPU:-0}" = 1 ]; then # then `npm run test:gpu` with the time left
  left=$(( 580 - ($(date +%s) - T0) )); log "test:gpu with ${left}s"
  timeout "$left" node node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts --reporter=verbose > "$OUT/test-gpu.log" 2>&1; echo "rc=$?" >> "$OUT/test-gpu.log"
  grep -E "✓|×|Test Files|Tests |rc=" "$OUT/test-gpu.log" | tail -30
fi
log done
( cd "$OUT" && tar czf logs.tar.gz --remove-files $(ls | grep -v '^logs.tar.gz$') )
