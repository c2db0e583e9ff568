// The Hopper prefill attention kernel, FlashAttention-3 style (sm_90a: TMA, wgmma, setmaxnreg).
//
// How it works. A block runs 128-row prefill items of the plan (rows = (token, query head) pairs
// of one kv head, GQA-packed as in attention_kernel.cuh), one after another (persistent blocks, one
// per SM), with three warpgroups:
//   warpgroup 0, the producer: one warp loads, by TMA, each item's Q (two boxes of 64 columns,
//     into one of two Q buffers, so the next item's Q arrives during this one) and walks the
//     item's key tiles (128 keys each): per tile it looks up the tile's pages in the block table
//     and issues one TMA copy per (page, 64-column half) of K and of V into a ring of
//     shared-memory stages (128-byte swizzle). Each stage and Q buffer has a "full" mbarrier (the
//     TMA bytes arrived) and an "empty" one (both consumers done with it). The producer's
//     registers are given back (setmaxnreg) to the consumers.
//   warpgroups 1 and 2, the consumers: each owns 64 query rows (one wgmma M tile). Per key tile:
//     S = Q K^T by wgmma from shared memory, the causal / window mask only where a row's key range
//     does not cover the tile, online softmax in fp32 registers (exp2 with the scale folded in), P
//     re-packed from the S accumulators into wgmma A registers, O += P V by wgmma (V transposed by
//     the instruction). Each consumer overlaps its softmax of tile j with its P V of tile j - 1
//     (see the loop), and the two take turns to issue their products (ping-pong), so that one's
//     softmax runs while the other's products keep the tensor cores busy.
// Keys past the item's last key (the tail of the last page, pages not loaded) are never used, but
// V rows there are zeroed in shared memory before P V: a zero probability times a NaN left in an
// unwritten cache slot would still be NaN.
//
// Takes: bf16/f16 Q, K, V, head dim 64 or 128, a block size dividing 128, no soft-capping, a cache
// of T (not codes), no split items (AttentionPlan::prefill_split). paged_attention checks these
// (hopper_prefill_supports) and otherwise runs the FlashAttention-2 kernel.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <climits>

#include "kernels/cuda/attention_hopper.h"
#include "kernels/cuda/attention_kernel.cuh"
#include "kernels/cuda/hopper.cuh"

namespace pagoda::cuda::attention {
namespace {

using namespace pagoda::cuda::hopper;

constexpr int kRows = kAttentionTileRows;  // 128 query rows: 2 consumer warpgroups x 64
constexpr int kKeys = 128;                 // keys per tile
constexpr int kHopperThreads = 384;
constexpr int kRowBytes = 128;  // one swizzled row: 64 16-bit elements
constexpr int kProducerRegs = 56, kConsumerRegs = 224;
static_assert(kRows == 128);

/// Shared memory of one block (byte offsets from a 1,024-aligned base):
/// Q [q buffers][halves][128 rows][128 B] | K [stages][halves][128 keys][128 B] | V (same) |
/// mbarriers: full K, full V, empty K, empty V [stages] each, full Q, empty Q [q buffers] each |
/// ItemInfo [q buffers] (the item of the Q buffer and its rows' key ranges, by the producer).
/// Two Q buffers let the producer load the next item's Q during this one; with head dim 128 and
/// three stages only one fits in the 227 KB of an SM.
// Two K/V stages and the consumers' ping-pong: measured against three stages (one Q buffer then
// fits) and no ping-pong on the H200, both within 1% at 8k and 32k keys, three stages 8-17% slower
// at 512 and 2,048 (docs/benchmarks.md).
constexpr int kStages = 2;
constexpr bool kPingPong = true;

constexpr size_t kHalfBytes = static_cast<size_t>(kKeys) * kRowBytes;  // 16 KB: 128 rows

/// What the producer tells the consumers about the item whose Q a buffer holds (written before the
/// buffer's "full Q" arrival), so that they start an item without global loads.
struct ItemInfo {
  AttentionWorkItem item;
  int key_lo, key_hi;                // the keys any row sees (key_hi < 0: none)
  int row_lo[kRows], row_hi[kRows];  // per row (hi < lo: none; padding rows)
  int pad[2];
};
static_assert(sizeof(ItemInfo) % 16 == 0);

template <int kD>
struct Layout {
  static constexpr int kHalves = kD / 64;
  static constexpr int kQBuffers = 2;
  static constexpr size_t kQBytes = static_cast<size_t>(kRows) * kRowBytes * kHalves;  // one
  static constexpr size_t kTileBytes = kHalfBytes * kHalves;
  static constexpr size_t kK = kQBuffers * kQBytes;
  static constexpr size_t kV = kK + kStages * kTileBytes;
  static constexpr size_t kBars = kV + kStages * kTileBytes;
  static constexpr size_t kInfo = kBars + (4 * kStages + 2 * kQBuffers) * sizeof(uint64_t);
  static constexpr size_t kBytes = kInfo + kQBuffers * sizeof(ItemInfo);
  static constexpr size_t kAlloc = kBytes + 1024;  // slack to align the base
};

__device__ __forceinline__ float quad_max(float v) {
  v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
  return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}
__device__ __forceinline__ float quad_sum(float v) {
  v += __shfl_xor_sync(0xffffffffu, v, 1);
  return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

/// S[64 x 128] = Q[64 rows of this warpgroup] K[tile]^T (kD / 16 k-steps of 16).
template <typename T, int kD>
__device__ __forceinline__ void qk(float (&s)[64], const unsigned char* q_rows,
                                   const unsigned char* k_tile) {
  constexpr size_t kQHalf = static_cast<size_t>(kRows) * kRowBytes;
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kD / 16; ++kk) {
    const uint64_t a = smem_desc(q_rows + (kk / 4) * kQHalf + (kk % 4) * 32, 16, 1024);
    const uint64_t b = smem_desc(k_tile + (kk / 4) * kHalfBytes + (kk % 4) * 32, 16, 1024);
    wgmma_ss_n128(WgmmaType<T>{}, s, a, b, kk > 0 ? 1 : 0);
  }
  wgmma_commit();
}

/// O[64 x kD] += P[64 x 128] V[tile] (8 k-steps of 16 keys; V's halves kHalfBytes apart).
template <typename T, int kD>
__device__ __forceinline__ void pv(float (&o)[kD / 2], const uint32_t (&pa)[kKeys / 16][4],
                                   const unsigned char* v_tile) {
  wgmma_fence();
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    const uint64_t b = smem_desc(v_tile + kk * 16 * kRowBytes, kHalfBytes, 1024);
    if constexpr (kD == 128) {
      wgmma_rs_n128_tb(WgmmaType<T>{}, o, pa[kk], b);
    } else {
      wgmma_rs_n64_tb(WgmmaType<T>{}, o, pa[kk], b);
    }
  }
  wgmma_commit();
}

/// Keys [lo, hi] that query row r of the item sees (hi < lo: none; padding rows past num_rows).
__device__ __forceinline__ int2 row_keys(const PagedAttentionParams& p, const AttentionWorkItem& it,
                                         int r, int group, int num_rows) {
  if (r >= num_rows) return make_int2(0, -1);
  const int32_t pos = p.positions[it.token_begin + r / group];
  const int hi = min(min(pos, p.seq_lens[it.seq] - 1), it.kv_end - 1);
  const int lo = max(p.sliding_window > 0 ? max(0, pos - p.sliding_window + 1) : 0, it.kv_begin);
  return make_int2(lo, hi);
}

/// The keys any row of the item sees, [lo, hi] (hi < 0: none), computed by a whole warp (every
/// warp of the block gets the same answer, so the producer and the consumers agree on the tiles
/// without talking).
__device__ __forceinline__ int2 item_keys(const PagedAttentionParams& p,
                                          const AttentionWorkItem& it, int lane) {
  int lo = INT_MAX, hi = -1;
  const int tokens = it.token_end - it.token_begin;
  for (int t = lane; t < tokens; t += 32) {
    const int2 k = row_keys(p, it, t, 1, tokens);
    if (k.y >= k.x) {
      lo = min(lo, k.x);
      hi = max(hi, k.y);
    }
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    lo = min(lo, __shfl_xor_sync(0xffffffffu, lo, o));
    hi = max(hi, __shfl_xor_sync(0xffffffffu, hi, o));
  }
  return make_int2(lo, hi);
}

/// The tiles [first, first + count) of 128 keys that cover keys [lo, hi].
struct TileRange {
  int first, count;
};
__device__ __forceinline__ TileRange tiles_of(int2 keys) {
  if (keys.y < 0) return {0, 0};
  return {keys.x / kKeys, keys.y / kKeys - keys.x / kKeys + 1};
}

/// One consumer thread's softmax state: rows r0 and r0 + 8 of its warp (g = lane / 4), running
/// maxima m (raw scores) and partial sums l of this thread's columns.
struct RowState {
  float m[2] = {-INFINITY, -INFINITY};
  float l[2] = {0.0f, 0.0f};
};

/// The softmax of one tile: masks S (columns of keys outside a row's [lo, hi] where the tile is not
/// covered), updates the running maxima and sums, turns S into probabilities in place and returns
/// the factors by which O must be rescaled (alpha, per row).
__device__ __forceinline__ float2 softmax_tile(float (&sc)[64], RowState& st, int2 k0, int2 k1,
                                               int tile_start, int t4, float scale_log2) {
  const bool covered = tile_start >= max(k0.x, k1.x) && tile_start + kKeys - 1 <= min(k0.y, k1.y);
  if (!__all_sync(0xffffffffu, covered)) {
#pragma unroll
    for (int jn = 0; jn < 16; ++jn) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = tile_start + jn * 8 + 2 * t4 + e;
        if (key < k0.x || key > k0.y) sc[4 * jn + e] = -INFINITY;
        if (key < k1.x || key > k1.y) sc[4 * jn + 2 + e] = -INFINITY;
      }
    }
  }
  float mx0 = st.m[0], mx1 = st.m[1];
#pragma unroll
  for (int jn = 0; jn < 16; ++jn) {
    mx0 = fmaxf(mx0, fmaxf(sc[4 * jn], sc[4 * jn + 1]));
    mx1 = fmaxf(mx1, fmaxf(sc[4 * jn + 2], sc[4 * jn + 3]));
  }
  mx0 = quad_max(mx0);
  mx1 = quad_max(mx1);
  // p = 2^(s * scale_log2 - base); a row without keys yet keeps base 0 (its p are exp2(-inf) = 0
  // and its O is still 0).
  const float base0 = mx0 == -INFINITY ? 0.0f : mx0 * scale_log2;
  const float base1 = mx1 == -INFINITY ? 0.0f : mx1 * scale_log2;
  const float alpha0 = exp2_ftz(st.m[0] * scale_log2 - base0);
  const float alpha1 = exp2_ftz(st.m[1] * scale_log2 - base1);
  st.m[0] = mx0;
  st.m[1] = mx1;
  float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
  for (int jn = 0; jn < 16; ++jn) {
    sc[4 * jn] = exp2_ftz(fmaf(sc[4 * jn], scale_log2, -base0));
    sc[4 * jn + 1] = exp2_ftz(fmaf(sc[4 * jn + 1], scale_log2, -base0));
    sc[4 * jn + 2] = exp2_ftz(fmaf(sc[4 * jn + 2], scale_log2, -base1));
    sc[4 * jn + 3] = exp2_ftz(fmaf(sc[4 * jn + 3], scale_log2, -base1));
    sum0 += sc[4 * jn] + sc[4 * jn + 1];
    sum1 += sc[4 * jn + 2] + sc[4 * jn + 3];
  }
  st.l[0] = st.l[0] * alpha0 + sum0;
  st.l[1] = st.l[1] * alpha1 + sum1;
  return make_float2(alpha0, alpha1);
}

/// P as wgmma A registers: k-step kk (keys 16 kk .. 16 kk + 15) from S's n-tiles 2 kk and 2 kk + 1.
template <typename T>
__device__ __forceinline__ void pack_p(uint32_t (&pa)[kKeys / 16][4], const float (&sc)[64]) {
#pragma unroll
  for (int kk = 0; kk < kKeys / 16; ++kk) {
    pa[kk][0] = pack2_rn<T>(sc[8 * kk], sc[8 * kk + 1]);
    pa[kk][1] = pack2_rn<T>(sc[8 * kk + 2], sc[8 * kk + 3]);
    pa[kk][2] = pack2_rn<T>(sc[8 * kk + 4], sc[8 * kk + 5]);
    pa[kk][3] = pack2_rn<T>(sc[8 * kk + 6], sc[8 * kk + 7]);
  }
}

template <int N>
__device__ __forceinline__ void scale_rows(float (&o)[N], float2 alpha) {
#pragma unroll
  for (int jn = 0; jn < N / 4; ++jn) {
    o[4 * jn] *= alpha.x;
    o[4 * jn + 1] *= alpha.x;
    o[4 * jn + 2] *= alpha.y;
    o[4 * jn + 3] *= alpha.y;
  }
}

/// The blocks are persistent: block b runs items b, b + gridDim.x, ... (the plan orders them
/// longest first), and the K/V stage ring runs on across items (tile counter `it`), so the
/// producer loads the next item's first tiles while the consumers finish the last one.
template <typename T, int kD>
__global__ void __launch_bounds__(kHopperThreads, 1)
    hopper_prefill_kernel(const KernelArgs args, const __grid_constant__ CUtensorMap q_map,
                          const __grid_constant__ CUtensorMap k_map,
                          const __grid_constant__ CUtensorMap v_map) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Layout<kD>;
  begin_dependent_kernel();
  const PagedAttentionParams& p = args.p;
  const int num_items = args.counts[1];
  const AttentionWorkItem* items = args.items + args.counts[0];

  extern __shared__ unsigned char smem_raw[];
  unsigned char* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~static_cast<uintptr_t>(1023));
  unsigned char* q_s = smem;
  unsigned char* k_s = smem + L::kK;
  unsigned char* v_s = smem + L::kV;
  uint64_t* full_k = reinterpret_cast<uint64_t*>(smem + L::kBars);
  uint64_t* full_v = full_k + kStages;
  uint64_t* empty_k = full_v + kStages;
  uint64_t* empty_v = empty_k + kStages;
  uint64_t* full_q = empty_v + kStages;
  uint64_t* empty_q = full_q + L::kQBuffers;
  ItemInfo* infos = reinterpret_cast<ItemInfo*>(smem + L::kInfo);

  const int tid = threadIdx.x, lane = tid & 31;
  const int group = args.group;
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      mbar_init(full_k + s, 1);
      mbar_init(full_v + s, 1);
      mbar_init(empty_k + s, 8);  // lane 0 of each consumer warp
      mbar_init(empty_v + s, 8);
    }
    for (int b = 0; b < L::kQBuffers; ++b) {
      mbar_init(full_q + b, 1);
      mbar_init(empty_q + b, 8);
    }
    mbar_fence_init();
  }
  __syncthreads();

  if (tid < 128) {  // ---- producer warpgroup: one warp issues the copies ----
    regs_dec<kProducerRegs>();
    if (tid >= 32) return;
    const int bs = p.layout.block_size;
    if (lane == 0) {
      prefetch_tensor_map(&q_map);
      prefetch_tensor_map(&k_map);
      prefetch_tensor_map(&v_map);
    }
    uint32_t it = 0;  // tiles so far: stage it % kStages, phase (it / kStages) & 1
    uint32_t n = 0;   // items so far: Q buffer n % kQBuffers, phase (n / kQBuffers) & 1
    for (int w = blockIdx.x; w < num_items; w += gridDim.x, ++n) {
      const AttentionWorkItem item = items[w];
      const int2 keys = item_keys(p, item, lane);
      const TileRange tiles = tiles_of(keys);
      // The item's info and Q into buffer b. Q: one box per 64-column half, (128 / group tokens) x
      // (group heads) rows in the order of the item's rows (t * group + g), swizzled like K; rows
      // past the item read later tokens or zeros (never written out).
      const int b = n % L::kQBuffers;
      if (lane == 0) mbar_wait(empty_q + b, ((n / L::kQBuffers) & 1) ^ 1);
      __syncwarp();
      ItemInfo& info = infos[b];
      const int num_rows = (item.token_end - item.token_begin) * group;
      for (int r = lane; r < kRows; r += 32) {
        const int2 k = row_keys(p, item, r, group, num_rows);
        info.row_lo[r] = k.x;
        info.row_hi[r] = k.y;
      }
      if (lane == 0) {
        info.item = item;
        info.key_lo = keys.x;
        info.key_hi = keys.y;
      }
      __syncwarp();  // the lanes' writes before lane 0's arrival (release) on full Q
      if (lane == 0) {
        mbar_arrive_expect_tx(full_q + b, (kRows / group) * group * kD * 2);
#pragma unroll
        for (int h = 0; h < L::kHalves; ++h)
          tma_load_3d(q_s + b * L::kQBytes + h * kHalfBytes, &q_map, h * 64, item.kv_head * group,
                      item.token_begin, full_q + b);
      }
      const int32_t* table = p.block_tables + static_cast<int64_t>(item.seq) * p.max_blocks_per_seq;
      // Per tile: K, then V, each into its stage once the consumers have freed it. The page ids of
      // tile j + 1 are loaded while tile j's copies wait for their stages, so the block-table load
      // is off the path from "stage free" to "copy issued". (Measured and not kept, see
      // docs/benchmarks.md: V one tile behind K, 3% slower at 32k keys; the pages gathered by the
      // four producer warps' cp.async instead of one TMA copy per (page, 64 columns), 2.2x slower.)
      // Lane i < 128 / bs: page i of a tile, loaded if it holds a key some row may see.
      auto tile_page = [&](int j, bool& load) {
        const int pos = (tiles.first + j) * kKeys + lane * bs;
        load = lane * bs < kKeys && pos <= keys.y;
        return load ? table[pos / bs] : 0;
      };
      // Copies a tile's pages (the ids `page` of the lanes that `load`) of K or V into `stage`,
      // once the stage's `empty` barrier says it is free.
      auto copy_tile = [&](const CUtensorMap* map, unsigned char* stage, uint64_t* full,
                           uint64_t* empty, uint32_t phase, int page, bool load) {
        const uint32_t bytes = __popc(__ballot_sync(0xffffffffu, load)) * bs * kD * 2;
        // Row of (page, kv head, offset 0) in the 2-D view [num_blocks * kv_heads * bs, kD].
        const int row = (page * p.layout.num_kv_heads + item.kv_head) * bs;
        if (lane == 0) {
          mbar_wait(empty, phase ^ 1);
          mbar_arrive_expect_tx(full, bytes);
        }
        __syncwarp();
        if (load) {
#pragma unroll
          for (int h = 0; h < L::kHalves; ++h)
            tma_load_2d(stage + h * kHalfBytes + lane * bs * kRowBytes, map, h * 64, row, full);
        }
      };
      bool load_next = false;
      int page_next = tiles.count > 0 ? tile_page(0, load_next) : 0;
      for (int j = 0; j < tiles.count; ++j, ++it) {
        const int page = page_next;
        const bool load = load_next;
        if (j + 1 < tiles.count) page_next = tile_page(j + 1, load_next);
        const int s = it % kStages;
        const uint32_t phase = (it / kStages) & 1;
        copy_tile(&k_map, k_s + s * L::kTileBytes, full_k + s, empty_k + s, phase, page, load);
        copy_tile(&v_map, v_s + s * L::kTileBytes, full_v + s, empty_v + s, phase, page, load);
      }
    }
    return;
  }

  // ---- consumer warpgroups: rows [64 wg, 64 wg + 64) of each item ----
  regs_inc<kConsumerRegs>();
  const int wg = tid / 128 - 1;
  const int wt = tid % 128;
  const int g = lane >> 2, t4 = lane & 3;
  const int r0 = wg * 64 + (wt >> 5) * 16 + g, r1 = r0 + 8;
  const float scale_log2 = p.scale * 1.4426950408889634f;
  T* out = static_cast<T*>(p.out);
  // Ping-pong (kPingPong): the two consumers take turns to issue their matrix products (named
  // barriers 3 and 4, 256 threads: one side waits, the other arrives), so that one's softmax runs
  // while the other's products use the tensor cores. Both issue the same sequence of products
  // (the same tiles), so the turns alternate to the end; consumer 0 goes first.
  auto my_turn = [&] {
    if constexpr (kPingPong) named_barrier(3 + wg, 256);
  };
  auto other_turn = [&] {
    if constexpr (kPingPong) named_barrier_arrive(4 - wg, 256);
  };
  if (kPingPong && wg == 1) named_barrier_arrive(3, 256);
  uint32_t it = 0, n = 0;
  for (int w = blockIdx.x; w < num_items; w += gridDim.x, ++n) {
    const int qb = n % L::kQBuffers;
    const unsigned char* q_rows = q_s + qb * L::kQBytes + wg * 64 * kRowBytes;
    mbar_wait(full_q + qb, (n / L::kQBuffers) & 1);
    const ItemInfo& info = infos[qb];
    const AttentionWorkItem item = info.item;
    const int num_rows = (item.token_end - item.token_begin) * group;
    const int2 keys = make_int2(info.key_lo, info.key_hi);
    const TileRange tiles = tiles_of(keys);
    const int2 k0 = make_int2(info.row_lo[r0], info.row_hi[r0]);
    const int2 k1 = make_int2(info.row_lo[r1], info.row_hi[r1]);

    float o[kD / 2];
#pragma unroll
    for (int i = 0; i < kD / 2; ++i) o[i] = 0.0f;
    RowState st;
    float sc[64];
    uint32_t pa[kKeys / 16][4];
    // Software pipeline (FlashAttention-3's intra-warpgroup overlap): per tile j, S = Q K_j^T and
    // then O += P_(j-1) V_(j-1) are issued; the softmax of S_j runs while the second product is on
    // the tensor cores, and O is rescaled (by the new maxima) once it has landed. (Measured against
    // FlashAttention-3's order, which rescales O and packs P at the top of the next iteration so
    // that nothing after the softmax waits for P V: 8-12% slower here, docs/benchmarks.md.)
    if (tiles.count > 0) {
      const int s = it % kStages;
      mbar_wait(full_k + s, (it / kStages) & 1);
      my_turn();
      qk<T, kD>(sc, q_rows, k_s + s * L::kTileBytes);
      other_turn();
      wgmma_wait<0>();
      pin(sc);
      if (lane == 0) mbar_arrive(empty_k + s);
      softmax_tile(sc, st, k0, k1, tiles.first * kKeys, t4, scale_log2);
      pack_p<T>(pa, sc);
    }
    for (int j = 1; j < tiles.count; ++j) {
      const uint32_t cur = it + j, prev = cur - 1;
      const int s = cur % kStages, sp = prev % kStages;
      mbar_wait(full_k + s, (cur / kStages) & 1);
      mbar_wait(full_v + sp, (prev / kStages) & 1);
      my_turn();
      qk<T, kD>(sc, q_rows, k_s + s * L::kTileBytes);
      pv<T, kD>(o, pa, v_s + sp * L::kTileBytes);
      other_turn();
      wgmma_wait<1>();  // S of tile j (P V of tile j - 1 may still run)
      pin(sc);
      if (lane == 0) mbar_arrive(empty_k + s);
      float2 alpha = softmax_tile(sc, st, k0, k1, (tiles.first + j) * kKeys, t4, scale_log2);
      pin(sc);
      asm volatile("" : "+f"(alpha.x), "+f"(alpha.y));
      wgmma_wait<0>();
      pin(o);
      pin(pa);
      if (lane == 0) mbar_arrive(empty_v + sp);
      scale_rows(o, alpha);
      pack_p<T>(pa, sc);
    }
    if (tiles.count > 0) {  // P V of the last tile, its V rows past the item's keys zeroed first
      const uint32_t last = it + tiles.count - 1;
      const int s = last % kStages;
      mbar_wait(full_v + s, (last / kStages) & 1);
      unsigned char* v_tile = v_s + s * L::kTileBytes;
      const int first = keys.y + 1 - (tiles.first + tiles.count - 1) * kKeys;
      if (first < kKeys) {
        // Every chunk of rows [first, 128) (so the swizzle does not matter).
        for (int i = wt; i < (kKeys - first) * (kD / 8); i += 128) {
          const int r = first + i / (kD / 8), c = i % (kD / 8);
          *reinterpret_cast<uint4*>(v_tile + (c / 8) * kHalfBytes + r * kRowBytes + c % 8 * 16) =
              make_uint4(0, 0, 0, 0);
        }
        fence_proxy_async();
        named_barrier(1 + wg, 128);
      }
      my_turn();
      pv<T, kD>(o, pa, v_tile);
      other_turn();
      wgmma_wait<0>();
      pin(o);
      pin(pa);
      if (lane == 0) mbar_arrive(empty_v + s);
      it += tiles.count;
    }
    if (lane == 0) mbar_arrive(empty_q + qb);  // every product of the item has completed

    // O / l, written as T; rows past the item's are padding.
    const float l0 = quad_sum(st.l[0]), l1 = quad_sum(st.l[1]);
    const float inv[2] = {l0 > 0.0f ? 1.0f / l0 : 0.0f, l1 > 0.0f ? 1.0f / l1 : 0.0f};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = h == 0 ? r0 : r1;
      if (r >= num_rows) continue;
      const int64_t t = item.token_begin + r / group;
      const int head = item.kv_head * group + r % group;
      T* dst = out + (t * p.num_heads + head) * kD + 2 * t4;
#pragma unroll
      for (int jn = 0; jn < kD / 8; ++jn)
        *reinterpret_cast<uint32_t*>(dst + jn * 8) =
            pack2<T>(o[4 * jn + 2 * h] * inv[h], o[4 * jn + 2 * h + 1] * inv[h]);
    }
  }
#endif
}

/// The driver's tensor-map encoder, found once through the runtime (no link to libcuda).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess)
      f = nullptr;
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

/// The 2-D view [num_blocks * kv_heads * block_size rows, head_dim] of one cache, in boxes of
/// (block_size rows, 64 columns) with the 128-byte swizzle: one box is one page's half-rows.
bool make_cache_map(CUtensorMap* map, const void* cache, const PagedAttentionParams& p) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const KVCacheLayout& l = p.layout;
  const cuuint64_t dims[2] = {
      static_cast<cuuint64_t>(l.head_dim),
      static_cast<cuuint64_t>(l.num_blocks) * l.num_kv_heads * l.block_size};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(l.head_dim) * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(l.block_size)};
  const cuuint32_t elem_strides[2] = {1, 1};
  return encode(map,
                p.dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                        : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                2, const_cast<void*>(cache), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

/// Q as the 3-D tensor [num_tokens (stride q_stride), num_heads, head_dim] in boxes of
/// (128 / group tokens, group heads, 64 columns): one box is the 64-column half of an item's rows.
bool make_q_map(CUtensorMap* map, int group, const PagedAttentionParams& p) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const int d = p.layout.head_dim;
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(d), static_cast<cuuint64_t>(p.num_heads),
                              static_cast<cuuint64_t>(p.num_tokens)};
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(d) * 2,
                                 static_cast<cuuint64_t>(p.q_stride) * 2};
  const cuuint32_t box[3] = {64, static_cast<cuuint32_t>(group),
                             static_cast<cuuint32_t>(kRows / group)};
  const cuuint32_t elem_strides[3] = {1, 1, 1};
  return encode(map,
                p.dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                        : CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
                3, const_cast<void*>(p.q), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

template <typename T, int kD>
cudaError_t launch_hopper(const KernelArgs& args, int grid, cudaStream_t stream) {
  CUtensorMap q_map, k_map, v_map;
  if (!make_q_map(&q_map, args.group, args.p) ||
      !make_cache_map(&k_map, args.p.key_cache, args.p) ||
      !make_cache_map(&v_map, args.p.value_cache, args.p))
    return cudaErrorNotSupported;
  constexpr size_t smem = Layout<kD>::kAlloc;
  auto* kernel = hopper_prefill_kernel<T, kD>;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem));
      e != cudaSuccess)
    return e;
  // Persistent blocks: one per SM at most (the items are read from the workspace).
  int device = 0, sms = 132;
  if (cudaGetDevice(&device) == cudaSuccess)
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  grid = std::min(grid, sms);
  if (cudaError_t e =
          launch_kernel(kernel, grid, kHopperThreads, smem, stream, args, q_map, k_map, v_map);
      e != cudaSuccess)
    return e;
  return cudaGetLastError();
}

}  // namespace

bool hopper_prefill_supports(const PagedAttentionParams& p) {
  const KVCacheLayout& l = p.layout;
  if ((l.head_dim != 64 && l.head_dim != 128) || l.block_size <= 0 || l.block_size > kKeys ||
      kKeys % l.block_size != 0 || p.softcap > 0 || p.kv_dtype != p.dtype ||
      (p.dtype != DType::kBF16 && p.dtype != DType::kF16) || !aligned16(p.key_cache) ||
      !aligned16(p.value_cache) || tensor_map_encoder() == nullptr)
    return false;
  int device = 0, major = 0, minor = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess)
    return false;
  return major == 9 && minor == 0;  // sm_90a machine code runs on compute capability 9.0 only
}

cudaError_t launch_prefill_hopper(const KernelArgs& args, int grid, cudaStream_t stream) {
  if (grid <= 0) return cudaSuccess;
  const bool bf16 = args.p.dtype == DType::kBF16;
  switch (args.p.layout.head_dim) {
    case 64:
      return bf16 ? launch_hopper<__nv_bfloat16, 64>(args, grid, stream)
                  : launch_hopper<__half, 64>(args, grid, stream);
    case 128:
      return bf16 ? launch_hopper<__nv_bfloat16, 128>(args, grid, stream)
                  : launch_hopper<__half, 128>(args, grid, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace pagoda::cuda::attention
