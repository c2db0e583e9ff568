#!/usr/bin/env python3
"""Writes tiny random-weight checkpoints of every architecture pagoda supports, with golden outputs
from Hugging Face transformers, for tests/golden. Runs where torch + transformers are installed (the
device machine); the project's tests only read what it writes.

    python3 tools/make_golden_fixtures.py OUT_DIR

For each fixture OUT_DIR/<name>/ holds config.json, the weights (model.safetensors, or shards with
model.safetensors.index.json) and golden.json in the format of models/stories260K/golden.json:
greedy ids, per-step top-5 and per-prompt-position top-10 log-probabilities. References are
computed in float32 with eager attention; a bf16 checkpoint is upcast to float32 for the reference,
which is what pagoda computes (bf16 weights, fp32 activations and accumulation).
"""
import json
import zlib
import os
import sys

import torch
import transformers
from transformers import AutoModelForCausalLM

VOCAB = 512
GREEDY_STEPS = 24


def base(**overrides):
    cfg = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
               rms_norm_eps=1e-6, rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1,
               eos_token_id=2, initializer_range=0.15)
    cfg.update(overrides)
    return cfg


FIXTURES = [
    # name, config class, config fields, save dtype, extra save options, prompt lengths
    ("llama-llama3-rope", "LlamaConfig",
     base(rope_theta=500000.0, rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                 high_freq_factor=4.0, original_max_position_embeddings=64)),
     torch.float32, {}, [5, 300]),
    ("llama-linear-rope-tied", "LlamaConfig",
     base(rope_scaling=dict(rope_type="linear", factor=4.0), tie_word_embeddings=True, num_key_value_heads=4),
     torch.float32, {}, [7, 90]),
    ("llama-bf16", "LlamaConfig", base(num_key_value_heads=1), torch.bfloat16, {}, [6, 40]),
    ("mistral-mqa", "MistralConfig", base(num_key_value_heads=1, sliding_window=None), torch.float32, {}, [8, 33]),
    ("qwen2-bias-sharded", "Qwen2Config", base(eos_token_id=[2, 3], tie_word_embeddings=True), torch.float32,
     dict(max_shard_size="200KB"), [9, 50]),
    ("qwen3-qknorm-headdim", "Qwen3Config", base(head_dim=24, num_attention_heads=4, num_key_value_heads=2),
     torch.float32, {}, [5, 64]),
    # Head dims of 64 and 128, which the GPU attention kernels take: these run on both backends.
    ("llama-hd64-llama3-rope", "LlamaConfig",
     base(hidden_size=128, num_attention_heads=2, num_key_value_heads=1, intermediate_size=256,
          rope_theta=500000.0, rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                                                 high_freq_factor=4.0, original_max_position_embeddings=64)),
     torch.float32, {}, [6, 200]),
    ("mistral-hd128-bf16", "MistralConfig",
     base(hidden_size=256, num_attention_heads=2, num_key_value_heads=1, intermediate_size=512,
          sliding_window=None), torch.bfloat16, {}, [7, 70]),
    ("qwen2-hd64-bias", "Qwen2Config",
     base(hidden_size=128, num_attention_heads=2, num_key_value_heads=2, intermediate_size=256),
     torch.float32, {}, [9, 45]),
    ("qwen3-hd128-qknorm", "Qwen3Config",
     base(hidden_size=128, head_dim=128, num_attention_heads=4, num_key_value_heads=1, intermediate_size=256),
     torch.float32, {}, [5, 80]),
]


def topk(logprobs, k):
    values, ids = torch.topk(logprobs, k)
    return {"ids": [int(i) for i in ids], "logprobs": [round(float(v), 6) for v in values]}


def run_case(model, prompt_ids):
    ids = list(prompt_ids)
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
        prefill = torch.log_softmax(logits, dim=-1)
        case = {"prompt_ids": prompt_ids, "prefill_top10": [topk(prefill[i], 10) for i in range(len(ids))]}
        greedy, steps = [], []
        for _ in range(GREEDY_STEPS):
            lp = torch.log_softmax(model(torch.tensor([ids])).logits[0, -1].float(), dim=-1)
            nxt = int(torch.argmax(lp))
            steps.append(topk(lp, 5))
            greedy.append(nxt)
            ids.append(nxt)
        case["greedy_ids"] = greedy
        case["step_top5"] = steps
    return case


def main():
    out_dir = sys.argv[1]
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    for name, cls_name, fields, dtype, save_opts, prompt_lens in FIXTURES:
        cfg = getattr(transformers, cls_name)(**fields)
        cfg.torch_dtype = dtype
        torch.manual_seed(zlib.crc32(name.encode()))
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager").to(dtype).eval()
        path = os.path.join(out_dir, name)
        model.save_pretrained(path, safe_serialization=True, **save_opts)
        # Reload from disk in float32: upcasting the in-memory model would keep buffers (RoPE
        # inv_freq) rounded to the checkpoint dtype, which a fresh float32 load does not.
        reference = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                         attn_implementation="eager").eval()
        cases = []
        for n in prompt_lens:
            prompt = [1] + torch.randint(3, VOCAB, (n - 1,), generator=gen).tolist()
            cases.append(run_case(reference, prompt))
        golden = {"model": name, "dtype": str(dtype).replace("torch.", ""), "reference_dtype": "float32",
                  "transformers_version": transformers.__version__, "cases": cases}
        with open(os.path.join(path, "golden.json"), "w") as f:
            json.dump(golden, f, indent=1)
        gen_cfg = os.path.join(path, "generation_config.json")
        print(name, "->", sorted(os.listdir(path)), "gen_config" if os.path.exists(gen_cfg) else "")


if __name__ == "__main__":
    main()
