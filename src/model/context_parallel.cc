#include "model/context_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "core/status.h"
#include "ops/ops.h"

namespace pagoda {
namespace {

/// The model-wide KV head that local KV head c of `rank` holds under -tp `world` (the rule of
/// model/tensor_parallel.h). Example: 2 KV heads over 4 ranks: rank 3 holds KV head 3 * 2 / 4 = 1.
int kv_head_of(int rank, int c, int num_kv_heads, int world) {
  if (num_kv_heads % world == 0) return rank * (num_kv_heads / world) + c;
  return rank * num_kv_heads / world;
}

}  // namespace

ContextParallelPlan plan_context_parallel(int num_heads, int num_kv_heads, int rank, int world,
                                          int dcp) {
  if (dcp < 1 || world % dcp != 0) {
    throw InvalidArgument(fmt::format(
        "--decode-context-parallel-size {}: must divide --tensor-parallel-size {}", dcp, world));
  }
  PAGODA_CHECK(num_heads % world == 0 && num_kv_heads > 0 &&
                   (num_kv_heads % world == 0 || world % num_kv_heads == 0),
               "{} heads, {} KV heads over {} ranks", num_heads, num_kv_heads, world);
  ContextParallelPlan p;
  p.size = dcp;
  p.member = rank % dcp;
  p.first_rank = rank - p.member;
  p.heads = num_heads / world;
  p.kv_heads = num_kv_heads % world == 0 ? num_kv_heads / world : 1;
  p.group_heads = dcp * p.heads;
  const int u0 = kv_head_of(p.first_rank, 0, num_kv_heads, world);
  const int u1 = kv_head_of(p.first_rank + dcp - 1, p.kv_heads - 1, num_kv_heads, world);
  p.group_kv_heads = u1 - u0 + 1;
  p.kv_source.assign(static_cast<size_t>(p.group_kv_heads), {-1, -1});
  for (int m = dcp - 1; m >= 0; --m) {  // backwards: the first member holding a head wins
    for (int c = 0; c < p.kv_heads; ++c) {
      const int u = kv_head_of(p.first_rank + m, c, num_kv_heads, world) - u0;
      p.kv_source[static_cast<size_t>(u)] = {m, c};
    }
  }
  // Group query head i (model-wide first_rank * heads + i) reads KV head (first_rank * heads +
  // i) / (H / K); the kernel maps it to group KV head i / (group_heads / group_kv_heads).
  const int per_kv = num_heads / num_kv_heads;
  bool whole = p.group_heads % p.group_kv_heads == 0;
  for (int i = 0; whole && i < p.group_heads; ++i) {
    whole = (p.first_rank * p.heads + i) / per_kv - u0 == i / (p.group_heads / p.group_kv_heads);
  }
  for (const auto& [m, c] : p.kv_source) whole = whole && m >= 0;
  if (!whole) {
    throw InvalidArgument(fmt::format(
        "--decode-context-parallel-size {}: ranks {} to {} of --tensor-parallel-size {} hold "
        "query heads [{}, {}) that do not read whole KV heads of the group (num_key_value_heads "
        "{}, num_attention_heads {})",
        dcp, p.first_rank, p.first_rank + dcp - 1, world, p.first_rank * p.heads,
        (p.first_rank + dcp) * p.heads, num_kv_heads, num_heads));
  }
  return p;
}

void check_context_parallel(int num_heads, int num_kv_heads, int world, int dcp) {
  for (int r = 0; r < world; ++r)
    (void)plan_context_parallel(num_heads, num_kv_heads, r, world, dcp);
}

int64_t local_slot(int64_t slot, int engine_block_size, const ContextParallelPlan& p) {
  if (slot < 0) return -1;
  const int64_t block = slot / engine_block_size, offset = slot % engine_block_size;
  if (offset % p.size != p.member) return -1;
  return block * (engine_block_size / p.size) + offset / p.size;
}

void merge_attention_partials(std::span<const float* const> outs,
                              std::span<const float* const> lses, int64_t T, int group_heads,
                              int head_dim, int h0, int n, float* out) {
  PAGODA_CHECK(outs.size() == lses.size() && !outs.empty() && h0 >= 0 && h0 + n <= group_heads,
               "merge of {} partials, heads [{}, {}) of {}", outs.size(), h0, h0 + n, group_heads);
  const size_t D = outs.size();
  for (int64_t t = 0; t < T; ++t) {
    for (int h = 0; h < n; ++h) {
      const int64_t row = t * group_heads + h0 + h;  // in the partials' [T, group_heads]
      float m = -std::numeric_limits<float>::infinity();
      for (size_t k = 0; k < D; ++k) m = std::max(m, lses[k][row]);
      float* o = out + (t * n + h) * head_dim;
      std::fill_n(o, head_dim, 0.0f);
      if (m == -std::numeric_limits<float>::infinity()) continue;  // no keys anywhere
      float total = 0.0f;
      for (size_t k = 0; k < D; ++k) {
        if (lses[k][row] == -std::numeric_limits<float>::infinity()) continue;
        const float w = std::exp(lses[k][row] - m);
        total += w;
        const float* src = outs[k] + row * head_dim;
        for (int i = 0; i < head_dim; ++i) o[i] += w * src[i];
      }
      const float inv = 1.0f / total;
      for (int i = 0; i < head_dim; ++i) o[i] *= inv;
    }
  }
}

ContextParallelAttention::ContextParallelAttention(ContextParallelPlan plan, Communicator* comm,
                                                   int head_dim)
    : plan_(std::move(plan)), comm_(comm), head_dim_(head_dim) {
  PAGODA_CHECK(comm_ != nullptr && comm_->world_size() >= plan_.first_rank + plan_.size,
               "decode context parallelism without its communicator");
}

void ContextParallelAttention::gather(const float* q, const float* k, const float* v, int64_t T) {
  tokens_ = T;
  const int64_t d = head_dim_;
  // A rank's chunk: q [T, heads, d], then k and v [T, kv_heads, d].
  const int64_t qn = T * plan_.heads * d, kn = T * plan_.kv_heads * d;
  const int64_t chunk = qn + 2 * kn;
  send_.resize(static_cast<size_t>(chunk));
  std::memcpy(send_.data(), q, static_cast<size_t>(qn) * sizeof(float));
  std::memcpy(send_.data() + qn, k, static_cast<size_t>(kn) * sizeof(float));
  std::memcpy(send_.data() + qn + kn, v, static_cast<size_t>(kn) * sizeof(float));
  recv_.resize(static_cast<size_t>(chunk * plan_.size));  // the group's members only
  comm_->all_gather_range(send_.data(), recv_.data(), static_cast<size_t>(chunk) * sizeof(float),
                          plan_.first_rank, plan_.size);
  const int G = plan_.group_heads, KG = plan_.group_kv_heads;
  q_.resize(static_cast<size_t>(T * G * d));
  k_.resize(static_cast<size_t>(T * KG * d));
  v_.resize(static_cast<size_t>(T * KG * d));
  auto member_chunk = [&](int m) { return recv_.data() + m * chunk; };
  // Example (heads 2, D 2): group q row t is member 0's heads 0, 1 then member 1's heads 0, 1.
  for (int64_t t = 0; t < T; ++t) {
    for (int m = 0; m < plan_.size; ++m) {
      std::memcpy(q_.data() + (t * G + int64_t{m} * plan_.heads) * d,
                  member_chunk(m) + t * plan_.heads * d,
                  static_cast<size_t>(plan_.heads * d) * sizeof(float));
    }
    for (int u = 0; u < KG; ++u) {
      const auto [m, c] = plan_.kv_source[static_cast<size_t>(u)];
      const float* src = member_chunk(m) + qn + (t * plan_.kv_heads + c) * d;
      std::memcpy(k_.data() + (t * KG + u) * d, src, static_cast<size_t>(d) * sizeof(float));
      std::memcpy(v_.data() + (t * KG + u) * d, src + kn, static_cast<size_t>(d) * sizeof(float));
    }
  }
}

Tensor ContextParallelAttention::group_q() const {
  return Tensor{const_cast<float*>(q_.data()), DType::kF32,
                Shape{tokens_, plan_.group_heads, head_dim_}};
}
Tensor ContextParallelAttention::group_k() const {
  return Tensor{const_cast<float*>(k_.data()), DType::kF32,
                Shape{tokens_, plan_.group_kv_heads, head_dim_}};
}
Tensor ContextParallelAttention::group_v() const {
  return Tensor{const_cast<float*>(v_.data()), DType::kF32,
                Shape{tokens_, plan_.group_kv_heads, head_dim_}};
}

Tensor ContextParallelAttention::local_slots(std::span<const int64_t> slots,
                                             int engine_block_size) {
  slots_.resize(slots.size());
  for (size_t t = 0; t < slots.size(); ++t)
    slots_[t] = local_slot(slots[t], engine_block_size, plan_);
  return Tensor{slots_.data(), DType::kI64, Shape{static_cast<int64_t>(slots_.size())}};
}

void ContextParallelAttention::attend(const OpContext& ctx, cpu::PagedAttentionParams p,
                                      float* out) {
  const int64_t T = tokens_, d = head_dim_;
  const int G = plan_.group_heads;
  PAGODA_CHECK(p.num_tokens == T && p.layout.num_kv_heads == plan_.group_kv_heads,
               "context-parallel attention: {} tokens of {} KV heads after a gather of {} tokens "
               "of {}",
               p.num_tokens, p.layout.num_kv_heads, T, plan_.group_kv_heads);
  // A rank's chunk of the second gather: its partial out [T, G, d], then lse [T, G].
  const int64_t on = T * G * d, chunk = on + T * G;
  send_.resize(static_cast<size_t>(chunk));
  p.q = q_.data();
  p.num_heads = G;
  p.out = send_.data();
  p.lse = send_.data() + on;
  p.cp_size = plan_.size;
  p.cp_rank = plan_.member;
  ops::paged_attention(ctx, p);
  recv_.resize(static_cast<size_t>(chunk * plan_.size));
  comm_->all_gather_range(send_.data(), recv_.data(), static_cast<size_t>(chunk) * sizeof(float),
                          plan_.first_rank, plan_.size);
  std::vector<const float*> outs, lses;
  for (int m = 0; m < plan_.size; ++m) {
    const float* base = recv_.data() + m * chunk;
    outs.push_back(base);
    lses.push_back(base + on);
  }
  merge_attention_partials(outs, lses, T, G, static_cast<int>(d), plan_.member * plan_.heads,
                           plan_.heads, out);
}

}  // namespace pagoda
