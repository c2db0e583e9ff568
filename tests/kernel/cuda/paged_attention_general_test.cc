// The general paged-attention kernel (every shape the mma.sync kernel does not take) against
// cpu::paged_attention, through paged_attention()'s dispatch and alone.
//
// Grid: head dims {8, 16, 24, 48, 80, 96, 256} x block sizes {1, 3, 16} x GQA groups {1, 2, 4, 8}
// x windows {0, 40} x batches mixing prefills, decodes and chunked prefills after a cached
// prefix; bf16 runs all of it, f16 a diagonal. How to add a case: extend a list below (a Batch is
// a list of {cached prefix, new tokens}; see paged_attention_case.h for what one case checks).
// The tolerance is the fast kernel's (attention_tolerance): the general kernel keeps P in fp32, so
// it is at least as close to the CPU.
#include <gtest/gtest.h>

#include "paged_attention_case.h"

namespace pagoda::cuda {
namespace {

using namespace testing;  // NOLINT

const std::vector<Batch> kBatches = {
    {{0, 37}},                            // prefill
    {{20, 13}},                           // chunked prefill after a cached prefix
    {{0, 33}, {49, 1}, {0, 1}, {17, 5}},  // mixed prefill + decodes + chunk
    {{0, 1}, {15, 1}, {16, 1}, {99, 1}},  // decode batch across block boundaries
    {{130, 24}, {63, 2}, {7, 1}},         // a chunk after a long prefix, a short chunk, a decode
};

TEST(CudaPagedAttentionGeneral, MatchesCpuOverGrid) {
  REQUIRE_GPU();
  ThreadPool pool(16);
  const int sms = device_sms();
  struct Heads {
    int q, kv;
  };
  uint32_t seed = 7;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    for (int d : {8, 16, 24, 48, 80, 96, 256}) {
      for (const Heads h : {Heads{4, 4}, Heads{4, 2}, Heads{8, 2}, Heads{8, 1}}) {
        for (int bs : {1, 3, 16}) {
          for (int window : {0, 40}) {
            for (size_t b = 0; b < kBatches.size(); ++b) {
              if (dt == DType::kF16 && (b + bs + window + h.q / h.kv) % 4 != 0) continue;
              SCOPED_TRACE(::testing::Message()
                           << dtype_label(dt) << " d=" << d << " heads=" << h.q << "/" << h.kv
                           << " bs=" << bs << " window=" << window << " batch=" << b);
              Case c{dt, d, h.q, h.kv, bs, window, kBatches[b], (b % 2) == 1};
              run_case(c, seed++, pool, sms);
              if (::testing::Test::HasFatalFailure()) return;
            }
          }
        }
      }
    }
  }
}

TEST(CudaPagedAttentionGeneral, FastHeadDimsWithOddBlockSizes) {
  // Head dims 64 and 128 with a block size the fast kernel does not take: the dispatch falls back.
  REQUIRE_GPU();
  ThreadPool pool(16);
  const int sms = device_sms();
  uint32_t seed = 500;
  for (int d : {64, 128}) {
    for (int bs : {1, 5, 24}) {
      for (size_t b = 0; b < kBatches.size(); ++b) {
        SCOPED_TRACE(::testing::Message() << "d=" << d << " bs=" << bs << " batch=" << b);
        run_case(Case{DType::kBF16, d, 8, 2, bs, b % 2 == 0 ? 0 : 40, kBatches[b], b % 2 == 1},
                 seed++, pool, sms);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST(CudaPagedAttentionGeneral, QuantizedCachesMatchCpuOnDequantizedValues) {
  // Codes of x / scale in the cache (the tiny models' head dims), against the CPU on the
  // dequantized values.
  REQUIRE_GPU();
  ThreadPool pool(16);
  const int sms = device_sms();
  uint32_t seed = 900;
  for (DType code : {DType::kF8E4M3, DType::kF8E5M2, DType::kI8}) {
    const float scale = code == DType::kI8 ? 1.0f / 127 : code == DType::kF8E4M3 ? 0.0029f : 0.41f;
    for (int d : {8, 24, 80, 256}) {
      for (size_t b = 0; b < kBatches.size(); ++b) {
        SCOPED_TRACE(::testing::Message() << dtype_name(code) << " d=" << d << " batch=" << b);
        Case c{b % 2 == 0 ? DType::kBF16 : DType::kF16,
               d,
               8,
               2,
               b % 3 == 0 ? 3 : 16,
               0,
               kBatches[b],
               b % 2 == 1};
        c.kv_dtype = code;
        c.k_scale = scale;
        c.v_scale = scale * 0.6f;
        run_case(c, seed++, pool, sms);
        if (::testing::Test::HasFatalFailure()) return;
      }
    }
  }
}

TEST(CudaPagedAttentionGeneral, RejectsHeadDimsAboveTheLimit) {
  PagedAttentionParams p;
  p.num_tokens = 1;
  p.num_seqs = 1;
  p.num_heads = 1;
  p.q_stride = 512;
  p.layout = {1, 1, 1, 512};
  EXPECT_EQ(paged_attention_general(p, nullptr), cudaErrorInvalidValue);
  p.layout = {1, 0, 1, 8};  // block size 0
  EXPECT_EQ(paged_attention_general(p, nullptr), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace pagoda::cuda
