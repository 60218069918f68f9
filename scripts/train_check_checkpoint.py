#!/usr/bin/env python3
"""A checkpoint written by `execcritic train sft` loads in transformers and gives our logits.

Run:  /work/.venv-ref/bin/python scripts/train_check_checkpoint.py [--bin target/debug/execcritic]
      (pins as scripts/make_fixtures.py: transformers==5.23.0 torch==2.15.0)

1. writes a tiny SFT data set (token ids + assistant masks) and a TOML config in a temp folder,
2. runs `execcritic train sft` for 3 steps (lr 1e-3) on models/tiny-qwen35 → <tmp>/out/final,
3. loads that folder with transformers (eager) and with `execcritic logits`, on 40 token ids,
4. prints the max |Δlogit| and how far the weights moved; exits 1 when Δ > 1e-4.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from transformers import Qwen3_5MoeForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", "target"), "debug", "execcritic"))
    ap.add_argument("--model", default="models/tiny-qwen35")
    a = ap.parse_args()
    model = os.path.abspath(a.model)
    tmp = tempfile.mkdtemp(prefix="train-ck-")
    with open(os.path.join(tmp, "data.jsonl"), "w") as f:
        for s in range(4):
            ids = [(i * 37 + s * 101 + 5) % 1024 for i in range(24)]
            f.write(json.dumps({"ids": ids, "mask": [i >= 8 for i in range(24)]}) + "\n")
    with open(os.path.join(tmp, "sft.toml"), "w") as f:
        f.write(f'model = "{model}"\ndata = "data.jsonl"\nout = "out"\nsteps = 3\nbatch_size = 2\n'
                f'shard_bytes = 500000\n[optimizer]\nlr = 1e-3\n')
    run = subprocess.run([a.bin, "train", "sft", "--config", os.path.join(tmp, "sft.toml")],
                         capture_output=True, text=True, check=True)
    print(run.stdout.strip())
    ck = os.path.join(tmp, "out", "final")
    ids = [(i * 53 + 7) % 1024 for i in range(40)]
    ours = json.loads(subprocess.run([a.bin, "logits", "--model", ck, "--ids", ",".join(map(str, ids))],
                                     capture_output=True, text=True, check=True).stdout)["logits"]
    kw = dict(attn_implementation="eager", experts_implementation="eager", dtype=torch.float32)
    hf = Qwen3_5MoeForCausalLM.from_pretrained(ck, **kw).eval()
    base = Qwen3_5MoeForCausalLM.from_pretrained(model, **kw).eval()
    with torch.no_grad():
        logits = hf(input_ids=torch.tensor([ids])).logits[0]
        moved = max(float((p - q).abs().max()) for p, q in zip(hf.parameters(), base.parameters()))
    err = float((logits - torch.tensor(ours)).abs().max())
    shards = sorted(f for f in os.listdir(ck) if f.startswith("model-"))
    print(json.dumps({"checkpoint": ck, "shards": len(shards), "max_weight_change": moved,
                      "max_abs_logit_diff_hf_vs_ours": err}))
    sys.exit(0 if err < 1e-4 and moved > 1e-4 else 1)


if __name__ == "__main__":
    main()
