//! Whole-model parity of the CUDA forward on the committed fixtures (models/tiny-qwen35*):
//! logits vs the CPU reference forward (itself checked against transformers to 1e-4 by
//! tests/model_parity.rs) within bf16 tolerance, decode through the caches ==
//! prefill, greedy generation identical to the CPU engine for 32 tokens; plus the full-size
//! Qwen3.5-35B-A3B benchmark on random weights generated on the GPU (`#[ignore]`, run by
//! scripts/gpu-check.sh). Built with `--features cuda`; skips without a GPU unless
//! `EXECCRITIC_REQUIRE_GPU=1`.
#![cfg(feature = "cuda")]

use execcritic::model::{ForwardOptions, LogitsMode, Model, ModelConfig, SeqInput};
use execcritic::tensor::cuda::forward::{CudaModel, CudaState};
use execcritic::tensor::cuda::Gpu;
use std::path::PathBuf;
use std::time::Instant;

/// Fixture folder: `$EXECCRITIC_MODELS/<name>` (the GPU host runs a prebuilt binary from another
/// path), else the crate's `models/<name>`.
fn fixture(name: &str) -> PathBuf {
    std::env::var_os("EXECCRITIC_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models"))
        .join(name)
}

/// The fixture's token ids `key` ("ids.a", "ids.b"; chosen by scripts/make_fixtures.py with a
/// router top-k margin check, so bf16 rounding does not flip experts).
fn fixture_ids(name: &str, key: &str) -> Vec<u32> {
    let bytes = std::fs::read(fixture(name).join("reference.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor(key).unwrap();
    assert_eq!(t.dtype(), safetensors::Dtype::I64);
    t.data()
        .chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as u32)
        .collect()
}

fn max_abs_err(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()))
}

/// CPU reference logits of every row of one sequence.
fn cpu_logits(cpu: &Model, toks: &[u32]) -> Vec<f32> {
    let mut s = cpu.new_state();
    let opts = ForwardOptions {
        logits: LogitsMode::All,
        ..Default::default()
    };
    cpu.forward(&mut [SeqInput::new(toks, &mut s)], &opts)
        .unwrap()
        .remove(0)
        .logits
        .data()
        .to_vec()
}

fn gpu() -> Option<Gpu> {
    match Gpu::new(0) {
        Ok(g) => Some(g),
        Err(e) => {
            if std::env::var("EXECCRITIC_REQUIRE_GPU").as_deref() == Ok("1") {
                panic!("GPU required but unavailable: {e}");
            }
            eprintln!("SKIP (no GPU): {e}");
            None
        }
    }
}

/// bf16 tolerance on logits: relative to the largest |logit| of the reference.
fn close_rel(what: &str, got: &[f32], want: &[f32], rel: f32) {
    let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-6);
    let err = max_abs_err(got, want);
    eprintln!("{what}: max abs err {err:.4e} (scale {scale:.3})");
    assert!(
        err <= rel * scale,
        "{what}: max abs err {err} > {rel} x {scale}"
    );
}

fn argmax(x: &[f32]) -> u32 {
    (0..x.len()).fold(0, |m, j| if x[j] > x[m] { j } else { m }) as u32
}

const REL: f32 = 0.05;

#[test]
fn fixtures_prefill_batch_matches_cpu_reference() {
    let Some(g) = gpu() else { return };
    for name in ["tiny-qwen35", "tiny-qwen35-b", "tiny-qwen35-bf16"] {
        let cpu = Model::load(&fixture(name)).unwrap();
        let m = CudaModel::load(&g, &fixture(name)).unwrap();
        let v = m.cfg.vocab_size;
        let (a, b) = (fixture_ids(name, "ids.a"), fixture_ids(name, "ids.b"));
        let mut st = CudaState::new(&g, &m.cfg, 2, 256, 256).unwrap();
        // both sequences in one packed batch (different lengths)
        let logits = m.forward(&g, &mut st, &[(0, &a), (1, &b)]).unwrap();
        close_rel(
            &format!("{name} logits.a"),
            &logits[..a.len() * v],
            &cpu_logits(&cpu, &a),
            REL,
        );
        close_rel(
            &format!("{name} logits.b"),
            &logits[a.len() * v..],
            &cpu_logits(&cpu, &b),
            REL,
        );
    }
}

#[test]
fn fixtures_decode_through_caches_equals_prefill() {
    let Some(g) = gpu() else { return };
    for name in ["tiny-qwen35", "tiny-qwen35-b"] {
        let m = CudaModel::load(&g, &fixture(name)).unwrap();
        let v = m.cfg.vocab_size;
        let (a, k) = (fixture_ids(name, "ids.a"), 40);
        let mut st = CudaState::new(&g, &m.cfg, 2, 256, 256).unwrap();
        let full = m.forward(&g, &mut st, &[(0, &a)]).unwrap();
        let mut inc = m.forward(&g, &mut st, &[(1, &a[..k])]).unwrap();
        for t in k..a.len() {
            inc.extend(m.forward(&g, &mut st, &[(1, &a[t..t + 1])]).unwrap());
        }
        assert_eq!(full.len(), a.len() * v);
        close_rel(&format!("{name} decode vs prefill"), &inc, &full, 0.02);
    }
}

#[test]
fn fixtures_greedy_32_tokens_equal_cpu() {
    let Some(g) = gpu() else { return };
    for name in ["tiny-qwen35", "tiny-qwen35-bf16"] {
        let cpu = Model::load(&fixture(name)).unwrap();
        let m = CudaModel::load(&g, &fixture(name)).unwrap();
        let prompt = &fixture_ids(name, "ids.b");
        let mut cs = cpu.new_state();
        let opts = ForwardOptions {
            logits: LogitsMode::Last,
            ..Default::default()
        };
        let mut st = CudaState::new(&g, &m.cfg, 1, 256, 256).unwrap();
        let v = m.cfg.vocab_size;
        let (mut cpu_out, mut gpu_out) = (vec![], vec![]);
        let mut c_last = cpu
            .forward(&mut [SeqInput::new(prompt, &mut cs)], &opts)
            .unwrap()
            .remove(0)
            .logits
            .data()
            .to_vec();
        let gl = m.forward(&g, &mut st, &[(0, prompt)]).unwrap();
        let mut g_last = gl[(prompt.len() - 1) * v..].to_vec();
        for _ in 0..32 {
            let (ct, gt) = (argmax(&c_last), argmax(&g_last));
            cpu_out.push(ct);
            gpu_out.push(gt);
            c_last = cpu
                .forward(&mut [SeqInput::new(&[ct], &mut cs)], &opts)
                .unwrap()
                .remove(0)
                .logits
                .data()
                .to_vec();
            g_last = m.forward(&g, &mut st, &[(0, &[gt])]).unwrap();
        }
        assert_eq!(gpu_out, cpu_out, "{name}: greedy continuations differ");
    }
}

#[test]
fn fixture_routing_record_and_replay() {
    let Some(g) = gpu() else { return };
    let name = "tiny-qwen35";
    let m = CudaModel::load(&g, &fixture(name)).unwrap();
    let (e, k, layers) = (
        m.cfg.num_experts,
        m.cfg.num_experts_per_tok,
        m.cfg.num_hidden_layers,
    );
    let a = fixture_ids(name, "ids.a");
    let mut st = CudaState::new(&g, &m.cfg, 2, 256, 256).unwrap();
    st.routing = Some(vec![]);
    let base = m.forward(&g, &mut st, &[(0, &a)]).unwrap();
    let rec = st.routing.take().unwrap();
    assert_eq!(rec.len(), layers);
    assert!(rec
        .iter()
        .all(|l| l.len() == a.len() * k && l.iter().all(|&x| x >= 0 && (x as usize) < e)));
    // replaying the recorded routing reproduces the logits exactly
    st.forced = Some(rec.clone());
    let replay = m.forward(&g, &mut st, &[(1, &a)]).unwrap();
    assert_eq!(
        replay, base,
        "replay of the recorded routing changed the logits"
    );
    // a different forced routing changes them; a malformed one is an error, not a launch
    let shifted: Vec<Vec<i32>> = rec
        .iter()
        .map(|l| l.iter().map(|&x| (x + 1) % e as i32).collect())
        .collect();
    st.reset_slot(&g, 1).unwrap();
    st.forced = Some(shifted);
    assert_ne!(m.forward(&g, &mut st, &[(1, &a)]).unwrap(), base);
    st.reset_slot(&g, 1).unwrap();
    st.forced = Some(vec![vec![0; 3]]);
    assert!(m.forward(&g, &mut st, &[(1, &a)]).is_err());
}

/// The exact text config of Qwen3.5-35B-A3B (shared/reference/qwen35-architecture.md §1).
fn qwen35_35b_a3b() -> ModelConfig {
    let text = serde_json::json!({
        "model_type": "qwen3_5_moe_text", "vocab_size": 248320, "hidden_size": 2048,
        "num_hidden_layers": 40, "full_attention_interval": 4, "num_attention_heads": 16,
        "num_key_value_heads": 2, "head_dim": 256, "linear_num_key_heads": 16,
        "linear_num_value_heads": 32, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
        "linear_conv_kernel_dim": 4, "num_experts": 256, "num_experts_per_tok": 8,
        "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25},
        "tie_word_embeddings": false
    });
    ModelConfig::from_json_str(&text.to_string(), std::path::Path::new("qwen3.5-35b-a3b")).unwrap()
}

/// Full-size benchmark on random weights generated on the GPU. Prints one JSON line (and writes
/// `$OUT/cuda-bench.json` when OUT is set).
#[test]
#[ignore = "full-size benchmark: needs an H200-class GPU (run by scripts/gpu-check.sh)"]
fn full_size_benchmark() {
    let Some(g) = gpu() else { return };
    let cfg = qwen35_35b_a3b();
    let (free0, total) = g.ctx.mem_get_info().unwrap();
    let t0 = Instant::now();
    let m = CudaModel::random(&g, cfg.clone(), 1).unwrap();
    g.sync().unwrap();
    let load_s = t0.elapsed().as_secs_f64();
    let (prefill_len, slots) = (4096usize, 257usize);
    let mut st = CudaState::new(&g, &cfg, slots, prefill_len + 64, prefill_len).unwrap();
    let (free1, _) = g.ctx.mem_get_info().unwrap();
    let ids: Vec<u32> = (0..prefill_len as u32)
        .map(|i| (i * 7919) % cfg.vocab_size as u32)
        .collect();
    // prefill 4k tokens, one sequence (logits of the last row only, as in serving)
    let t1 = Instant::now();
    m.forward_last(&g, &mut st, &[(0, &ids)]).unwrap();
    let prefill_tps = prefill_len as f64 / t1.elapsed().as_secs_f64();
    // batch-1 decode (each step includes the host round trip of its logits)
    let steps = 32;
    let t2 = Instant::now();
    for i in 0..steps {
        m.forward_last(&g, &mut st, &[(0, &ids[i..i + 1])]).unwrap();
    }
    let b1_tps = steps as f64 / t2.elapsed().as_secs_f64();
    // concurrent decode: slots 1..=256 primed with 16 tokens each (two prefill calls)
    for half in [1..129usize, 129..257] {
        let chunk: Vec<(usize, &[u32])> = half.map(|s| (s, &ids[s..s + 16])).collect();
        m.forward_last(&g, &mut st, &chunk).unwrap();
    }
    let mut conc = serde_json::Map::new();
    for b in [64usize, 256] {
        let batch: Vec<(usize, &[u32])> = (1..=b).map(|s| (s, &ids[s..s + 1])).collect();
        let n = 8;
        let t3 = Instant::now();
        for _ in 0..n {
            m.forward_last(&g, &mut st, &batch).unwrap();
        }
        let tps = (n * b) as f64 / t3.elapsed().as_secs_f64();
        conc.insert(format!("decode_{b}_output_tok_s"), serde_json::json!(tps));
    }
    // MoE layer alone at a large batch (4096 tokens): FLOPs = T·k·3·2·H·I (+ shared expert)
    let t = prefill_len;
    m.moe_layer_only(&g, &mut st, 0, t).unwrap();
    g.sync().unwrap();
    let reps = 5;
    let t4 = Instant::now();
    for _ in 0..reps {
        m.moe_layer_only(&g, &mut st, 0, t).unwrap();
    }
    g.sync().unwrap();
    let moe_s = t4.elapsed().as_secs_f64() / reps as f64;
    let (h, i, k, e) = (
        cfg.hidden_size as f64,
        cfg.moe_intermediate_size as f64,
        cfg.num_experts_per_tok as f64,
        cfg.num_experts as f64,
    );
    let flops = t as f64 * (k + 1.0) * 3.0 * 2.0 * h * i;
    let bytes = (e + 1.0) * 3.0 * h * i * 2.0;
    let res = serde_json::json!({
        "gpu": g.ctx.name().unwrap_or_default(), "arch": g.arch,
        "load_random_weights_s": load_s, "weights_gib": (free0 - free1) as f64 / (1u64 << 30) as f64,
        "total_gib": total as f64 / (1u64 << 30) as f64,
        "prefill_4k_tok_s": prefill_tps, "decode_batch1_tok_s": b1_tps, "concurrent": conc,
        "moe_layer_4k_ms": moe_s * 1e3, "moe_layer_tflops": flops / moe_s / 1e12, "moe_layer_gb_s": bytes / moe_s / 1e9,
        "fraction_of_limits": {"decode_batch1_vs_800": b1_tps / 800.0, "moe_vs_989_tflops": flops / moe_s / 1e12 / 989.0,
                               "prefill_vs_80k": prefill_tps / 80000.0},
    });
    println!("CUDA_BENCH {res}");
    if let Ok(out) = std::env::var("OUT") {
        std::fs::write(
            std::path::Path::new(&out).join("cuda-bench.json"),
            serde_json::to_string_pretty(&res).unwrap(),
        )
        .unwrap();
    }
}
