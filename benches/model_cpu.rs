//! CPU engine benchmark (harness = false): prefill and batched decode throughput of the forward
//! pass on a Hugging Face model folder (weights kept in the checkpoint's format: f32 or bf16
//! matrices), the GFLOP/s of the large-GEMM kernel (f32 and bf16 weights), the bandwidth of the
//! decode GEMV with f32 and bf16 weights, the machine's streaming read bandwidth on the same
//! threads (the decode roofline) and the ISA path the engine ran on with its nominal
//! floating-point operations per cycle and core (bf16 dot products count double). Prints one
//! JSON object; scripts/bench_cpu_vs_transformers.py runs it next to transformers on the same
//! weights and turns these into fractions of their limits.
//!
//! `cargo bench --bench model_cpu -- DIR [--prefill 512] [--decode-steps 32] [--prompt 64]
//! [--stream-bytes N]`: with `--stream-bytes` the streaming read bandwidth is measured a second
//! time on a buffer of N bytes (the weights one decode step reads), read over and over as decode
//! reads its weights, so the part that stays in the last-level cache counts as it does in decode.
//! Threads: `RAYON_NUM_THREADS` (the script sets the same count for torch). ISA path:
//! `EXECCRITIC_CPU_PATH` (see `execcritic::tensor::cpu_path`). With `EXECCRITIC_PROFILE=1` it also
//! prints per-op times of each phase to stderr. `--prefill-only N` runs the prefill N times and
//! stops (no decode, kernels or bandwidth), for `perf record`. Heap policy:
//! `EXECCRITIC_HEAP=system` keeps the C library's defaults (see `execcritic::tensor::host_heap`);
//! the JSON says which was used.

use execcritic::model::{ForwardOptions, LogitsMode, Model, SeqInput};
use execcritic::tensor::cpu::matmul_t;
use execcritic::tensor::cpu_path;
use execcritic::tensor::linear::linear;
use execcritic::tensor::Weight;
use execcritic::tensor::profile;
use std::time::Instant;

fn arg(args: &[String], name: &str, default: usize) -> usize {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn tokens(n: usize, seed: u32, vocab: usize) -> Vec<u32> {
    (0..n as u32)
        .map(|i| {
            (i.wrapping_mul(2654435761)
                .wrapping_add(seed.wrapping_mul(40503))
                >> 7)
                % vocab as u32
        })
        .collect()
}

/// With `EXECCRITIC_PROFILE=1`: print the op-time table of the phase just measured (ms per
/// forward call over `calls` calls, share of the timed total) to stderr and clear it.
fn print_profile(phase: &str, calls: usize, wall_s: f64) {
    if !profile::is_enabled() {
        return;
    }
    let rows = profile::take();
    let total: f64 = rows.iter().map(|r| r.1).sum();
    eprintln!(
        "== {phase}: {:.2} ms per forward (wall), {:.2} ms in scopes",
        1e3 * wall_s / calls as f64,
        1e3 * total / calls as f64
    );
    for (name, s, n) in rows {
        eprintln!(
            "  {name:<18} {:>8.3} ms {:>5.1}%  ({} calls/forward)",
            1e3 * s / calls as f64,
            100.0 * s / total,
            n as usize / calls
        );
    }
}

fn best_of<F: FnMut() -> f64>(runs: usize, mut f: F) -> f64 {
    (0..runs).map(|_| f()).fold(f64::INFINITY, f64::min)
}

/// Streaming read bandwidth (GB/s) of the rayon pool: every thread sums its contiguous share of
/// a buffer of `bytes` as u64 words; best of 6 passes (the first also warms the caches).
fn stream_read_gb_s(bytes: usize) -> f64 {
    use rayon::prelude::*;
    let words = (bytes / 8).max(1 << 16);
    let buf: Vec<u64> = (0..words as u64).into_par_iter().map(|i| i.wrapping_mul(0x9E37_79B9)).collect();
    let share = words.div_ceil(rayon::current_num_threads()).max(1 << 16);
    let secs = best_of(6, || {
        let t = Instant::now();
        let sum: u64 = buf
            .par_chunks(share)
            .map(|c| {
                let lanes = c.chunks_exact(8).fold([0u64; 8], |mut a, v| {
                    for (x, y) in a.iter_mut().zip(v) {
                        *x = x.wrapping_add(*y);
                    }
                    a
                });
                lanes.iter().fold(0u64, |a, b| a.wrapping_add(*b))
            })
            .reduce(|| 0, |a, b| a.wrapping_add(b));
        let dt = t.elapsed().as_secs_f64();
        std::hint::black_box(sum);
        dt
    });
    (words * 8) as f64 / secs / 1e9
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let Some(dir) = args.first().filter(|a| !a.starts_with("--")) else {
        eprintln!("usage: cargo bench --bench model_cpu -- MODEL_DIR [--prefill N] [--decode-steps N] [--prompt N]");
        return;
    };
    let (prefill, steps, prompt) = (
        arg(&args, "--prefill", 512),
        arg(&args, "--decode-steps", 32),
        arg(&args, "--prompt", 64),
    );
    let model = Model::load(std::path::Path::new(dir)).expect("load model");
    let vocab = model.config().vocab_size;
    let last = ForwardOptions {
        logits: LogitsMode::Last,
        ..Default::default()
    };

    // Prefill: one sequence of `prefill` tokens.
    let ids = tokens(prefill, 1, vocab);
    profile::take();
    let only = arg(&args, "--prefill-only", 0);
    let mut wall = 0.0;
    let runs = if only > 0 { only } else { 2 };
    let prefill_s = best_of(runs, || {
        let mut st = model.new_state();
        let t = Instant::now();
        model
            .forward(&mut [SeqInput::new(&ids, &mut st)], &last)
            .unwrap();
        let dt = t.elapsed().as_secs_f64();
        wall += dt;
        dt
    });
    print_profile("prefill", runs, wall);
    if only > 0 {
        println!("{}", serde_json::json!({ "prefill_tokens": prefill, "prefill_tok_s": prefill as f64 / prefill_s }));
        return;
    }

    // Decode: `b` sequences with a `prompt`-token prefill (untimed), then `steps` batched steps.
    let mut decode = Vec::new();
    for b in [1usize, 8] {
        let mut wall = 0.0;
        let secs = best_of(2, || {
            let prompts: Vec<Vec<u32>> = (0..b)
                .map(|i| tokens(prompt, 10 + i as u32, vocab))
                .collect();
            let mut states: Vec<_> = (0..b).map(|_| model.new_state()).collect();
            for (p, st) in prompts.iter().zip(states.iter_mut()) {
                model.forward(&mut [SeqInput::new(p, st)], &last).unwrap();
            }
            let steps_ids = tokens(steps * b, 99, vocab);
            profile::take();
            let t = Instant::now();
            for s in 0..steps {
                let mut batch: Vec<SeqInput<'_>> = states
                    .iter_mut()
                    .enumerate()
                    .map(|(i, st)| SeqInput::new(&steps_ids[s * b + i..s * b + i + 1], st))
                    .collect();
                model.forward(&mut batch, &last).unwrap();
            }
            let dt = t.elapsed().as_secs_f64();
            wall += dt;
            dt
        });
        print_profile(&format!("decode b{b} (last run)"), steps, wall / 2.0);
        decode.push((b, (b * steps) as f64 / secs));
    }

    // Large GEMM: x[512, 2048] · W[4096, 2048]ᵀ.
    let (m, k, n) = (512usize, 2048usize, 4096usize);
    let x: Vec<f32> = (0..m * k).map(|i| (i % 17) as f32 * 0.01).collect();
    let w: Vec<f32> = (0..n * k).map(|i| (i % 13) as f32 * 0.01).collect();
    let mut out = vec![0.0f32; m * n];
    let gemm_s = best_of(3, || {
        let t = Instant::now();
        matmul_t(&x, m, k, &w, n, &mut out, true);
        t.elapsed().as_secs_f64()
    });
    // Decode-shaped GEMV: one row against the same weight (memory bound).
    let gemv_s = best_of(5, || {
        let t = Instant::now();
        matmul_t(&x[..k], 1, k, &w, n, &mut out[..n], true);
        t.elapsed().as_secs_f64()
    });

    // The same GEMV with bf16 weights (half the bytes; the format of bf16 checkpoints).
    let wb: Vec<half::bf16> = w.iter().map(|&v| half::bf16::from_f32(v)).collect();
    let gemv_bf16_s = best_of(5, || {
        let t = Instant::now();
        linear(&x[..k], 1, k, Weight::Bf16(&wb), n, &mut out[..n], true);
        t.elapsed().as_secs_f64()
    });

    let gemm_bf16_s = best_of(3, || {
        let t = Instant::now();
        linear(&x, m, k, Weight::Bf16(&wb), n, &mut out, true);
        t.elapsed().as_secs_f64()
    });

    // DRAM: 1 GiB, far beyond the caches; the decode step's working set when asked for.
    let stream_gb_s = stream_read_gb_s(1 << 30);
    let stream_bytes = arg(&args, "--stream-bytes", 0);
    let stream_step_gb_s = (stream_bytes > 0).then(|| stream_read_gb_s(stream_bytes));
    let path = cpu_path::active();

    let json = serde_json::json!({
        "cpu_path": path.name(),
        "cpu_path_flops_per_cycle": path.flops_per_cycle(),
        "cpu_path_f32_flops_per_cycle": path.f32_flops_per_cycle(),
        "bf16_activations": format!("{:?}", cpu_path::bf16_activations()),
        "heap": execcritic::tensor::host_heap::retain_freed_memory().name(),
        "stream_read_gb_s": stream_gb_s,
        "stream_step_bytes": stream_bytes,
        "stream_read_step_gb_s": stream_step_gb_s,
        "weights": format!("{:?}", model.matrix_dtype()),
        "threads": rayon::current_num_threads(),
        "prefill_tokens": prefill,
        "prefill_tok_s": prefill as f64 / prefill_s,
        "decode_steps": steps,
        "decode_prompt": prompt,
        "decode_b1_tok_s": decode[0].1,
        "decode_b8_tok_s": decode[1].1,
        "gemm_shape": [m, k, n],
        "gemm_gflops": 2.0 * (m * n * k) as f64 / gemm_s / 1e9,
        "gemm_bf16_gflops": 2.0 * (m * n * k) as f64 / gemm_bf16_s / 1e9,
        "gemv_gb_s": (n * k * 4) as f64 / gemv_s / 1e9,
        "gemv_bf16_gb_s": (n * k * 2) as f64 / gemv_bf16_s / 1e9,
    });
    println!("{json}");
}
