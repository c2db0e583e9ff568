// CUDA paged attention (plan + upload + run) against cpu::paged_attention.
//
// The shapes of the fast (mma.sync) kernel; paged_attention_general_test.cc covers the others. How
// to add a case: a Batch is a list of SeqSpec {cached prefix length, new query tokens}
// (prefill = {0, n}, decode = {ctx - 1, 1}, chunked prefill = {prefix, n}); add one to a batch
// list, or extend the head / head-dim / block-size / window lists. Each case fills both caches
// with the same random 16-bit keys and values in shuffled physical blocks (the GPU cache is
// poisoned with NaN first, so a read of any slot outside a sequence shows up as NaN), runs four
// variants of the plan (as planned; splits disabled; padded grids as a CUDA graph would launch;
// splits of one 64-key tile), each twice on one upload, and the general kernel alone, and compares
// each with the CPU kernel on the same values (paged_attention_case.h).
#include <gtest/gtest.h>

#include "paged_attention_case.h"

namespace pagoda::cuda {
namespace {

using namespace testing;  // NOLINT

const std::vector<Batch> kShortBatches = {
    {{0, 37}},                            // prefill
    {{20, 13}},                           // chunked prefill after a cached prefix
    {{0, 33}, {49, 1}, {0, 1}, {17, 5}},  // mixed prefill + decodes + chunk
    {{0, 1}, {15, 1}, {16, 1}, {99, 1}},  // decode batch across block boundaries
    {{300, 64}, {0, 130}, {63, 2}},       // several prefill tiles, prefix hits, short chunk
    {{1000, 1}, {700, 3}, {513, 1}},      // decodes long enough to split
    {{0, 200}, {129, 131}},  // prefill tiles that end inside a warp's 32 rows; unmasked inner tiles
};

TEST(CudaPagedAttention, MatchesCpuOverGrid) {
  REQUIRE_GPU();
  ThreadPool pool(16);
  const int sms = device_sms();
  struct Heads {
    int q, kv;
  };
  uint32_t seed = 1;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int d : {64, 128}) {
      for (const Heads h : {Heads{8, 8}, Heads{16, 4}, Heads{32, 4}, Heads{16, 1}}) {
        for (int bs : {16, 32, 48, 64}) {  // 48: a block size that is no power of two
          for (int window : {0, 40}) {
            for (size_t b = 0; b < kShortBatches.size(); ++b) {
              // bf16 gets the whole grid; f16 a diagonal of it.
              if (dt == DType::kF16 && (b + bs / 16 + window) % 3 != 0) continue;
              SCOPED_TRACE(::testing::Message()
                           << dtype_label(dt) << " d=" << d << " heads=" << h.q << "/" << h.kv
                           << " bs=" << bs << " window=" << window << " batch=" << b);
              Case c{dt, d, h.q, h.kv, bs, window, kShortBatches[b], (b % 2) == 1};
              run_case(c, seed++, pool, sms);
              if (::testing::Test::HasFatalFailure()) return;
            }
          }
        }
      }
    }
  }
}

TEST(CudaPagedAttention, LongContextsSplitKv) {
  REQUIRE_GPU();
  ThreadPool pool(16);
  const int sms = device_sms();
  const std::vector<Batch> batches = {
      {{8191, 1}},                                  // one 8k decode: split-KV
      {{8000, 64}},                                 // chunked prefill after an 8k prefix
      {{2047, 1}, {4095, 1}, {100, 1}, {3000, 4}},  // uneven decode batch
  };
  uint32_t seed = 1000;
  for (const Batch& b : batches) {
    for (int window : {0, 1000}) {
      SCOPED_TRACE(::testing::Message()
                   << "batch[0].prefix=" << b[0].prefix << " window=" << window);
      run_case(Case{DType::kBF16, 128, 32, 8, 16, window, b, true}, seed++, pool, sms);
      run_case(Case{DType::kBF16, 64, 8, 8, 16, window, b, false}, seed++, pool, sms);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// Prefills long enough for many 128-key tiles of the Hopper kernel (and the FlashAttention-2
// kernel's 128-row items, kWideTilesFa2): whole prompts, a chunk after a cached prefix, windows,
// block sizes 16 to 128, GQA 1 / 4 / 7 / 8.
TEST(CudaPagedAttention, LongPrefillsMatchCpu) {
  REQUIRE_GPU();
  ThreadPool pool(16);
  const int sms = device_sms();
  const std::vector<Batch> batches = {
      {{0, 1100}},
      {{1300, 500}, {0, 77}},
      {{0, 700}, {0, 300}, {250, 256}},
  };
  uint32_t seed = 3000;
  for (size_t b = 0; b < batches.size(); ++b) {
    for (int bs : {16, 64, 128}) {
      const int window = b == 1 ? 600 : 0;
      SCOPED_TRACE(::testing::Message() << "batch=" << b << " bs=" << bs);
      run_case(Case{DType::kBF16, 128, 32, 8, bs, window, batches[b], b == 2}, seed++, pool, sms);
      run_case(Case{DType::kF16, 64, 8, 8, bs, window, batches[b], false}, seed++, pool, sms);
      run_case(Case{DType::kBF16, 128, 32, 4, bs, 0, batches[b], false}, seed++, pool, sms);
      // GQA 7 (Qwen2.5-7B's 28 / 4): items of 18 tokens, 126 of the 128 rows.
      run_case(Case{DType::kBF16, 128, 28, 4, bs, 0, batches[b], false}, seed++, pool, sms);
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

// A quantized cache (codes of x / scale, one scale per cache) against the CPU on the dequantized
// values: prefill, chunked and decode batches, with splits, every code and both dtypes.
TEST(CudaPagedAttention, QuantizedCachesMatchCpuOnDequantizedValues) {
  REQUIRE_GPU();
  ThreadPool pool(16);
  const int sms = device_sms();
  uint32_t seed = 2000;
  for (DType code : {DType::kF8E4M3, DType::kF8E5M2, DType::kI8}) {
    // Scales that spread [-1, 1] over the code's range (e4m3: 448, e5m2: a few binades, int8: 127).
    const float k_scale = code == DType::kI8       ? 1.0f / 127
                          : code == DType::kF8E4M3 ? 0.0031f
                                                   : 0.37f;
    for (DType dt : {DType::kBF16, DType::kF16}) {
      for (int d : {64, 128}) {
        for (size_t b = 0; b < kShortBatches.size(); ++b) {
          if (dt == DType::kF16 && b % 2 == 1) continue;
          SCOPED_TRACE(::testing::Message() << dtype_name(code) << " " << dtype_label(dt)
                                            << " d=" << d << " batch=" << b);
          Case c{dt, d, 16, 4, 16, b == 2 ? 40 : 0, kShortBatches[b], b % 2 == 1};
          c.kv_dtype = code;
          c.k_scale = k_scale;
          c.v_scale = k_scale * 1.7f;
          run_case(c, seed++, pool, sms);
          if (::testing::Test::HasFatalFailure()) return;
        }
      }
    }
    SCOPED_TRACE(dtype_name(code));
    Case long_case{DType::kBF16, 128, 32, 8, 16, 0, {{4095, 1}, {3000, 4}}, true};
    long_case.kv_dtype = code;
    long_case.k_scale = long_case.v_scale = k_scale;
    run_case(long_case, seed++, pool, sms);
  }
}

}  // namespace
}  // namespace pagoda::cuda
