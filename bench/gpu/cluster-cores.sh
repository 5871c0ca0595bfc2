#!/bin/bash
# Device call, CPU only: issue 20's hop benchmark (`npm run bench cluster`) on the device machine's
# 16 cores, where the client, two runners, the plain server and their engine children each get a
# core (here they share two). Same models, 1 engine thread, SQLite runner storage, Unix sockets;
# the CPU backend (no CUDA build carried). Carry node.xz, nm.tar.xz, sqlite.tar.xz, nlc-cpu.tar.xz
# (bench/gpu/packs.sh):
# `cd .gpu && ROUNDS=40 bash app/bench/gpu/cluster-cores.sh`.
. app/bench/gpu/setup.sh
log "cores: $(nproc), load: $(cut -d' ' -f1-3 /proc/loadavg)"
export NATIVEGEN_BACKEND=cpu UV_THREADPOOL_SIZE=1 BENCH_CLUSTER_ROUNDS=${ROUNDS:-40}
for run in $(seq 1 "${RUNS:-2}"); do
  timeout "${TIMEOUT:-250}" node --import tsx bench/cluster.ts > "$OUT/cluster-$run.log" 2>&1; echo "rc=$?" >> "$OUT/cluster-$run.log"
  cat "$OUT/cluster-$run.log" | grep -v "^timestamp"; log "run $run"
  cp bench/results/cluster-unix.json "$OUT/cluster-unix-$run.json" 2>/dev/null
done
