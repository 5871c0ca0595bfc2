#!/bin/bash
# Device call: do CPU and CUDA decision probabilities agree within the issue's 0.0012 when cuBLAS
# computes in f32 (GGML_CUDA_CUBLAS_COMPUTE_TYPE=f32)? ggml-cuda's cuBLAS path computes f16 inputs
# (the f16 KV cache's attention products without flash attention, dequantized weights in batches
# MMQ does not take) with f16 accumulation on this GPU; test:gpu's two decision-parity cases
# measured 3.65e-3 and 1.71e-2. Then what f32 costs: prefill and the 4,000-token TTFT through the
# socket (bench/peer.ts, PEER_ONLY=prefill, no llama-server) with and without it.
# Carry node.xz, nm.tar.xz, cuda-*.part, nlc-cpu.tar.xz: `cd .gpu && bash app/bench/gpu/precision.sh`.
. app/bench/gpu/setup.sh
parity() { # name, then env assignments
  local name=$1; shift
  ( export "$@"; timeout 150 node node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts test/gpu/parity.test.ts -t "decision probabilities" --reporter=verbose ) > "$OUT/parity-$name.log" 2>&1
  echo "rc=$?" >> "$OUT/parity-$name.log"
  log "parity $name: $(grep -E '^ +Tests ' "$OUT/parity-$name.log")"; grep -E "test:gpu parity" "$OUT/parity-$name.log"
}
parity f32 GGML_CUDA_CUBLAS_COMPUTE_TYPE=f32
export BENCH_BACKEND=cuda BENCH_MODEL=${BENCH_MODEL:-qwen3-0.6b-shape} PEER_THREADS=1 PEER_ROUNDS=${PEER_ROUNDS:-2}
export NATIVEGEN_LLAMA_SERVER_DIR="$W/no-llama-server"
node node_modules/tsx/dist/cli.mjs fixtures/cli.ts "$BENCH_MODEL" > /dev/null 2>&1
prefill() { # name, then env assignments
  local name=$1; shift
  ( export PEER_ONLY=prefill "$@"; timeout 110 node node_modules/tsx/dist/cli.mjs bench/run.ts peer ) > "$OUT/prefill-$name.log" 2>&1
  echo "rc=$?" >> "$OUT/prefill-$name.log"
  log "prefill $name: $(tail -1 "$OUT/prefill-$name.log")"; grep -E "nativegen|tok/s|TTFT|first token" "$OUT/prefill-$name.log" | sed 's/^\[[^]]*\] //' | head -8
}
prefill f16 BENCH_NOTE=default
prefill f32 GGML_CUDA_CUBLAS_COMPUTE_TYPE=f32
parity f16 BENCH_NOTE=default
log done
( cd "$OUT" && tar czf logs.tar.gz --remove-files $(ls | grep -v '^logs.tar.gz$') )
