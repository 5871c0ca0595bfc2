#!/bin/bash
# Device call: CUDA graphs on with llama.cpp's graph reuse off (LLAMA_GRAPH_REUSE_DISABLE=1, what
# CUDA children now get with graphs on). diagnose-graphs.sh showed the abort is no kernel without
# sm_90 code (an unbuffered stdout printed no "no device code") and not ggml's op fusion; a reused
# llama graph keeps its ggml graph id, and ggml-cuda then replays the captured CUDA graph without
# comparing nodes. Steps: (1) control, the native-worker suite with reuse on (expect the abort);
# (2) the four suites that aborted, reuse off; (3) tokencost on the GPU: the decode's CPU and tok/s
# through `nativegen serve` with graphs off (the default), graphs on + reuse off, graphs on + reuse
# on, each against the in-process loop; (4) `npm run test:gpu`. Carry node.xz, nm.tar.xz,
# cuda-*.part, nlc-cpu.tar.xz: `cd .gpu && bash app/bench/gpu/graphs-reuse.sh`.
. app/bench/gpu/setup.sh
suites() { # name, seconds, files, then env assignments
  local name=$1 limit=$2 files=$3; shift 3
  local left=$(( 585 - ($(date +%s) - T0) )); [ "$left" -lt "$limit" ] && limit=$left
  [ "$limit" -gt 20 ] || { log "no time left for $name"; return; }
  ( export NATIVEGEN_TEST_ENGINE_BACKEND=cuda GGML_CUDA_DISABLE_GRAPHS=0 "$@"
    timeout "$limit" node node_modules/vitest/vitest.mjs run $files --reporter=verbose ) > "$OUT/suites-$name.log" 2>&1
  echo "rc=$?" >> "$OUT/suites-$name.log"
  log "suites $name: $(grep -c 'illegal instruction' "$OUT/suites-$name.log") illegal-instruction lines; $(grep -E '^ +Tests ' "$OUT/suites-$name.log")"
  grep -E "×" "$OUT/suites-$name.log" | head -12
}
suites reuse-on 60 test/native-worker.test.ts LLAMA_GRAPH_REUSE_DISABLE=0
suites reuse-off 200 "test/native-worker.test.ts test/supervision.test.ts test/provider/conversations.test.ts test/provider/tools.test.ts"
export BENCH_BACKEND=cuda BENCH_MODEL=${BENCH_MODEL:-qwen3-0.6b-shape}
node node_modules/tsx/dist/cli.mjs fixtures/cli.ts "$BENCH_MODEL" > /dev/null
cost() { # name, then env assignments
  local name=$1; shift
  ( export TOKENCOST_THREADS=1 TOKENCOST_ROUNDS=2 TOKENCOST_TOKENS=400 TOKENCOST_PROFILE=0 "$@"
    timeout 90 node node_modules/tsx/dist/cli.mjs bench/run.ts tokencost ) > "$OUT/tokencost-$name.log" 2>&1
  echo "rc=$?" >> "$OUT/tokencost-$name.log"; cp bench/results/tokencost.json "$OUT/tokencost-$name.json" 2>/dev/null
  log "tokencost $name: $(tail -1 "$OUT/tokencost-$name.log")"; grep -v "^\s*at " "$OUT/tokencost-$name.log" | tail -14
}
cost graphs-off
cost graphs-on NATIVEGEN_CUDA_GRAPHS=1
cost graphs-on-reuse NATIVEGEN_CUDA_GRAPHS=1 LLAMA_GRAPH_REUSE_DISABLE=0
left=$(( 580 - ($(date +%s) - T0) )); log "test:gpu with ${left}s"
if [ "$left" -gt 60 ]; then
  timeout "$left" node node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts --reporter=verbose > "$OUT/test-gpu.log" 2>&1; echo "rc=$?" >> "$OUT/test-gpu.log"
  grep -E "✓|×|↓|Test Files|Tests |rc=" "$OUT/test-gpu.log" | tail -24
fi
log done
( cd "$OUT" && tar czf logs.tar.gz --remove-files $(ls | grep -v '^logs.tar.gz$') )
