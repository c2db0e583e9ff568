#include "runtime/cuda/device_sampler.h"

#include <algorithm>
#include <cstring>

#include "kernels/cuda/sample_logits.h"

namespace pagoda {
namespace {

size_t align16(size_t x) { return (x + 15) & ~size_t{15}; }

template <typename T>
T* at(void* base, size_t offset) {
  return reinterpret_cast<T*>(static_cast<char*>(base) + offset);
}

}  // namespace

DeviceSampler::~DeviceSampler() {
  if (host_ != nullptr) cudaFreeHost(host_);
}

void DeviceSampler::reserve(size_t bytes, cudaStream_t stream) {
  if (bytes <= capacity_) return;
  PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream));  // no copy from or to the old area in flight
  if (host_ != nullptr) cudaFreeHost(host_);
  host_ = nullptr;
  capacity_ = std::max(bytes * 2, size_t{1} << 16);
  PAGODA_CUDA_CHECK(cudaMallocHost(&host_, capacity_));
  device_ = DeviceBuffer(capacity_);
}

bool DeviceSampler::launch(const void* logits, DType dtype, int64_t vocab,
                           std::span<const DeviceDraw> draws, float* workspace,
                           cudaStream_t stream) {
  const size_t rows = draws.size();
  size_t num_penalties = 0, num_biases = 0, num_masked = 0, num_allowed = 0;
  const auto allowed_words = static_cast<size_t>((vocab + 31) / 32);
  bool any = false;
  for (const DeviceDraw& d : draws) {
    if (d.temperature < 0) continue;
    any = true;
    num_penalties += d.penalty_tokens.size();
    num_biases += d.logit_bias.size();
    num_masked += d.masked.size();
    if (!d.allowed.empty()) {
      PAGODA_CHECK(d.allowed.size() == allowed_words, "a token bitmask of {} words for vocab {}",
                   d.allowed.size(), vocab);
      ++num_allowed;
    }
  }
  if (!any) return false;
  Layout l;
  l.params = 0;
  l.penalties = align16(l.params + rows * sizeof(cuda::SamplingRow));
  l.biases = align16(l.penalties + num_penalties * sizeof(cuda::PenaltyEntry));
  l.masked = align16(l.biases + num_biases * sizeof(cuda::BiasEntry));
  l.allowed = align16(l.masked + num_masked * sizeof(int32_t));
  l.inputs_end = align16(l.allowed + num_allowed * allowed_words * sizeof(uint32_t));
  l.tokens = l.inputs_end;
  l.logprobs = align16(l.tokens + rows * sizeof(int32_t));
  l.top_tokens = align16(l.logprobs + rows * sizeof(float));
  l.top_logprobs = align16(l.top_tokens + rows * cuda::kMaxTopLogprobs * sizeof(int32_t));
  l.end = align16(l.top_logprobs + rows * cuda::kMaxTopLogprobs * sizeof(float));
  reserve(l.end, stream);
  layout_ = l;

  auto* params = at<cuda::SamplingRow>(host_, l.params);
  auto* penalties = at<cuda::PenaltyEntry>(host_, l.penalties);
  auto* biases = at<cuda::BiasEntry>(host_, l.biases);
  auto* masked = at<int32_t>(host_, l.masked);
  auto* allowed = at<uint32_t>(host_, l.allowed);
  int32_t np = 0, nb = 0, nm = 0, na = 0;
  for (size_t r = 0; r < rows; ++r) {
    const DeviceDraw& d = draws[r];
    cuda::SamplingRow p;
    p.skip = d.temperature < 0 ? 1 : 0;
    p.temperature = std::max(d.temperature, 0.0f);
    p.top_k = d.top_k;
    p.top_p = d.top_p;
    p.min_p = d.min_p;
    p.repetition_penalty = d.repetition_penalty;
    p.presence_penalty = d.presence_penalty;
    p.frequency_penalty = d.frequency_penalty;
    p.num_logprobs = std::min(d.num_logprobs, cuda::kMaxTopLogprobs);
    p.seed = d.seed;
    p.counter = d.counter;
    if (!p.skip) {
      p.penalty_begin = np;
      for (const DrawPenaltyToken& t : d.penalty_tokens)
        penalties[np++] = cuda::PenaltyEntry{t.token, t.output_count, t.in_prompt};
      p.penalty_count = np - p.penalty_begin;
      p.bias_begin = nb;
      for (const auto& [t, b] : d.logit_bias) biases[nb++] = cuda::BiasEntry{t, b};
      p.bias_count = nb - p.bias_begin;
      p.mask_begin = nm;
      if (!d.masked.empty()) {
        std::memcpy(masked + nm, d.masked.data(), d.masked.size() * sizeof(int32_t));
        nm += static_cast<int32_t>(d.masked.size());
      }
      p.mask_count = nm - p.mask_begin;
      if (!d.allowed.empty()) {
        std::memcpy(allowed + static_cast<size_t>(na) * allowed_words, d.allowed.data(),
                    allowed_words * sizeof(uint32_t));
        p.allowed_row = na++;
      }
    }
    params[r] = p;
  }
  PAGODA_CUDA_CHECK(
      cudaMemcpyAsync(device_.get(), host_, l.inputs_end, cudaMemcpyHostToDevice, stream));
  void* dev = device_.get();
  cuda::SampleLogitsArgs a;
  a.logits = logits;
  a.dtype = dtype;
  a.rows = static_cast<int64_t>(rows);
  a.vocab = vocab;
  a.params = at<cuda::SamplingRow>(dev, l.params);
  a.penalties = at<cuda::PenaltyEntry>(dev, l.penalties);
  a.biases = at<cuda::BiasEntry>(dev, l.biases);
  a.masked = at<int32_t>(dev, l.masked);
  a.allowed = at<uint32_t>(dev, l.allowed);
  a.allowed_words = static_cast<int64_t>(allowed_words);
  a.workspace = workspace;
  a.tokens = at<int32_t>(dev, l.tokens);
  a.logprobs = at<float>(dev, l.logprobs);
  a.top_tokens = at<int32_t>(dev, l.top_tokens);
  a.top_logprobs = at<float>(dev, l.top_logprobs);
  PAGODA_CUDA_CHECK(cuda::sample_logits(a, stream));
  // Tokens and logprobs always; the top-N arrays only when some row asked for them.
  bool any_top = false;
  for (const DeviceDraw& d : draws) any_top = any_top || (d.temperature >= 0 && d.num_logprobs > 0);
  const size_t download_end = any_top ? l.end : l.top_tokens;
  PAGODA_CUDA_CHECK(cudaMemcpyAsync(at<char>(host_, l.tokens), at<char>(dev, l.tokens),
                                    download_end - l.tokens, cudaMemcpyDeviceToHost, stream));
  return true;
}

void DeviceSampler::collect(std::span<const DeviceDraw> draws, std::span<int32_t> tokens,
                            std::span<DrawnLogprobs> logprobs) const {
  const Layout& l = layout_;
  const auto* h_tokens = at<const int32_t>(host_, l.tokens);
  const auto* h_logprobs = at<const float>(host_, l.logprobs);
  const auto* h_top_tokens = at<const int32_t>(host_, l.top_tokens);
  const auto* h_top_logprobs = at<const float>(host_, l.top_logprobs);
  for (size_t r = 0; r < draws.size(); ++r) {
    const DeviceDraw& d = draws[r];
    if (d.temperature < 0) continue;
    tokens[r] = h_tokens[r];
    if (d.num_logprobs < 0 || r >= logprobs.size()) continue;
    DrawnLogprobs& out = logprobs[r];
    out.logprob = h_logprobs[r];
    out.top.clear();
    for (int i = 0; i < std::min(d.num_logprobs, cuda::kMaxTopLogprobs); ++i) {
      const size_t at_i = r * cuda::kMaxTopLogprobs + static_cast<size_t>(i);
      if (h_top_tokens[at_i] < 0) break;
      out.top.emplace_back(h_top_tokens[at_i], h_top_logprobs[at_i]);
    }
  }
}

}  // namespace pagoda
