//! The GPU benchmarks of the serving path, each a [`PhaseLog`] whose JSON is rewritten after
//! every phase (a failed phase is recorded and the next one runs):
//! * the engine benchmark (`engine::bench::run`): every scenario through the real engine loop
//!   on a CUDA model with random weights;
//! * the model-step benchmark (`engine::bench::model_steps`): the forward step by step with
//!   sampling on the device and decode steps replayed as CUDA graphs, the MoE layer alone, the
//!   host cost of empty launches.
//!
//! In CI both run on the emulated device at the tiny fixture's shape (smoke tests of every
//! phase, of the record written after each phase, and of a failing scenario recorded while the
//! later ones still run; no timing threshold). Ignored here and run by `scripts/gpu-check.sh`
//! on an H200 at the Qwen3.5-35B-A3B shape: `full_size_model_step_benchmark` writes
//! `$OUT/cuda-bench.json`, `full_size_engine_benchmark` `$OUT/engine-bench.json` and its
//! summary `$OUT/h200-engine.json` (issue #15's keys). With `EXECCRITIC_BENCH_SHAPE=tiny` the
//! ignored tests run the tiny plans on the emulator instead (`gpu-check.sh --rehearse`).

use execcritic::engine::bench::{self, BenchPlan, BenchReport, DeviceProbe, PhaseLog, StepPlan};
use execcritic::engine::cuda_backend::CudaDecoder;
use execcritic::model::backend::cuda::perf::H200;
use execcritic::model::backend::cuda::{CudaModel, CudaState};
use execcritic::model::config::ModelConfig;
use execcritic::model::tokenizer::Tokenizer;
use execcritic::tensor::cuda::{Act, Gpu};
use serde_json::{json, Value};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

fn models() -> PathBuf {
    std::env::var_os("EXECCRITIC_MODELS")
        .map(Into::into)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("models"))
}

fn tiny_cfg() -> ModelConfig {
    ModelConfig::from_dir(&models().join("tiny-qwen35")).unwrap()
}

/// The engine benchmark of `plan` on `model`: the MoE layer alone first (its own scratch,
/// freed before the engine's caches are allocated), then the engine's caches and scenarios.
fn engine_benchmark<A: Act>(
    gpu: &Gpu,
    model: CudaModel<A>,
    plan: &BenchPlan,
    log: &mut PhaseLog,
) -> BenchReport {
    let cfg = model.cfg.clone();
    let probe = DeviceProbe::new(gpu);
    let moe_tokens = plan.prefill_tokens;
    log.phase(&format!("moe_layer_{moe_tokens}"), &probe, || {
        let mut st = CudaState::<A>::new(gpu, &cfg, 1, 16, moe_tokens)?;
        bench::moe_layer(gpu, &model, &mut st, moe_tokens, 5, plan.act_bytes, &H200)
    });
    let mut decoder = None;
    log.phase("allocate_caches", &probe, || {
        let cache = plan.cache();
        decoder = Some(CudaDecoder::with_cache(
            gpu.clone(),
            model,
            cache,
            plan.step_tokens(),
        )?);
        Ok(json!({"slots": cache.slots, "max_len": cache.max_len, "kv_tokens": cache.kv_tokens}))
    });
    let Some(decoder) = decoder.map(Arc::new) else {
        return BenchReport {
            roofline_device: H200.name,
            scenarios: vec![],
            failed: vec!["allocate_caches".into()],
        };
    };
    let tokenizer = match Tokenizer::from_dir(&models().join("tokenizer")) {
        Ok(t) => Arc::new(t),
        Err(e) => {
            log.phase("tokenizer", &probe, || -> bench::PhaseResult<()> {
                Err(e.into())
            });
            return BenchReport {
                roofline_device: H200.name,
                scenarios: vec![],
                failed: vec!["tokenizer".into()],
            };
        }
    };
    let d = decoder.clone();
    let probe = probe.with_graphs(move || d.decode_graphs().ok());
    bench::run(decoder, tokenizer, &cfg, plan, &H200, &probe, log)
}

/// Issue #15's keys from an engine-benchmark record (`h200-engine.json`): every scenario's
/// tokens/s and fraction of its roofline limit, and the MoE layer's share of the BF16 peak.
fn h200_summary(doc: &Value) -> Value {
    let mut tok_s = serde_json::Map::new();
    let mut fraction = serde_json::Map::new();
    for p in doc["phases"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|p| p["status"] == "ok")
    {
        let (name, r) = (p["name"].as_str().unwrap_or_default(), &p["result"]);
        if name.starts_with("moe_layer_") {
            tok_s.insert("moe_layer_ms".into(), r["ms"].clone());
            tok_s.insert("moe_peak_fraction".into(), r["peak_fraction"].clone());
            fraction.insert(name.into(), r["fraction_of_limit"].clone());
        } else if r.get("tok_s").is_some() {
            let key = match name {
                "prefill_4096" => "prefill_4k_tok_s".to_string(),
                n if n.starts_with("decode_") => format!("{n}_output_tok_s"),
                n => format!("{n}_tok_s"),
            };
            tok_s.insert(key, r["tok_s"].clone());
            fraction.insert(name.into(), r["fraction_of_limit"].clone());
        }
    }
    let mut s = json!({"source": "engine benchmark (tests/engine_bench.rs)", "gpu": doc["gpu"],
                       "commit": doc["commit"], "date": doc["date"]});
    s.as_object_mut().unwrap().extend(tok_s);
    s["fraction_of_limit"] = Value::Object(fraction);
    s
}

/// A record kept in memory whose every write is also collected (the document after each phase).
fn watched() -> (PhaseLog, Rc<RefCell<Vec<Value>>>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut log = PhaseLog::new(Some(dir.path().join("bench.json")));
    let writes = Rc::new(RefCell::new(vec![]));
    let (w, path) = (writes.clone(), dir.path().join("bench.json"));
    log.on_write(move |doc| {
        // what is on disk at this moment is the document just written
        let on_disk = std::fs::read_to_string(&path).unwrap();
        assert_eq!(on_disk, serde_json::to_string_pretty(doc).unwrap());
        w.borrow_mut().push(serde_json::from_str(&on_disk).unwrap());
    });
    (log, writes, dir)
}

/// Statuses of the phases in a document, by name.
fn statuses(doc: &Value) -> Vec<(String, String)> {
    doc["phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                p["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Each phase appears as `running` in one write and with its outcome in the next.
fn assert_written_around_each_phase(writes: &[Value]) {
    let last = writes.last().unwrap();
    let phases = statuses(last);
    for (i, (name, status)) in phases.iter().enumerate() {
        let running = writes.iter().position(|d| {
            let s = statuses(d);
            s.len() == i + 1 && s[i] == (name.clone(), "running".into())
        });
        let running = running.unwrap_or_else(|| panic!("no write with {name} running"));
        let s = statuses(&writes[running + 1]);
        assert_eq!(
            s.get(i),
            Some(&(name.clone(), status.clone())),
            "the write after {name} ran"
        );
    }
    assert!(!phases.iter().any(|(_, s)| s == "running"), "{phases:?}");
}

#[test]
fn every_scenario_runs_through_the_engine_on_the_emulator() {
    let gpu = Gpu::emulator().unwrap();
    let model = CudaModel::<f32>::random(&gpu, tiny_cfg(), 3).unwrap();
    let plan = BenchPlan::tiny();
    let (mut log, writes, dir) = watched();
    let report = engine_benchmark(&gpu, model, &plan, &mut log);
    let doc = log.document();
    eprintln!("{doc:#}");
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    let names = bench::scenario_names(&plan);
    assert_eq!(names.len(), 5, "{names:?}");
    let got: Vec<&str> = report.scenarios.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(got, names);
    let phases: Vec<String> = statuses(&doc).into_iter().map(|(n, _)| n).collect();
    let mut want = vec![
        "moe_layer_24".to_string(),
        "allocate_caches".into(),
        "warmup".into(),
    ];
    want.extend(names.iter().cloned());
    assert_eq!(phases, want);
    assert!(
        statuses(&doc).iter().all(|(_, s)| s == "ok"),
        "{:?}",
        statuses(&doc)
    );
    assert_written_around_each_phase(&writes.borrow());
    let on_disk = std::fs::read_to_string(dir.path().join("bench.json")).unwrap();
    assert_eq!(on_disk, serde_json::to_string_pretty(&doc).unwrap());
    let leftovers = std::fs::read_dir(dir.path()).unwrap().count();
    assert_eq!(
        leftovers, 1,
        "only the record: no temporary file left behind"
    );
    for p in doc["phases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| names.contains(&p["name"].as_str().unwrap().to_string()))
    {
        let s = &p["result"];
        for key in ["seconds", "tok_s", "limit_tok_s", "fraction_of_limit"] {
            let v = s[key].as_f64().unwrap();
            assert!(v > 0.0 && v.is_finite(), "{}: {key} = {v}", s["name"]);
        }
        assert!(s["steps"].as_u64().unwrap() > 0, "{s}");
        assert_eq!(s["preemptions"], 0, "the plan's cache holds every scenario");
        let d = &p["device"];
        assert!(d["memory"]["in_use"].as_u64().unwrap() > 0, "{d}");
        assert!(
            d["memory"]["peak"].as_u64().unwrap() >= d["memory"]["in_use"].as_u64().unwrap(),
            "{d}"
        );
        assert!(d["ops_per_step"]["total"].as_f64().unwrap() > 0.0, "{d}");
        assert!(d["decode_graphs"].as_u64().is_some(), "{d}");
        assert!(d["clocks"].is_null(), "the emulator has no clocks: {d}");
    }
    // pure decode steps are replayed as graphs on the emulator too
    let decode = log.record("decode_4").unwrap();
    assert!(
        decode["device"]["ops"]["graph_launches"].as_u64().unwrap() > 0,
        "{decode}"
    );
    // the agents' later turns read only their new tokens
    let agents = report.get("agent_multi_turn").unwrap();
    assert!(agents.cached_tokens > 0, "{agents:?}");
    assert_eq!(report.get("decode_4").unwrap().decoded_tokens, 4 * 2);
    let moe = &doc["phases"][0]["result"];
    assert!(moe["fraction_of_limit"].as_f64().unwrap() > 0.0, "{moe}");
    let summary = h200_summary(&doc);
    assert!(
        summary["fraction_of_limit"]["prefill_24"].as_f64().unwrap() > 0.0,
        "{summary}"
    );
    assert!(
        summary["moe_peak_fraction"].as_f64().unwrap() > 0.0,
        "{summary}"
    );
}

#[test]
fn a_failing_scenario_is_recorded_and_the_later_ones_still_run() {
    // sequences of at most 20 tokens: the 24-token prefill cannot run, every other scenario can
    let gpu = Gpu::emulator().unwrap();
    let model = CudaModel::<f32>::random(&gpu, tiny_cfg(), 3).unwrap();
    let plan = BenchPlan::tiny();
    let mut cache = plan.cache();
    cache.max_len = 20;
    let decoder =
        Arc::new(CudaDecoder::with_cache(gpu.clone(), model, cache, plan.step_tokens()).unwrap());
    let tokenizer = Arc::new(Tokenizer::from_dir(&models().join("tokenizer")).unwrap());
    let (mut log, writes, _dir) = watched();
    let cfg = tiny_cfg();
    let report = bench::run(
        decoder,
        tokenizer,
        &cfg,
        &plan,
        &H200,
        &DeviceProbe::new(&gpu),
        &mut log,
    );
    let doc = log.document();
    assert_eq!(report.failed, vec!["prefill_24".to_string()]);
    let st = statuses(&doc);
    assert_eq!(
        st.iter().filter(|(_, s)| s == "ok").count(),
        st.len() - 1,
        "{st:?}"
    );
    let failed = log.record("prefill_24").unwrap();
    assert_eq!(failed["status"], "failed");
    assert!(
        failed["error"].as_str().unwrap().contains("max_len"),
        "{failed}"
    );
    // measured before the failure and after it
    assert_eq!(
        st.last().unwrap(),
        &("agent_multi_turn".to_string(), "ok".to_string())
    );
    assert!(report.get("decode_4").is_some() && report.get("agent_multi_turn").is_some());
    assert_written_around_each_phase(&writes.borrow());
}

/// The model-step benchmark of `plan` into `log` (random weights loaded as a phase).
fn model_step_benchmark<A: Act>(gpu: &Gpu, cfg: &ModelConfig, plan: &StepPlan, log: &mut PhaseLog) {
    if let Some(model) = bench::load_random::<A>(gpu, cfg, log) {
        bench::model_steps(&DeviceProbe::new(gpu), &model, plan, &H200, log);
    }
}

#[test]
fn model_steps_sample_on_the_device_and_replay_graphs_on_the_emulator() {
    let gpu = Gpu::emulator().unwrap();
    let plan = StepPlan::tiny();
    let (mut log, writes, _dir) = watched();
    model_step_benchmark::<f32>(&gpu, &tiny_cfg(), &plan, &mut log);
    let doc = log.document();
    eprintln!("{doc:#}");
    let mut want = vec![
        "load_random_weights".to_string(),
        "empty_launches".into(),
        "allocate_caches".into(),
    ];
    want.extend(bench::model_step_phases(&plan));
    assert_eq!(
        statuses(&doc),
        want.iter()
            .map(|n| (n.clone(), "ok".to_string()))
            .collect::<Vec<_>>()
    );
    assert_written_around_each_phase(&writes.borrow());
    let phase = |n: &str| log.result(n).unwrap().clone();
    let empty = phase("empty_launches");
    assert_eq!(empty["launches"], 1000);
    assert!(
        empty["host_us_per_launch"].as_f64().unwrap() > 0.0,
        "{empty}"
    );
    assert!(empty["graph_replay_s"].as_f64().unwrap() > 0.0, "{empty}");
    for b in &plan.batches {
        let d = phase(&format!("decode_{b}"));
        assert_eq!(d["graph_captured"], true, "{d}");
        // a timed step is one graph launch plus the sampling kernel, nothing else
        let per = &d["enqueued_per_timed_step"];
        assert_eq!(per["graph_launches"], 1.0, "{d}");
        assert_eq!(per["gemms"], 0.0, "{d}");
        assert!(per["kernels"].as_f64().unwrap() <= 1.0, "{d}");
        assert!(
            d["launches_per_step"]["total"].as_u64().unwrap() > 10,
            "{d}"
        );
        for k in [
            "measured",
            "limit",
            "fraction_of_limit",
            "replay_ms",
            "replay_fraction_of_limit",
        ] {
            assert!(
                d[k].as_f64().is_some_and(|v| v > 0.0 && v.is_finite()),
                "{k}: {d}"
            );
        }
    }
    let summary = &doc["summary"];
    for name in bench::model_step_phases(&plan) {
        assert!(
            summary[&name]["fraction_of_limit"].as_f64().unwrap() > 0.0,
            "{name}: {summary}"
        );
    }
}

#[test]
#[ignore = "full-size model-step benchmark: needs an H200-class GPU (run by scripts/gpu-check.sh)"]
fn full_size_model_step_benchmark() {
    let mut log = PhaseLog::from_env(
        "cuda-bench.json",
        "model-step benchmark (tests/engine_bench.rs)",
    );
    let Some((gpu, cfg, tiny)) = bench::open_bench_device(&mut log, &models()) else {
        panic!("no device: {:#}", log.document())
    };
    if tiny {
        model_step_benchmark::<f32>(&gpu, &cfg, &StepPlan::tiny(), &mut log);
    } else {
        model_step_benchmark::<u16>(&gpu, &cfg, &StepPlan::full(), &mut log);
    }
    println!("CUDA_BENCH {}", log.document()["summary"]);
    assert!(log.failed().is_empty(), "failed phases: {:?}", log.failed());
}

#[test]
#[ignore = "full-size engine benchmark: needs an H200-class GPU (run by scripts/gpu-check.sh)"]
fn full_size_engine_benchmark() {
    let mut log = PhaseLog::from_env(
        "engine-bench.json",
        "engine benchmark (tests/engine_bench.rs)",
    );
    if let Some(out) = std::env::var_os("OUT") {
        let path = Path::new(&out).join("h200-engine.json");
        log.on_write(move |doc| {
            if let Err(e) = bench::write_atomic(&path, &h200_summary(doc)) {
                eprintln!("could not write {}: {e}", path.display());
            }
        });
    }
    let Some((gpu, cfg, tiny)) = bench::open_bench_device(&mut log, &models()) else {
        panic!("no device: {:#}", log.document())
    };
    let report = if tiny {
        bench::load_random::<f32>(&gpu, &cfg, &mut log)
            .map(|m| engine_benchmark(&gpu, m, &BenchPlan::tiny(), &mut log))
    } else {
        bench::load_random::<u16>(&gpu, &cfg, &mut log)
            .map(|m| engine_benchmark(&gpu, m, &BenchPlan::full(), &mut log))
    };
    println!("ENGINE_BENCH {}", h200_summary(&log.document()));
    assert!(
        report.is_some() && log.failed().is_empty(),
        "failed phases: {:?}",
        log.failed()
    );
}
