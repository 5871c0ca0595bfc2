# Device calls, common part (sourced, from the carried folder: `cd .gpu && . app/bench/gpu/setup.sh`).
# The device has no node and no network: the carried folder holds node.xz (the node binary),
# nm.tar.xz (node_modules trimmed to linux-x64), optionally nlc-*.tar.xz, lsrc.tar.xz (llama.cpp's source as
# node-llama-cpp ships it) and cuda-*.part (an earlier call's CUDA build), and app/ (this
# repository's files). Everything is unpacked under /tmp/w, outside the device's checkout, so a
# warm machine keeps it for the next call; app/ is copied over it every call.
# DRY=1: run on a machine without a GPU (the same steps, CPU backend) to check the scripts.
set -u
CARRY=$(pwd)
W=${W:-/tmp/w}
OUT=${OUT:-/tmp/w-out}
mkdir -p "$W/bin" "$W/models" "$OUT"
T0=${T0:-$(date +%s)}
log() { echo "[$(( $(date +%s) - T0 ))s] $*"; }
if [ ! -x "$W/bin/node" ]; then
  if [ -f "$CARRY/node.xz" ]; then xz -dc "$CARRY/node.xz" > "$W/bin/node" && chmod +x "$W/bin/node"; else ln -sf "$(command -v node)" "$W/bin/node"; fi
fi
cp "$CARRY/app/bench/gpu/npm-shim" "$W/bin/npm" && chmod +x "$W/bin/npm"
export PATH="$W/bin:$PATH"
APP="$W/app"
mkdir -p "$APP"
cp -r "$CARRY/app/." "$APP/"
if [ ! -d "$APP/node_modules/effect" ]; then
  tar xJf "$CARRY/nm.tar.xz" -C "$APP" && log "node_modules unpacked"
fi
if [ -f "$CARRY/sqlite.tar.xz" ] && [ ! -d "$APP/node_modules/libsql" ]; then
  tar xJf "$CARRY/sqlite.tar.xz" -C "$APP" && log "SQLite driver unpacked"
fi
# nlc-*.tar.xz: node-llama-cpp prebuilt packages (nlc-cpu: linux-x64 with its baseline CPU variant,
# for the CPU side of the parity tests; nlc-vulkan: linux-x64-vulkan).
for pack in "$CARRY"/nlc-*.tar.xz; do
  [ -f "$pack" ] || continue
  mkdir -p "$APP/node_modules/@node-llama-cpp" && tar xJf "$pack" -C "$APP/node_modules/@node-llama-cpp" && log "$(basename "$pack") unpacked"
done
# vklibs.tar.xz: Debian's Vulkan loader and glvnd libraries (libvulkan1, libglvnd0, libglx0, libegl1,
# libgl1, libopengl0, libgles2, unpacked with dpkg -x), which the device lacks, and the NVIDIA ICD.
if [ -f "$CARRY/vklibs.tar.xz" ]; then
  mkdir -p "$W/vk" && tar xJf "$CARRY/vklibs.tar.xz" -C "$W/vk"
  export LD_LIBRARY_PATH="$W/vk/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  for icd in /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json; do
    [ -f "$icd" ] && export VK_DRIVER_FILES="$icd" && break
  done
  log "Vulkan loader unpacked (VK_DRIVER_FILES=${VK_DRIVER_FILES:-none})"
fi
NLC="$APP/node_modules/node-llama-cpp"
export NLC_DIR="$NLC" NM_DIR="$APP/node_modules"
BUILD="$NLC/llama/localBuilds/linux-x64-cuda"
if [ ! -f "$BUILD/Release/llama-addon.node" ] && ls "$CARRY"/cuda-*.part >/dev/null 2>&1; then
  # buildDone.status: node-llama-cpp loads a local build only where its build finished (compileLLamaCpp.js).
  mkdir -p "$BUILD" && cat "$CARRY"/cuda-*.part | tar xJf - -C "$BUILD" && touch "$BUILD/buildDone.status" && log "CUDA build unpacked from the carried parts"
fi
export NATIVEGEN_MODEL_CACHE="$W/models"
mkdir -p "$APP/.cache" && ln -sfn "$W/models" "$APP/.cache/models"
export LLAMA_LIBS="$BUILD/bin:$BUILD/Release"
export NATIVEGEN_LLAMA_SERVER_DIR="$W/llama-server"
cd "$APP"
log "node $(node --version), app in $APP"

# The CUDA binding, built from the carried llama.cpp source where no build is carried or unpacked,
# and packed into $OUT as cuda-*.part for later calls (the 64 MiB carry holds the source or the build).
build_cuda_where_missing() {
  if [ -f "$CARRY/lsrc.tar.xz" ] && [ ! -f "$NLC/llama/llama.cpp/CMakeLists.txt" ]; then
    tar xJf "$CARRY/lsrc.tar.xz" -C "$NLC/llama" && mv "$NLC/llama/src" "$NLC/llama/llama.cpp" && mkdir -p "$NLC/llama/llama.cpp/.git" && log "llama.cpp source unpacked"
  fi
  if [ ! -f "$BUILD/Release/llama-addon.node" ]; then
    log "engine build: start"
    ( time timeout 420 node bin/nativegen.js engine build --gpu cuda ) > "$OUT/build-nlc.log" 2>&1; echo "rc=$?" >> "$OUT/build-nlc.log"
    log "engine build: $(tail -1 "$OUT/build-nlc.log")"; grep -E "^real" "$OUT/build-nlc.log"
    pack_cuda_build
  fi
}

# The CUDA binding (and the record of nativegen's patches it was built with) as cuda-*.part in $OUT.
pack_cuda_build() {
  ( cd "$BUILD" && tar cf - Release $(ls nativegen-patches.json 2>/dev/null) | xz -T16 -6 | split -b 15m -d - "$OUT/cuda-" ) && for f in "$OUT"/cuda-??; do mv "$f" "$f.part"; done
  log "packed: $(ls -la "$OUT" | grep part | awk '{print $5}' | tr '\n' ' ')"
}
