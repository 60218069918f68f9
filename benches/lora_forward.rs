//! LoRA forward benchmark (harness = false): one adapted projection `y = x·Wᵀ` of the real
//! Qwen3.5-35B-A3B's shapes, computed (a) over merged weights `W = W₀ + s·B·A` — one GEMM, what
//! the trainer does (`train::lora`) — and (b) with the adapter path added at run time,
//! `y = x·W₀ᵀ + s·(x·Aᵀ)·Bᵀ`, for decode-like (1–16 rows) and prefill-like (1k–4k rows) inputs;
//! plus the cost of one merge (paid once per optimizer step, per adapted weight). The CPU
//! trainer's GEMM (`train::ops::gemm`). Prints one JSON line per (projection, rows).
//!
//! `cargo bench --bench lora_forward [-- --rank 16 --rows 1,4,16,1024,4096]`
//! (the numbers in docs/train.md: `cargo bench --profile dev`, dependencies at opt-level 3).

use execcritic::train::ops::{gemm, linear, View};
use std::time::Instant;

/// (name, out, in) of the adapted projections of Qwen3.5-35B-A3B (hidden 2048).
const SHAPES: [(&str, usize, usize); 6] = [
    ("attn.q_proj", 8192, 2048),
    ("attn.o_proj", 2048, 4096),
    ("gdn.in_proj_qkv", 8192, 2048),
    ("gdn.out_proj", 2048, 4096),
    ("expert.gate_up", 512, 2048),
    ("expert.down", 2048, 512),
];

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).cloned()
}

fn vals(n: usize, seed: u32) -> Vec<f32> {
    (0..n).map(|i| ((((i as u32).wrapping_mul(2654435761) ^ seed) >> 9) % 2001) as f32 / 1000.0 - 1.0).collect()
}

/// Median seconds of `f` over enough repetitions to fill ~0.3 s (at least 3).
fn time(mut f: impl FnMut()) -> f64 {
    let mut runs = vec![];
    let start = Instant::now();
    while runs.len() < 3 || (start.elapsed().as_secs_f64() < 0.3 && runs.len() < 200) {
        let t = Instant::now();
        f();
        runs.push(t.elapsed().as_secs_f64());
    }
    runs.sort_by(f64::total_cmp);
    runs[runs.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let r: usize = arg(&args, "--rank").and_then(|v| v.parse().ok()).unwrap_or(16);
    let rows: Vec<usize> = arg(&args, "--rows")
        .map(|v| v.split(',').filter_map(|x| x.parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 4, 16, 1024, 4096]);
    let s = 2.0f32;
    for (name, out, inp) in SHAPES {
        let (w0, a, b) = (vals(out * inp, 1), vals(r * inp, 2), vals(out * r, 3));
        let mut w = w0.clone();
        let merge = time(|| {
            let mut ba = vec![0.0; out * inp];
            gemm(out, inp, r, View::rows(&b, r), View::rows(&a, inp), &mut ba, false);
            w.iter_mut().zip(w0.iter().zip(&ba)).for_each(|(x, (o, d))| *x = o + s * d);
        });
        for &m in &rows {
            let x = vals(m * inp, 4);
            let merged = time(|| {
                std::hint::black_box(linear(&x, m, inp, &w, out));
            });
            let adapter = time(|| {
                let mut y = linear(&x, m, inp, &w0, out);
                let mut xa = linear(&x, m, inp, &a, r);
                xa.iter_mut().for_each(|v| *v *= s);
                gemm(m, out, r, View::rows(&xa, r), View::t(&b, r), &mut y, true);
                std::hint::black_box(y);
            });
            println!(
                "{{\"projection\":\"{name}\",\"out\":{out},\"in\":{inp},\"rank\":{r},\"rows\":{m},\
                 \"merged_us\":{:.1},\"adapter_us\":{:.1},\"adapter_over_merged\":{:.3},\"merge_us\":{:.1}}}",
                merged * 1e6,
                adapter * 1e6,
                adapter / merged,
                merge * 1e6
            );
        }
    }
}
