"""PyTorch's flash attention (SDPA, FLASH_ATTENTION backend) on the causal prefill cases of
`bench_kernels_cuda attention`: GQA 32/8 heads, head dim 128, bf16. TFLOP/s counts 4 * heads * d
per (query, visible key) pair, as the C++ benchmark does. Run on the device machine (torch with CUDA):

    python3 bench/device/torch_attention.py
"""
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

CASES = [(32, 512), (8, 2048), (2, 8192), (1, 32768), (1, 512)]
HEADS, KV_HEADS, D = 32, 8, 128


def main():
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}")
    for b, length in CASES:
        q = torch.randn(b, HEADS, length, D, device="cuda", dtype=torch.bfloat16)
        k = torch.randn(b, KV_HEADS, length, D, device="cuda", dtype=torch.bfloat16)
        v = torch.randn_like(k)
        # GQA by repetition: the same FLOPs; the flash backend needs equal head counts.
        k = k.repeat_interleave(HEADS // KV_HEADS, dim=1)
        v = v.repeat_interleave(HEADS // KV_HEADS, dim=1)
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            run = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            for _ in range(3):
                run()
            torch.cuda.synchronize()
            iters = max(5, int(2e12 / (4 * HEADS * D * length * length / 2 * b)))
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                run()
            end.record()
            torch.cuda.synchronize()
        ms = start.elapsed_time(end) / iters
        flops = 4.0 * HEADS * D * b * length * (length + 1) / 2
        print(f"torch flash prefill B{b} x L{length}: {ms * 1e3:9.1f} us {flops / ms / 1e9:7.1f} TFLOP/s")


if __name__ == "__main__":
    main()
