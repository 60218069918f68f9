#!/usr/bin/env python3
"""Side-by-side CPU benchmark: execcritic's forward pass vs transformers eager, same weights,
same thread count, one run.

Builds a random-weight Qwen3.5-MoE of ~170M parameters with the real layer mix (3 Gated
DeltaNet : 1 gated attention) and saves it as f32 safetensors and, rounded to bf16 (the real
checkpoint's format), as bf16 safetensors. For each it measures
  * prefill: one 512-token sequence (tokens/s)
  * decode: batch 1 and batch 8, 32 steps after a 64-token prompt (generated tokens/s)
  * large GEMM [512x2048]·[2048x4096]: ours (gemm crate) vs torch.matmul, GFLOP/s, and the
    machine's nominal FMA peak
for transformers (torch eager, `attn_implementation="eager"`, `experts_implementation="eager"`)
and for `cargo bench --bench model_cpu`. Our engine keeps each checkpoint's format (bf16 weight
matrices stay bf16, f32 accumulation). transformers runs the f32 checkpoint in f32 and the bf16
checkpoint both in bf16 (its default for a bf16 checkpoint) and upcast to f32 (the very same
weight values); each bf16 ratio is taken against the FASTER of the two.
Every figure is also read against its limit: the report names the ISA path our engine ran on
(`EXECCRITIC_CPU_PATH`, chosen at start-up) and that path's nominal peak (threads x clock x
flops per cycle, bf16 dot products counting double) for the GEMM and the prefill's matrix
FLOPs, and the streaming read bandwidth the bench measured on the same threads for the decode
rows (weight bytes read per step / step time).

`--cpu-path avx2` forces our engine onto the AVX2 path and limits torch to AVX2 as well
(ATEN_CPU_CAPABILITY, DNNL_MAX_CPU_ISA, MKL_ENABLE_INSTRUCTIONS, set before torch loads): the
"AVX2-only machine" run on a machine that has more.
Prints a markdown report (and writes it with --write).

Run: scripts/bench_cpu_vs_transformers.sh [--threads 2] [--dtype f32|bf16|both] [--cpu-path PATH] [--write benches/results/cpu-engine.md]
"""
import argparse
import copy
import datetime
import json
import os
import platform
import subprocess
import sys
import time



def limit_torch_isa(argv):
    """With `--cpu-path avx2`: keep torch (ATen, oneDNN, MKL) on AVX2 too (must run before torch loads)."""
    if "--cpu-path" in argv and argv[argv.index("--cpu-path") + 1:][:1] == ["avx2"]:
        os.environ.update(ATEN_CPU_CAPABILITY="avx2", DNNL_MAX_CPU_ISA="AVX2", MKL_ENABLE_INSTRUCTIONS="AVX2")


limit_torch_isa(sys.argv)
import torch  # noqa: E402
from transformers import Qwen3_5MoeForCausalLM, Qwen3_5MoeTextConfig  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fixtures import randomise  # noqa: E402

LIN, FULL = "linear_attention", "full_attention"
BENCH_SPEC = dict(
    vocab_size=16384, hidden_size=1024, num_hidden_layers=8, layer_types=[LIN, LIN, LIN, FULL] * 2,
    num_attention_heads=8, num_key_value_heads=2, head_dim=128,
    linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=128, linear_value_head_dim=128,
    linear_conv_kernel_dim=4, num_experts=16, num_experts_per_tok=4, moe_intermediate_size=256,
    shared_expert_intermediate_size=256, tie_word_embeddings=False, rms_norm_eps=1e-6,
    rope_parameters={"rope_type": "default", "rope_theta": 10000000.0, "partial_rotary_factor": 0.25,
                     "mrope_section": [11, 11, 10], "mrope_interleaved": True},
)
PREFILL, STEPS, PROMPT = 512, 32, 64


def tokens(n, seed, vocab):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n,), generator=g)


def best_of(runs, f):
    return min(f() for _ in range(runs))


def bench_hf(model):
    from transformers import DynamicCache
    vocab = model.config.vocab_size
    out = {}
    with torch.no_grad():
        ids = tokens(PREFILL, 1, vocab)[None]

        def prefill():
            t = time.perf_counter()
            model(input_ids=ids, use_cache=True, logits_to_keep=1)
            return time.perf_counter() - t
        out["prefill_tok_s"] = PREFILL / best_of(2, prefill)
        for b in (1, 8):
            def decode():
                prompt = torch.stack([tokens(PROMPT, 10 + i, vocab) for i in range(b)])
                cache = DynamicCache(config=model.config)
                o = model(input_ids=prompt, past_key_values=cache, use_cache=True, logits_to_keep=1)
                cache = o.past_key_values
                step_ids = tokens(STEPS * b, 99, vocab).view(STEPS, b)
                t = time.perf_counter()
                for s in range(STEPS):
                    o = model(input_ids=step_ids[s][:, None], past_key_values=cache, use_cache=True, logits_to_keep=1)
                    cache = o.past_key_values
                return time.perf_counter() - t
            out[f"decode_b{b}_tok_s"] = b * STEPS / best_of(2, decode)
        m, k, n = 512, 2048, 4096
        x, w = torch.randn(m, k), torch.randn(n, k)

        def mm():
            t = time.perf_counter()
            torch.nn.functional.linear(x, w)
            return time.perf_counter() - t
        out["gemm_gflops"] = 2 * m * n * k / best_of(3, mm) / 1e9
    return out


def cpu_mhz():
    """The clock in /proc/cpuinfo (MHz; boost may be higher), or None."""
    try:
        info = open("/proc/cpuinfo").read()
        return float([l for l in info.splitlines() if l.startswith("cpu MHz")][0].split(":")[1])
    except Exception:  # noqa: BLE001
        return None


def weight_bytes(model, batch, elem_bytes):
    """Weight bytes one decode step of `batch` sequences reads, and the matrix multiply-adds per
    token: every parameter but the embedding table (one row per token), the routed experts scaled
    by the expected share of experts the batch touches (top-k of E per token, independent)."""
    cfg = model.config
    e, k = cfg.num_experts, cfg.num_experts_per_tok
    touched = 1 - (1 - k / e) ** batch
    read, macs = 0.0, 0.0
    for name, p in model.named_parameters():
        if "embed_tokens" in name:
            continue
        routed = ".experts." in name and "shared" not in name
        read += p.numel() * (touched if routed else 1)
        if p.dim() >= 2:
            macs += p.numel() * (k / e if routed else 1)
    return read * elem_bytes, macs


def run_ours(root, threads, path, cpu_path, stream_bytes, activations=None):
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads), CARGO_TARGET_DIR=os.environ.get("CARGO_TARGET_DIR", "/work/target"))
    env.pop("EXECCRITIC_BF16_ACTIVATIONS", None)
    if activations:
        env["EXECCRITIC_BF16_ACTIVATIONS"] = activations
    if cpu_path:
        env["EXECCRITIC_CPU_PATH"] = cpu_path
    # MODEL_CPU_BIN: an already built `model_cpu` bench binary (skips cargo).
    cmd = [os.environ["MODEL_CPU_BIN"]] if os.environ.get("MODEL_CPU_BIN") else ["cargo", "bench", "--bench", "model_cpu", "--"]
    res = subprocess.run(cmd + [path, "--prefill", str(PREFILL), "--decode-steps", str(STEPS), "--prompt", str(PROMPT),
                                "--stream-bytes", str(int(stream_bytes))],
                         cwd=root, env=env, capture_output=True, text=True)
    if res.returncode != 0:
        sys.exit(res.stderr[-3000:])
    return json.loads([l for l in res.stdout.splitlines() if l.startswith("{")][-1])


ROWS = [("prefill 512 tokens (tok/s)", "prefill_tok_s"), ("decode batch 1 (tok/s)", "decode_b1_tok_s"),
        ("decode batch 8 (tok/s)", "decode_b8_tok_s")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dir", default="/tmp/execcritic-bench-model")
    ap.add_argument("--dtype", choices=["f32", "bf16", "both"], default="both")
    ap.add_argument("--write", default=None)
    ap.add_argument("--cpu-path", default=None, help="force our ISA path (avx2 also limits torch to AVX2)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    cfg = Qwen3_5MoeTextConfig(**BENCH_SPEC, hidden_act="silu")
    model = Qwen3_5MoeForCausalLM._from_config(cfg, attn_implementation="eager", experts_implementation="eager",
                                               dtype=torch.float32).eval()
    randomise(model, torch.Generator().manual_seed(0))
    n_params = sum(p.numel() for p in model.parameters())

    mhz = cpu_mhz()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True).stdout.strip()
    cpu = [l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")][0]
    lines = [
        "## Run: CPU engine vs transformers (eager), same weights, same threads",
        "",
        f"- date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}, commit `{commit}`",
        f"- machine: {cpu}, {os.cpu_count()} vCPUs, {platform.system()} {platform.release()}; threads used: {args.threads}",
        f"- model: random-weight Qwen3.5-MoE, {n_params / 1e6:.1f}M params, 8 layers (3 GDN : 1 gated attention),"
        f" hidden 1024, 16 experts top-4, vocab 16384",
        f"- transformers {__import__('transformers').__version__}, torch {torch.__version__}; ours: "
        "`cargo bench --bench model_cpu` (release)",
        f"- decode: {STEPS} steps after a {PROMPT}-token prompt per sequence; best of 2 runs each",
        f"- forced: EXECCRITIC_CPU_PATH={args.cpu_path}; torch: " + ", ".join(
            f"{v}={os.environ[v]}" for v in ("ATEN_CPU_CAPABILITY", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")
            if v in os.environ) if args.cpu_path else "- ISA path: the best the CPU supports (not forced)",
    ]
    tables, loads = [], [f"{os.getloadavg()[0]:.1f} at start"]
    for dtype in (["f32", "bf16"] if args.dtype == "both" else [args.dtype]):
        path = f"{args.dir}-{dtype}"
        if dtype == "f32":
            variants = {"f32": model}
            model.save_pretrained(path)
        else:
            low = copy.deepcopy(model).to(torch.bfloat16)
            low.save_pretrained(path)
            variants = {"bf16": low, "f32 (upcast)": copy.deepcopy(low).float()}
        print(f"{dtype} checkpoint -> {path}", file=sys.stderr)
        elem = 2 if dtype == "bf16" else 4
        step1_bytes, _ = weight_bytes(model, 1, elem)
        ours = run_ours(root, args.threads, path, args.cpu_path, step1_bytes)
        # bf16 checkpoints also with the activations rounded to bf16 (transformers' bf16 contract).
        rounded = run_ours(root, args.threads, path, args.cpu_path, step1_bytes, "bf16") if dtype == "bf16" else None
        loads.append(f"{os.getloadavg()[0]:.1f} after ours ({dtype})")
        hf = {name: bench_hf(m) for name, m in variants.items()}
        loads.append(f"{os.getloadavg()[0]:.1f} after transformers ({dtype})")
        names = list(hf)
        t = [f"**{dtype} checkpoint** (ours: weight matrices in {ours.get('weights', '?')}, heap policy `{ours.get('heap', '?')}`)", "",
             "| measure | execcritic | " + " | ".join(f"transformers {n}" for n in names) + " | ratio |",
             "|---|---|" + "---|" * len(names) + "---|"]
        if rounded:
            t[2] = t[2].replace("| execcritic |", "| execcritic | execcritic, bf16 activations |").replace(
                "| ratio |", "| ratio | ratio, bf16 activations |")
            t[3] += "---|---|"
        for label, key in ROWS:
            best = max(hf[n][key] for n in names)
            t.append(f"| {label} | {ours[key]:.1f} | " + (f"{rounded[key]:.1f} | " if rounded else "")
                     + " | ".join(f"{hf[n][key]:.1f}" for n in names) + f" | {ours[key] / best:.2f}x |"
                     + (f" {rounded[key] / best:.2f}x |" if rounded else ""))
        # f32 weights multiply in f32 whatever the path: their limit is the path's f32 peak.
        fpc = ours["cpu_path_flops_per_cycle"] if dtype == "bf16" else ours.get("cpu_path_f32_flops_per_cycle", ours["cpu_path_flops_per_cycle"])
        peak = args.threads * mhz / 1000 * fpc if mhz else None
        step_gb_s = ours.get("stream_read_step_gb_s") or ours["stream_read_gb_s"]
        _, macs = weight_bytes(model, 1, elem)
        best_prefill = max(ours["prefill_tok_s"], rounded["prefill_tok_s"] if rounded else 0)
        gflops = 2 * macs * best_prefill / 1e9
        t += ["", f"Limits ({dtype}): ISA path `{ours['cpu_path']}`, nominal peak "
              + (f"{peak:.0f} GFLOP/s ({args.threads} threads x {mhz / 1000:.2f} GHz x "
                 f"{fpc:.0f} flop/cycle)" if peak else "unknown")
              + "; streaming read bandwidth "
              f"{ours['stream_read_gb_s']:.1f} GB/s from DRAM (1 GiB), {step_gb_s:.1f} GB/s over a buffer of the "
              f"batch-1 step's {step1_bytes / 1e6:.0f} MB read again and again ({args.threads} threads)."]
        t.append(f"Prefill matrix FLOPs{' (the faster contract)' if rounded else ''}: {gflops:.1f} GFLOP/s" + (f" = {100 * gflops / peak:.0f}% of the path peak." if peak else "."))
        for b in (1, 8):
            step_bytes, _ = weight_bytes(model, b, elem)
            bw = step_bytes * ours[f"decode_b{b}_tok_s"] / b / 1e9
            t.append(f"Decode batch {b}: {step_bytes / 1e6:.0f} MB of weights per step -> {bw:.1f} GB/s = "
                     f"{100 * bw / step_gb_s:.0f}% of the step-sized streaming read bandwidth "
                     f"({100 * bw / ours['stream_read_gb_s']:.0f}% of DRAM's).")
        tables.append((t, ours, hf, rounded))
    lines.append(f"- 1-min load average (the machine is shared): {', '.join(loads)}")
    lines.append("")
    for t, *_ in tables:
        lines.extend(t)
        lines.append("")
    ours, hf = tables[0][1], next(iter(tables[0][2].values()))
    lines += ["| kernel | execcritic | torch | ratio |", "|---|---|---|---|",
              f"| GEMM 512x2048x4096 f32 (GFLOP/s) | {ours['gemm_gflops']:.1f} | {hf['gemm_gflops']:.1f} | "
              f"{ours['gemm_gflops'] / hf['gemm_gflops']:.2f}x |", ""]
    peak = args.threads * mhz / 1000 * ours["cpu_path_flops_per_cycle"] if mhz else None
    peak32 = args.threads * mhz / 1000 * ours.get("cpu_path_f32_flops_per_cycle", ours["cpu_path_flops_per_cycle"]) if mhz else None
    # bf16 weights: exact activations (the default), and rounded to bf16 where that run exists.
    rounded = next((t[3] for t in tables if t[3]), None)
    gemm_exact = ours.get("gemm_bf16_gflops", float("nan"))
    gemm_rounded = rounded["gemm_bf16_gflops"] if rounded else float("nan")
    lines[-1:-1] = [f"| GEMM 512x2048x4096 bf16 weights, exact activations (GFLOP/s) | {gemm_exact:.1f} | | |"] + (
        [f"| GEMM 512x2048x4096 bf16 weights, bf16 activations (GFLOP/s) | {gemm_rounded:.1f} | | |"] if rounded else [])
    if peak:
        lines.append(f"Large-GEMM efficiency: ours {ours['gemm_gflops']:.1f} GFLOP/s f32, "
                     f"{gemm_exact:.1f} / {gemm_rounded:.1f} GFLOP/s bf16 weights (exact / bf16 activations); torch f32 "
                     f"{hf['gemm_gflops']:.1f} GFLOP/s; nominal peaks of our `{ours['cpu_path']}` path: bf16 "
                     f"{peak:.0f} GFLOP/s ({args.threads} threads x {mhz / 1000:.2f} GHz x "
                     f"{ours['cpu_path_flops_per_cycle']:.0f} flop/cycle, bf16 dot products counting double), f32 "
                     f"{peak32:.0f} GFLOP/s (the clock in /proc/cpuinfo, boost may be higher): "
                     f"f32 {100 * ours['gemm_gflops'] / peak32:.0f}%, bf16 weights with exact activations "
                     f"{100 * gemm_exact / peak32:.0f}% of the f32 peak, with bf16 activations "
                     f"{100 * gemm_rounded / peak:.0f}% of the bf16 peak. Decode GEMV bandwidth (ours, "
                     f"4096x2048): f32 {ours['gemv_gb_s']:.1f} GB/s, bf16 {ours.get('gemv_bf16_gb_s', float('nan')):.1f} GB/s "
                     f"of {ours['stream_read_gb_s']:.1f} GB/s streaming read.")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.write:  # append: the file keeps every run (shared machines make single runs noisy)
        with open(args.write, "a") as f:
            f.write(("\n" if os.path.exists(args.write) and os.path.getsize(args.write) else "") + report)


if __name__ == "__main__":
    main()
