//! The engine benchmark (`engine::bench`): every scenario through the real engine loop on a
//! CUDA model with random weights — on the emulated device at the tiny fixture's shape in CI (a
//! smoke test: every scenario present with positive numbers, no timing threshold), and, ignored
//! here and run by `scripts/gpu-check.sh` on an H200, at the real Qwen3.5-35B-A3B shape, writing
//! `$OUT/engine-bench.json` and `$OUT/h200-engine.json` (issue #15's keys).

use execcritic::engine::bench::{self, BenchPlan, BenchReport};
use execcritic::engine::cuda_backend::CudaDecoder;
use execcritic::model::backend::cuda::perf::{self, H200};
use execcritic::model::backend::cuda::{CudaModel, CudaState};
use execcritic::model::config::ModelConfig;
use execcritic::model::layout::qwen35_35b_a3b_config;
use execcritic::model::tokenizer::Tokenizer;
use execcritic::tensor::cuda::{Act, Gpu};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

fn models() -> std::path::PathBuf {
    std::env::var_os("EXECCRITIC_MODELS")
        .map(Into::into)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("models"))
}

fn tokenizer() -> Arc<Tokenizer> {
    Arc::new(Tokenizer::from_dir(&models().join("tokenizer")).unwrap())
}

/// The engine over a random-weight CUDA model of shape `cfg`, cache sized by the plan.
fn run<A: Act>(gpu: &Gpu, model: CudaModel<A>, plan: &BenchPlan) -> BenchReport {
    let cfg = model.cfg.clone();
    let decoder = CudaDecoder::with_cache(gpu.clone(), model, plan.cache(), plan.step_tokens())
        .unwrap();
    bench::run(Arc::new(decoder), tokenizer(), &cfg, plan, &H200).unwrap()
}

#[test]
fn every_scenario_runs_through_the_engine_on_the_emulator() {
    let gpu = Gpu::emulator().unwrap();
    let dir = models().join("tiny-qwen35");
    let cfg = ModelConfig::from_dir(&dir).unwrap();
    let model = CudaModel::<f32>::random(&gpu, cfg, 3).unwrap();
    let plan = BenchPlan::tiny();
    let report = run(&gpu, model, &plan);
    let json = serde_json::to_value(&report).unwrap();
    eprintln!("{json}");
    let names = bench::scenario_names(&plan);
    assert_eq!(names.len(), 5, "{names:?}");
    let got: Vec<&str> = json["scenarios"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(got, names);
    for s in json["scenarios"].as_array().unwrap() {
        for key in ["seconds", "tok_s", "limit_tok_s", "fraction_of_limit"] {
            let v = s[key].as_f64().unwrap();
            assert!(v > 0.0 && v.is_finite(), "{}: {key} = {v}", s["name"]);
        }
        assert!(s["steps"].as_u64().unwrap() > 0, "{s}");
        assert_eq!(s["preemptions"], 0, "the plan's cache holds every scenario");
    }
    // the agents' later turns read only their new tokens
    let agents = report.get("agent_multi_turn").unwrap();
    assert!(agents.cached_tokens > 0, "{agents:?}");
    let decode = report.get("decode_4").unwrap();
    assert_eq!(decode.decoded_tokens, 4 * 2, "{decode:?}");
}

/// Seconds of the MoE layer alone at `t` tokens (layer 0, after a warm-up).
fn moe_layer_seconds<A: Act>(gpu: &Gpu, m: &CudaModel<A>, t: usize) -> f64 {
    let mut st = CudaState::<A>::new(gpu, &m.cfg, 1, 16, t).unwrap();
    m.moe_layer_only(gpu, &mut st, 0, t).unwrap();
    gpu.sync().unwrap();
    let reps = 5;
    let t0 = Instant::now();
    for _ in 0..reps {
        m.moe_layer_only(gpu, &mut st, 0, t).unwrap();
    }
    gpu.sync().unwrap();
    t0.elapsed().as_secs_f64() / reps as f64
}

#[test]
#[ignore = "full-size engine benchmark: needs an H200-class GPU (run by scripts/gpu-check.sh)"]
fn full_size_engine_benchmark() {
    let gpu = Gpu::cuda(0).expect("the benchmark needs a GPU");
    let cfg = ModelConfig::from_json_str(
        &qwen35_35b_a3b_config().to_string(),
        Path::new("qwen3.5-35b-a3b"),
    )
    .unwrap();
    let model = CudaModel::<u16>::random(&gpu, cfg.clone(), 1).unwrap();
    // the MoE layer alone at 4,096 tokens, as a share of the BF16 peak (its own scratch, freed
    // before the engine's caches are allocated)
    let moe_s = moe_layer_seconds(&gpu, &model, 4096);
    let moe_flops = perf::totals(&perf::moe_layer(&cfg, 4096, 2), &H200).flops;
    let moe_peak_fraction = moe_flops / moe_s / H200.flops_s;
    let plan = BenchPlan::full();
    let report = run(&gpu, model, &plan);
    let tok_s = |name: &str| report.get(name).map_or(0.0, |s| s.tok_s);
    let fraction = |name: &str| report.get(name).map_or(0.0, |s| s.fraction_of_limit);
    let commit = std::env::var("EXECCRITIC_COMMIT").unwrap_or_else(|_| "unknown".into());
    let date = std::env::var("EXECCRITIC_DATE").unwrap_or_else(|_| "unknown".into());
    let h200 = serde_json::json!({
        "gpu": gpu.name(), "commit": commit, "date": date, "source": "engine benchmark (tests/engine_bench.rs)",
        "batch1_decode_tok_s": tok_s("batch1_decode"),
        "decode_256_output_tok_s": tok_s("decode_256"),
        "prefill_4k_tok_s": tok_s("prefill_4096"),
        "moe_peak_fraction": moe_peak_fraction,
        "moe_layer_4k_ms": moe_s * 1e3,
        "fraction_of_limit": {
            "batch1_decode": fraction("batch1_decode"), "decode_64": fraction("decode_64"),
            "decode_256": fraction("decode_256"), "prefill_4k": fraction("prefill_4096"),
            "agent_multi_turn": fraction("agent_multi_turn"), "moe_layer_4k": moe_peak_fraction,
        },
        "agent_multi_turn_tok_s": tok_s("agent_multi_turn"),
        "decode_64_output_tok_s": tok_s("decode_64"),
    });
    let full = serde_json::json!({"commit": commit, "gpu": gpu.name(), "report": report});
    println!("ENGINE_BENCH {h200}");
    if let Ok(out) = std::env::var("OUT") {
        let out = Path::new(&out);
        std::fs::write(out.join("h200-engine.json"), serde_json::to_string_pretty(&h200).unwrap())
            .unwrap();
        std::fs::write(out.join("engine-bench.json"), serde_json::to_string_pretty(&full).unwrap())
            .unwrap();
    }
}
