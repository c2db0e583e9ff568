// CPU decode throughput for a real model shape with dummy weights, next to the memory-bandwidth
// bound: a decode step must stream every weight once, so tokens/s <= bandwidth / weight bytes *
// batch.
//
//   bench_decode [CONFIG_DIR] [--device cpu|cuda] [--dtype bfloat16] [--batches 1,16]
//                [--steps 16] [--context 64] [--prefill 512] [--quantization fp8]
//                [--cpu-bf16-matmul exact|round] [--cpu-matmul batch-invariant|onednn]
//
// Default CONFIG_DIR: the repository's configs/llama-3.2-1b. On cuda the bound printed is the
// H200's measured 4.19 TB/s (docs/benchmarks.md); --prefill times one forward of that many tokens
// (batch 1) and reports tokens/s. --quantization X draws the weights in format X (vLLM's method
// names, as `--load-format dummy --quantization X`); the bytes per step count each tensor in the
// format it has on the device (FP8 at load: one byte per weight plus the fp32 row scales).
// --cpu-bf16-matmul round: the CPU's prefill matmuls round the activations to bf16
// (LoadOptions::cpu_bf16_round) instead of exact fp32 products. --cpu-matmul onednn: oneDNN past
// the decode sizes (LoadOptions::cpu_onednn) instead of the batch-invariant kernel.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "cli/runtime_env.h"
#include "core/thread_pool.h"
#include "model/model.h"
#include "runtime/device_model.h"

namespace {

using Clock = std::chrono::steady_clock;

/// CPU time of the whole process (all threads), for figures that hold on a shared machine: the
/// pool's threads sleep when idle, so CPU time / threads is the step time with the cores to itself.
double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// Read bandwidth of this machine: all threads summing a 1 GiB buffer, best of 5.
double measure_read_bandwidth(pagoda::ThreadPool& pool) {
  const size_t n = (1ull << 30) / sizeof(float);
  std::vector<float> data(n);
  pool.parallel_for(static_cast<int64_t>(n), 1 << 20, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) data[static_cast<size_t>(i)] = static_cast<float>(i & 1023);
  });
  double best = 0;
  volatile float sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    std::vector<float> partial(static_cast<size_t>(pool.num_threads()), 0.0f);
    const auto t0 = Clock::now();
    pool.run_on_all([&](int t, int nt) {
      const size_t begin = n * static_cast<size_t>(t) / static_cast<size_t>(nt);
      const size_t end = n * static_cast<size_t>(t + 1) / static_cast<size_t>(nt);
      float acc[16] = {};
      for (size_t i = begin; i + 16 <= end; i += 16) {
        for (int j = 0; j < 16; ++j) acc[j] += data[i + static_cast<size_t>(j)];
      }
      partial[static_cast<size_t>(t)] = std::accumulate(acc, acc + 16, 0.0f);
    });
    best = std::max(best, static_cast<double>(n * sizeof(float)) / seconds_since(t0) / 1e9);
    sink = sink + partial[0];
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = std::string(PAGODA_SOURCE_DIR) + "/configs/llama-3.2-1b";
  std::string dtype_name = "bfloat16";
  std::vector<int> batches{1, 16};
  int steps = 16, context = 64, prefill = 0;
  std::string device = "cpu";
  std::string quantization, kv_cache_dtype = "auto";
  bool bf16_round = false, onednn = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--dtype") {
      dtype_name = next();
    } else if (a == "--device") {
      device = next();
    } else if (a == "--quantization") {
      quantization = next();
    } else if (a == "--kv-cache-dtype") {
      kv_cache_dtype = next();
    } else if (a == "--cpu-bf16-matmul") {
      const std::string mode = next();
      if (mode != "exact" && mode != "round") {
        std::fprintf(stderr, "--cpu-bf16-matmul: exact or round, not '%s'\n", mode.c_str());
        return 2;
      }
      bf16_round = mode == "round";
    } else if (a == "--cpu-matmul") {
      const std::string mode = next();
      if (mode != "batch-invariant" && mode != "onednn") {
        std::fprintf(stderr, "--cpu-matmul: batch-invariant or onednn, not '%s'\n", mode.c_str());
        return 2;
      }
      onednn = mode == "onednn";
    } else if (a == "--prefill") {
      prefill = std::stoi(next());
    } else if (a == "--steps") {
      steps = std::stoi(next());
    } else if (a == "--context") {
      context = std::stoi(next());
    } else if (a == "--batches") {
      batches.clear();
      const std::string list = next();
      for (size_t p = 0; p < list.size();) {
        const size_t q = std::min(list.find(',', p), list.size());
        batches.push_back(std::stoi(list.substr(p, q - p)));
        p = q + 1;
      }
    } else {
      dir = a;
    }
  }
  pagoda::ThreadPool pool(0);
  std::printf("machine: %d threads\n", pool.num_threads());
  // The GPU's limit is the measured H200 copy bandwidth; the CPU's is measured here.
  const double bandwidth = device == "cuda" ? 4190.0 : measure_read_bandwidth(pool);
  std::printf("memory read bandwidth: %.1f GB/s (%s)\n", bandwidth,
              device == "cuda" ? "H200, measured copy bandwidth" : "1 GiB sum, best of 5");

  pagoda::LoadOptions options;
  options.format = pagoda::LoadFormat::kDummy;
  options.kv_cache.dtype = kv_cache_dtype;
  options.runtime = pagoda::runtime_options_from_env();  // the PAGODA_* A/B knobs
  options.dtype = pagoda::dtype_from_torch_name(dtype_name);
  options.definition.quantization = quantization;
  options.definition.dummy_weights = true;
  options.cpu_bf16_round = bf16_round;
  options.cpu_onednn = onednn;
  const auto t_load = Clock::now();
  auto model = pagoda::load_model_on_device(dir, options, device, pool);
  const auto& c = model->config();
  std::printf("model: %s (%s dummy weights, %s), built in %.1f s; CPU bf16 matmuls: %s\n",
              dir.c_str(), dtype_name.c_str(), model->definition().weight_summary().c_str(),
              seconds_since(t_load), bf16_round ? "round" : "exact");

  // Bytes a decode step streams: every matrix once (the embedding table only as the LM head when
  // tied).
  // A tensor with a format-fixed dtype counts in it; the float weights of FP8-at-load projections
  // are one byte per element on the device.
  std::set<std::string> quantized_at_load;
  for (const auto& l : model->definition().layers) {
    for (const pagoda::LinearDef* lin : {&l.qkv, &l.o, &l.gate_up, &l.down}) {
      if (lin->format != pagoda::WeightFormat::kFp8Online) continue;
      for (const auto& src : lin->sources) quantized_at_load.insert(src.prefix + ".weight");
    }
  }
  double weight_bytes = 0;
  for (const auto& spec : model->definition().tensors()) {
    if (spec.name == model->definition().embed_name && !c.tie_word_embeddings) continue;
    const size_t size = quantized_at_load.count(spec.name) != 0 ? 1
                        : spec.dtype                            ? pagoda::dtype_size(*spec.dtype)
                                     : pagoda::dtype_size(*options.dtype);
    weight_bytes += static_cast<double>(spec.shape.num_elements()) * static_cast<double>(size);
  }
  std::printf("weights read per step: %.2f GB -> bound %.2f steps/s\n\n", weight_bytes / 1e9,
              bandwidth * 1e9 / weight_bytes);
  if (prefill > 0) {
    const int block_size = 16;
    const int blocks = (prefill + block_size - 1) / block_size;
    model->init_kv_cache(blocks + 1, block_size);
    std::vector<int32_t> tables(static_cast<size_t>(blocks));
    std::iota(tables.begin(), tables.end(), 1);
    std::vector<int32_t> ids, pos, qsl{0, prefill}, seq_lens{prefill}, rows{prefill - 1};
    std::vector<int64_t> slots;
    for (int p = 0; p < prefill; ++p) {
      ids.push_back((p * 104729) % static_cast<int32_t>(c.vocab_size));
      pos.push_back(p);
      slots.push_back(block_size + p);
    }
    pagoda::ForwardBatch fb{ids, pos, qsl, seq_lens, tables, blocks, slots, rows};
    std::vector<double> times, cpu_times;
    for (int i = 0; i < 7; ++i) {
      const auto t0 = Clock::now();
      const double c0 = process_cpu_seconds();
      (void)model->forward(fb);
      if (i == 0) continue;  // the first run warms up
      times.push_back(seconds_since(t0));
      cpu_times.push_back(process_cpu_seconds() - c0);
    }
    std::sort(times.begin(), times.end());
    std::sort(cpu_times.begin(), cpu_times.end());
    const double cpu_per_thread = cpu_times[cpu_times.size() / 2] / pool.num_threads();
    std::printf(
        "prefill: %d tokens, batch 1: %.2f ms (min %.2f, max %.2f) = %.0f tokens/s; CPU time / "
        "threads %.2f ms = %.0f tokens/s\n\n",
        prefill, times[times.size() / 2] * 1e3, times.front() * 1e3, times.back() * 1e3,
        prefill / times[times.size() / 2], cpu_per_thread * 1e3, prefill / cpu_per_thread);
  }
  std::printf(
      "| batch | context | decode ms/step | tokens/s | weight GB/s | %% of bandwidth | CPU time / "
      "threads, ms/step |\n|---|---|---|---|---|---|---|\n");

  for (int batch : batches) {
    const int max_len = context + steps + 1;
    const int block_size = 16;
    const int blocks_per_seq = (max_len + block_size - 1) / block_size;
    model->init_kv_cache(static_cast<int64_t>(batch) * blocks_per_seq, block_size);
    std::vector<int32_t> tables(static_cast<size_t>(batch * blocks_per_seq));
    std::iota(tables.begin(), tables.end(), 0);
    // One step over `len` new tokens per sequence starting at `start`.
    auto step = [&](int start, int len) {
      std::vector<int32_t> ids, pos, qsl{0}, seq_lens, rows;
      std::vector<int64_t> slots;
      for (int s = 0; s < batch; ++s) {
        for (int p = start; p < start + len; ++p) {
          ids.push_back((s * 7919 + p * 104729) % static_cast<int32_t>(c.vocab_size));
          pos.push_back(p);
          slots.push_back(static_cast<int64_t>(s) * blocks_per_seq * block_size + p);
        }
        qsl.push_back(static_cast<int32_t>(ids.size()));
        seq_lens.push_back(start + len);
        rows.push_back(static_cast<int32_t>(ids.size()) - 1);
      }
      pagoda::ForwardBatch fb{ids, pos, qsl, seq_lens, tables, blocks_per_seq, slots, rows};
      (void)model->forward(fb);
    };
    step(0, context);  // prefill
    step(context, 1);  // warm-up decode
    std::vector<double> times, cpu_times;
    for (int i = 0; i < steps; ++i) {
      const auto t0 = Clock::now();
      const double c0 = process_cpu_seconds();
      step(context + 1 + i, 1);
      times.push_back(seconds_since(t0));
      cpu_times.push_back(process_cpu_seconds() - c0);
    }
    std::sort(times.begin(), times.end());
    std::sort(cpu_times.begin(), cpu_times.end());
    const double median = times[times.size() / 2];
    std::printf("| %d | %d | %.1f (min %.1f, max %.1f) | %.2f | %.2f | %.0f%% | %.1f |\n", batch,
                context, median * 1e3, times.front() * 1e3, times.back() * 1e3, batch / median,
                weight_bytes / median / 1e9, 100 * weight_bytes / median / 1e9 / bandwidth,
                cpu_times[cpu_times.size() / 2] / pool.num_threads() * 1e3);
  }
  return 0;
}
