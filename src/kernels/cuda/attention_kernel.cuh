#pragma once
// The paged attention kernel, FlashAttention-2 style on mma.sync (m16n8k16, fp32 accumulate).
//
// One block (4 warps) runs one AttentionWorkItem: up to kRows query rows, each row one (token,
// query head) pair of the item's kv head, so a key/value tile is loaded once for the whole GQA
// group. Keys are walked in tiles of 64 positions through the block table, double-buffered with
// cp.async (zero-filled past the range, so garbage never meets a zero probability); per tile:
// S = Q K^T (ldmatrix + mma), causal/window mask per row, online softmax in fp32 registers
// (exp2 with the scale folded in), O += P V (P re-packed from the S accumulators, V through
// ldmatrix.trans).
//   prefill, 128 rows: warp w owns rows [32w, 32w + 32) (two m-tiles, Q read from shared memory
//   per tile) and all 64 keys of a tile, in two steps of 32.
//   prefill, 64 rows (batches that 128-row items would not spread over every SM): warp w owns rows
//   [16w, 16w + 16) (Q in registers) and all 64 keys of a tile in one step.
//   decode (kRows = 16): 16 rows, warp w owns keys [16w, 16w + 16) of every tile, and the four
//   partial softmaxes are merged through shared memory at the end (flash-decoding inside a block).
// Only a tile that some row's key range does not cover is masked (the diagonal, window and split
// edges, the end of the keys).
// A split item (partial_slot >= 0) writes fp32 O / l and lse = m + log2(l) into its slots; the last
// of the item's splits to finish merges them (finish_split), so no second kernel is launched.
// A quantized cache (kQuant: one-byte codes, kv_quant.cuh) is copied by cp.async into a double-
// buffered staging tile of codes, and each tile is converted (exactly) into one T tile before its
// mmas; the key scale joins the softmax scale and the value scale the output's 1 / l.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/fast_divmod.h"
#include "kernels/cuda/kv_quant.cuh"
#include "kernels/cuda/mma.cuh"
#include "kernels/cuda/paged_attention.h"

namespace pagoda::cuda::attention {

constexpr int kThreads = 128;
constexpr int kKeyTile = 64;

/// Everything a block needs, by value.
struct KernelArgs {
  PagedAttentionParams p;
  const int32_t* counts;  // [num_decode_items, num_prefill_items, ...]
  const AttentionWorkItem* items;
  const AttentionTokenInfo* token_info;  // [num_tokens]
  int32_t* split_counters;               // [slots], zero between launches
  float* partial_lse;                    // [slots, 64]
  float* partial_out;                    // [slots, 64, head_dim]
  int group;
  FastDivmod block_size_div;  // by p.layout.block_size
  KVCode kv_code;             // of p.kv_dtype: kNone when the cache holds T
};

template <int kD, int kRows_, bool kQuant_ = false>
struct Shape {
  static constexpr bool kQuant = kQuant_;
  static constexpr int kRows = kRows_;
  static constexpr bool kDecode = kRows == 16;
  // Prefill: each warp owns kRows / 4 rows. With 32 (two 16-row mma tiles) every K and V fragment
  // read from shared memory feeds two mmas; with 16 rows the kernel reads twice the bytes per flop,
  // but a batch makes twice the blocks.
  static constexpr int kWarpRowTiles = kDecode ? 1 : kRows / 16 / (kThreads / 32);
  static constexpr int kStride = kD + 8;  // padded smem row (16 bytes): conflict-free ldmatrix
  // Keys of a tile one warp takes per step: decode splits the 64 over its 4 warps; prefill with two
  // m-tiles walks them in two steps of 32, so that S of both (32 registers) fits beside O (128).
  static constexpr int kWarpKeys = kDecode ? 16 : kWarpRowTiles == 1 ? kKeyTile : 32;
  static constexpr int kWarpSteps = kDecode ? 1 : kKeyTile / kWarpKeys;
  static constexpr size_t kQElems = static_cast<size_t>(kRows) * kStride;
  static constexpr size_t kKVElems = static_cast<size_t>(kKeyTile) * kStride;  // one buffer
  // T tiles of K and V: double-buffered cp.async targets, or with kQuant one converted tile each
  // (the codes' staging [2 buffers][K, V][64 keys][kD bytes] is double-buffered instead).
  static constexpr int kTileBuffers = kQuant ? 1 : 2;
  static constexpr size_t kStagingBytes = kQuant ? 2 * 2 * kKeyTile * kD : 0;
  template <typename T>
  static constexpr size_t smem_bytes() {
    return (kQElems + 2 * kTileBuffers * kKVElems) * sizeof(T) + kStagingBytes +
           2 * kRows * sizeof(int);
  }
  static_assert(kRows % kAttentionSlotRows == 0);  // a split's partials fill whole slots
  static_assert(kDecode || kRows == kAttentionTileRows || kRows == kAttentionSmallTileRows);
};

// Flash-decoding's reduction without a second launch: every block of a split (tile, kv head)
// counts its arrival on the counter of the group's first slot once its partial writes are visible
// device-wide; the last to arrive merges the n partials of the item's rows, out = sum_s
// 2^(lse_s - max) O_s / sum_s 2^(lse_s - max), and resets the counter for the next launch.
// A split of an item of kRows rows holds kRows / kAttentionSlotRows consecutive slots.
// The partials come from other SMs, so they are read through L2 (ld.cg), all at once: the n
// log-sum-exps into `weights` ([n][num_rows] in the free shared memory), turned into normalised
// weights by a warp per row, then each thread's output chunk sums its n partials with the loads
// unrolled, so that the merge costs a few L2 round trips, not one per split. Block-uniform: every
// thread calls it.
template <typename T, int kD, int kRows>
__device__ void finish_split(const KernelArgs& args, const AttentionWorkItem& item, int num_rows,
                             float* weights /* [kAttentionMaxSplits][kRows] */) {
  constexpr int kSlotRows = kRows;  // rows between two splits' partials
  __shared__ int is_last;
  const AttentionTokenInfo info = args.token_info[item.token_begin];
  const int n = info.num_splits;
  const int64_t slot0 =
      info.first_slot + static_cast<int64_t>(item.kv_head) * n * (kRows / kAttentionSlotRows);
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    is_last = atomicAdd(args.split_counters + slot0, 1) == n - 1;
    if (is_last) args.split_counters[slot0] = 0;  // every split has arrived: none will touch it
    __threadfence();
  }
  __syncthreads();
  if (!is_last) return;

  const float* lse = args.partial_lse + slot0 * kAttentionSlotRows;
  const float* part = args.partial_out + slot0 * kAttentionSlotRows * kD;
  for (int i = threadIdx.x; i < n * num_rows; i += kThreads) {  // the item's rows only
    weights[i] = __ldcg(lse + (i / num_rows) * kSlotRows + i % num_rows);
  }
  __syncthreads();
  const int lane = threadIdx.x & 31;
  for (int r = threadIdx.x >> 5; r < num_rows; r += kThreads / 32) {
    float big = -INFINITY;
    for (int s = lane; s < n; s += 32) big = fmaxf(big, weights[s * num_rows + r]);
    for (int o = 16; o > 0; o >>= 1) big = fmaxf(big, __shfl_xor_sync(0xffffffffu, big, o));
    float sum = 0.0f;
    for (int s = lane; s < n; s += 32) {
      const float w = big == -INFINITY ? 0.0f : exp2f(weights[s * num_rows + r] - big);
      weights[s * num_rows + r] = w;
      sum += w;
    }
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int s = lane; s < n; s += 32) weights[s * num_rows + r] *= inv;
  }
  __syncthreads();
  T* out = static_cast<T*>(args.p.out);
  for (int i = threadIdx.x; i < num_rows * (kD / 4); i += kThreads) {
    const int r = i / (kD / 4), d = (i % (kD / 4)) * 4;
    // The partials in batches of kBatch loads in flight (a batch past n loads nothing and adds
    // zeros), summed in split order.
    constexpr int kBatch = 16;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int s0 = 0; s0 < n; s0 += kBatch) {
      float4 v[kBatch];
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        v[j] = s0 + j < n ? __ldcg(reinterpret_cast<const float4*>(
                                part + ((s0 + j) * kSlotRows + r) * kD + d))
                          : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {  // a split without keys for the row: weight 0, values 0
        const float w = s0 + j < n ? weights[(s0 + j) * num_rows + r] : 0.0f;
        acc[0] += w * v[j].x;
        acc[1] += w * v[j].y;
        acc[2] += w * v[j].z;
        acc[3] += w * v[j].w;
      }
    }
    const int64_t t = item.token_begin + r / args.group;
    const int h = item.kv_head * args.group + r % args.group;
    *reinterpret_cast<uint2*>(out + (t * args.p.num_heads + h) * kD + d) =
        make_uint2(pack2<T>(acc[0], acc[1]), pack2<T>(acc[2], acc[3]));
  }
}

template <typename T, int kD, int kRows, bool kQuant>
__global__ void __launch_bounds__(kThreads) attention_kernel(KernelArgs args) {
  begin_dependent_kernel();
  using S = Shape<kD, kRows, kQuant>;
  constexpr bool kDecode = S::kDecode;
  constexpr int kStride = S::kStride, kWarpKeys = S::kWarpKeys;
  constexpr int kMT = S::kWarpRowTiles;  // 16-row mma tiles per warp
  constexpr int kNT = kWarpKeys / 8;     // n-tiles of 8 keys per warp and step
  constexpr int kDT = kD / 8;            // n-tiles of 8 output dims
  constexpr int kChunks = kD / 8;        // 16-byte chunks per row

  const PagedAttentionParams& p = args.p;
  const int item_index = kDecode ? blockIdx.x : args.counts[0] + blockIdx.x;
  if (blockIdx.x >= args.counts[kDecode ? 0 : 1]) return;
  const AttentionWorkItem item = args.items[item_index];

  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* q_s = reinterpret_cast<T*>(smem_raw);
  T* k_s = q_s + S::kQElems;                     // [kTileBuffers][64][kStride]
  T* v_s = k_s + S::kTileBuffers * S::kKVElems;  // [kTileBuffers][64][kStride]
  uint8_t* codes_s = reinterpret_cast<uint8_t*>(v_s + S::kTileBuffers * S::kKVElems);
  // kQuant: staging buffer b's keys at codes_s + b * 2 * 64 * kD, its values 64 * kD after.
  int* row_lo = reinterpret_cast<int*>(codes_s + S::kStagingBytes);
  int* row_hi = row_lo + kRows;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int group = args.group;
  const int num_rows = (item.token_end - item.token_begin) * group;
  const int32_t seq_len = p.seq_lens[item.seq];
  const T* q_base = static_cast<const T*>(p.q);

  // Rows: key range per row (empty for padding rows), and the Q tile.
  for (int r = tid; r < kRows; r += kThreads) {
    int lo = 0, hi = -1;
    if (r < num_rows) {
      const int32_t pos = p.positions[item.token_begin + r / group];
      hi = min(min(pos, seq_len - 1), item.kv_end - 1);
      lo = p.sliding_window > 0 ? max(0, pos - p.sliding_window + 1) : 0;
      lo = max(lo, item.kv_begin);
    }
    row_lo[r] = lo;
    row_hi[r] = hi;
  }
  for (int i = tid; i < kRows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    const bool valid = r < num_rows;
    const T* src = q_base;
    if (valid) {
      const int64_t t = item.token_begin + r / group;
      const int h = item.kv_head * group + r % group;
      src = q_base + t * p.q_stride + static_cast<int64_t>(h) * kD + c * 8;
    }
    cp_async16(q_s + r * kStride + c * 8, src, valid);
  }
  __syncthreads();

  // The block's key range; this warp's rows' union of ranges (for skipping tiles it does not see)
  // and intersection (a tile inside it needs no mask). Padding rows (r >= num_rows) are left out
  // of both: their results are never written, so unmasked garbage there is harmless.
  int key_lo = 0x7fffffff, key_hi = -1;
  for (int r = 0; r < kRows; ++r) {
    if (row_lo[r] <= row_hi[r]) {
      key_lo = min(key_lo, row_lo[r]);
      key_hi = max(key_hi, row_hi[r]);
    }
  }
  const int g = lane >> 2, tig = lane & 3;
  const int warp_row0 = kDecode ? 0 : warp * 16 * kMT;  // the warp's first row
  // Row of (m-tile mt, half h) of this thread: warp_row0 + mt * 16 + g + 8 h.
  int lo[kMT][2], hi[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      lo[mt][h] = row_lo[warp_row0 + mt * 16 + g + 8 * h];
      hi[mt][h] = row_hi[warp_row0 + mt * 16 + g + 8 * h];
    }
  }
  int warp_lo = 0x7fffffff, warp_hi = -1, inner_lo = -1, inner_hi = 0x7fffffff;
  for (int r = warp_row0; r < warp_row0 + 16 * kMT; ++r) {
    if (row_lo[r] <= row_hi[r]) {
      warp_lo = min(warp_lo, row_lo[r]);
      warp_hi = max(warp_hi, row_hi[r]);
    }
    if (r < num_rows) {
      inner_lo = max(inner_lo, row_lo[r]);
      inner_hi = min(inner_hi, row_hi[r]);
    }
  }

  const int32_t* table = p.block_tables + static_cast<int64_t>(item.seq) * p.max_blocks_per_seq;
  // Elements of T, or one-byte codes (kQuant).
  using C = std::conditional_t<kQuant, uint8_t, T>;
  const C* k_cache = static_cast<const C*>(p.key_cache);
  const C* v_cache = static_cast<const C*>(p.value_cache);
  const int bs = p.layout.block_size;
  const int num_tiles = key_hi >= key_lo ? (key_hi - key_lo) / kKeyTile + 1 : 0;

  // Thread tid copies 16-byte chunk `chunk` of key rows first_row + i * kRowsPerPass of a tile
  // (a chunk: 8 elements of T, or 16 codes). The rows' cache addresses are all computed (block-
  // size division by multiply-high, table entry) before the copies are issued, so that the table
  // reads overlap rather than chain. Example (kQuant, kD 128): 8 chunks per row, 16 rows per pass,
  // 4 passes; thread 37 copies bytes [80, 96) of rows 4, 20, 36 and 52.
  constexpr int kCopyChunks = kQuant ? kD / 16 : kChunks;  // 16-byte chunks per cached row
  constexpr int kElemsPerChunk = kQuant ? 16 : 8;
  constexpr int kRowsPerPass = kThreads / kCopyChunks;
  constexpr int kPasses = kKeyTile / kRowsPerPass;
  static_assert(kThreads % kCopyChunks == 0 && kKeyTile % kRowsPerPass == 0);
  const int chunk = tid % kCopyChunks, first_row = tid / kCopyChunks;
  // Cache layout [num_blocks, num_kv_heads, block_size, head_dim]: elements per physical block,
  // and this item's head and chunk within one.
  const int64_t block_elems = static_cast<int64_t>(p.layout.num_kv_heads) * bs * kD;
  const int head_elems = item.kv_head * bs * kD + chunk * kElemsPerChunk;
  auto load_tile = [&](int tile, int buf) {
    const int first_pos = key_lo + tile * kKeyTile + first_row;
    int64_t off[kPasses];
#pragma unroll
    for (int i = 0; i < kPasses; ++i) {
      const int pos = first_pos + i * kRowsPerPass;
      uint32_t block_index = 0, in_block = 0;
      args.block_size_div.divmod(static_cast<uint32_t>(min(pos, key_hi)), &block_index, &in_block);
      off[i] = static_cast<int64_t>(table[block_index]) * block_elems + head_elems +
               static_cast<int>(in_block) * kD;
    }
    if constexpr (kQuant) {
      uint8_t* kd = codes_s + buf * 2 * kKeyTile * kD + first_row * kD + chunk * 16;
      uint8_t* vd = kd + kKeyTile * kD;
#pragma unroll
      for (int i = 0; i < kPasses; ++i) {
        const bool valid = first_pos + i * kRowsPerPass <= key_hi;  // else zero codes: value 0
        cp_async16(kd + i * kRowsPerPass * kD, k_cache + off[i], valid);
        cp_async16(vd + i * kRowsPerPass * kD, v_cache + off[i], valid);
      }
    } else {
      T* kd = k_s + buf * S::kKVElems + first_row * kStride + chunk * 8;
      T* vd = v_s + buf * S::kKVElems + first_row * kStride + chunk * 8;
#pragma unroll
      for (int i = 0; i < kPasses; ++i) {
        const bool valid = first_pos + i * kRowsPerPass <= key_hi;  // else zero-filled
        cp_async16(kd + i * kRowsPerPass * kStride, k_cache + off[i], valid);
        cp_async16(vd + i * kRowsPerPass * kStride, v_cache + off[i], valid);
      }
    }
  };
  // kQuant: staging buffer `buf` -> the T tiles. Each thread converts kPer 16-code chunks of the
  // keys, then of the values; all of a half's shared loads are issued before its first store (the
  // compiler may not move a load above a store that could alias it), and the code is a template
  // argument, so each conversion is a straight run of independent instructions: this loop is
  // latency-bound at three warps per scheduler. Example (kD 128): chunk i = tid + 128 j is row
  // i / 8, codes [16 (i % 8), + 16).
  auto convert_half = [&](const uint8_t* src, T* dst, auto code) {
    constexpr int kPer = kKeyTile * (kD / 16) / kThreads;
    static_assert(kPer * kThreads == kKeyTile * (kD / 16));
    uint4 c[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = tid + j * kThreads;
      c[j] = *reinterpret_cast<const uint4*>(src + (i / (kD / 16)) * kD + (i % (kD / 16)) * 16);
    }
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
      const int i = tid + j * kThreads;
      kv_codes_to_row16<T>(c[j], decltype(code)::value,
                           dst + (i / (kD / 16)) * kStride + (i % (kD / 16)) * 16);
    }
  };
  auto convert_tile = [&](int buf) {
    const uint8_t* kc = codes_s + buf * 2 * kKeyTile * kD;
    auto both = [&](auto code) {
      convert_half(kc, k_s, code);
      convert_half(kc + kKeyTile * kD, v_s, code);
    };
    switch (args.kv_code) {
      case KVCode::kE4M3:
        both(std::integral_constant<KVCode, KVCode::kE4M3>{});
        break;
      case KVCode::kE5M2:
        both(std::integral_constant<KVCode, KVCode::kE5M2>{});
        break;
      default:
        both(std::integral_constant<KVCode, KVCode::kI8>{});
        break;
    }
  };

  if (num_tiles > 0) load_tile(0, 0);
  cp_async_commit();  // group 0: Q and tile 0

  // A quantized cache's key scale joins the softmax scale; its value scale multiplies 1 / l.
  const float scale_log2 =
      p.scale * 1.4426950408889634f * (kQuant ? kv_scale_or_one(p.k_scale) : 1.0f);
  const float v_scale = kQuant ? kv_scale_or_one(p.v_scale) : 1.0f;
  float o[kMT][kDT][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int i = 0; i < kDT; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
  }
  float m[kMT][2], l[kMT][2];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
  }
  // Decode keeps its single m-tile of Q in registers; prefill's two would not fit beside the
  // accumulators, so they are read from shared memory per tile (FlashAttention-2 does the same).
  constexpr bool kQInRegisters = kMT == 1;
  uint32_t qf[kQInRegisters ? kD / 16 : 1][4];
  // ldmatrix address of this lane within a 16 x 16 A fragment at (row, col) of the Q tile.
  auto q_frag = [&](int row, int col) {
    return q_s + (row + ((lane >> 3) & 1) * 8 + (lane & 7)) * kStride + col + (lane >> 4) * 8;
  };
  const int key_off = kDecode ? warp * 16 : 0;

  for (int tile = 0; tile < max(num_tiles, 1); ++tile) {
    if (tile + 1 < num_tiles) load_tile(tile + 1, (tile + 1) & 1);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();
    if constexpr (kQuant) {  // the previous tile's mmas are done (the loop's last barrier)
      if (tile < num_tiles) convert_tile(tile & 1);
      __syncthreads();
    }
    const int cbuf = kQuant ? 0 : (tile & 1);  // the T tile of this iteration
    if constexpr (kQInRegisters) {
      if (tile == 0) {
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk) ldmatrix_x4(qf[kk], q_frag(warp_row0, kk * 16));
      }
    }
    const int tile_base = key_lo + tile * kKeyTile;
#pragma unroll 1
    for (int step = 0; step < S::kWarpSteps; ++step) {
      const int step_off = key_off + step * kWarpKeys;
      const int first_key = tile_base + step_off, last_key = first_key + kWarpKeys - 1;
      if (tile >= num_tiles || first_key > warp_hi || last_key < warp_lo) continue;
      const T* kt = k_s + cbuf * S::kKVElems + step_off * kStride;
      const T* vt = v_s + cbuf * S::kKVElems + step_off * kStride;
      float s[kMT][kNT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
          s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
      }
      // S = Q K^T, 32 head dims per step: each K fragment serves every m-tile of the warp.
#pragma unroll
      for (int kk = 0; kk < kD / 32; ++kk) {
        uint32_t qa[kMT][2][4];
        if constexpr (!kQInRegisters) {
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            ldmatrix_x4(qa[mt][0], q_frag(warp_row0 + mt * 16, kk * 32));
            ldmatrix_x4(qa[mt][1], q_frag(warp_row0 + mt * 16, kk * 32 + 16));
          }
        }
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          uint32_t b[4];
          ldmatrix_x4(b, kt + (nt * 8 + (lane & 7)) * kStride + kk * 32 + (lane >> 3) * 8);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            if constexpr (kQInRegisters) {
              mma<T>(s[mt][nt], qf[2 * kk], b[0], b[1]);
              mma<T>(s[mt][nt], qf[2 * kk + 1], b[2], b[3]);
            } else {
              mma<T>(s[mt][nt], qa[mt][0], b[0], b[1]);
              mma<T>(s[mt][nt], qa[mt][1], b[2], b[3]);
            }
          }
        }
      }
      // Scale; mask only a tile that is not inside every row's range (the diagonal, a sliding
      // window's edge, the end of the keys, the split's edges).
      const bool needs_mask = first_key < inner_lo || last_key > inner_hi;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = first_key + nt * 8 + tig * 2 + (e & 1);
            const int h = e >> 1;
            const bool ok = !needs_mask || (key >= lo[mt][h] && key <= hi[mt][h]);
            s[mt][nt][e] = ok ? s[mt][nt][e] * scale_log2 : -INFINITY;
          }
        }
      }
      // Online softmax per row: new maximum, rescale of the running sum and output.
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          mx[0] = fmaxf(mx[0], fmaxf(s[mt][nt][0], s[mt][nt][1]));
          mx[1] = fmaxf(mx[1], fmaxf(s[mt][nt][2], s[mt][nt][3]));
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
          mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        }
        float use[2], corr[2], sum[2] = {0.0f, 0.0f};
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const float next = fmaxf(m[mt][h], mx[h]);
          use[h] = next == -INFINITY ? 0.0f : next;
          corr[h] = exp2f(m[mt][h] - use[h]);
          m[mt][h] = next;
#pragma unroll
          for (int i = 0; i < kDT; ++i) {
            o[mt][i][2 * h] *= corr[h];
            o[mt][i][2 * h + 1] *= corr[h];
          }
        }
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt) {
          s[mt][nt][0] = exp2f(s[mt][nt][0] - use[0]);
          s[mt][nt][1] = exp2f(s[mt][nt][1] - use[0]);
          s[mt][nt][2] = exp2f(s[mt][nt][2] - use[1]);
          s[mt][nt][3] = exp2f(s[mt][nt][3] - use[1]);
          sum[0] += s[mt][nt][0] + s[mt][nt][1];
          sum[1] += s[mt][nt][2] + s[mt][nt][3];
        }
        l[mt][0] = l[mt][0] * corr[0] + sum[0];
        l[mt][1] = l[mt][1] * corr[1] + sum[1];
      }
      // O += P V, 16 keys per mma k-step: each V fragment serves every m-tile of the warp.
#pragma unroll
      for (int ks = 0; ks < kWarpKeys / 16; ++ks) {
        uint32_t a[kMT][4];
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          a[mt][0] = pack2<T>(s[mt][2 * ks][0], s[mt][2 * ks][1]);
          a[mt][1] = pack2<T>(s[mt][2 * ks][2], s[mt][2 * ks][3]);
          a[mt][2] = pack2<T>(s[mt][2 * ks + 1][0], s[mt][2 * ks + 1][1]);
          a[mt][3] = pack2<T>(s[mt][2 * ks + 1][2], s[mt][2 * ks + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < kD / 16; ++dp) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, vt + (ks * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * kStride +
                                   dp * 16 + (lane >> 4) * 8);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            mma<T>(o[mt][2 * dp], a[mt], b[0], b[1]);
            mma<T>(o[mt][2 * dp + 1], a[mt], b[2], b[3]);
          }
        }
      }
    }
    __syncthreads();  // the next iteration's load overwrites this buffer
  }
  cp_async_wait<0>();

#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      l[mt][h] += __shfl_xor_sync(0xffffffffu, l[mt][h], 1);
      l[mt][h] += __shfl_xor_sync(0xffffffffu, l[mt][h], 2);
    }
  }

  T* out = static_cast<T*>(p.out);
  const bool split = item.partial_slot >= 0;
  float* part_out =
      split ? args.partial_out + static_cast<int64_t>(item.partial_slot) * kAttentionSlotRows * kD
            : nullptr;
  float* part_lse =
      split ? args.partial_lse + static_cast<int64_t>(item.partial_slot) * kAttentionSlotRows
            : nullptr;

  if constexpr (!kDecode) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int r = warp_row0 + mt * 16 + g + 8 * h;
        if (r >= num_rows) continue;
        const float inv = l[mt][h] > 0.0f ? v_scale / l[mt][h] : 0.0f;
        const int64_t t = item.token_begin + r / group;
        const int head = item.kv_head * group + r % group;
#pragma unroll
        for (int i = 0; i < kDT; ++i) {
          const int d = i * 8 + tig * 2;
          const float x0 = o[mt][i][2 * h] * inv, x1 = o[mt][i][2 * h + 1] * inv;
          if (split) {
            *reinterpret_cast<float2*>(part_out + r * kD + d) = make_float2(x0, x1);
          } else {
            *reinterpret_cast<uint32_t*>(out + (t * p.num_heads + head) * kD + d) =
                pack2<T>(x0, x1);
          }
        }
        if (split && tig == 0)
          part_lse[r] = l[mt][h] > 0.0f ? m[mt][h] + log2f(l[mt][h]) : -INFINITY;
      }
    }
  } else {
    // Merge the four warps' partial softmaxes over the item's rows (num_rows of the 16 are
    // real). One exchange of the row maxima and sums; then each warp scales its rows by its share,
    // 2^(m_w - max) / sum, so that the last pass adds four vectors. The K/V buffers are free now.
    __shared__ float m_s[4][16], l_s[4][16], lse_s[16];
    float* merge = reinterpret_cast<float*>(k_s);  // [4][16][kD]: K, V tiles (and the staging)
    __syncthreads();
    if (tig == 0) {
      m_s[warp][g] = m[0][0];
      m_s[warp][g + 8] = m[0][1];
      l_s[warp][g] = l[0][0];
      l_s[warp][g + 8] = l[0][1];
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = g + 8 * h;
      if (r >= num_rows) continue;
      float big = -INFINITY;
#pragma unroll
      for (int w = 0; w < 4; ++w) big = fmaxf(big, m_s[w][r]);
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < 4; ++w)
        sum += big == -INFINITY ? 0.0f : l_s[w][r] * exp2f(m_s[w][r] - big);
      const float f = big == -INFINITY || sum <= 0.0f ? 0.0f : v_scale * exp2f(m[0][h] - big) / sum;
      if (warp == 0 && tig == 0) lse_s[r] = sum > 0.0f ? big + log2f(sum) : -INFINITY;
#pragma unroll
      for (int i = 0; i < kDT; ++i) {
        const int d = i * 8 + tig * 2;
        *reinterpret_cast<float2*>(merge + (warp * 16 + r) * kD + d) =
            make_float2(o[0][i][2 * h] * f, o[0][i][2 * h + 1] * f);
      }
    }
    __syncthreads();
    for (int i = tid; i < num_rows * (kD / 4); i += kThreads) {
      const int r = i / (kD / 4), d = (i % (kD / 4)) * 4;
      float4 x = *reinterpret_cast<const float4*>(merge + r * kD + d);
#pragma unroll
      for (int w = 1; w < 4; ++w) {
        const float4 v = *reinterpret_cast<const float4*>(merge + (w * 16 + r) * kD + d);
        x.x += v.x;
        x.y += v.y;
        x.z += v.z;
        x.w += v.w;
      }
      if (split) {
        *reinterpret_cast<float4*>(part_out + r * kD + d) = x;
        if (d == 0) part_lse[r] = lse_s[r];
      } else {
        const int64_t t = item.token_begin + r / group;
        const int head = item.kv_head * group + r % group;
        *reinterpret_cast<uint2*>(out + (t * p.num_heads + head) * kD + d) =
            make_uint2(pack2<T>(x.x, x.y), pack2<T>(x.z, x.w));
      }
    }
  }
  // The whole of shared memory is free now: the merge's weights go there.
  static_assert(S::template smem_bytes<T>() >= sizeof(float) * kAttentionMaxSplits * kRows);
  static_assert(!kDecode || S::template smem_bytes<T>() - S::kQElems * sizeof(T) >=
                                sizeof(float) * 4 * 16 * kD);  // the decode merge's buffer
  if (split) finish_split<T, kD, kRows>(args, item, num_rows, reinterpret_cast<float*>(smem_raw));
}

/// Launches one instantiation over `grid` blocks (raising its shared-memory limit first).
template <typename T, int kD, int kRows, bool kQuant>
cudaError_t launch_attention(const KernelArgs& args, int grid, cudaStream_t stream) {
  if (grid <= 0) return cudaSuccess;
  constexpr size_t smem = Shape<kD, kRows, kQuant>::template smem_bytes<T>();
  auto* kernel = attention_kernel<T, kD, kRows, kQuant>;
  if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(smem));
      e != cudaSuccess)
    return e;
  launch_kernel(kernel, grid, kThreads, smem, stream, args);
  return cudaGetLastError();
}

/// The instantiation of the dtype and head dim of `args` for items of kRows rows, with a cache of
/// T or of codes.
template <int kRows, bool kQuant>
cudaError_t launch_rows_of(const KernelArgs& args, int grid, cudaStream_t stream) {
  const bool bf16 = args.p.dtype == DType::kBF16;
  switch (args.p.layout.head_dim) {
    case 64:
      return bf16 ? launch_attention<__nv_bfloat16, 64, kRows, kQuant>(args, grid, stream)
                  : launch_attention<__half, 64, kRows, kQuant>(args, grid, stream);
    case 128:
      return bf16 ? launch_attention<__nv_bfloat16, 128, kRows, kQuant>(args, grid, stream)
                  : launch_attention<__half, 128, kRows, kQuant>(args, grid, stream);
    default:
      return cudaErrorInvalidValue;
  }
}
template <int kRows>
cudaError_t launch_rows(const KernelArgs& args, int grid, cudaStream_t stream) {
  return args.kv_code == KVCode::kNone ? launch_rows_of<kRows, false>(args, grid, stream)
                                       : launch_rows_of<kRows, true>(args, grid, stream);
}

/// The instantiations live in attention_decode.cu, attention_prefill.cu (128 rows) and
/// attention_prefill_small.cu (64 rows), compiled in parallel.
cudaError_t launch_decode(const KernelArgs& args, int grid, cudaStream_t stream);
cudaError_t launch_prefill(const KernelArgs& args, int grid, cudaStream_t stream);
cudaError_t launch_prefill_small(const KernelArgs& args, int grid, cudaStream_t stream);

}  // namespace pagoda::cuda::attention
