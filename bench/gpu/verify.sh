#!/bin/bash
# Device call: `npm run test:gpu` whole, then the engine worker suite on CUDA (graphs as the build's
# record decides). Carry node.xz, nm.tar.xz, cuda-*.part, nlc-cpu.tar.xz:
# `cd .gpu && bash app/bench/gpu/verify.sh`.
. app/bench/gpu/setup.sh
log "build's patches: $(cat "$BUILD/nativegen-patches.json" 2>/dev/null || echo none)"
timeout 330 node node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts --reporter=verbose > "$OUT/test-gpu.log" 2>&1; echo "rc=$?" >> "$OUT/test-gpu.log"
grep -E "✓|×|parity:|Test Files|Tests |rc=" "$OUT/test-gpu.log"; log test:gpu
left=$(( 560 - ($(date +%s) - T0) ))
( export NATIVEGEN_TEST_ENGINE_BACKEND=cuda; timeout "$left" node node_modules/vitest/vitest.mjs run test/native-worker.test.ts --reporter=verbose ) > "$OUT/native-worker.log" 2>&1; echo "rc=$?" >> "$OUT/native-worker.log"
grep -E "×|chunked vs|Tests |rc=" "$OUT/native-worker.log"; log done
( cd "$OUT" && tar czf logs.tar.gz --remove-files $(ls | grep -v '^logs.tar.gz$') )
