#!/usr/bin/env python3
"""Gradient references for the train layer: transformers autograd on a committed tiny fixture.

Pinned like scripts/make_fixtures.py: transformers==5.23.0 torch==2.15.0 safetensors==0.8.0.
Run:  /work/.venv-ref/bin/python scripts/make_grad_fixtures.py [--model models/tiny-qwen35]

Loads the fixture (eager attention, eager experts), runs one sequence of T=80 seeded token ids
(crosses the 64-token GDN chunk), loss = mean next-token NLL (HF's labels=ids loss), and writes
models/<fixture>/grad_reference.safetensors:
  ids                      the token ids (int64)
  loss                     [1] the loss
  grad.<HF name>           gradient of every parameter under its checkpoint name (fused experts
                           split per expert: gate = gate_up_proj[e, :I], up = gate_up_proj[e, I:])
The stored gradients are computed in float64 from the f32 weights (exact up to f64 rounding);
grad_reference_meta.json records, per parameter, the relative error of the f32 autograd
gradients against them (the f32 noise floor our 1e-3 test tolerance must sit well above).
"""
import argparse
import json
import os

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import Qwen3_5MoeForCausalLM

T, SEED = 80, 7


def grads_of(model, ids):
    model.zero_grad()
    out = model(input_ids=ids[None], labels=ids[None], use_cache=False)
    out.loss.backward()
    return float(out.loss), {n: p.grad.detach().clone() for n, p in model.named_parameters()}


def split_names(grads, disk_names, n_experts, inter):
    """Map in-memory parameter names to the checkpoint's names (per-expert when saved so)."""
    out = {}
    for n, g in grads.items():
        if n.endswith("experts.gate_up_proj") and n not in disk_names:
            base = n[: -len("gate_up_proj")]
            for e in range(n_experts):
                out[f"{base}{e}.gate_proj.weight"] = g[e, :inter]
                out[f"{base}{e}.up_proj.weight"] = g[e, inter:]
        elif n.endswith("experts.down_proj") and n not in disk_names:
            base = n[: -len("down_proj")]
            for e in range(n_experts):
                out[f"{base}{e}.down_proj.weight"] = g[e]
        else:
            out[n] = g
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/tiny-qwen35")
    a = ap.parse_args()
    kw = dict(attn_implementation="eager", experts_implementation="eager")
    m32 = Qwen3_5MoeForCausalLM.from_pretrained(a.model, dtype=torch.float32, **kw).train()
    m64 = Qwen3_5MoeForCausalLM.from_pretrained(a.model, dtype=torch.float64, **kw).train()
    cfg = m32.config
    with safe_open(os.path.join(a.model, "model.safetensors"), "pt") as f:
        disk = {k: f.get_tensor(k) for k in f.keys()}
    gen = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, cfg.vocab_size, (T,), generator=gen)
    loss32, g32 = grads_of(m32, ids)
    loss64, g64 = grads_of(m64, ids)
    g32 = split_names(g32, disk, cfg.num_experts, cfg.moe_intermediate_size)
    g64 = split_names(g64, disk, cfg.num_experts, cfg.moe_intermediate_size)
    # The split must reproduce the checkpoint's own per-expert tensors.
    p32 = split_names({n: p.detach() for n, p in m32.named_parameters()}, disk, cfg.num_experts, cfg.moe_intermediate_size)
    assert set(p32) == set(disk), sorted(set(p32) ^ set(disk))[:5]
    for n, v in p32.items():
        assert torch.equal(v, disk[n].to(v.dtype)), n
    rel = {n: float((g32[n].double() - g64[n]).norm() / g64[n].norm().clamp_min(1e-30)) for n in g64}
    out = {"ids": ids, "loss": torch.tensor([loss64], dtype=torch.float32)}
    out.update({f"grad.{n}": g.to(torch.float32).contiguous() for n, g in g64.items()})
    save_file(out, os.path.join(a.model, "grad_reference.safetensors"))
    meta = dict(T=T, seed=SEED, loss_f64=loss64, loss_f32=loss32, n_params=len(g64),
                max_rel_err_f32_vs_f64=max(rel.values()),
                worst=sorted(rel.items(), key=lambda kv: -kv[1])[:5])
    with open(os.path.join(a.model, "grad_reference_meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta, indent=1))


if __name__ == "__main__":
    main()
