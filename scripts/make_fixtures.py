#!/usr/bin/env python3
"""Build tiny random-weight Qwen3.5-MoE reference fixtures with transformers (CPU, eager).

Pinned: transformers==5.23.0 torch==2.15.0 safetensors==0.8.0 (see the check below).
Install:  python3.11 -m venv /work/.venv-ref && /work/.venv-ref/bin/pip install \
              torch==2.15.0 transformers==5.23.0 safetensors==0.8.0 numpy
Run:      /work/.venv-ref/bin/python scripts/make_fixtures.py [--out models]

For each fixture folder models/<name>/ it writes:
  config.json, model.safetensors      via save_pretrained (keys model.*, fused experts)
  reference.safetensors               ids.{a,b}; logits.{a,b} [T,V]; hidden.{a,b}.{i} [T,H]
                                      (i=0: embeddings, i=l+1: raw output of layer l, before the
                                      final norm); router.{a,b}.{l} [T,E];
                                      decode.logits [T-K,V]: prefill a[:K], then one token at a time;
                                      resume.logits [T-R,V]: prefill a[:R], then a multi-token chunk
                                      a[R:R+C] through the caches, then one token at a time.
  reference_meta.json                 versions, seed, min router top-k margin (required > 1e-4),
                                      |f32 - float64| of the reference logits (required < 5e-5)
Every parameter is re-randomised (HF's zero init of the (1+w) norms would hide 1+w bugs).
The bf16 fixture stores bf16 weights; its f32 references are computed in f32 from the
bf16-rounded weights (exact load check) and bf16.logits.a holds HF's bf16-compute logits.
"""
import argparse
import json
import math
import os

import torch
import transformers
import safetensors
from safetensors.torch import save_file
from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

PINS = {"transformers": "5.23.0", "torch": "2.15.0", "safetensors": "0.8.0"}
LIN, FULL = "linear_attention", "full_attention"

FIXTURES = {
    # The main fixture: the shape of the reference spec with a 1024-token vocabulary, untied head.
    "tiny-qwen35": dict(
        vocab_size=1024, hidden_size=64, num_hidden_layers=4, layer_types=[LIN, LIN, LIN, FULL],
        num_attention_heads=4, num_key_value_heads=2, head_dim=32,
        linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16,
        linear_conv_kernel_dim=4, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
        shared_expert_intermediate_size=48, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True},
    ),
    # A second shape: other head counts and dims, 12 experts top-3, conv kernel 3, a different
    # layer pattern (two attention layers, one early), half-rotary heads. (A tied head made every
    # seed's f32 reference drift > 1e-4 from float64, so tied heads are tested in Rust instead.)
    "tiny-qwen35-b": dict(
        vocab_size=512, hidden_size=48, num_hidden_layers=6, layer_types=[LIN, FULL, LIN, LIN, LIN, FULL],
        num_attention_heads=6, num_key_value_heads=2, head_dim=16,
        linear_num_key_heads=2, linear_num_value_heads=6, linear_key_head_dim=24, linear_value_head_dim=12,
        linear_conv_kernel_dim=3, num_experts=12, num_experts_per_tok=3, moe_intermediate_size=16,
        shared_expert_intermediate_size=24, tie_word_embeddings=False,
        rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "partial_rotary_factor": 0.5,
                         "mrope_section": [2, 1, 1], "mrope_interleaved": True},
    ),
}
BF16_FIXTURE = ("tiny-qwen35-bf16", "tiny-qwen35")
T_A, T_B = 80, 37          # both sequences; 80 crosses the 64-token GDN chunk
DECODE_K = 70              # decode.logits: prefill 70, decode 10 one by one
RESUME_R, RESUME_C = 40, 30  # resume.logits: prefill 40, chunk of 30, then 10 decodes
MAX_F64_ERR = 5e-5         # max |HF f32 logits - HF float64 logits| accepted for a fixture


def check_pins():
    have = {"transformers": transformers.__version__, "torch": torch.__version__.split("+")[0],
            "safetensors": safetensors.__version__}
    for k, v in PINS.items():
        if have[k] != v:
            raise SystemExit(f"{k} {have[k]} installed, fixtures are pinned to {v}")
    return have


def randomise(model, gen):
    """Re-draw every parameter (names follow Qwen3_5MoeForCausalLM)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("A_log"):
                p.copy_(torch.empty(p.shape).uniform_(1.0, 8.0, generator=gen).log())
            elif name.endswith("dt_bias"):
                p.copy_(torch.empty(p.shape).uniform_(-1.0, 1.0, generator=gen))
            elif name.endswith("linear_attn.norm.weight"):      # gated RMSNorm, plain w
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=gen))
            elif p.dim() == 1:                                   # (1+w) RMSNorms
                p.copy_(0.3 * torch.randn(p.shape, generator=gen))
            elif name.endswith("embed_tokens.weight"):              # tied: also the head, keep logits O(1)
                std = 0.3 if model.config.tie_word_embeddings else 1.0
                p.copy_(std * torch.randn(p.shape, generator=gen))
            elif name.endswith("conv1d.weight"):
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
            elif name.endswith("mlp.gate.weight"):               # router: logits ~N(0,1), which maximises top-k margins
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))
            else:                                                # projections, experts [.., out, in]
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[-1]))


def capture(model, ids):
    """Full-sequence forward of one sequence: logits, per-layer raw outputs, router logits."""
    layer_outs = []
    hooks = [layer.register_forward_hook(lambda m, i, o: layer_outs.append((o[0] if isinstance(o, tuple) else o).detach()))
             for layer in model.model.layers]
    out = model(input_ids=ids[None], output_hidden_states=True, output_router_logits=True, use_cache=False)
    for h in hooks:
        h.remove()
    hidden = [out.hidden_states[0][0]] + [o[0] for o in layer_outs]
    routers = [r.reshape(ids.shape[0], -1) for r in out.router_logits]
    return out.logits[0], hidden, routers


def stepped_logits(model, ids, chunks):
    """Feed `ids` in the given chunk lengths through one DynamicCache; logits of every position
    after the first chunk."""
    from transformers import DynamicCache
    cache = DynamicCache(config=model.config)
    pos, rows = 0, []
    for i, c in enumerate(chunks):
        out = model(input_ids=ids[None, pos:pos + c], past_key_values=cache, use_cache=True)
        cache = out.past_key_values
        if i > 0:
            rows.append(out.logits[0])
        pos += c
    return torch.cat(rows, 0)


def topk_margin(routers, k):
    m = float("inf")
    for r in routers:
        p = torch.softmax(r.float(), -1).sort(-1, descending=True).values
        m = min(m, float((p[:, k - 1] - p[:, k]).min()))
    return m


def build(name, spec, out_dir, versions, seed, bf16_of=None):
    torch.manual_seed(seed)
    cfg = Qwen3_5MoeTextConfig(**spec, rms_norm_eps=1e-6, hidden_act="silu", bos_token_id=1, eos_token_id=2)
    model = Qwen3_5MoeForCausalLM._from_config(cfg, attn_implementation="eager", experts_implementation="eager",
                                               dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(seed)
    randomise(model, gen)
    if bf16_of is not None:   # round every weight to bf16; references computed in f32 from those
        with torch.no_grad():
            for p in model.parameters():
                p.copy_(p.to(torch.bfloat16).to(torch.float32))
    ids_a = torch.randint(0, spec["vocab_size"], (T_A,), generator=gen)
    ids_b = torch.randint(0, spec["vocab_size"], (T_B,), generator=gen)
    ref, margins = {"ids.a": ids_a, "ids.b": ids_b}, []
    with torch.no_grad():
        for tag, ids in (("a", ids_a), ("b", ids_b)):
            logits, hidden, routers = capture(model, ids)
            ref[f"logits.{tag}"] = logits
            for i, h in enumerate(hidden):
                ref[f"hidden.{tag}.{i}"] = h
            for i, r in enumerate(routers):
                ref[f"router.{tag}.{i}"] = r
            margins.append(topk_margin(routers, spec["num_experts_per_tok"]))
        ref["decode.logits"] = stepped_logits(model, ids_a, [DECODE_K] + [1] * (T_A - DECODE_K))
        ref["resume.logits"] = stepped_logits(model, ids_a, [RESUME_R, RESUME_C] + [1] * (T_A - RESUME_R - RESUME_C))
        full = ref["logits.a"]
        dec_err = float((ref["decode.logits"] - full[DECODE_K:]).abs().max())
        res_err = float((ref["resume.logits"] - full[RESUME_R:]).abs().max())
        bf16_err = None
        if bf16_of is not None:
            f32_state = {k: v.clone() for k, v in model.state_dict().items()}
            mb = model.to(torch.bfloat16)
            lb = mb(input_ids=ids_a[None], use_cache=False).logits[0].float()
            ref["bf16.logits.a"] = lb
            bf16_err = float((lb - full).abs().max())
    min_margin = min(margins)
    if not min_margin > 1e-4:
        print(f"{name}: seed {seed}: router top-k margin {min_margin:.2e} <= 1e-4, trying the next seed")
        return False
    # Conditioning: the f32 reference must sit well inside the 1e-4 test tolerance of the exact
    # (float64) result, otherwise a test at 1e-4 would measure f32 noise, not correctness.
    with torch.no_grad():
        m64 = Qwen3_5MoeForCausalLM._from_config(cfg, attn_implementation="eager", experts_implementation="eager",
                                                 dtype=torch.float64).eval()
        m64.load_state_dict({k: v.double() for k, v in model.state_dict().items()} if bf16_of is None
                            else {k: v.double() for k, v in f32_state.items()})
        f64_err = max(float((m64(input_ids=ids[None], use_cache=False).logits[0] - ref[f"logits.{tag}"].double()).abs().max())
                      for tag, ids in (("a", ids_a), ("b", ids_b)))
    if not f64_err < MAX_F64_ERR:
        print(f"{name}: seed {seed}: f32 reference is {f64_err:.2e} from float64, trying the next seed")
        return False
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d)  # bf16 fixture: the model was cast to bf16 above
    save_file({k: v.contiguous() for k, v in ref.items()}, os.path.join(d, "reference.safetensors"))
    meta = dict(versions=versions, seed=seed, T_a=T_A, T_b=T_B, decode_k=DECODE_K, resume_r=RESUME_R,
                resume_c=RESUME_C, min_topk_margin=min_margin, hf_decode_vs_full_max_err=dec_err,
                hf_resume_vs_full_max_err=res_err, hf_f32_vs_f64_max_err=f64_err, hf_bf16_vs_f32_max_err=bf16_err,
                weights_dtype="bfloat16" if bf16_of else "float32",
                n_params=sum(p.numel() for p in model.parameters()))
    with open(os.path.join(d, "reference_meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(name, json.dumps(meta))
    return True


def build_with_margin(name, spec, out_dir, versions, seed, bf16_of=None):
    """Try seeds from `seed` until every router top-k choice has a margin > 1e-4."""
    for s in range(seed, seed + 1000, 7):
        if build(name, spec, out_dir, versions, s, bf16_of):
            return
    raise SystemExit(f"{name}: no seed gave a router top-k margin > 1e-4")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="models")
    args = ap.parse_args()
    versions = check_pins()
    torch.set_num_threads(2)
    build_with_margin("tiny-qwen35", FIXTURES["tiny-qwen35"], args.out, versions, seed=1)
    build_with_margin("tiny-qwen35-b", FIXTURES["tiny-qwen35-b"], args.out, versions, seed=2)
    name, base = BF16_FIXTURE
    build_with_margin(name, FIXTURES[base], args.out, versions, seed=3, bf16_of=base)


if __name__ == "__main__":
    main()
