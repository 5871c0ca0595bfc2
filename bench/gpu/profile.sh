#!/bin/bash
# Device call: where a decoded token's time goes on the GPU (bench/tokencost.ts with
# BENCH_BACKEND=cuda: CPU ms per token per process, and V8 profiles of the three processes), then
# `npm run test:gpu` with what is left of the call. Run from the carried folder:
# `cd .gpu && bash app/bench/gpu/profile.sh`.
. app/bench/gpu/setup.sh
export BENCH_BACKEND=${BENCH_BACKEND:-cuda} BENCH_MODEL=${BENCH_MODEL:-qwen3-0.6b-shape}
node node_modules/tsx/dist/cli.mjs fixtures/cli.ts "$BENCH_MODEL" > /dev/null
( export TOKENCOST_THREADS=1 TOKENCOST_ROUNDS=${TOKENCOST_ROUNDS:-2} TOKENCOST_TOKENS=${TOKENCOST_TOKENS:-600}
  timeout 240 node node_modules/tsx/dist/cli.mjs bench/run.ts tokencost ) > "$OUT/tokencost.log" 2>&1
echo "rc=$?" >> "$OUT/tokencost.log"; cp bench/results/tokencost.json "$OUT/" 2>/dev/null
log "tokencost: $(tail -1 "$OUT/tokencost.log")"; grep -v "^\s*at " "$OUT/tokencost.log" | tail -60
case ",${ONLY:-test}," in *,test,*)
  left=$(( 575 - ($(date +%s) - T0) )); log "test:gpu with ${left}s"
  timeout "$left" node node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts --reporter=verbose > "$OUT/test-gpu.log" 2>&1; echo "rc=$?" >> "$OUT/test-gpu.log"
  grep -E "✓|×|↓|Test Files|Tests |rc=" "$OUT/test-gpu.log" | tail -30 ;; esac
log done
( cd "$OUT" && tar czf logs.tar.gz --remove-files $(ls | grep -v '^logs.tar.gz$') )
