#!/usr/bin/env python3
"""Training throughput side by side on CPU: `execcritic grads` (forward + backward of the mean
next-token NLL, every parameter's gradient) vs PyTorch eager autograd on the same random
~170M-parameter Qwen3.5-MoE (the model benchmark's BENCH_SPEC), same thread count; plus the peak
RSS of our process with and without per-layer activation recomputation.

Run:  /work/.venv-ref/bin/python scripts/bench_train_cpu_vs_torch.py [--tokens 256] [--threads 2]
      (build first: cargo build --release; --bin points at the binary)
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import torch
from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu_vs_transformers import BENCH_SPEC  # noqa: E402
from make_fixtures import randomise  # noqa: E402


def ours(binary, model, ids, threads, recompute):
    cmd = ["/usr/bin/time", "-f", "MAXRSS %M", binary, "grads", "--model", model, "--ids", ",".join(map(str, ids)),
           "--out", os.path.join(model, "g.safetensors")] + (["--recompute"] if recompute else [])
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, check=True)
    secs = float(re.search(r"forward\+backward: ([0-9.]+) s", r.stderr).group(1))
    rss = int(re.search(r"MAXRSS (\d+)", r.stderr).group(1)) / 1024
    return secs, rss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bin", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "release", "execcritic"))
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = Qwen3_5MoeTextConfig(**BENCH_SPEC, hidden_act="silu", bos_token_id=1, eos_token_id=2)
    kw = dict(attn_implementation="eager", experts_implementation="eager", dtype=torch.float32)
    m = Qwen3_5MoeForCausalLM._from_config(cfg, **kw).train()
    randomise(m, torch.Generator().manual_seed(0))
    n_params = sum(p.numel() for p in m.parameters())
    d = tempfile.mkdtemp(prefix="bench-train-")
    m.save_pretrained(d)
    ids = torch.randint(0, cfg.vocab_size, (a.tokens,), generator=torch.Generator().manual_seed(1))
    times = []
    for _ in range(2):
        m.zero_grad()
        t0 = time.perf_counter()
        m(input_ids=ids[None], labels=ids[None], use_cache=False).loss.backward()
        times.append(time.perf_counter() - t0)
    torch_s = min(times)
    del m
    res = {"params_M": round(n_params / 1e6, 1), "tokens": a.tokens, "threads": a.threads,
           "torch_eager_fwd_bwd_s": round(torch_s, 3), "torch_tokens_per_s": round(a.tokens / torch_s, 1)}
    for rc in (False, True):
        secs, rss = ours(a.bin, d, ids.tolist(), a.threads, rc)
        tag = "recompute" if rc else "saved"
        res[f"ours_{tag}_fwd_bwd_s"] = round(secs, 3)
        res[f"ours_{tag}_tokens_per_s"] = round(a.tokens / secs, 1)
        res[f"ours_{tag}_peak_rss_MiB"] = round(rss)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
