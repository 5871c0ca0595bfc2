#!/bin/bash
# Device call 3: the measurements, after build2.sh on the same (warm) machine, or with its
# cuda-*.part carried. nativegen through its socket (a real `nativegen serve`) against llama-server
# built from the same tree, and llama-bench (in build2.sh): decode, prefill, the 4,000-token TTFT
# cold and 95% reused, the decision delay, SIGKILL to ready (bench/peer.ts with BENCH_BACKEND=cuda,
# BENCH_MODEL=qwen3-0.6b-shape); CUDA graphs on vs off; prefill in 128-token chunks (the old
# default) vs a native batch; the first request's TTFT with and without the warm-up.
# Run from the carried folder: `cd .gpu && bash app/bench/gpu/measure.sh`. DRY=1: CPU, tiny run.
. app/bench/gpu/setup.sh
export BENCH_BACKEND=${BENCH_BACKEND:-cuda} BENCH_MODEL=${BENCH_MODEL:-qwen3-0.6b-shape} PEER_THREADS=1 PEER_ROUNDS=${PEER_ROUNDS:-3}
[ "${DRY:-0}" = 1 ] && export PEER_QUICK=1 PEER_ROUNDS=1 NATIVEGEN_LLAMA_SERVER_DIR=$HOME/.cache/nativegen/llama-server/v0.4.0
if [ "${DRY:-0}" != 1 ] && [ ! -x "$NATIVEGEN_LLAMA_SERVER_DIR/bin/llama-server" ]; then
  mkdir -p "$NATIVEGEN_LLAMA_SERVER_DIR/bin"
  printf '#!/bin/sh\nLD_LIBRARY_PATH=%s exec %s "$@"\n' "$LLAMA_LIBS" "$BUILD/bin/llama-server" > "$NATIVEGEN_LLAMA_SERVER_DIR/bin/llama-server"
  chmod +x "$NATIVEGEN_LLAMA_SERVER_DIR/bin/llama-server"
  echo '{"release":"v0.4.0","cpuVariant":"cuda sm_90 (the node-llama-cpp build tree)","cmakeArguments":[]}' > "$NATIVEGEN_LLAMA_SERVER_DIR/bin/build.json"
fi
M=$(node node_modules/tsx/dist/cli.mjs fixtures/cli.ts "$BENCH_MODEL" | cut -f5)
peer() { # name, then env assignments for this run
  local name=$1; shift
  ( export "$@"; timeout "${PEER_TIMEOUT:-240}" node node_modules/tsx/dist/cli.mjs bench/run.ts peer ) > "$OUT/peer-$name.log" 2>&1
  echo "rc=$?" >> "$OUT/peer-$name.log"; cp bench/results/peer.json "$OUT/peer-$name.json" 2>/dev/null
  log "peer $name: $(tail -1 "$OUT/peer-$name.log")"; grep -E "^\[.*\] [a-zA-Z.0-9]+: nativegen" "$OUT/peer-$name.log" | sed 's/^\[[^]]*\] //'
}
first() { # mode
  for mode in none child; do
    timeout 60 node node_modules/tsx/dist/cli.mjs bench/gpu/first-request.ts "$M" "$mode" 2>&1 | tail -1 | tee -a "$OUT/first-request.jsonl"
  done
}
ONLY=${ONLY:-main,first,graphs,chunk128}
case ",$ONLY," in *,main,*) peer main PEER_ONLY=decode,prefill,latency,decision,repair ;; esac
case ",$ONLY," in *,first,*) first; log "first request" ;; esac
case ",$ONLY," in *,graphs,*) peer graphs PEER_ONLY=decode,prefill NATIVEGEN_CUDA_GRAPHS=1 ;; esac
case ",$ONLY," in *,chunk128,*) peer chunk128 PEER_ONLY=prefill NATIVEGEN_WORKER_PREFILL_CHUNK=128 ;; esac
case ",$ONLY," in *,test,*) left=$(( 580 - ($(date +%s) - T0) )); timeout "$left" node node_modules/vitest/vitest.mjs run --config vitest.gpu.config.ts --reporter=verbose > "$OUT/test-gpu.log" 2>&1; echo "rc=$?" >> "$OUT/test-gpu.log"; grep -E "✓|×|Test Files|Tests |rc=" "$OUT/test-gpu.log" | tail -30 ;; esac
nvidia-smi --query-gpu=name,memory.used,memory.total,clocks.sm,temperature.gpu --format=csv > "$OUT/gpu-after.txt" 2>&1
log done
# The device returns at most 8 files: every log in one archive beside the build parts.
( cd "$OUT" && tar czf logs.tar.gz --remove-files $(ls | grep -v -e '\.part$' -e '^logs.tar.gz$') )
