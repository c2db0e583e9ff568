// CUDA rms_norm, add_rms_norm, silu_and_mul, embedding and rope_and_cache against the CPU kernels;
// gather_layer_rows against the host gather.
//
// How to add a case: extend a size list in the TEST below; every case draws fresh random 16-bit
// inputs (never zeros), runs the CPU kernel on their exact fp32 values, poisons the GPU output and
// compares with normalised_error against tolerance(dtype). The lists include the small models'
// shapes (stories260K: hidden 64, head_dim 8, intermediate 172; fixtures: head_dim 16, 24), whose
// rows are not always whole 16-byte vectors and so take the kernels' scalar paths.
#include <gtest/gtest.h>

#include <numeric>
#include <random>
#include <tuple>
#include <utility>

#include "cuda_test_util.h"
#include "kernels/cpu/activation.h"
#include "kernels/cpu/norm.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/norm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/tensor_ops.h"
#include "paged_attention_case.h"

namespace pagoda::cuda {
namespace {

using namespace testing;  // NOLINT

const DType kDTypes[] = {DType::kBF16, DType::kF16};

TEST(CudaNorm, RmsNormMatchesCpu) {
  REQUIRE_GPU();
  ThreadPool pool(4);
  uint32_t seed = 1;
  for (DType dt : kDTypes) {
    for (int64_t rows : {1, 7, 33, 300}) {
      for (int64_t n : {8, 24, 64, 128, 333, 4096, 5120}) {  // 8, 24: per-head q/k norm
        SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " rows=" << rows << " n=" << n);
        const HalfData x = random_half(rows * n, dt, seed++, -2.0f, 2.0f);
        const HalfData w = random_half(n, dt, seed++, 0.5f, 1.5f);
        std::vector<float> ref(rows * n);
        cpu::rms_norm(x.values.data(), w.values.data(), rows, n, 1e-6f, ref.data(), pool);
        DeviceBuffer dx = to_device(x.bits), dw = to_device(w.bits), dy(rows * n * 2);
        poison(dy);
        CUDA_OK(rms_norm(dx.get(), dw.get(), rows, n, 1e-6f, dy.get(), dt, nullptr));
        CUDA_OK(cudaDeviceSynchronize());
        EXPECT_LE(normalised_error(halves_to_floats(to_host<uint16_t>(dy, rows * n), dt), ref),
                  tolerance(dt));
        // In place (out == x).
        CUDA_OK(rms_norm(dx.get(), dw.get(), rows, n, 1e-6f, dx.get(), dt, nullptr));
        CUDA_OK(cudaDeviceSynchronize());
        EXPECT_LE(normalised_error(halves_to_floats(to_host<uint16_t>(dx, rows * n), dt), ref),
                  tolerance(dt));
      }
    }
  }
}

TEST(CudaNorm, AddRmsNormMatchesCpu) {
  REQUIRE_GPU();
  ThreadPool pool(4);
  uint32_t seed = 100;
  for (DType dt : kDTypes) {
    for (int64_t rows : {1, 2, 16, 129}) {
      for (int64_t n : {64, 96, 4096, 1001}) {
        SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " rows=" << rows << " n=" << n);
        const HalfData res = random_half(rows * n, dt, seed++, -3.0f, 3.0f);
        const HalfData x = random_half(rows * n, dt, seed++);
        const HalfData w = random_half(n, dt, seed++, 0.5f, 1.5f);
        std::vector<float> ref_res = res.values, ref(rows * n);
        cpu::add_rms_norm(ref_res.data(), x.values.data(), w.values.data(), rows, n, 1e-5f,
                          ref.data(), pool);
        DeviceBuffer dres = to_device(res.bits), dx = to_device(x.bits), dw = to_device(w.bits);
        DeviceBuffer dy(rows * n * 2);
        poison(dy);
        CUDA_OK(
            add_rms_norm(dres.get(), dx.get(), dw.get(), rows, n, 1e-5f, dy.get(), dt, nullptr));
        CUDA_OK(cudaDeviceSynchronize());
        EXPECT_LE(normalised_error(halves_to_floats(to_host<uint16_t>(dy, rows * n), dt), ref),
                  tolerance(dt));
        EXPECT_LE(
            normalised_error(halves_to_floats(to_host<uint16_t>(dres, rows * n), dt), ref_res),
            tolerance(dt));
      }
    }
  }
}

TEST(CudaActivation, SiluAndMulMatchesCpu) {
  REQUIRE_GPU();
  ThreadPool pool(4);
  uint32_t seed = 200;
  for (DType dt : kDTypes) {
    for (int64_t rows : {1, 7, 128}) {
      for (int64_t cols : {8, 172, 333, 14336}) {  // 172: gate_up rows of 344, up unaligned
        SCOPED_TRACE(::testing::Message()
                     << dtype_label(dt) << " rows=" << rows << " cols=" << cols);
        // The fused gate_up layout: [rows, 2 * cols], gate first.
        const HalfData gu = random_half(rows * 2 * cols, dt, seed++, -4.0f, 4.0f);
        std::vector<float> gate(rows * cols), up(rows * cols), ref(rows * cols);
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t c = 0; c < cols; ++c) {
            gate[r * cols + c] = gu.values[r * 2 * cols + c];
            up[r * cols + c] = gu.values[r * 2 * cols + cols + c];
          }
        cpu::silu_and_mul(gate.data(), up.data(), rows * cols, ref.data(), pool);
        DeviceBuffer dgu = to_device(gu.bits), dout(rows * cols * 2);
        poison(dout);
        const auto* base = dgu.as<uint16_t>();
        CUDA_OK(silu_and_mul(base, base + cols, rows, cols, 2 * cols, dout.get(), dt, nullptr));
        CUDA_OK(cudaDeviceSynchronize());
        EXPECT_LE(normalised_error(halves_to_floats(to_host<uint16_t>(dout, rows * cols), dt), ref),
                  tolerance(dt));
      }
    }
  }
}

TEST(CudaEmbedding, GathersRows) {
  REQUIRE_GPU();
  for (DType dt : kDTypes) {
    for (int64_t hidden : {64, 4096, 77, 8}) {
      SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " hidden=" << hidden);
      const int64_t vocab = 1000;
      const HalfData table = random_half(vocab * hidden, dt, 300 + hidden);
      std::vector<int32_t> ids = {0, 999, 17, 17, 500, 3, 998};
      DeviceBuffer dt_ = to_device(table.bits), dids = to_device(ids);
      DeviceBuffer dout(ids.size() * hidden * 2);
      poison(dout);
      CUDA_OK(embedding(dids.as<int32_t>(), static_cast<int64_t>(ids.size()), dt_.get(), vocab,
                        hidden, dout.get(), dt, nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      const auto got = to_host<uint16_t>(dout, ids.size() * hidden);
      for (size_t t = 0; t < ids.size(); ++t)
        for (int64_t i = 0; i < hidden; ++i)
          ASSERT_EQ(got[t * hidden + i], table.bits[ids[t] * hidden + i])
              << "t=" << t << " i=" << i;
    }
  }
}

// A tensor-parallel rank's vocabulary slice: rows [first, first + rows) of the whole table; the
// ids outside it give zero rows (the other ranks' share of the all-reduce).
TEST(CudaEmbedding, ShardGathersItsRowsAndZerosElsewhere) {
  REQUIRE_GPU();
  for (DType dt : kDTypes) {
    for (int64_t hidden : {64, 77}) {
      SCOPED_TRACE(::testing::Message() << dtype_label(dt) << " hidden=" << hidden);
      const int64_t vocab = 1000, first = 500, rows = 250;
      const HalfData table = random_half(vocab * hidden, dt, 400 + hidden);
      const std::vector<uint16_t> slice(table.bits.begin() + first * hidden,
                                        table.bits.begin() + (first + rows) * hidden);
      const std::vector<int32_t> ids = {0, 499, 500, 749, 750, 600, 999};
      DeviceBuffer dslice = to_device(slice), dids = to_device(ids);
      DeviceBuffer dout(ids.size() * hidden * 2);
      poison(dout);
      const EmbeddingShard p{dids.as<int32_t>(),
                             static_cast<int64_t>(ids.size()),
                             dslice.get(),
                             first,
                             rows,
                             hidden,
                             dout.get(),
                             dt};
      CUDA_OK(embedding_shard(p, nullptr));
      CUDA_OK(cudaDeviceSynchronize());
      const auto got = to_host<uint16_t>(dout, ids.size() * hidden);
      for (size_t t = 0; t < ids.size(); ++t) {
        const bool mine = ids[t] >= first && ids[t] < first + rows;
        for (int64_t i = 0; i < hidden; ++i) {
          ASSERT_EQ(got[t * hidden + i], mine ? table.bits[ids[t] * hidden + i] : uint16_t{0})
              << "t=" << t << " i=" << i;
        }
      }
    }
  }
}

// rope_and_cache against cpu::rope_neox + cpu::reshape_and_cache: q and k rotated in place, the
// rotated k and v in the GPU cache layout at the slots (negative slots skipped), from a fused qkv;
// with the per-head norm (Qwen3), cpu::rms_norm over each head first, rounded to dtype.
TEST(CudaGather, LayerRowsSideBySide) {
  // Rows of 3 layers of [tokens, hidden] (layer stride padded past the tokens) into [rows, 3
  // hidden], -1 for zeros; hidden 64 (16-byte vectors) and 5 (the byte loop). Exact copies.
  REQUIRE_GPU();
  for (const int64_t hidden : {64, 5}) {
    SCOPED_TRACE(hidden);
    const int layers = 3;
    const int64_t stride = 8 * hidden;  // elements per layer: 8 tokens (rows 0..5 read)
    std::vector<uint16_t> src(static_cast<size_t>(layers * stride));
    std::iota(src.begin(), src.end(), uint16_t{1});
    const std::vector<int32_t> rows{5, 0, -1, 3, 3};
    const DeviceBuffer dsrc = to_device(src), drows = to_device(rows);
    const auto n = static_cast<size_t>(static_cast<int64_t>(rows.size()) * layers * hidden);
    DeviceBuffer out(n * 2);
    poison(out);
    CUDA_OK(gather_layer_rows(dsrc.get(), layers, stride * 2, hidden * 2, drows.as<int32_t>(),
                              static_cast<int64_t>(rows.size()), out.get(), nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<uint16_t> got = to_host<uint16_t>(out, n);
    for (size_t r = 0; r < rows.size(); ++r) {
      for (int l = 0; l < layers; ++l) {
        for (int64_t c = 0; c < hidden; ++c) {
          const size_t at = (r * layers + static_cast<size_t>(l)) * static_cast<size_t>(hidden) +
                            static_cast<size_t>(c);
          const uint16_t want =
              rows[r] < 0 ? 0 : src[static_cast<size_t>(l * stride + rows[r] * hidden + c)];
          ASSERT_EQ(got[at], want) << "row " << r << " layer " << l << " column " << c;
        }
      }
    }
  }
  EXPECT_EQ(gather_layer_rows(nullptr, 0, 0, 2, nullptr, 1, nullptr, nullptr),
            cudaErrorInvalidValue);
}

TEST(CudaRope, RopeAndCacheMatchesCpu) {
  REQUIRE_GPU();
  ThreadPool pool(4);
  uint32_t seed = 400;
  struct Shape {
    int heads, kv_heads, head_dim, block_size;
  };
  for (DType dt : kDTypes) {
    // The small models' shapes too: head dims 8 / 16 / 24 and block sizes 1 and 3.
    for (const Shape s :
         {Shape{32, 8, 128, 16}, Shape{8, 8, 64, 32}, Shape{4, 1, 96, 16}, Shape{8, 4, 8, 16},
          Shape{8, 4, 8, 1}, Shape{4, 1, 16, 3}, Shape{4, 2, 24, 3}}) {
      for (const auto& [tokens, qk_norm] : {std::pair<int64_t, bool>{1, false},
                                            {7, false},
                                            {70, false},
                                            {1, true},
                                            {7, true},
                                            {70, true}}) {
        SCOPED_TRACE(::testing::Message()
                     << dtype_label(dt) << " heads=" << s.heads << "/" << s.kv_heads
                     << " d=" << s.head_dim << " t=" << tokens << " qk_norm=" << qk_norm);
        const int d = s.head_dim, half = d / 2;
        const int64_t row = static_cast<int64_t>(s.heads + 2 * s.kv_heads) * d;
        const HalfData qkv = random_half(tokens * row, dt, seed++, -2.0f, 2.0f);
        std::vector<float> inv_freq(half);
        for (int i = 0; i < half; ++i) inv_freq[i] = std::pow(500000.0f, -2.0f * i / d);
        std::vector<int32_t> positions(tokens);
        std::mt19937 gen(seed++);
        for (auto& p : positions) p = static_cast<int32_t>(gen() % 9000);
        const int64_t num_blocks = (tokens + s.block_size - 1) / s.block_size + 2;
        std::vector<int64_t> slots(tokens);
        std::vector<int64_t> perm(num_blocks * s.block_size);
        std::iota(perm.begin(), perm.end(), 0);
        std::shuffle(perm.begin(), perm.end(), gen);
        for (int64_t t = 0; t < tokens; ++t) slots[t] = t % 5 == 3 ? -1 : perm[t];

        // CPU: split q, k, v to fp32, rotate, cache (token-major fp32).
        std::vector<float> q(tokens * s.heads * d), k(tokens * s.kv_heads * d), v(k.size());
        for (int64_t t = 0; t < tokens; ++t) {
          const float* r = &qkv.values[t * row];
          std::copy(r, r + s.heads * d, &q[t * s.heads * d]);
          std::copy(r + s.heads * d, r + (s.heads + s.kv_heads) * d, &k[t * s.kv_heads * d]);
          std::copy(r + (s.heads + s.kv_heads) * d, r + row, &v[t * s.kv_heads * d]);
        }
        const HalfData q_norm = random_half(d, dt, seed++, 0.5f, 1.5f);
        const HalfData k_norm = random_half(d, dt, seed++, 0.5f, 1.5f);
        constexpr float kEps = 1e-6f;
        if (qk_norm) {
          for (auto [x, weight, heads] :
               {std::tuple{&q, &q_norm, s.heads}, std::tuple{&k, &k_norm, s.kv_heads}}) {
            std::vector<float> normed(x->size());
            cpu::rms_norm(x->data(), weight->values.data(), tokens * heads, d, kEps, normed.data(),
                          pool);
            for (size_t i = 0; i < normed.size(); ++i)
              (*x)[i] = half_to_float(float_to_half(normed[i], dt), dt);
          }
        }
        cpu::rope_neox(q.data(), k.data(), positions.data(), tokens, s.heads, s.kv_heads, d,
                       inv_freq.data(), pool);
        cpu::PagedKVLayout cl{num_blocks, s.block_size, s.kv_heads, d};
        const size_t cache_elems = num_blocks * s.block_size * s.kv_heads * d;
        std::vector<float> kc(cache_elems, 0.0f), vc(cache_elems, 0.0f);
        cpu::reshape_and_cache(k.data(), v.data(), slots.data(), tokens, kc.data(), vc.data(), cl,
                               pool);

        DeviceBuffer dqkv = to_device(qkv.bits), dfreq = to_device(inv_freq);
        DeviceBuffer dqn = to_device(q_norm.bits), dkn = to_device(k_norm.bits);
        DeviceBuffer dpos = to_device(positions), dslots = to_device(slots);
        DeviceBuffer dkc(cache_elems * 2), dvc(cache_elems * 2);
        poison(dkc);
        poison(dvc);
        RopeCacheParams p;
        auto* base = dqkv.as<uint16_t>();
        p.q = base;
        p.k = base + s.heads * d;
        p.v = base + (s.heads + s.kv_heads) * d;
        p.q_stride = p.k_stride = p.v_stride = row;
        p.positions = dpos.as<int32_t>();
        p.inv_freq = dfreq.as<float>();
        p.slot_mapping = dslots.as<int64_t>();
        p.key_cache = dkc.get();
        p.value_cache = dvc.get();
        p.num_tokens = tokens;
        p.num_heads = s.heads;
        p.layout = {num_blocks, s.block_size, s.kv_heads, d};
        p.dtype = dt;
        p.cache_dtype = dt;
        if (qk_norm) {
          p.q_norm = dqn.get();
          p.k_norm = dkn.get();
          p.norm_eps = kEps;
        }
        CUDA_OK(rope_and_cache(p, nullptr));
        CUDA_OK(cudaDeviceSynchronize());

        const auto got = halves_to_floats(to_host<uint16_t>(dqkv, tokens * row), dt);
        std::vector<float> got_q, got_k, ref_kc, got_kc, ref_vc, got_vc;
        for (int64_t t = 0; t < tokens; ++t) {
          got_q.insert(got_q.end(), &got[t * row], &got[t * row + s.heads * d]);
          got_k.insert(got_k.end(), &got[t * row + s.heads * d],
                       &got[t * row + (s.heads + s.kv_heads) * d]);
        }
        EXPECT_LE(normalised_error(got_q, q), tolerance(dt));
        EXPECT_LE(normalised_error(got_k, k), tolerance(dt));
        // The written slots, converted from the GPU layout [block, head, offset, dim].
        const auto gkc = to_host<uint16_t>(dkc, cache_elems),
                   gvc = to_host<uint16_t>(dvc, cache_elems);
        int written = 0;
        for (int64_t t = 0; t < tokens; ++t) {
          if (slots[t] < 0) continue;
          ++written;
          const int64_t b = slots[t] / s.block_size, o = slots[t] % s.block_size;
          for (int h = 0; h < s.kv_heads; ++h)
            for (int e = 0; e < d; ++e) {
              const int64_t gi = ((b * s.kv_heads + h) * s.block_size + o) * d + e;
              const int64_t ci = (slots[t] * s.kv_heads + h) * d + e;
              got_kc.push_back(half_to_float(gkc[gi], dt));
              ref_kc.push_back(kc[ci]);
              got_vc.push_back(half_to_float(gvc[gi], dt));
              ref_vc.push_back(vc[ci]);
            }
        }
        EXPECT_LE(normalised_error(got_kc, ref_kc), tolerance(dt));
        EXPECT_EQ(normalised_error(got_vc, ref_vc), 0.0);  // v is copied bit for bit
        // Skipped slots stay poisoned: count the NaN rows of the cache.
        int64_t touched = 0;
        for (int64_t sl = 0; sl < num_blocks * s.block_size; ++sl) {
          const int64_t b = sl / s.block_size, o = sl % s.block_size;
          if (gvc[(b * s.kv_heads * s.block_size + o) * d] != 0xffff) ++touched;
        }
        EXPECT_EQ(touched, written);
      }
    }
  }
}

// rope_and_cache into a quantized cache: every written element is exactly the code of the value
// the dtype cache receives (same launch otherwise) divided by the scale, rounded as the CPU's
// encoders round; skipped slots keep their poison.
TEST(CudaRope, RopeAndCacheQuantizedCacheHoldsTheCodes) {
  REQUIRE_GPU();
  uint32_t seed = 4400;
  const int heads = 8, kvh = 2, bs = 16;
  for (DType code : {DType::kF8E4M3, DType::kF8E5M2, DType::kI8}) {
    for (DType dt : kDTypes) {
      for (int d : {128, 24}) {
        SCOPED_TRACE(::testing::Message()
                     << dtype_name(code) << " " << dtype_label(dt) << " d=" << d);
        const int64_t tokens = 37, row = static_cast<int64_t>(heads + 2 * kvh) * d;
        const HalfData qkv = random_half(tokens * row, dt, seed++, -3.0f, 3.0f);
        std::vector<float> inv_freq(d / 2);
        for (int i = 0; i < d / 2; ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * i / d);
        std::vector<int32_t> positions(tokens);
        std::vector<int64_t> slots(tokens);
        for (int64_t t = 0; t < tokens; ++t) {
          positions[t] = static_cast<int32_t>(t * 7 + 3);
          slots[t] = t % 6 == 4 ? -1 : (tokens - 1 - t) + 5;
        }
        const int64_t num_blocks = (tokens + 5 + bs - 1) / bs + 1;
        const size_t elems = static_cast<size_t>(num_blocks) * bs * kvh * d;
        const std::vector<float> scales = {code == DType::kI8 ? 3.0f / 127 : 0.0071f,
                                           code == DType::kI8 ? 2.5f / 127 : 0.013f};
        DeviceBuffer dfreq = to_device(inv_freq), dpos = to_device(positions);
        DeviceBuffer dslots = to_device(slots), dscales = to_device(scales);
        DeviceBuffer hk(elems * 2), hv(elems * 2), qk(elems), qv(elems);
        poison(hk);
        poison(hv);
        CUDA_OK(cudaMemset(qk.get(), 0xee, elems));
        CUDA_OK(cudaMemset(qv.get(), 0xee, elems));
        for (bool quant : {false, true}) {
          DeviceBuffer dqkv = to_device(qkv.bits);
          auto* base = dqkv.as<uint16_t>();
          RopeCacheParams p;
          p.q = base;
          p.k = base + heads * d;
          p.v = base + (heads + kvh) * d;
          p.q_stride = p.k_stride = p.v_stride = row;
          p.positions = dpos.as<int32_t>();
          p.inv_freq = dfreq.as<float>();
          p.slot_mapping = dslots.as<int64_t>();
          p.key_cache = quant ? qk.get() : hk.get();
          p.value_cache = quant ? qv.get() : hv.get();
          p.num_tokens = tokens;
          p.num_heads = heads;
          p.layout = {num_blocks, bs, kvh, d};
          p.dtype = dt;
          p.cache_dtype = quant ? code : dt;
          p.k_scale = dscales.as<float>();
          p.v_scale = dscales.as<float>() + 1;
          CUDA_OK(rope_and_cache(p, nullptr));
        }
        CUDA_OK(cudaDeviceSynchronize());
        const auto ghk = to_host<uint16_t>(hk, elems), ghv = to_host<uint16_t>(hv, elems);
        const auto gqk = to_host<uint8_t>(qk, elems), gqv = to_host<uint8_t>(qv, elems);
        int64_t written = 0, mismatches = 0;
        for (size_t i = 0; i < elems; ++i) {
          if (ghv[i] == 0xffff) {  // a slot no token wrote
            mismatches += gqk[i] != 0xee || gqv[i] != 0xee;
            continue;
          }
          ++written;
          mismatches += gqk[i] != encode_kv(half_to_float(ghk[i], dt) / scales[0], code);
          mismatches += gqv[i] != encode_kv(half_to_float(ghv[i], dt) / scales[1], code);
        }
        EXPECT_EQ(written, static_cast<int64_t>(std::count_if(slots.begin(), slots.end(),
                                                              [](int64_t x) { return x >= 0; })) *
                               kvh * d);
        EXPECT_EQ(mismatches, 0);
      }
    }
  }
}

}  // namespace
}  // namespace pagoda::cuda
