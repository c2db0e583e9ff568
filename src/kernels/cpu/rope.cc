// Rotary position embedding, rotate-half (NeoX) convention, as Hugging Face Llama applies it.
#include "kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace pagoda::cpu {
namespace {

// x[i], x[i + half] <- x[i] * c - x[i + half] * s, x[i + half] * c + x[i] * s.
void rotate_head(float* x, const float* cos_v, const float* sin_v, int half) {
  float* x2 = x + half;
  for (int i = 0; i < half; ++i) {
    const float a = x[i], b = x2[i];
    x[i] = a * cos_v[i] - b * sin_v[i];
    x2[i] = b * cos_v[i] + a * sin_v[i];
  }
}

}  // namespace

void rope_neox(float* q, float* k, const int32_t* positions, int64_t num_tokens, int num_heads,
               int num_kv_heads, int head_dim, const float* inv_freq, ThreadPool& pool) {
  if (num_tokens <= 0 || head_dim < 2) return;
  const int half = head_dim / 2;
  const int64_t per_token = static_cast<int64_t>(num_heads + num_kv_heads) * head_dim;
  const int64_t grain = std::max<int64_t>(1, 8192 / per_token);
  pool.parallel_for(num_tokens, grain, [&](int64_t t0, int64_t t1) {
    std::vector<float> cos_v(static_cast<size_t>(half)), sin_v(static_cast<size_t>(half));
    for (int64_t t = t0; t < t1; ++t) {
      // The angle is rounded to fp32 before cos/sin, exactly as transformers does: at long
      // positions that rounding, not the trig, dominates the difference from exact math.
      const float pos = static_cast<float>(positions[t]);
      for (int i = 0; i < half; ++i) {
        const float angle = pos * inv_freq[i];
        cos_v[i] = std::cos(angle);
        sin_v[i] = std::sin(angle);
      }
      for (int h = 0; h < num_heads; ++h)
        rotate_head(q + (t * num_heads + h) * head_dim, cos_v.data(), sin_v.data(), half);
      for (int h = 0; h < num_kv_heads; ++h)
        rotate_head(k + (t * num_kv_heads + h) * head_dim, cos_v.data(), sin_v.data(), half);
    }
  });
}

}  // namespace pagoda::cpu
