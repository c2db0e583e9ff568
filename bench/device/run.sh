#!/usr/bin/env bash
# The CUDA backend on the device machine, in one call: build (PAGODA_CUDA=ON, sm_90) into
# /tmp/build-cuda, run the gpu-labelled tests (kernels_cuda_test: every CUDA kernel against the CPU
# kernels) and the CUDA kernel benchmark (GEMV / attention against the H200 limits). Logs go to
# $OUT/ (build.log, test.log, bench.log); the summary is printed last. Takes ~3-6 minutes.
#
#   bench/device/run.sh          on the device machine (from the repository root)
#   bench/device/run.sh --pack   on a build machine whose image lacks nothing: builds portable
#                                (x86-64-v3) binaries into build-cuda/ plus the non-CUDA shared
#                                libraries they need in build-cuda/device-libs/. If the device image
#                                cannot configure pagoda (its Debian dev packages are missing), carry
#                                build-cuda/tests/kernel/cuda/kernels_cuda_test,
#                                build-cuda/bench/kernels_cuda/bench_kernels_cuda and
#                                build-cuda/device-libs, and run.sh uses those instead.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-/tmp/pagoda-device-out}
mkdir -p "$out"
targets=(kernels_cuda_test bench_kernels_cuda)

if [ "${1:-}" = "--pack" ]; then
  set -e
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGODA_CUDA=ON -DPAGODA_NATIVE=OFF \
    -DPAGODA_BUILD_TESTS=ON -DPAGODA_BUILD_BENCH=ON >/dev/null
  ninja -C build-cuda "${targets[@]}"
  rm -rf build-cuda/device-libs && mkdir -p build-cuda/device-libs
  for bin in build-cuda/tests/kernel/cuda/kernels_cuda_test build-cuda/bench/kernels_cuda/bench_kernels_cuda; do
    ldd "$bin" | awk '/=> \//{print $3}' |
      grep -v -E '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libcudart|libcublas|libcublasLt)\.so' |
      xargs -r -I{} cp -L {} build-cuda/device-libs/
  done
  du -sh build-cuda/device-libs build-cuda/tests/kernel/cuda/kernels_cuda_test build-cuda/bench/kernels_cuda/bench_kernels_cuda
  exit 0
fi

export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total,clocks.sm,clocks.max.sm --format=csv \
  2>&1 | tee "$out/build.log"
start=$(date +%s)
build=/tmp/build-cuda
test_bin="" bench_bin="" mode=""
if cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPAGODA_CUDA=ON \
     -DPAGODA_BUILD_TESTS=ON -DPAGODA_BUILD_BENCH=ON >>"$out/build.log" 2>&1 &&
   ninja -C "$build" -j "$(nproc)" "${targets[@]}" >>"$out/build.log" 2>&1; then
  test_bin=$build/tests/kernel/cuda/kernels_cuda_test
  bench_bin=$build/bench/kernels_cuda/bench_kernels_cuda
  mode="built here in $(( $(date +%s) - start )) s"
elif [ -x build-cuda/tests/kernel/cuda/kernels_cuda_test ]; then
  test_bin=build-cuda/tests/kernel/cuda/kernels_cuda_test
  bench_bin=build-cuda/bench/kernels_cuda/bench_kernels_cuda
  export LD_LIBRARY_PATH=$PWD/build-cuda/device-libs:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  mode="build failed here (see build.log); using carried binaries from run.sh --pack"
else
  tail -30 "$out/build.log"
  echo "run.sh: FAIL: could not build (see $out/build.log) and no carried binaries in build-cuda/"
  exit 1
fi
echo "run.sh: $mode" | tee -a "$out/build.log"

# Tests: ctest -L gpu when built here (it runs every gpu-labelled test), else the binary itself.
if [ "$test_bin" = "$build/tests/kernel/cuda/kernels_cuda_test" ]; then
  (cd "$build" && timeout 420 ctest -L gpu -V --output-on-failure --timeout 400) >"$out/test.log" 2>&1
else
  timeout 420 "$test_bin" >"$out/test.log" 2>&1
fi
test_rc=$?
timeout 240 "$bench_bin" >"$out/bench.log" 2>&1
bench_rc=$?

echo "===== test failures (full log: test.log) ====="
grep -E "Failure|Expected|Which is|error|variant=|bf16|f16|FAILED|PASSED|tests passed|tests failed" "$out/test.log" |
  grep -v "^\[ RUN" | head -60
echo "===== benchmark (bench.log) ====="
cat "$out/bench.log"
echo "===== summary ====="
echo "build: $mode"
echo "tests: exit $test_rc ($(grep -c '\[       OK' "$out/test.log") ok, $(grep -c '\[  FAILED  \].*ms)' "$out/test.log") failed)"
echo "bench: exit $bench_rc"
echo "total: $(( $(date +%s) - start )) s"
[ $test_rc -eq 0 ] && [ $bench_rc -eq 0 ]
