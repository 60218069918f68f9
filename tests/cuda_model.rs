//! Whole-model parity of the CUDA forward on the committed fixtures (models/tiny-qwen35*), on the
//! real GPU when one is present and on the emulated device otherwise (same test bodies):
//! * f32 mode (activations and weights in f32): logits equal the CPU engine's (itself checked
//!   against transformers to 1e-4 by tests/model_parity.rs) to 1e-4, decode through the caches
//!   equals prefill, greedy generation identical to the CPU engine for 32 tokens;
//! * bf16 mode: the bf16 fixture's logits vs transformers' bf16 logits, f32 fixtures vs the CPU
//!   engine, both with the reference's routing forced (expert choices that sit within bf16 noise
//!   of a tie would otherwise flip), decode == prefill, routing record and replay;
//! (The full-size model-step benchmark is `full_size_model_step_benchmark` in
//! tests/engine_bench.rs.)
//! `EXECCRITIC_REQUIRE_GPU=1` makes a missing GPU a failure instead of falling back.

use execcritic::model::{ForwardOptions, LogitsMode, Model, ModelConfig, SeqInput};
use execcritic::model::backend::cuda::{CudaModel, CudaState};
use execcritic::tensor::cuda::{Act, ActType, Gpu};
use std::path::PathBuf;

/// Fixture folder: `$EXECCRITIC_MODELS/<name>` (the GPU host runs a prebuilt binary from another
/// path), else the crate's `models/<name>`.
/// The CPU engine on fixture `name` as the reference of the f32 mode: activations of bf16
/// products kept in f32 whatever `EXECCRITIC_BF16_ACTIVATIONS` says (`tensor::cpu_path`).
fn cpu_reference(name: &str) -> Model {
    execcritic::tensor::cpu_path::set_bf16_activations(execcritic::tensor::cpu_path::Bf16Activations::F32);
    Model::load(&fixture(name)).unwrap()
}

fn fixture(name: &str) -> PathBuf {
    std::env::var_os("EXECCRITIC_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("models"))
        .join(name)
}

/// One tensor of the fixture's `reference.safetensors` as (dtype, shape, raw bytes).
fn reference(name: &str, key: &str) -> (safetensors::Dtype, Vec<usize>, Vec<u8>) {
    let bytes = std::fs::read(fixture(name).join("reference.safetensors")).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor(key).unwrap();
    (t.dtype(), t.shape().to_vec(), t.data().to_vec())
}

/// The fixture's token ids `key` ("ids.a", "ids.b"; chosen by scripts/make_fixtures.py with a
/// router top-k margin check, so bf16 rounding does not flip experts).
fn fixture_ids(name: &str, key: &str) -> Vec<u32> {
    let (dt, _, data) = reference(name, key);
    assert_eq!(dt, safetensors::Dtype::I64);
    data.chunks_exact(8)
        .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as u32)
        .collect()
}

fn fixture_f32(name: &str, key: &str) -> (Vec<usize>, Vec<f32>) {
    let (dt, shape, data) = reference(name, key);
    assert_eq!(dt, safetensors::Dtype::F32);
    let v = data
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (shape, v)
}

/// The reference's routing of sequence `seq` ("a"/"b"): per layer the top-k experts of
/// transformers' router logits (ties to the lower index), in the forward's `[T · k]` layout.
fn reference_routing(name: &str, seq: &str, cfg: &ModelConfig) -> Vec<Vec<i32>> {
    let k = cfg.num_experts_per_tok;
    (0..cfg.num_hidden_layers)
        .map(|l| {
            let (shape, r) = fixture_f32(name, &format!("router.{seq}.{l}"));
            let e = shape[1];
            r.chunks_exact(e)
                .flat_map(|row| {
                    let mut order: Vec<usize> = (0..e).collect();
                    order.sort_by(|a, b| row[*b].total_cmp(&row[*a]).then(a.cmp(b)));
                    order[..k].iter().map(|&x| x as i32).collect::<Vec<_>>()
                })
                .collect()
        })
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

/// The real GPU when present, else the emulated device.
fn gpu() -> Gpu {
    let g = Gpu::auto().expect("no device: neither a GPU nor the emulator");
    eprintln!("device: {}", g.name());
    g
}

/// Tolerance on logits relative to the largest |logit| of the reference (at least 1).
fn close_rel(what: &str, got: &[f32], want: &[f32], rel: f32) {
    let scale = want.iter().fold(1.0f32, |m, v| m.max(v.abs()));
    let err = max_abs_err(got, want);
    eprintln!("{what}: max abs err {err:.4e} (scale {scale:.3})");
    assert!(
        err <= rel * scale,
        "{what}: max abs err {err} > {rel} x {scale}"
    );
}

/// bf16 tolerance: relative RMS error `‖got − want‖ / ‖want‖` and the share of rows whose top-1
/// token agrees. Element-wise maxima are not a fair bf16 measure: a few rows near a rounding
/// cliff (e.g. where transformers' bf16 run routed differently) dominate them.
fn close_bf16(what: &str, got: &[f32], want: &[f32], vocab: usize, rel_rms: f32, top1: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let num: f64 = got
        .iter()
        .zip(want)
        .map(|(a, b)| ((a - b) as f64).powi(2))
        .sum();
    let den: f64 = want.iter().map(|b| (*b as f64).powi(2)).sum();
    let rms = (num / den.max(1e-30)).sqrt() as f32;
    let rows = want.len() / vocab;
    let agree = (0..rows)
        .filter(|r| {
            let s = r * vocab..(r + 1) * vocab;
            argmax(&got[s.clone()]) == argmax(&want[s])
        })
        .count();
    eprintln!(
        "{what}: relative RMS error {rms:.4}, top-1 agreement {agree}/{rows}, max abs err {:.4}",
        max_abs_err(got, want)
    );
    assert!(
        rms <= rel_rms,
        "{what}: relative RMS error {rms} > {rel_rms}"
    );
    assert!(
        agree as f32 >= top1 * rows as f32,
        "{what}: top-1 agreement {agree}/{rows} < {top1}"
    );
}

fn argmax(x: &[f32]) -> u32 {
    (0..x.len()).fold(0, |m, j| if x[j] > x[m] { j } else { m }) as u32
}

/// f32 mode vs the CPU engine: max |error| relative to the largest |logit|.
const F32_TOL: f32 = 1e-4;
/// bf16 mode vs a bf16 reference (transformers in bf16) or the f32 CPU engine, routing forced:
/// relative RMS error and top-1 agreement (docs/cuda.md, "Tolerances"; measured 2-5 %, while
/// transformers' own bf16 run is 4.0 % from its f32 run on the bf16 fixture).
const BF16_RMS: f32 = 0.08;
const BF16_TOP1: f32 = 0.9;

const FIXTURES: [&str; 3] = ["tiny-qwen35", "tiny-qwen35-b", "tiny-qwen35-bf16"];

/// Both fixture sequences in one packed batch (different lengths) vs the CPU engine; with
/// `force`, the reference routing is replayed. f32: max-abs check; bf16: RMS + top-1.
fn prefill_batch_vs_cpu<A: Act>(g: &Gpu, name: &str, force: bool) {
    let cpu = cpu_reference(name);
    let m = CudaModel::<A>::load(g, &fixture(name)).unwrap();
    let v = m.cfg.vocab_size;
    let (a, b) = (fixture_ids(name, "ids.a"), fixture_ids(name, "ids.b"));
    let mut st = CudaState::new(g, &m.cfg, 2, 128, 128).unwrap();
    if force {
        let (ra, rb) = (
            reference_routing(name, "a", &m.cfg),
            reference_routing(name, "b", &m.cfg),
        );
        st.forced = Some(
            ra.into_iter()
                .zip(rb)
                .map(|(x, y)| [x, y].concat())
                .collect(),
        );
    }
    let logits = m.forward(g, &mut st, &[(0, &a), (1, &b)]).unwrap();
    let t = A::TYPE.suffix();
    let check = |what: String, got: &[f32], want: &[f32]| match A::TYPE {
        ActType::F32 => close_rel(&what, got, want, F32_TOL),
        ActType::Bf16 => close_bf16(&what, got, want, v, BF16_RMS, BF16_TOP1),
    };
    check(
        format!("{name} {t} logits.a"),
        &logits[..a.len() * v],
        &cpu_logits(&cpu, &a),
    );
    check(
        format!("{name} {t} logits.b"),
        &logits[a.len() * v..],
        &cpu_logits(&cpu, &b),
    );
}

#[test]
fn f32_mode_prefill_batch_matches_cpu_engine() {
    let g = gpu();
    for name in FIXTURES {
        prefill_batch_vs_cpu::<f32>(&g, name, false);
    }
}

#[test]
fn bf16_mode_prefill_batch_matches_cpu_engine_with_reference_routing() {
    let g = gpu();
    for name in FIXTURES {
        prefill_batch_vs_cpu::<u16>(&g, name, true);
    }
}

#[test]
fn bf16_mode_matches_transformers_bf16_logits() {
    let g = gpu();
    let name = "tiny-qwen35-bf16";
    let m = CudaModel::<u16>::load(&g, &fixture(name)).unwrap();
    let a = fixture_ids(name, "ids.a");
    let mut st = CudaState::new(&g, &m.cfg, 1, 128, 128).unwrap();
    st.forced = Some(reference_routing(name, "a", &m.cfg));
    let logits = m.forward(&g, &mut st, &[(0, &a)]).unwrap();
    let (_, want) = fixture_f32(name, "bf16.logits.a");
    close_bf16(
        "bf16 logits.a vs transformers bf16",
        &logits,
        &want,
        m.cfg.vocab_size,
        BF16_RMS,
        BF16_TOP1,
    );
}

/// Prefill the first 40 tokens, then decode one by one: equals one prefill of everything.
fn decode_equals_prefill<A: Act>(g: &Gpu, name: &str, tol: f32) {
    let m = CudaModel::<A>::load(g, &fixture(name)).unwrap();
    let v = m.cfg.vocab_size;
    let (a, k) = (fixture_ids(name, "ids.a"), 40);
    let mut st = CudaState::new(g, &m.cfg, 2, 128, 128).unwrap();
    st.routing = Some(vec![]);
    let full = m.forward(g, &mut st, &[(0, &a)]).unwrap();
    // the decode replays the prefill's routing, so a near-tie cannot flip an expert
    let rec = st.routing.take().unwrap();
    let kk = m.cfg.num_experts_per_tok;
    let rows = |r: std::ops::Range<usize>| -> Vec<Vec<i32>> {
        rec.iter()
            .map(|l| l[r.start * kk..r.end * kk].to_vec())
            .collect()
    };
    st.forced = Some(rows(0..k));
    let mut inc = m.forward(g, &mut st, &[(1, &a[..k])]).unwrap();
    for t in k..a.len() {
        st.forced = Some(rows(t..t + 1));
        inc.extend(m.forward(g, &mut st, &[(1, &a[t..t + 1])]).unwrap());
    }
    assert_eq!(full.len(), a.len() * v);
    close_rel(
        &format!("{name} {} decode vs prefill", A::TYPE.suffix()),
        &inc,
        &full,
        tol,
    );
}

/// The run-time switches (`tensor::cuda::switches`, `EXECCRITIC_CUDA_DISABLE`) on the bf16
/// fixture: a packed prefill (64-row tiles: the staged tensor-core expert GEMM with cp.async)
/// then decode steps of three sequences (16-row tiles: the weight-streaming GEMM). Without
/// cp.async and with the staged GEMM in place of the streaming one the logits are the same bits;
/// with the FMA expert GEMM (and SwiGLU as its own kernel) they agree to fp32 summation order,
/// as with every path off. The default run's routing is replayed, so an expert within rounding
/// of a tie cannot flip.
#[test]
fn switched_off_paths_give_the_default_paths_logits() {
    use execcritic::tensor::cuda::Switches;
    let g = gpu();
    let name = "tiny-qwen35-bf16";
    let m = CudaModel::<u16>::load(&g, &fixture(name)).unwrap();
    let a = fixture_ids(name, "ids.a");
    let steps: Vec<Vec<(usize, &[u32])>> = std::iter::once(vec![(0, &a[..]), (1, &a[..9])])
        .chain((0..3).map(|t| vec![(0, &a[t..t + 1]), (1, &a[t..t + 1]), (2, &a[t..t + 1])]))
        .collect();
    // (logits, the routing of every step)
    let run = |sw: Switches, replay: Option<&Vec<Vec<Vec<i32>>>>| {
        let g = g.clone().with_switches(sw);
        let mut st = CudaState::new(&g, &m.cfg, 3, 128, 128).unwrap();
        let (mut out, mut routing) = (vec![], vec![]);
        for (s, seqs) in steps.iter().enumerate() {
            match replay {
                Some(r) => st.forced = Some(r[s].clone()),
                None => st.routing = Some(vec![]),
            }
            out.extend(m.forward_last(&g, &mut st, seqs).unwrap());
            routing.extend(st.routing.take());
        }
        (out, routing)
    };
    let (want, routing) = run(Switches::default(), None);
    let off = |f: fn(&mut Switches)| {
        let mut s = Switches::default();
        f(&mut s);
        s
    };
    for (what, sw, exact) in [
        ("cp-async", off(|s| s.cp_async = false), true),
        ("stream-gemm", off(|s| s.stream_gemm = false), true),
        ("mma-gemm", off(|s| s.mma_gemm = false), false),
        ("all", Switches::PLAIN, false),
    ] {
        let (got, _) = run(sw, Some(&routing));
        if exact {
            assert_eq!(got, want, "{what} off");
        } else {
            close_rel(&format!("{what} off"), &got, &want, 1e-2);
        }
    }
}

#[test]
fn decode_through_caches_equals_prefill() {
    let g = gpu();
    for name in ["tiny-qwen35", "tiny-qwen35-b"] {
        decode_equals_prefill::<f32>(&g, name, F32_TOL);
        decode_equals_prefill::<u16>(&g, name, 0.02);
    }
}

#[test]
fn f32_mode_greedy_32_tokens_equal_cpu_engine() {
    let g = gpu();
    for name in ["tiny-qwen35", "tiny-qwen35-bf16"] {
        let cpu = cpu_reference(name);
        let m = CudaModel::<f32>::load(&g, &fixture(name)).unwrap();
        let prompt = &fixture_ids(name, "ids.b");
        let mut cs = cpu.new_state();
        let opts = ForwardOptions {
            logits: LogitsMode::Last,
            ..Default::default()
        };
        let mut st = CudaState::new(&g, &m.cfg, 1, 128, 64).unwrap();
        let (mut cpu_out, mut gpu_out) = (vec![], vec![]);
        let mut c_last = cpu
            .forward(&mut [SeqInput::new(prompt, &mut cs)], &opts)
            .unwrap()
            .remove(0)
            .logits
            .data()
            .to_vec();
        let mut g_last = m.forward_last(&g, &mut st, &[(0, prompt)]).unwrap();
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
    let g = gpu();
    let name = "tiny-qwen35";
    let m = CudaModel::<u16>::load(&g, &fixture(name)).unwrap();
    let (e, k, layers) = (
        m.cfg.num_experts,
        m.cfg.num_experts_per_tok,
        m.cfg.num_hidden_layers,
    );
    let a = fixture_ids(name, "ids.a");
    let mut st = CudaState::new(&g, &m.cfg, 2, 128, 128).unwrap();
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

#[test]
fn unsupported_shape_is_an_error_at_load() {
    let g = gpu();
    let mut cfg = ModelConfig::from_dir(&fixture("tiny-qwen35")).unwrap();
    cfg.head_dim = 512;
    let err = CudaModel::<f32>::random(&g, cfg, 1)
        .err()
        .expect("head_dim 512 must be refused");
    assert!(err.to_string().contains("head_dim 512"), "{err}");
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

#[test]
fn launches_per_step_equal_the_performance_model() {
    // The op counter at the device seam against model::backend::cuda::perf: a batch-3 decode step, a
    // prefill and one MoE layer of the tiny fixture launch exactly the kernels and GEMMs the
    // performance model lists (and no memset: counts are zeroed by the grouping kernel).
    use execcritic::model::backend::cuda::perf::{self, Step, H200};
    let g = gpu();
    let name = "tiny-qwen35";
    let m = CudaModel::<u16>::load(&g, &fixture(name)).unwrap();
    let cfg = ModelConfig::from_dir(&fixture(name)).unwrap();
    let mut st = CudaState::new(&g, &cfg, 3, 32, 16).unwrap();
    let ids: Vec<u32> = (0..8).map(|i| 5 + 3 * i).collect();
    let before = g.op_counts();
    m.forward_last(&g, &mut st, &[(0, &ids[..6])]).unwrap();
    let prefill = g.op_counts().since(before);
    m.forward_last(&g, &mut st, &[(1, &ids[..2]), (2, &ids[..3])]).unwrap();
    let before = g.op_counts();
    m.forward_last(&g, &mut st, &[(0, &ids[6..7]), (1, &ids[2..3]), (2, &ids[3..4])])
        .unwrap();
    let decode = g.op_counts().since(before);
    let before = g.op_counts();
    m.moe_layer_only(&g, &mut st, 0, 3).unwrap();
    let moe = g.op_counts().since(before);
    g.sync().unwrap();
    let want = |costs: &[perf::KernelCost]| {
        let t = perf::totals(costs, &H200);
        (t.launches, t.gemms, 0u64)
    };
    let got = |c: execcritic::tensor::cuda::OpCounts| (c.launches, c.gemms, c.memsets);
    eprintln!("decode step: {decode:?}, prefill: {prefill:?}, MoE layer: {moe:?}");
    assert_eq!(got(decode), want(&perf::step(&cfg, Step::Decode { batch: 3, context: 3 }, 2)));
    assert_eq!(got(prefill), want(&perf::step(&cfg, Step::Prefill { tokens: 6 }, 2)));
    assert_eq!(got(moe), want(&perf::moe_layer(&cfg, 3, 2)));
}

#[test]
fn released_and_fixture_configs_are_supported_shapes() {
    use execcritic::model::backend::cuda::check_supported;
    check_supported(&qwen35_35b_a3b()).unwrap();
    for name in FIXTURES {
        check_supported(&ModelConfig::from_dir(&fixture(name)).unwrap()).unwrap();
    }
}
