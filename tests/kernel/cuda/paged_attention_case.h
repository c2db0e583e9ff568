#pragma once
// One paged-attention case of the CUDA kernel tests: random caches in shuffled physical blocks, the
// CPU kernel as reference, and the CUDA paths (plan variants and the general kernel alone) compared
// by normalised error. Shared by paged_attention_test.cc (the fast kernel's shapes) and
// paged_attention_general_test.cc (every other shape).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "core/fp8.h"
#include "core/thread_pool.h"
#include "cuda_test_util.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cuda/paged_attention.h"

namespace pagoda::cuda::testing {

// bf16 inputs and output (2^-9 rounding each), P rounded to dtype before P.V, fp32 softmax.
inline double attention_tolerance(DType dt) { return dt == DType::kBF16 ? 1.5e-2 : 3e-3; }

struct SeqSpec {
  int prefix;
  int new_tokens;
};
using Batch = std::vector<SeqSpec>;

struct Case {
  DType dtype;
  int head_dim, num_heads, num_kv_heads, block_size, sliding_window;
  Batch batch;
  bool strided_q = false;  // q inside a fused qkv row
  // A quantized cache (kF8E4M3, kF8E5M2, kI8): the GPU holds the codes of x / scale, the CPU
  // reference code * scale in fp32. kF32 here: the cache is of dtype.
  DType kv_dtype = DType::kF32;
  float k_scale = 1.0f, v_scale = 1.0f;
};

// The host's code of x (already divided by the scale), as the GPU's encoder rounds it.
inline uint8_t encode_kv(float x, DType code) {
  if (code == DType::kF8E4M3) return float_to_e4m3(x);
  if (code == DType::kF8E5M2) return float_to_e5m2(x);
  if (std::isnan(x)) return 0;
  return static_cast<uint8_t>(static_cast<int8_t>(std::nearbyint(std::clamp(x, -127.0f, 127.0f))));
}
inline float decode_kv(uint8_t c, DType code) {
  if (code == DType::kF8E4M3) return e4m3_to_float(c);
  if (code == DType::kF8E5M2) return e5m2_to_float(c);
  return static_cast<float>(static_cast<int8_t>(c));
}

// kFineSplits: splits as short as one 64-key tile (the most partials the merge can meet).
// kWideTiles, kWideFineSplits: prefill items of 128 rows (the plan gives these small batches 64);
// unsplit ones run the Hopper kernel where it takes the shape (attention_hopper.h), and
// kWideTilesFa2 runs them on the FlashAttention-2 kernel (PagedAttentionParams::hopper = false).
// kGeneral: paged_attention_general alone, whatever the shape (the fast shapes check it too).
enum class Variant {
  kPlanned,
  kNoSplit,
  kPaddedGrid,
  kFineSplits,
  kWideTiles,
  kWideTilesFa2,
  kWideFineSplits,
  kGeneral
};

inline void run_case(const Case& c, uint32_t seed, ThreadPool& pool, int num_sms) {
  const DType dt = c.dtype;
  const int d = c.head_dim, kvh = c.num_kv_heads, bs = c.block_size, heads = c.num_heads;
  const int num_seqs = static_cast<int>(c.batch.size());
  std::vector<int32_t> seq_lens, qsl = {0}, positions;
  int max_blocks = 0;
  for (const auto& s : c.batch) {
    seq_lens.push_back(s.prefix + s.new_tokens);
    qsl.push_back(qsl.back() + s.new_tokens);
    max_blocks = std::max(max_blocks, (seq_lens.back() + bs - 1) / bs);
    for (int i = 0; i < s.new_tokens; ++i) positions.push_back(s.prefix + i);
  }
  const int64_t tokens = qsl.back();
  const int num_blocks = num_seqs * max_blocks + 3;
  std::vector<int32_t> physical(num_blocks);
  std::iota(physical.begin(), physical.end(), 0);
  std::mt19937 gen(seed);
  std::shuffle(physical.begin(), physical.end(), gen);
  std::vector<int32_t> tables(static_cast<size_t>(num_seqs) * max_blocks, -1);
  for (int s = 0; s < num_seqs; ++s)
    for (int j = 0; j < (seq_lens[s] + bs - 1) / bs; ++j)
      tables[s * max_blocks + j] = physical[s * max_blocks + j];

  // Caches: CPU [block, offset, head, dim] fp32; GPU [block, head, offset, dim] 16-bit, NaN where
  // no token lives.
  const size_t cache_elems = static_cast<size_t>(num_blocks) * bs * kvh * d;
  std::vector<float> kc(cache_elems, 0.0f), vc(cache_elems, 0.0f);
  std::vector<uint16_t> gk(cache_elems, 0xffff), gv(cache_elems, 0xffff);
  const bool quant = c.kv_dtype != DType::kF32;
  // Codes: 0x7f is NaN in both float8 formats; int8 has none (its poison -128 is never written).
  const uint8_t poison_code = c.kv_dtype == DType::kI8 ? 0x80 : 0x7f;
  std::vector<uint8_t> ck(quant ? cache_elems : 0, poison_code), cv(ck);
  for (int s = 0; s < num_seqs; ++s) {
    const HalfData kd = random_half(static_cast<size_t>(seq_lens[s]) * kvh * d, dt, seed + 11 + s);
    const HalfData vd = random_half(static_cast<size_t>(seq_lens[s]) * kvh * d, dt, seed + 97 + s);
    for (int pos = 0; pos < seq_lens[s]; ++pos) {
      const int64_t b = tables[s * max_blocks + pos / bs], o = pos % bs;
      for (int h = 0; h < kvh; ++h)
        for (int e = 0; e < d; ++e) {
          const size_t src = (static_cast<size_t>(pos) * kvh + h) * d + e;
          const size_t ci = ((b * bs + o) * kvh + h) * d + e;
          const size_t gi = ((b * kvh + h) * bs + o) * d + e;
          kc[ci] = kd.values[src];
          vc[ci] = vd.values[src];
          gk[gi] = kd.bits[src];
          gv[gi] = vd.bits[src];
          if (quant) {
            ck[gi] = encode_kv(kd.values[src] / c.k_scale, c.kv_dtype);
            cv[gi] = encode_kv(vd.values[src] / c.v_scale, c.kv_dtype);
            kc[ci] = decode_kv(ck[gi], c.kv_dtype) * c.k_scale;
            vc[ci] = decode_kv(cv[gi], c.kv_dtype) * c.v_scale;
          }
        }
    }
  }
  // q: dense [tokens, heads, d], or rows of a fused qkv of (heads + 2 kvh) * d.
  const int64_t q_stride = c.strided_q ? static_cast<int64_t>(heads + 2 * kvh) * d : heads * d;
  const HalfData qd = random_half(tokens * q_stride, dt, seed + 5, -2.0f, 2.0f);
  std::vector<float> q(tokens * heads * d);
  for (int64_t t = 0; t < tokens; ++t)
    std::copy(&qd.values[t * q_stride], &qd.values[t * q_stride + heads * d], &q[t * heads * d]);

  std::vector<float> ref(tokens * heads * d);
  cpu::PagedAttentionParams cp;
  cp.q = q.data();
  cp.positions = positions.data();
  cp.query_start_loc = qsl.data();
  cp.seq_lens = seq_lens.data();
  cp.block_tables = tables.data();
  cp.key_cache = kc.data();
  cp.value_cache = vc.data();
  cp.out = ref.data();
  cp.num_tokens = tokens;
  cp.num_seqs = num_seqs;
  cp.num_heads = heads;
  cp.max_blocks_per_seq = max_blocks;
  cp.sliding_window = c.sliding_window;
  cp.scale = 1.0f / std::sqrt(static_cast<float>(d));
  cp.layout = {num_blocks, bs, kvh, d};
  cpu::paged_attention(cp, pool);

  DeviceBuffer dq = to_device(qd.bits), dpos = to_device(positions), dqsl = to_device(qsl);
  DeviceBuffer dlens = to_device(seq_lens), dtables = to_device(tables);
  DeviceBuffer dk = quant ? to_device(ck) : to_device(gk),
               dv = quant ? to_device(cv) : to_device(gv);
  DeviceBuffer dout(tokens * heads * d * 2);
  const std::vector<float> scales = {c.k_scale, c.v_scale};
  DeviceBuffer dscales = to_device(scales);
  PagedAttentionParams gp;
  gp.q = dq.get();
  gp.q_stride = q_stride;
  gp.positions = dpos.as<int32_t>();
  gp.query_start_loc = dqsl.as<int32_t>();
  gp.seq_lens = dlens.as<int32_t>();
  gp.block_tables = dtables.as<int32_t>();
  gp.key_cache = dk.get();
  gp.value_cache = dv.get();
  gp.out = dout.get();
  gp.num_tokens = tokens;
  gp.num_seqs = num_seqs;
  gp.num_heads = heads;
  gp.max_blocks_per_seq = max_blocks;
  gp.sliding_window = c.sliding_window;
  gp.scale = cp.scale;
  gp.layout = {num_blocks, bs, kvh, d};
  gp.dtype = dt;
  gp.kv_dtype = quant ? c.kv_dtype : dt;
  if (quant) {
    gp.k_scale = dscales.as<float>();
    gp.v_scale = dscales.as<float>() + 1;
  }

  AttentionPlanInput in;
  in.query_start_loc = qsl.data();
  in.seq_lens = seq_lens.data();
  in.num_seqs = num_seqs;
  in.num_heads = heads;
  in.num_kv_heads = kvh;
  in.num_sms = num_sms;
  in.sliding_window = c.sliding_window;
  for (Variant v :
       {Variant::kPlanned, Variant::kNoSplit, Variant::kPaddedGrid, Variant::kFineSplits,
        Variant::kWideTiles, Variant::kWideTilesFa2, Variant::kWideFineSplits, Variant::kGeneral}) {
    SCOPED_TRACE(::testing::Message() << "variant=" << static_cast<int>(v));
    AttentionLimits limits;
    limits.max_tokens = tokens;
    limits.max_items = 1 << 16;
    limits.max_partial_slots = v == Variant::kNoSplit ? 0 : 4096;
    limits.head_dim = d;
    limits.block_size = bs;
    const bool fine = v == Variant::kFineSplits || v == Variant::kWideFineSplits;
    in.min_split_keys = fine ? 64 : kDefaultMinSplitKeys;
    const bool wide =
        v == Variant::kWideTiles || v == Variant::kWideTilesFa2 || v == Variant::kWideFineSplits;
    gp.hopper = v != Variant::kWideTilesFa2;
    in.prefill_rows = wide ? kAttentionTileRows : 0;
    // The planned variants plan as the model does (128-row unsplit items for the Hopper kernel
    // where it runs); the split variants keep the FlashAttention-2 plan's small-batch splits.
    in.hopper_prefill = (v == Variant::kPlanned || v == Variant::kPaddedGrid) &&
                        hopper_prefill_available(gp.layout, gp.dtype, gp.kv_dtype, gp.softcap);
    AttentionPlan plan;
    CUDA_OK(plan_paged_attention(in, limits, &plan));
    if (v == Variant::kNoSplit) {
      ASSERT_EQ(plan.num_partial_slots, 0);
    }
    if (v == Variant::kPaddedGrid) {
      plan.decode_grid += 3;
      plan.prefill_grid += 5;
    }
    DeviceBuffer ws(attention_workspace_bytes(limits));
    ASSERT_NE(ws.get(), nullptr);
    CUDA_OK(upload_attention_plan(plan, limits, ws.get(), nullptr));
    // Twice on one upload, as the layers of a step run: the split counters must be back at zero.
    for (int run = 0; run < 2; ++run) {
      poison(dout);
      if (v == Variant::kGeneral) {
        CUDA_OK(paged_attention_general(gp, nullptr));
      } else {
        CUDA_OK(paged_attention(gp, plan, limits, ws.get(), nullptr));
      }
      CUDA_OK(cudaDeviceSynchronize());
    }
    const auto got = halves_to_floats(to_host<uint16_t>(dout, tokens * heads * d), dt);
    EXPECT_LE(normalised_error(got, ref), attention_tolerance(dt))
        << plan.prefill_rows << "-row prefill items, items " << plan.num_decode_items
        << " decode + " << plan.num_prefill_items << " prefill, " << plan.num_partial_slots
        << " partial slots";
  }
}

inline int device_sms() {
  int sms = 132;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  return sms;
}

}  // namespace pagoda::cuda::testing
