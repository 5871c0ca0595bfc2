#!/bin/bash
# Device call: is the CUDA graph abort ("an illegal instruction was encountered" when a prefill is
# cancelled or preempted between chunks, docs/gpu.md) Hopper's programmatic dependent launch (PDL,
# which this llama.cpp turns on for sm_90 kernels; GGML_CUDA_PDL=0 turns it off at run time)?
# Builds the CUDA binding first where no build is carried or unpacked (build2.sh's first part),
# then runs the engine suites that aborted, on CUDA with graphs on, with PDL off (and, with what is
# left of the call, with PDL on, the control). Run from the carried folder:
# `cd .gpu && bash app/bench/gpu/graphs.sh`.
. app/bench/gpu/setup.sh
build_cuda_where_missing
SUITES=${SUITES:-test/native-worker.test.ts test/supervision.test.ts test/provider/conversations.test.ts test/provider/tools.test.ts}
suites() { # name, then env assignments
  local name=$1; shift
  local left=$(( 570 - ($(date +%s) - T0) ))
  [ "$left" -gt 30 ] || { log "no time left for $name"; return; }
  ( export NATIVEGEN_TEST_ENGINE_BACKEND=cuda GGML_CUDA_DISABLE_GRAPHS=0 "$@"
    timeout "$left" node node_modules/vitest/vitest.mjs run $SUITES --reporter=verbose ) > "$OUT/suites-$name.log" 2>&1
  echo "rc=$?" >> "$OUT/suites-$name.log"
  log "suites $name: $(grep -c 'illegal instruction' "$OUT/suites-$name.log") illegal-instruction lines; $(grep -E '^ +Tests ' "$OUT/suites-$name.log")"
  grep -E "×" "$OUT/suites-$name.log" | head -12
}
suites pdl-off GGML_CUDA_PDL=0
suites pdl-on GGML_CUDA_PDL=1
log done
( cd "$OUT" && tar czf logs.tar.gz --remove-files $(ls | grep -v -e '\.part$' -e '^logs.tar.gz$') )
