#!/bin/bash
# Device call (a cold machine, carrying node.xz, nm.tar.xz and an earlier call's cuda-*.part: no
# llama.cpp source, so no llama-server; its figures come from docs/gpu.md's earlier runs): nativegen's
# own GPU figures through its socket, the 4,000-token prompt cold and its follow-up reusing 95%, decode
# against the in-process loop, the 1-token request (bench/peer.ts, PEER_ONLY=prefill,decode,latency),
# then `npm run test:gpu` with what is left. Run from the carried folder:
# `cd .gpu && bash app/bench/gpu/followup.sh`.
. app/bench/gpu/setup.sh
export BENCH_BACKEND=${BENCH_BACKEND:-cuda} BENCH_MODEL=${BENCH_MODEL:-qwen3-0.6b-shape} PEER_THREADS=1 PEER_ROUNDS=${PEER_ROUNDS:-3}
# An empty llama-server directory and no bundle: the peer benchmark skips llama-server's figures.
export NATIVEGEN_LLAMA_SERVER_DIR="$W/no-llama-server"
node node_modules/tsx/dist/cli.mjs fixtures/cli.ts "$BENCH_MODEL" > "$OUT/model.txt" 2>&1; log "model: $(cut -f1,4 "$OUT/model.txt")"
( export PEER_ONLY=${PEER_ONLY:-prefill,decode,latency}; timeout "${PEER_TIMEOUT:-300}" node node_modules/tsx/dist/cli.mjs bench/run.ts peer ) > "$OUT/peer.log" 2>&1
echo "rc=$?" >> "$OUT/peer.log"; cp bench/results/peer.json "$OUT/peer.json" 2>/dev/null
log "peer: $(tail -1 "$OUT/peer.log")"; grep -E "^\[.*\] [a-zA-Z.0-9]+: nativegen|follow|cold" "$OUT/peer.log" | sed 's/^\[[^]]*\] //' | head -20
left=$(( 575 - ($(date +%s) - T0) )); log "test:gpu with ${left}s"
timeout "$left" node node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts --reporter=verbose > "$OUT/test-gpu.log" 2>&1; echo "rc=$?" >> "$OUT/test-gpu.log"
grep -E "✓|×|↓|Test Files|Tests |rc=" "$OUT/test-gpu.log" | tail -30
log done
( cd "$OUT" && tar czf logs.tar.gz --remove-files $(ls | grep -v '^logs.tar.gz$') )
