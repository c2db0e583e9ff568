#!/usr/bin/env python3
"""Writes tiny random-weight Llama checkpoints in the real quantized formats (compressed-tensors FP8
and INT8 W8A8, GPTQ, AWQ, ModelOpt NVFP4, an FP8 KV cache), with golden outputs from Hugging Face
transformers on the exactly dequantized weights, for tests/golden/quant_golden_test.cc. Runs where
torch + transformers + safetensors are installed (the device machine, through
bench/device/make_quant_fixtures.sh); the project's tests only read what it writes.

    python3 tools/make_quant_fixtures.py OUT_DIR [--only NAME,NAME...]

How it works. For each fixture: a LlamaForCausalLM (hidden 128, 2 layers, vocab 512, head dim 64)
with random weights; its dense tensors are rounded to the checkpoint's dtype (bf16 for
llm-compressor / ModelOpt, fp16 for AutoGPTQ / AutoAWQ); each projection of each layer is quantized
round-to-nearest the way the producing tool lays it out (tensor names, dtypes, packing, scale
shapes, config fields), and the dequantized weights (computed from the stored codes and scales in
fp32, exactly as the engine reads them) replace the projection's weights in the float32 reference.
Where activations are quantized (W8A8) each quantized Linear's input goes through vLLM's
quantize-dequantize first; with an FP8 KV cache, keys and values are quantized by the per-layer
scales in attention. Static scales (FP8 input_scale, KV k_scale / v_scale, NVFP4's input_scale) come
from a calibration pass over the golden prompts, min-max as llm-compressor's observers.

Cross-checks (a layout bug fails here, on the device machine, not only in C++): the saved file is
read back and every quantized projection is unpacked by a second, element-by-element decoder
written from the C++ loader's documented layouts (src/model/quant/*_methods.cc); it must equal the
reference's weights bit for bit, and every dense tensor must equal the reference's.

OUT_DIR/<name>/ holds config.json (and the format's side file where the producing tool writes one),
model.safetensors and golden.json in make_golden_fixtures.py's format, plus "format" (what the
fixture covers), "kv_cache_dtype" (the --kv-cache-dtype the test loads it with, when the checkpoint
has KV scales) and "activation_quantization" (the emulated W8A8 rule, for the record).
"""
import argparse
import json
import os
import sys
import traceback
import zlib

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM
from transformers.models.llama import modeling_llama

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_golden_fixtures import GREEDY_STEPS, VOCAB, base, run_case  # noqa: E402

E4M3_MAX = 448.0
FP8_MIN_SCALE = 1.0 / (E4M3_MAX * 512.0)  # vLLM's dynamic per-token minimum (cpu::quant_gemm.h)
E2M1_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]  # float4_e2m1 magnitudes of codes 0..7
PROJECTIONS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
               "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]
# The input each projection reads (act-order permutations are shared per input).
INPUT_OF = {"q_proj": "attn_in", "k_proj": "attn_in", "v_proj": "attn_in", "gate_proj": "mlp_in",
            "up_proj": "mlp_in"}


def config_fields(tied):
    # Head dim 64 (hidden 128, 2 heads): the GPU's fast attention kernel takes it. Every
    # projection's input (128 or 256) is a multiple of the group sizes 16 .. 128, every output
    # (64 .. 256) of the 8 values an int32 packs along the rows. initializer_range 0.06 (the dense
    # fixtures' 0.15 amplifies ~2.4x per matmul): each projection keeps about unit gain, so that
    # one FP8 / INT8 activation rounding that a summation-order difference flips moves the
    # log-probabilities little (tests/data/tiny's FP8 at load moves them by 1.5-2.6 between W8A8
    # and W8A16, fp8_gpu_test.cc); logits still spread with std ~0.7 over the 512 tokens.
    return base(hidden_size=128, num_attention_heads=2, num_key_value_heads=1,
                intermediate_size=256, tie_word_embeddings=tied, initializer_range=0.06)


# ---- compressed-tensors (llm-compressor) ------------------------------------------------------

def ct_args(num_bits, typ, strategy, dynamic, observer):
    """One QuantizationArgs as compressed-tensors serializes it (every field, nulls included)."""
    return {"actorder": None, "block_structure": None, "dynamic": dynamic, "group_size": None,
            "num_bits": num_bits, "observer": observer, "observer_kwargs": {}, "scale_dtype": None,
            "strategy": strategy, "symmetric": True, "type": typ, "zp_dtype": None}


def ct_config(fmt, weights, inputs, kv_cache_scheme=None):
    """config.json's quantization_config of llm-compressor's oneshot (compressed-tensors 0.1x)."""
    return {"config_groups": {"group_0": {"format": fmt, "input_activations": inputs,
                                          "output_activations": None, "targets": ["Linear"],
                                          "weights": weights}},
            "format": fmt, "global_compression_ratio": None, "ignore": ["lm_head"],
            "kv_cache_scheme": kv_cache_scheme, "quant_method": "compressed-tensors",
            "quantization_status": "compressed", "sparsity_config": {}, "transform_config": {},
            "version": "0.12.2"}


def e4m3(x):
    """fp32 -> float8_e4m3fn -> fp32, saturating at +-448 (torch's cast would give NaN past it)."""
    return x.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn).float()


def quantize_fp8(w, per_channel, scale_dtype):
    """llm-compressor's FP8 weights: scale = max|w| / 448 per output row (channel) or per tensor,
    stored in the model's dtype; q = e4m3(w / scale). Returns (tensors, dequantized)."""
    amax = w.abs().amax(dim=1, keepdim=True) if per_channel else w.abs().amax().reshape(1)
    scale = (amax / E4M3_MAX).to(scale_dtype).float()
    q = (w / (scale if per_channel else scale[0])).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    deq = q.float() * (scale if per_channel else scale[0])
    return {"weight": q, "weight_scale": scale.to(scale_dtype)}, deq


def quantize_int8(w, scale_dtype):
    """llm-compressor's INT8 weights, symmetric per channel: scale = max|w| / 127 per output row,
    q = clamp(round(w / scale), -128, 127) int8 [rows, in], weight_scale [rows, 1]."""
    scale = (w.abs().amax(dim=1, keepdim=True) / 127.0).to(scale_dtype).float()
    q = torch.round(w / scale).clamp(-128, 127).to(torch.int8)
    return {"weight": q, "weight_scale": scale.to(scale_dtype)}, q.float() * scale


def fp8_dynamic_per_token(x):
    """vLLM's dynamic per-token FP8 activations as the engine computes them (cpu::quant_gemm.h,
    fake_quantize_fp8_rows): s = max(max|x| / 448, 1 / (448 * 512)) per row, x_hat = e4m3(x / s) * s."""
    xf = x.float()
    s = torch.clamp(xf.abs().amax(dim=-1, keepdim=True) / E4M3_MAX, min=FP8_MIN_SCALE)
    return (e4m3(xf / s) * s).to(x.dtype)


def fp8_static(scale):
    """Static per-tensor FP8 activations: x_hat = e4m3(x / s) * s with the checkpoint's input_scale."""
    return lambda x: (e4m3(x.float() / scale) * scale).to(x.dtype)


def int8_dynamic_per_token(x):
    """vLLM's dynamic per-token INT8 activations (cpu::quant_gemm.h, quantize_int8_rows):
    s = max|x| / 127, q = round_half_even(x * (127 / max|x|)) saturated to [-128, 127],
    x_hat = q * s; a zero row stays zero."""
    xf = x.float()
    amax = xf.abs().amax(dim=-1, keepdim=True)
    safe = torch.where(amax > 0, amax, torch.ones_like(amax))
    # 127 / max|x| as one fp32 division: torch evaluates `127.0 / tensor` as reciprocal * 127,
    # which differs in the last bit for a quarter of the rows and flips roundings.
    q = torch.round(xf * (torch.full_like(safe, 127.0) / safe)).clamp(-128, 127)
    q = torch.where(amax > 0, q, torch.zeros_like(q))
    return (q * (amax / 127.0)).to(x.dtype)


# ---- GPTQ (AutoGPTQ / GPTQModel, checkpoint_format "gptq": v1 zeros) ---------------------------

def gptq_config(bits, group_size, sym, desc_act):
    return {"bits": bits, "checkpoint_format": "gptq", "damp_percent": 0.01, "desc_act": desc_act,
            "group_size": group_size, "lm_head": False, "model_file_base_name": None,
            "model_name_or_path": None, "quant_method": "gptq", "static_groups": False, "sym": sym,
            "true_sequential": True}


def quantize_gptq(w, bits, group_size, sym, desc_act, gen):
    """Round-to-nearest with GPTQ's quantizer and layout (no error correction).

    W [rows, in]. Group g of input features: with desc_act a random permutation perm of the
    features (GPTQ's order of decreasing Hessian diagonal) and g_idx[perm[i]] = i // G, else
    g_idx[l] = l // G. Per (group, row): sym: scale = 2 max|w| / maxq, zero = (maxq + 1) / 2;
    asym: scale = (max(w, 0) - min(w, 0)) / maxq, zero = round(-min / scale); scale stored fp16
    and q = clamp(round(w / scale) + zero, 0, maxq).
    Stored (pack = 32 / bits):
      qweight int32 [in / pack, rows]: bits [t * bits, (t + 1) * bits) of word (i, j) hold q of
              feature i * pack + t, row j
      qzeros  int32 [groups, rows / pack]: field t of word (g, c) holds zero(g, row c * pack + t) - 1
      scales  fp16 [groups, rows]; g_idx int32 [in]
    Example (4 bits): features 0..7 of row j with q = 1..8 give word 0x87654321 at (0, j).
    """
    rows, cols = w.shape
    maxq = (1 << bits) - 1
    g_size = cols if group_size == -1 else group_size
    groups = cols // g_size
    if desc_act:
        perm = torch.randperm(cols, generator=gen)
        g_idx = torch.empty(cols, dtype=torch.int32)
        g_idx[perm] = (torch.arange(cols) // g_size).to(torch.int32)
    else:
        g_idx = (torch.arange(cols) // g_size).to(torch.int32)
    scales = torch.empty(groups, rows)
    zeros = torch.empty(groups, rows, dtype=torch.int64)
    q = torch.empty(cols, rows, dtype=torch.int64)  # W^T's codes
    for g in range(groups):
        members = (g_idx == g).nonzero().flatten()
        wg = w[:, members]  # [rows, G]
        xmin = torch.clamp(wg.amin(dim=1), max=0.0)
        xmax = torch.clamp(wg.amax(dim=1), min=0.0)
        if sym:
            xmax = torch.maximum(xmin.abs(), xmax)
            xmin = -xmax
        scale = ((xmax - xmin) / maxq).half().float()
        zero = torch.full((rows,), (maxq + 1) // 2, dtype=torch.int64) if sym else \
            torch.round(-xmin / scale).to(torch.int64)
        # v1 stores zero - 1 in a bits-wide field: zero 0 would not survive (AutoGPTQ's overflow).
        assert int(zero.min()) >= 1 and int(zero.max()) <= maxq, "a GPTQ v1 zero point out of range"
        qg = torch.clamp(torch.round(wg / scale[:, None]) + zero[:, None], 0, maxq).to(torch.int64)
        q[members, :] = qg.t()
        scales[g] = scale
        zeros[g] = zero
    deq = torch.empty(rows, cols)
    gl = g_idx.long()
    deq[:, :] = (scales[gl, :] * (q - zeros[gl, :]).float()).t()
    pack = 32 // bits
    qweight = torch.zeros(cols // pack, rows, dtype=torch.int64)
    for t in range(pack):
        qweight |= q[t::pack, :] << (t * bits)
    qzeros = torch.zeros(groups, rows // pack, dtype=torch.int64)
    for t in range(pack):
        qzeros |= ((zeros[:, t::pack] - 1) & maxq) << (t * bits)
    tensors = {"qweight": to_int32(qweight), "qzeros": to_int32(qzeros), "scales": scales.half(),
               "g_idx": g_idx}
    return tensors, deq


def to_int32(words):
    """uint32 words held in int64 -> int32 with the same bits."""
    return torch.where(words >= 2**31, words - 2**32, words).to(torch.int32)


# ---- AWQ (AutoAWQ GEMM) -----------------------------------------------------------------------

AWQ_ORDER = [0, 2, 4, 6, 1, 3, 5, 7]  # nibble p of a word holds column 8 c + AWQ_ORDER[p]


def awq_config(group_size):
    return {"bits": 4, "group_size": group_size, "modules_to_not_convert": None,
            "quant_method": "awq", "version": "gemm", "zero_point": True}


def quantize_awq(w, group_size):
    """AutoAWQ's pseudo-quantizer (zero_point=True) and GEMM packing.

    Per (row, group of G consecutive inputs): scale = max(max - min, 1e-5) / 15 stored fp16,
    zero = clamp(-round(min / scale), 0, 15), q = clamp(round(w / scale) + zero, 0, 15).
    Stored: qweight int32 [in, rows / 8]: nibble p of word (l, c) holds q of (row 8 c +
    AWQ_ORDER[p], input l); qzeros int32 [groups, rows / 8] packed the same way; scales fp16
    [groups, rows]. Example: rows 0..7 of input l with q = 1..8 give word 0x86427531.
    """
    rows, cols = w.shape
    groups = cols // group_size
    wg = w.reshape(rows, groups, group_size)
    wmax, wmin = wg.amax(dim=2), wg.amin(dim=2)
    scale = (torch.clamp(wmax - wmin, min=1e-5) / 15).half().float()  # [rows, groups]
    zero = torch.clamp(-torch.round(wmin / scale), 0, 15)
    q = torch.clamp(torch.round(wg / scale[:, :, None]) + zero[:, :, None], 0, 15)
    deq = ((q - zero[:, :, None]) * scale[:, :, None]).reshape(rows, cols)
    qt = q.reshape(rows, cols).t().to(torch.int64)  # [in, rows]
    zt = zero.t().to(torch.int64)  # [groups, rows]

    def pack_rows(values):
        words = torch.zeros(values.shape[0], rows // 8, dtype=torch.int64)
        for p in range(8):
            words |= values[:, AWQ_ORDER[p]::8] << (4 * p)
        return to_int32(words)

    tensors = {"qweight": pack_rows(qt), "qzeros": pack_rows(zt), "scales": scale.t().half()}
    return tensors, deq


# ---- NVFP4 (NVIDIA ModelOpt) ------------------------------------------------------------------

def modelopt_config():
    """hf_quant_config.json as ModelOpt's export writes it."""
    return {"producer": {"name": "modelopt", "version": "0.29.0"},
            "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": None, "group_size": 16,
                             "exclude_modules": ["lm_head"]}}


def quantize_nvfp4(w):
    """ModelOpt's NVFP4: global s2 = max|w| / (6 * 448) (fp32, weight_scale_2), per 16 inputs
    block scale b = e4m3(max|block| / 6 / s2) (weight_scale float8_e4m3fn [rows, in / 16]), code =
    the nearest float4_e2m1 to w / (b * s2). weight uint8 [rows, in / 2]: input 2i in the low
    nibble of byte i, 2i + 1 in the high one; bit 3 of a nibble is the sign.
    w_hat = e2m1(code) * (b * s2): that product order, in fp32, as the engine computes it."""
    rows, cols = w.shape
    s2 = (w.abs().amax() / (6.0 * E4M3_MAX)).float()
    blocks = w.reshape(rows, cols // 16, 16)
    b = (blocks.abs().amax(dim=2) / 6.0 / s2).clamp(max=E4M3_MAX).to(torch.float8_e4m3fn)
    scale = b.float() * s2  # [rows, blocks]
    x = blocks / scale[:, :, None]
    table = torch.tensor(E2M1_VALUES)
    mag = torch.argmin((x.abs()[..., None] - table).abs(), dim=-1)  # [rows, blocks, 16]
    sign = (x < 0) & (mag > 0)
    codes = (mag + 8 * sign.to(torch.int64)).reshape(rows, cols)
    values = table[mag] * torch.where(sign, -1.0, 1.0)
    deq = (values * scale[:, :, None]).reshape(rows, cols)
    packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)
    return {"weight": packed, "weight_scale": b, "weight_scale_2": s2.reshape(())}, deq


# ---- the reader: an independent decoder of the stored layouts ---------------------------------

def read_back(kind, t, rows, cols, params):
    """Decodes one stored projection element by element, from the layouts the C++ loader documents
    (not from the packers above), to catch a packing bug here. Products are formed in Python
    doubles, where they are exact (a 16-bit scale times a small integer or an e2m1 value), and
    rounded once to fp32: the engine's fp32 product."""
    if kind in ("fp8_channel", "fp8_tensor", "int8"):
        s = t["weight_scale"].float().reshape(-1)
        s = s.expand(rows) if s.numel() == 1 else s
        return t["weight"].float() * s[:, None]
    out = [[0.0] * cols for _ in range(rows)]
    if kind == "gptq":
        bits = params["bits"]
        pack, mask = 32 // bits, (1 << bits) - 1
        qw = (t["qweight"].to(torch.int64) & 0xFFFFFFFF).tolist()
        qz = (t["qzeros"].to(torch.int64) & 0xFFFFFFFF).tolist()
        sc = t["scales"].float().tolist()
        g_idx = t["g_idx"].tolist()
        for l in range(cols):
            g = g_idx[l]
            for j in range(rows):
                q = (qw[l // pack][j] >> ((l % pack) * bits)) & mask
                z = ((qz[g][j // pack] >> ((j % pack) * bits)) & mask) + 1
                out[j][l] = sc[g][j] * (q - z)
    elif kind == "awq":
        reverse = [AWQ_ORDER.index(c) for c in range(8)]
        qw = (t["qweight"].to(torch.int64) & 0xFFFFFFFF).tolist()
        qz = (t["qzeros"].to(torch.int64) & 0xFFFFFFFF).tolist()
        sc = t["scales"].float().tolist()
        g_size = params["group_size"]
        for l in range(cols):
            for j in range(rows):
                q = (qw[l][j // 8] >> (4 * reverse[j % 8])) & 0xF
                z = (qz[l // g_size][j // 8] >> (4 * reverse[j % 8])) & 0xF
                out[j][l] = (q - z) * sc[l // g_size][j]
    elif kind == "nvfp4":
        packed = t["weight"].to(torch.int64).tolist()
        scale = (t["weight_scale"].float() * t["weight_scale_2"].float()).tolist()  # fp32 product
        for j in range(rows):
            for l in range(cols):
                code = (packed[j][l // 2] >> (4 * (l % 2))) & 0xF
                v = E2M1_VALUES[code & 7] * (-1.0 if code & 8 else 1.0)
                out[j][l] = v * scale[j][l // 16]
    else:
        raise ValueError(kind)
    return torch.tensor(out, dtype=torch.float64).float()


# ---- the fixtures -----------------------------------------------------------------------------

# name -> spec. kind: how each projection is stored; dtype: the dense tensors' and scales' dtype;
# act: the activation quantization of W8A8; kv: an FP8 KV cache with per-layer scales; tied:
# tie_word_embeddings (small fixtures; compressed-tensors' ignore of lm_head shows on the untied one).
FIXTURES = [
    ("ct-fp8-dynamic", dict(kind="fp8_channel", dtype=torch.bfloat16, act="fp8_token", tied=False,
                            prompts=[6, 48],
                            covers="compressed-tensors float-quantized FP8_DYNAMIC: per-channel "
                                   "weight scales, dynamic per-token FP8 activations, lm_head "
                                   "ignored (dense)")),
    ("ct-fp8-static-kv", dict(kind="fp8_tensor", dtype=torch.bfloat16, act="fp8_static", kv=True,
                              tied=True, prompts=[7, 40],
                              covers="compressed-tensors float-quantized FP8: per-tensor weight "
                                     "scales, static per-tensor input_scale, kv_cache_scheme FP8 "
                                     "with self_attn.k_scale / v_scale (--kv-cache-dtype fp8)")),
    ("ct-int8-dynamic", dict(kind="int8", dtype=torch.bfloat16, act="int8_token", tied=True,
                             prompts=[5, 44],
                             covers="compressed-tensors int-quantized W8A8: per-channel INT8 "
                                    "weights, dynamic per-token INT8 activations")),
    ("gptq-g128-sym", dict(kind="gptq", dtype=torch.float16, tied=True, prompts=[6, 40],
                           params=dict(bits=4, group_size=128, sym=True, desc_act=False),
                           covers="GPTQ v1 4-bit, group 128, symmetric")),
    ("gptq-g32-asym", dict(kind="gptq", dtype=torch.float16, tied=True, prompts=[8, 36],
                           params=dict(bits=4, group_size=32, sym=False, desc_act=False),
                           covers="GPTQ v1 4-bit, group 32, asymmetric (zero points - 1 in qzeros)")),
    ("gptq-channel", dict(kind="gptq", dtype=torch.float16, tied=True, prompts=[5, 40],
                          params=dict(bits=4, group_size=-1, sym=True, desc_act=False),
                          covers="GPTQ v1 4-bit, per channel (group_size -1)")),
    ("gptq-g64-desc-act", dict(kind="gptq", dtype=torch.float16, tied=True, prompts=[9, 40],
                               params=dict(bits=4, group_size=64, sym=True, desc_act=True),
                               covers="GPTQ v1 4-bit, group 64, desc_act (act-order): g_idx a "
                                      "permutation of the groups")),
    ("gptq-8bit-sidefile", dict(kind="gptq", dtype=torch.float16, tied=True, prompts=[6, 40],
                                params=dict(bits=8, group_size=128, sym=False, desc_act=False),
                                side_file="quantize_config.json",
                                covers="GPTQ v1 8-bit, group 128, asymmetric, config in AutoGPTQ's "
                                       "quantize_config.json side file")),
    ("awq-g64", dict(kind="awq", dtype=torch.float16, tied=True, prompts=[7, 40],
                     params=dict(group_size=64),
                     covers="AutoAWQ GEMM 4-bit, group 64, zero points, interleaved nibble order")),
    ("modelopt-nvfp4", dict(kind="nvfp4", dtype=torch.bfloat16, tied=True, prompts=[6, 40],
                            side_file="hf_quant_config.json",
                            covers="ModelOpt NVFP4 (hf_quant_config.json): uint8 pairs of e2m1 "
                                   "codes, e4m3 block scales of 16, weight_scale_2, input_scale; "
                                   "weight-only (W4A16) as on Hopper and the CPU")),
]


def quantize(kind, w, spec, gen):
    dtype, params = spec["dtype"], spec.get("params", {})
    if kind == "fp8_channel":
        return quantize_fp8(w, True, dtype)
    if kind == "fp8_tensor":
        return quantize_fp8(w, False, dtype)
    if kind == "int8":
        return quantize_int8(w, dtype)
    if kind == "gptq":
        return quantize_gptq(w, params["bits"], params["group_size"], params["sym"],
                             params["desc_act"], gen)
    if kind == "awq":
        return quantize_awq(w, params["group_size"])
    if kind == "nvfp4":
        return quantize_nvfp4(w)
    raise ValueError(kind)


def quant_config(spec):
    """The quantization config as the producing tool writes it."""
    kind, params = spec["kind"], spec.get("params", {})
    fp8 = lambda strategy, dynamic, observer: ct_args(8, "float", strategy, dynamic, observer)
    if kind == "fp8_channel":
        return ct_config("float-quantized", fp8("channel", False, "minmax"),
                         fp8("token", True, None))
    if kind == "fp8_tensor":
        return ct_config("float-quantized", fp8("tensor", False, "minmax"),
                         fp8("tensor", False, "minmax"),
                         kv_cache_scheme=fp8("tensor", False, "minmax") if spec.get("kv") else None)
    if kind == "int8":
        return ct_config("int-quantized", ct_args(8, "int", "channel", False, "minmax"),
                         ct_args(8, "int", "token", True, None))
    if kind == "gptq":
        return gptq_config(params["bits"], params["group_size"], params["sym"], params["desc_act"])
    if kind == "awq":
        return awq_config(params["group_size"])
    if kind == "nvfp4":
        return modelopt_config()
    raise ValueError(kind)


class AttentionHook:
    """Replaces transformers' eager attention (a module-level function LlamaAttention looks up at
    call time) with one that records each layer's max |K| and |V| (post-RoPE, what the cache
    stores), or quantizes K and V to FP8 with the layer's scales as the engine's cache does
    (kernels/cpu/kv_cache_codes.h: code = e4m3(x / scale), read back as code * scale)."""

    def __init__(self, scales=None):
        self.scales = scales  # {layer: (k_scale, v_scale)}; None: record
        self.amax = {}
        self.calls = 0

    def __enter__(self):
        self.original = modeling_llama.eager_attention_forward

        def attention(module, query, key, value, *args, **kwargs):
            self.calls += 1
            layer = module.layer_idx
            if self.scales is None:
                k, v = self.amax.get(layer, (0.0, 0.0))
                self.amax[layer] = (max(k, float(key.abs().max())), max(v, float(value.abs().max())))
            else:
                ks, vs = self.scales[layer]
                key = (e4m3(key.float() / ks) * ks).to(key.dtype)
                value = (e4m3(value.float() / vs) * vs).to(value.dtype)
            return self.original(module, query, key, value, *args, **kwargs)

        modeling_llama.eager_attention_forward = attention
        return self

    def __exit__(self, *exc):
        modeling_llama.eager_attention_forward = self.original
        return False


def calibrate(model, prompts, modules):
    """Min-max calibration over the golden prompts: max |input| of each quantized Linear and max
    |K|, |V| of each layer."""
    amax, handles = {}, []
    for name, module in modules.items():
        def hook(mod, args, name=name):
            amax[name] = max(amax.get(name, 0.0), float(args[0].abs().max()))
        handles.append(module.register_forward_pre_hook(hook))
    with torch.no_grad(), AttentionHook() as attention:
        for p in prompts:
            model(torch.tensor([p]))
    for h in handles:
        h.remove()
    assert attention.calls > 0, "transformers no longer calls modeling_llama.eager_attention_forward"
    return amax, attention.amax


def wrap_input(module, fn):
    """Each call of module sees fn(x) instead of x (the W8A8 activation quantization)."""
    forward = module.forward
    module.forward = lambda x, *a, **k: forward(fn(x), *a, **k)


def make_fixture(out_dir, name, spec, prompts):
    kind, dtype = spec["kind"], spec["dtype"]
    cfg = transformers.LlamaConfig(**config_fields(spec["tied"]))
    torch.manual_seed(zlib.crc32(name.encode()))
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").float().eval()
    if spec["tied"]:  # one Parameter, whatever this transformers version's tying does
        model.lm_head.weight = model.model.embed_tokens.weight
    path = os.path.join(out_dir, name)
    os.makedirs(path, exist_ok=True)
    tensors = {}
    modules = {}
    expected = {}  # quantized prefix -> the dequantized weight the reference uses
    with torch.no_grad():
        # The dense tensors as the checkpoint stores them; the reference reads them back exactly.
        for pname, p in model.named_parameters():
            p.copy_(p.to(dtype).float())
        for layer in range(cfg.num_hidden_layers):
            for proj in PROJECTIONS:
                prefix = f"model.layers.{layer}.{proj}"
                module = model.get_submodule(prefix)
                # Projections that read the same input (q, k, v; gate, up) share GPTQ's act-order
                # permutation, as AutoGPTQ's are (the same inputs give the same Hessian): one
                # generator per (layer, input).
                source = proj.rsplit(".", 1)[0] + "." + INPUT_OF.get(proj.rsplit(".", 1)[1], proj)
                proj_gen = torch.Generator().manual_seed(
                    zlib.crc32(f"{name}.{layer}.{source}".encode()))
                stored, deq = quantize(kind, module.weight.detach().clone(), spec, proj_gen)
                for suffix, t in stored.items():
                    tensors[f"{prefix}.{suffix}"] = t.contiguous()
                module.weight.copy_(deq)
                modules[prefix] = module
                expected[prefix] = deq.clone()
        for pname, p in model.named_parameters():
            prefix = pname.rsplit(".", 1)[0]
            if prefix in modules or (spec["tied"] and pname == "lm_head.weight"):
                continue
            tensors[pname] = p.detach().to(dtype).contiguous()
    golden_extra = {}
    if spec.get("act") == "fp8_static" or spec.get("kv") or kind == "nvfp4":
        inputs, kv = calibrate(model, prompts, modules)
        for prefix, m in inputs.items():
            if kind == "nvfp4":  # ModelOpt: the activations' global scale, max / (6 * 448), fp32
                tensors[f"{prefix}.input_scale"] = torch.tensor(m / (6.0 * E4M3_MAX)).float()
            elif spec.get("act") == "fp8_static":  # llm-compressor: [1] in the model's dtype
                tensors[f"{prefix}.input_scale"] = torch.tensor([m / E4M3_MAX]).to(dtype)
        if spec.get("kv"):
            scales = {}
            for layer, (k, v) in kv.items():
                ks = torch.tensor([k / E4M3_MAX]).to(dtype)
                vs = torch.tensor([v / E4M3_MAX]).to(dtype)
                tensors[f"model.layers.{layer}.self_attn.k_scale"] = ks
                tensors[f"model.layers.{layer}.self_attn.v_scale"] = vs
                scales[layer] = (float(ks), float(vs))
            golden_extra["kv_cache_dtype"] = "fp8"
            golden_extra["kv_scales"] = {str(k): list(v) for k, v in scales.items()}
    # The reference's activation quantization, per quantized Linear (vLLM's W8A8).
    act = spec.get("act")
    for prefix, module in modules.items():
        if act == "fp8_token":
            wrap_input(module, fp8_dynamic_per_token)
        elif act == "int8_token":
            wrap_input(module, int8_dynamic_per_token)
        elif act == "fp8_static":
            wrap_input(module, fp8_static(float(tensors[f"{prefix}.input_scale"].float()[0])))
    if act:
        golden_extra["activation_quantization"] = {
            "fp8_token": "x_hat = e4m3(x / s) * s, s = max(max|x| / 448, 1 / (448 * 512)) per token",
            "int8_token": "x_hat = round_half_even(x * 127 / max|x|) * max|x| / 127 per token",
            "fp8_static": "x_hat = e4m3(x / input_scale) * input_scale"}[act]

    save_file(tensors, os.path.join(path, "model.safetensors"), metadata={"format": "pt"})
    # config.json as save_pretrained writes it, with the checkpoint's dtype ("dtype" in
    # transformers v5, "torch_dtype" before) and the quantization_config.
    cfg.architectures = ["LlamaForCausalLM"]
    cfg.save_pretrained(path)
    with open(os.path.join(path, "config.json")) as f:
        config = json.load(f)
    dtype_key = "torch_dtype" if "torch_dtype" in config and "dtype" not in config else "dtype"
    config[dtype_key] = str(dtype).replace("torch.", "")
    qc = quant_config(spec)
    if "side_file" in spec:
        with open(os.path.join(path, spec["side_file"]), "w") as f:
            json.dump(qc, f, indent=2)
    else:
        config["quantization_config"] = qc
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)

    check_written(path, kind, spec, expected, model, modules)

    if spec.get("kv"):
        with torch.no_grad(), AttentionHook(scales) as attention:
            cases = [run_case(model, p) for p in prompts]
        assert attention.calls > 0, "the KV cache emulation was never called"
    else:
        cases = [run_case(model, p) for p in prompts]
    golden = {"model": name, "format": spec["covers"], "dtype": str(dtype).replace("torch.", ""),
              "reference_dtype": "float32", "transformers_version": transformers.__version__,
              "torch_version": torch.__version__, "cases": cases}
    golden.update(golden_extra)
    with open(os.path.join(path, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
    sizes = {f: os.path.getsize(os.path.join(path, f)) for f in sorted(os.listdir(path))}
    print(name, "->", sizes, "greedy", [c["greedy_ids"][:8] for c in cases], flush=True)


def check_written(path, kind, spec, expected, model, modules):
    """Reads the checkpoint back: each quantized projection decoded by read_back equals the
    reference's weight bit for bit, each dense tensor the reference's parameter."""
    stored = load_file(os.path.join(path, "model.safetensors"))
    params = dict(model.named_parameters())
    assert ("lm_head.weight" in stored) == (not spec["tied"]), "lm_head.weight stored iff untied"
    for prefix, deq in expected.items():
        t = {k[len(prefix) + 1:]: v for k, v in stored.items() if k.startswith(prefix + ".")}
        got = read_back(kind, t, deq.shape[0], deq.shape[1], spec.get("params", {}))
        if not torch.equal(got, deq) or not torch.equal(modules[prefix].weight.detach(), deq):
            bad = (got != deq).nonzero()[:5].tolist()
            raise AssertionError(f"{prefix}: read-back differs from the reference at {bad}")
    for pname, p in params.items():
        if pname.rsplit(".", 1)[0] in modules:
            continue
        if not torch.equal(stored[pname].float(), p.detach()):
            raise AssertionError(f"{pname}: stored tensor differs from the reference")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--only", default="", help="comma-separated fixture names (default: all)")
    args = parser.parse_args()
    only = [n for n in args.only.split(",") if n]
    known = [f[0] for f in FIXTURES]
    unknown = [n for n in only if n not in known]
    if unknown:
        sys.exit(f"unknown fixtures {unknown}; known: {known}")
    print("torch", torch.__version__, "transformers", transformers.__version__, flush=True)
    # Every fixture's prompts are drawn first, in list order, so that they do not depend on
    # --only. New fixtures go at the end of FIXTURES.
    gen = torch.Generator().manual_seed(4321)
    prompts = {name: [[1] + torch.randint(3, VOCAB, (n - 1,), generator=gen).tolist()
                      for n in spec["prompts"]] for name, spec in FIXTURES}
    failed = []
    for name, spec in FIXTURES:
        if only and name not in only:
            continue
        print(f"=== {name}", flush=True)
        try:
            make_fixture(args.out_dir, name, spec, prompts[name])
        except Exception:
            traceback.print_exc()
            print(f"FAILED: {name}", flush=True)
            failed.append(name)
    print("done;", f"failed: {', '.join(failed)}" if failed else "all fixtures written",
          f"({GREEDY_STEPS} greedy steps each)", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
