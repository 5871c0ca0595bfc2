#!/bin/bash
# Device call: the CUDA build with nativegen's graph patch, graphs on as its record decides (no
# variable set): test/gpu/parity.test.ts (greedy parity, decision probabilities, and the runtime's
# decision log-likelihoods against node-llama-cpp's own on each backend), then the peer
# benchmark's decision delay and SIGKILL-to-ready figures, then tokencost (ms per token through the
# socket vs the in-process loop). Carry node.xz, nm.tar.xz, cuda-*.part, nlc-cpu.tar.xz:
# `cd .gpu && bash app/bench/gpu/graphs-default.sh`.
. app/bench/gpu/setup.sh
log "build's patches: $(cat "$BUILD/nativegen-patches.json" 2>/dev/null || echo none)"
timeout 240 node node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts test/gpu/parity.test.ts --reporter=verbose > "$OUT/parity.log" 2>&1; echo "rc=$?" >> "$OUT/parity.log"
grep -E "✓|×|parity:|Tests |rc=" "$OUT/parity.log"; log parity
export BENCH_BACKEND=cuda BENCH_MODEL=qwen3-0.6b-shape PEER_THREADS=1 PEER_ROUNDS=3
node node_modules/tsx/dist/cli.mjs fixtures/cli.ts "$BENCH_MODEL" > /dev/null 2>&1
( export PEER_ONLY=decision,repair; timeout 200 node node_modules/tsx/dist/cli.mjs bench/run.ts peer ) > "$OUT/peer.log" 2>&1
echo "rc=$?" >> "$OUT/peer.log"; grep -E "^\[.*\] [a-zA-Z.0-9]+: nativegen|rc=" "$OUT/peer.log" | sed 's/^\[[^]]*\] //'; log peer
left=$(( 560 - ($(date +%s) - T0) ))
( export TOKENCOST_THREADS=1 TOKENCOST_ROUNDS=2 TOKENCOST_TOKENS=400 TOKENCOST_PROFILE=0; timeout "$left" node node_modules/tsx/dist/cli.mjs bench/run.ts tokencost ) > "$OUT/tokencost.log" 2>&1
echo "rc=$?" >> "$OUT/tokencost.log"; grep -v "^\s*at " "$OUT/tokencost.log" | tail -14; log done
( cd "$OUT" && tar czf logs.tar.gz --remove-files $(ls | grep -v '^logs.tar.gz$') )
