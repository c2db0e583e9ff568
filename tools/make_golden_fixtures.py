#!/usr/bin/env python3
"""Writes tiny random-weight checkpoints of every architecture pagoda supports, with golden outputs
from Hugging Face transformers, for tests/golden. Runs where torch + transformers are installed (the
device machine); the project's tests only read what it writes.

    python3 tools/make_golden_fixtures.py OUT_DIR [--only NAME,NAME...]
    python3 tools/make_golden_fixtures.py tests/data/tiny --add-beam-search [--only ...]

Each fixture is written on its own: one that fails prints its traceback and "FAILED: name", the
others are still written, and the exit status is 1. Prompts do not depend on --only.

For each fixture OUT_DIR/<name>/ holds config.json, the weights (model.safetensors, or shards with
model.safetensors.index.json) and golden.json in the format of models/stories260K/golden.json:
greedy ids, per-step top-5 and per-prompt-position top-10 log-probabilities, and "beam_search":
transformers' generate(num_beams=W, num_return_sequences=W, do_sample=False) for a few widths,
length penalties, early_stopping values and stop tokens (BEAM_CASES; the generated ids of each
hypothesis, its end token included, and sequences_scores). --add-beam-search only adds (or
replaces) the beam_search entries of fixtures already in OUT_DIR, leaving their weights and other
goldens as they are. References are
computed in float32 with eager attention; a bf16 checkpoint is upcast to float32 for the reference,
which is what pagoda computes (bf16 weights, fp32 activations and accumulation).
"""
import argparse
import json
import math
import os
import sys
import traceback
import zlib

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
    # name, config class, config fields, save dtype, extra save options, prompt lengths[, extra]
    # extra: "perturb" (norm weights and biases off their init), "max_model_len" (written to
    # golden.json for the tests), "min_prompt_len" / "max_seq_len" (checked here: the bounds the
    # fixture's RoPE semantics rely on).
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
] + [
    # The families and RoPE scalings of issue 16 (Phi-3, Gemma-2, YaRN, dynamic NTK). Norm weights
    # and biases are perturbed ("perturb") so that the norms' conventions show in the outputs.
    # golden.json's optional "max_model_len" is the engine setting the tests load the fixture with.
    #
    # Phi-3 without RoPE scaling: fused qkv_proj and gate_up_proj, head dim 64.
    ("phi3-hd64", "Phi3Config",
     base(hidden_size=128, num_attention_heads=2, num_key_value_heads=1, intermediate_size=256,
          pad_token_id=0), torch.float32, {}, [6, 60], {"perturb": True}),
    # Phi-3 with LongRoPE ("longrope", formerly "su"). transformers chooses the factor list per
    # forward pass: long_factor when the pass's longest position + 1 exceeds
    # original_max_position_embeddings, else short_factor, for every position of that pass. pagoda
    # (as vLLM) chooses once: long_factor iff max_model_len > original_max_position_embeddings.
    # The two agree when every forward pass of the golden stays on one side of the threshold:
    #  - phi3-longrope-long: original 32, every prompt longer than 32 (the golden recomputes the
    #    whole sequence each step, so every pass exceeds 32: long factors throughout), loaded with
    #    the default max_model_len = max_position_embeddings = 1024 > 32: long factors.
    #    attention factor sqrt(1 + ln(1024 / 32) / ln 32) = sqrt(2).
    #  - phi3-longrope-short: original 256, prompts + 24 greedy tokens <= 84 < 256 (short factors
    #    in transformers), loaded with max_model_len 256 <= 256: short factors; the attention factor
    #    still comes from max_position_embeddings / original = 4: sqrt(1 + ln 4 / ln 256).
    ("phi3-longrope-long", "Phi3Config",
     base(hidden_size=128, num_attention_heads=2, num_key_value_heads=2, intermediate_size=256,
          pad_token_id=0, original_max_position_embeddings=32,
          rope_scaling=dict(rope_type="longrope", original_max_position_embeddings=32,
                            short_factor=[1.0 + 0.02 * i for i in range(32)],
                            long_factor=[32.0 ** (i / 31) for i in range(32)])),
     torch.float32, {}, [40, 100], {"perturb": True, "min_prompt_len": 33}),
    ("phi3-longrope-short", "Phi3Config",
     base(hidden_size=128, num_attention_heads=2, num_key_value_heads=1, intermediate_size=256,
          pad_token_id=0, original_max_position_embeddings=256,
          rope_scaling=dict(rope_type="longrope", original_max_position_embeddings=256,
                            short_factor=[1.0 + 0.1 * i for i in range(32)],
                            long_factor=[40.0 ** (i / 31) for i in range(32)])),
     torch.float32, {}, [5, 60], {"perturb": True, "max_model_len": 256, "max_seq_len": 256}),
    # Gemma-2: embeddings * sqrt(hidden), GeGLU (gelu_pytorch_tanh), four (1 + w) norms per layer,
    # query_pre_attn_scalar (48) other than head_dim (64), sliding windows of 16 keys on the even
    # layers (transformers' default layer_types) with prompts longer than that, tied embeddings.
    # The soft-caps are far below Gemma's 50 / 30 so that tanh bends these random-weight scores and
    # logits (attention scores here reach ~10, logits ~5); at 50 / 30 they would be linear.
    ("gemma2-hd64-softcap", "Gemma2Config",
     base(hidden_size=128, head_dim=64, num_attention_heads=4, num_key_value_heads=2,
          intermediate_size=256, num_hidden_layers=4, query_pre_attn_scalar=48, sliding_window=16,
          attn_logit_softcapping=10.0, final_logit_softcapping=5.0,
          hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True, pad_token_id=0),
     torch.float32, {}, [6, 70], {"perturb": True}),
    # Gemma-2 with Gemma-2-2b/9b's head dim (256) and query_pre_attn_scalar (256), bf16.
    ("gemma2-hd256-bf16", "Gemma2Config",
     base(hidden_size=128, head_dim=256, num_attention_heads=2, num_key_value_heads=1,
          intermediate_size=256, num_hidden_layers=2, query_pre_attn_scalar=256, sliding_window=24,
          attn_logit_softcapping=20.0, final_logit_softcapping=8.0,
          hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True, pad_token_id=0),
     torch.bfloat16, {}, [7, 50], {"perturb": True}),
    # Qwen2 with YaRN as Qwen's long-context instructions write it (factor 4 and
    # original_max_position_embeddings = max_position_embeddings): the long prompt crosses 64.
    # YaRN is static in transformers (no per-sequence-length update). Attention factor
    # 0.1 ln 4 + 1; correction range from beta_fast 32 / beta_slow 1 at 64 positions.
    ("qwen2-yarn-hd64", "Qwen2Config",
     base(hidden_size=128, num_attention_heads=2, num_key_value_heads=1, intermediate_size=256,
          max_position_embeddings=64,
          rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=64)),
     torch.float32, {}, [9, 120], {"perturb": True}),
    # YaRN as DeepSeek writes it: max_position_embeddings = factor * original, explicit betas and
    # mscale / mscale_all_dim (attention factor (0.1 * 1.0 ln 4 + 1) / (0.1 * 0.5 ln 4 + 1)).
    ("llama-yarn-mscale", "LlamaConfig",
     base(hidden_size=128, num_attention_heads=2, num_key_value_heads=1, intermediate_size=256,
          max_position_embeddings=256,
          rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=64,
                            beta_fast=16.0, beta_slow=2.0, mscale=1.0, mscale_all_dim=0.5)),
     torch.float32, {}, [8, 110], {"perturb": True}),
    # Dynamic NTK. transformers rescales the base per forward pass once the sequence exceeds
    # max_position_embeddings, and uses the unscaled base below it; pagoda uses the unscaled base
    # when max_model_len <= max_position_embeddings (the tests load this one with max_model_len
    # 128; the engine's default would be vLLM's 128 * 2 and the NTK base at 256), which equals
    # transformers for every sequence that fits. Prompts + 24 greedy tokens stay <= 128.
    ("llama-dynamic-hd64", "LlamaConfig",
     base(hidden_size=128, num_attention_heads=2, num_key_value_heads=1, intermediate_size=256,
          max_position_embeddings=128, rope_scaling=dict(rope_type="dynamic", factor=2.0)),
     torch.float32, {}, [6, 100], {"perturb": True, "max_model_len": 128, "max_seq_len": 128}),
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


# Beam search cases: (num_beams, length_penalty, early_stopping, max_new_tokens, extra stop token).
# The extra stop token is the prompt's second greedy token, so that some beams end early; pagoda
# gets it as stop_token_ids, transformers as one more eos_token_id.
BEAM_CASES = [
    (2, 1.0, False, 8, False),
    (3, 0.5, True, 8, True),
    (4, 2.0, "never", 6, True),
    (3, 1.0, False, 10, True),
]


def beam_cases(model, prompt_ids, greedy_ids):
    """transformers' beam search on one prompt, for each of BEAM_CASES."""
    config_eos = model.config.eos_token_id
    config_eos = [] if config_eos is None else ([config_eos] if isinstance(config_eos, int) else list(config_eos))
    out = []
    for num_beams, length_penalty, early_stopping, max_new_tokens, extra_stop in BEAM_CASES:
        stop_ids = [int(greedy_ids[1])] if extra_stop and int(greedy_ids[1]) not in config_eos else []
        eos = config_eos + stop_ids
        with torch.no_grad():
            g = model.generate(torch.tensor([prompt_ids]), num_beams=num_beams,
                               num_return_sequences=num_beams, do_sample=False,
                               length_penalty=length_penalty, early_stopping=early_stopping,
                               max_new_tokens=max_new_tokens, eos_token_id=eos,
                               pad_token_id=eos[0] if eos else 0, return_dict_in_generate=True,
                               output_scores=True)
        sequences = []
        for i in range(num_beams):
            # beam_indices is -1 past a hypothesis' end: its count is the generated length.
            n = int((g.beam_indices[i] >= 0).sum())
            sequences.append([int(t) for t in g.sequences[i, len(prompt_ids):len(prompt_ids) + n]])
        out.append({"prompt_ids": list(prompt_ids), "num_beams": num_beams,
                    "length_penalty": length_penalty, "early_stopping": early_stopping,
                    "max_new_tokens": max_new_tokens, "stop_token_ids": stop_ids,
                    "sequences": sequences,
                    "sequences_scores": [round(float(x), 6) for x in g.sequences_scores]})
    return out


def add_beam_search(path):
    """Adds the beam_search entries to the fixture already written at path."""
    reference = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                     attn_implementation="eager").eval()
    with open(os.path.join(path, "golden.json")) as f:
        golden = json.load(f)
    first = golden["cases"][0]
    golden["beam_search"] = beam_cases(reference, first["prompt_ids"], first["greedy_ids"])
    golden["beam_search_transformers_version"] = transformers.__version__
    with open(os.path.join(path, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
    print(os.path.basename(path), "-> beam_search:", len(golden["beam_search"]), "cases", flush=True)


def perturb(model):
    """Moves norm weights and biases off their initial values (ones or zeros), so that the (1 + w)
    convention of Gemma's norms and the biases change the outputs the goldens pin down."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith(".bias"):
                p.add_(torch.randn_like(p) * 0.2)


def rope_debug(model):
    """What transformers' rotary embedding last used (inv_freq, the cos/sin factor), for comparing
    with pagoda's rope_tables when a RoPE-scaled fixture disagrees. Not read by the tests."""
    try:
        rotary = model.model.rotary_emb
        return {"rope_type": str(getattr(rotary, "rope_type", "")),
                "attention_scaling": float(rotary.attention_scaling),
                "inv_freq": [float(x) for x in rotary.inv_freq.float().tolist()]}
    except Exception as e:  # a model without a shared rotary_emb: nothing to record
        return {"error": repr(e)}


def make_fixture(out_dir, fixture, prompts):
    name, cls_name, fields, dtype, save_opts, _ = fixture[:6]
    extra = fixture[6] if len(fixture) > 6 else {}
    for n in (len(p) for p in prompts):
        if n < extra.get("min_prompt_len", 0) or n + GREEDY_STEPS > extra.get("max_seq_len", math.inf):
            raise ValueError(f"{name}: a {n}-token prompt breaks the fixture's length bounds")
    cfg = getattr(transformers, cls_name)(**fields)
    cfg.torch_dtype = dtype
    torch.manual_seed(zlib.crc32(name.encode()))
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    if extra.get("perturb"):
        perturb(model)
    model = model.to(dtype).eval()
    path = os.path.join(out_dir, name)
    model.save_pretrained(path, safe_serialization=True, **save_opts)
    # Reload from disk in float32: upcasting the in-memory model would keep buffers (RoPE
    # inv_freq) rounded to the checkpoint dtype, which a fresh float32 load does not.
    reference = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32,
                                                     attn_implementation="eager").eval()
    cases = [run_case(reference, prompt) for prompt in prompts]
    golden = {"model": name, "dtype": str(dtype).replace("torch.", ""), "reference_dtype": "float32",
              "transformers_version": transformers.__version__, "cases": cases,
              "beam_search": beam_cases(reference, prompts[0], cases[0]["greedy_ids"])}
    if "max_model_len" in extra:
        golden["max_model_len"] = extra["max_model_len"]
    if extra.get("perturb"):
        golden["rope_debug"] = rope_debug(reference)
    with open(os.path.join(path, "golden.json"), "w") as f:
        json.dump(golden, f, indent=1)
    gen_cfg = os.path.join(path, "generation_config.json")
    print(name, "->", sorted(os.listdir(path)), "gen_config" if os.path.exists(gen_cfg) else "", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--only", default="", help="comma-separated fixture names (default: all)")
    parser.add_argument("--add-beam-search", action="store_true",
                        help="only add the beam_search entries to the fixtures in OUT_DIR")
    args = parser.parse_args()
    only = [n for n in args.only.split(",") if n]
    known = [f[0] for f in FIXTURES]
    unknown = [n for n in only if n not in known]
    if unknown:
        sys.exit(f"unknown fixtures {unknown}; known: {known}")
    print("torch", torch.__version__, "transformers", transformers.__version__, flush=True)
    torch.manual_seed(0)
    # Every fixture's prompts are drawn first, in list order, so that a fixture's prompts do not
    # depend on which others run (--only) or fail. New fixtures go at the end of FIXTURES.
    gen = torch.Generator().manual_seed(1234)
    prompts = {}
    for fixture in FIXTURES:
        prompts[fixture[0]] = [[1] + torch.randint(3, VOCAB, (n - 1,), generator=gen).tolist()
                               for n in fixture[5]]
    failed = []
    for fixture in FIXTURES:
        name = fixture[0]
        if only and name not in only:
            continue
        print(f"=== {name}", flush=True)
        try:
            if args.add_beam_search:
                if os.path.isdir(os.path.join(args.out_dir, name)):
                    add_beam_search(os.path.join(args.out_dir, name))
                continue
            make_fixture(args.out_dir, fixture, prompts[name])
        except Exception:
            traceback.print_exc()
            print(f"FAILED: {name}", flush=True)
            failed.append(name)
    print("done;", f"failed: {', '.join(failed)}" if failed else "all fixtures written", flush=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
