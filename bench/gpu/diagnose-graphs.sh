#!/bin/bash
# Device call: where does the CUDA graph abort come from ("an illegal instruction was encountered"
# when a prefill is cancelled or preempted between chunks, graphs on; docs/gpu.md)? Builds the CUDA
# binding where none is there (and packs it into $OUT as cuda-*.part for later calls), then runs
# test/native-worker.test.ts on CUDA with graphs on, its engine children given the host's whole
# environment (NATIVEGEN_TEST_CHILD_INHERIT_ALL=1) so that:
#  1. an LD_PRELOAD shim makes the children's C stdout unbuffered: a kernel's device-side printf
#     (ggml's "has no device code compatible with CUDA arch", followed by __trap(), which the driver
#     reports as an illegal instruction) reaches the log before the abort;
#  2. with ggml's op fusion off (GGML_CUDA_DISABLE_FUSION=1): does the abort go?
#  3. under compute-sanitizer (memcheck, every process): the kernel and the fault.
# Run from the carried folder (node.xz, nm.tar.xz, lsrc.tar.xz): `cd .gpu && bash app/bench/gpu/diagnose-graphs.sh`.
. app/bench/gpu/setup.sh
build_cuda_where_missing
grep -m3 -E "CMAKE_CUDA_ARCHITECTURES|CUDA architectures|GGML_NATIVE" "$OUT/build-nlc.log" "$BUILD"/CMakeCache.txt 2>/dev/null
printf '#include <stdio.h>\n__attribute__((constructor)) static void unbuffered(void) { setvbuf(stdout, NULL, _IONBF, 0); }\n' > "$W/unbuf.c"
gcc -shared -fPIC -o "$W/unbuf.so" "$W/unbuf.c" && log "unbuffered-stdout shim built"
FILE=${FILE:-test/native-worker.test.ts}
run() { # name, seconds, then a command prefix (may be empty), env from the caller
  local name=$1 limit=$2; shift 2
  local left=$(( 585 - ($(date +%s) - T0) )); [ "$left" -lt "$limit" ] && limit=$left
  [ "$limit" -gt 20 ] || { log "no time left for $name"; return; }
  ( export NATIVEGEN_TEST_ENGINE_BACKEND=cuda GGML_CUDA_DISABLE_GRAPHS=0 NATIVEGEN_TEST_CHILD_INHERIT_ALL=1
    timeout "$limit" "$@" node node_modules/vitest/vitest.mjs run $FILE --reporter=verbose ) > "$OUT/$name.log" 2>&1
  echo "rc=$?" >> "$OUT/$name.log"
  log "$name: $(grep -c 'illegal instruction' "$OUT/$name.log") illegal-instruction lines; $(grep -E '^ +Tests ' "$OUT/$name.log")"
  grep -E "no device code|×|ERROR" "$OUT/$name.log" | sort | uniq -c | head -12
}
LD_PRELOAD="$W/unbuf.so" run graphs-unbuffered 150 env
GGML_CUDA_DISABLE_FUSION=1 run graphs-nofusion 120 env
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
if [ -n "$SAN" ]; then
  run graphs-sanitizer 240 "$SAN" --target-processes all --print-limit 20 --log-file "$OUT/san-%p.txt"
  for f in "$OUT"/san-*.txt; do [ -s "$f" ] && { echo "== $f"; grep -E "=========" "$f" | head -25; }; done
else
  log "no compute-sanitizer"
fi
log done
( cd "$OUT" && tar czf logs.tar.gz --remove-files $(ls | grep -v -e '\.part$' -e '^logs.tar.gz$') )
