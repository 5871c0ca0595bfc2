cd .cores && . app/bench/gpu/setup.sh >/dev/null 2>&1
export UV_THREADPOOL_SIZE=1
for m in local remote; do timeout 120 node --import tsx bench/_cluster-path.ts 300 $m 2>&1 | grep -v "^timestamp" | tail -22 > $OUT/path-$m.txt; echo "== $m"; cat $OUT/path-$m.txt; done
