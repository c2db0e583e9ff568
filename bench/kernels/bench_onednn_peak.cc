// The compute bound of the CPU prefill (not a test): oneDNN matmul throughput in bf16 (bf16 x bf16,
// fp32 accumulation) and fp32 with everything cache-resident, on every thread of a pool.
//
// Each thread runs its own single-threaded primitive (as cpu::linear does), with the weights
// reordered once into the blocked layout oneDNN prefers and small enough for L2, so the figure is
// the arithmetic rate of the cores, not of memory. A prefill of P tokens through a model of W
// matmul weights needs 2 W P flops, so tokens/s <= this rate / (2 W).
//
//   bench_onednn_peak [--threads=N] [--m=512] [--n=256] [--k=2048] [--reps=20]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <vector>

#include "core/thread_pool.h"

namespace {

using dnnl::memory;
using Clock = std::chrono::steady_clock;

struct ThreadMatmul {
  dnnl::matmul primitive;
  memory src, weights, dst;
};

// GFLOP/s of m x n x k matmuls in `dtype` run `reps` times on every thread of the pool at once.
double peak(pagoda::ThreadPool& pool, memory::data_type dtype, int64_t m, int64_t n, int64_t k,
            int reps) {
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  std::vector<std::unique_ptr<ThreadMatmul>> per_thread(static_cast<size_t>(pool.num_threads()));
  pool.run_on_all([&](int t, int) {
    omp_set_num_threads(1);  // oneDNN single-threaded in each pool thread
    const memory::desc src_md({m, k}, dtype, memory::format_tag::ab);
    const memory::desc plain_w({k, n}, dtype, memory::format_tag::ba);
    const memory::desc any_w({k, n}, dtype, memory::format_tag::any);
    const memory::desc dst_md({m, n}, memory::data_type::f32, memory::format_tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src_md, any_w, dst_md), engine);
    auto mm = std::make_unique<ThreadMatmul>();
    mm->src = memory(src_md, engine);
    mm->dst = memory(dst_md, engine);
    memory plain(plain_w, engine);
    std::memset(mm->src.get_data_handle(), 0, src_md.get_size());
    std::memset(plain.get_data_handle(), 0, plain_w.get_size());
    mm->weights = memory(pd.weights_desc(), engine);
    dnnl::stream stream(engine);
    dnnl::reorder(plain, mm->weights).execute(stream, plain, mm->weights);
    stream.wait();
    mm->primitive = dnnl::matmul(pd);
    if (t == 0)
      std::printf("  %s: %s\n", dtype == memory::data_type::bf16 ? "bf16" : "f32",
                  pd.impl_info_str());
    per_thread[static_cast<size_t>(t)] = std::move(mm);
  });
  auto run = [&] {
    pool.run_on_all([&](int t, int) {
      auto& mm = *per_thread[static_cast<size_t>(t)];
      dnnl::stream stream(engine);
      for (int r = 0; r < reps; ++r) {
        mm.primitive.execute(
            stream,
            {{DNNL_ARG_SRC, mm.src}, {DNNL_ARG_WEIGHTS, mm.weights}, {DNNL_ARG_DST, mm.dst}});
      }
      stream.wait();
    });
  };
  run();  // warm-up
  double best = 1e30;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    run();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return 2.0 * static_cast<double>(m * n * k) * reps * pool.num_threads() / best / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 0, reps = 20;
  int64_t m = 512, n = 256, k = 2048;
  for (int i = 1; i < argc; ++i) {
    auto value = [&](const char* name) -> const char* {
      const size_t len = std::strlen(name);
      return std::strncmp(argv[i], name, len) == 0 ? argv[i] + len : nullptr;
    };
    if (const char* v = value("--threads=")) threads = std::atoi(v);
    if (const char* v = value("--m=")) m = std::atoll(v);
    if (const char* v = value("--n=")) n = std::atoll(v);
    if (const char* v = value("--k=")) k = std::atoll(v);
    if (const char* v = value("--reps=")) reps = std::atoi(v);
  }
  pagoda::ThreadPool pool(threads);
  std::printf("oneDNN %d.%d.%d, %d threads, %ldx%ldx%ld per thread, cache-resident:\n",
              dnnl::version()->major, dnnl::version()->minor, dnnl::version()->patch,
              pool.num_threads(), static_cast<long>(m), static_cast<long>(n), static_cast<long>(k));
  const double bf16 = peak(pool, memory::data_type::bf16, m, n, k, reps);
  const double f32 = peak(pool, memory::data_type::f32, m, n, k, reps);
  std::printf("bf16 matmul: %.0f GFLOP/s\nfp32 matmul: %.0f GFLOP/s\n", bf16, f32);
  return 0;
}
