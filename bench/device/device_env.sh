# Sourced (from the repository root) by the A/B device scripts: the CUDA toolkit on PATH, the
# carried .device/deps (pcre2, xxhash, OpenSSL, UCX: the device image lacks them; carried as
# .device/deps.tar.xz and unpacked here) for pkg-config, the linker and
# the loader, and `flags`, the cmake arguments of a Release build with CUDA, tests and benchmarks.
# Without oneDNN (PAGODA_ONEDNN=OFF): the image lacks it and its library (40 MB) would not fit in
# the 64 MiB a device call carries next to the repository; the CPU matmuls then stream (slower
# CPU prefill, the same GPU figures).
export PATH=/usr/local/cuda/bin:$PATH
deps=$PWD/.device/deps
# The carried archive (tools/prepare_device.sh) unpacks here once per machine.
[ -d "$deps" ] || [ ! -f .device/deps.tar.xz ] || tar -C .device -xJf .device/deps.tar.xz
sed -i "s|^prefix=.*|prefix=$deps|" "$deps/lib/pkgconfig/libpcre2-8.pc"
for pc in "$deps"/lib/pkgconfig/ucx*.pc; do [ -f "$pc" ] && sed -i "s|^prefix = .*|prefix = $deps|" "$pc"; done
export PKG_CONFIG_PATH=$deps/lib/pkgconfig LD_LIBRARY_PATH=$deps/lib
flags=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGODA_CUDA=ON -DPAGODA_ONEDNN=OFF
       -DPAGODA_BUILD_TESTS=ON -DPAGODA_BUILD_BENCH=ON -DCMAKE_INCLUDE_PATH="$deps/include"
       -DCMAKE_LIBRARY_PATH="$deps/lib")

# The quantized-format scripts' start (fp8_bench.sh, w4_bench.sh, int8_bench.sh): the GPU line and
# a Release build of the given targets into $build (/tmp/build-cuda), logged to $out/build.log;
# on a failed build the errors are printed and the calling script exits. Needs `out` and `start`.
#   device_build SCRIPT_NAME TARGET...
device_build() {
  local name=$1
  shift
  build=/tmp/build-cuda
  nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader |
    tee "$out/build.log"
  if ! cmake -S . -B "$build" "${flags[@]}" >>"$out/build.log" 2>&1 ||
     ! ninja -C "$build" -j "$(nproc)" "$@" >>"$out/build.log" 2>&1; then
    grep -E "error|Error" "$out/build.log" | head -30
    echo "$name: FAIL: build (see build.log)"
    exit 1
  fi
  echo "build: $(( $(date +%s) - start )) s"
}
