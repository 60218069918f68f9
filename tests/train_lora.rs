//! LoRA adapters on attention, GDN and expert projections: zero-initialised B leaves the model
//! unchanged, the adapter gradients formed from activations and output gradients (no dense
//! gradient) equal the projection of the dense gradient for every projection kind and match
//! finite differences, SFT steps with adapters
//! lower the loss while every non-adapted parameter stays bit-identical, and the merged
//! checkpoint loads in the inference engine with the trained logits.

use execcritic::model::{ForwardOptions, LogitsMode, Model, SeqInput};
use execcritic::train::checkpoint::save;
use execcritic::train::grpo::GrpoConfig;
use execcritic::train::lora::{Lora, LoraConfig};
use execcritic::train::loss::mean_nll;
use execcritic::train::optim::{AdamW, AdamWConfig, Schedule};
use execcritic::train::trainer::{SftExample, Trainer};
use execcritic::train::{Grads, TapeOptions, TrainModel};
use std::path::Path;

fn cfg() -> LoraConfig {
    LoraConfig {
        rank: 4,
        alpha: 8.0,
        targets: ["self_attn.q_proj", "linear_attn.in_proj_qkv", "shared_expert.down_proj", "experts.3.up_proj"]
            .map(String::from)
            .to_vec(),
        seed: 1,
    }
}

/// Non-zero B (so that dA is non-trivial), merged into the model.
fn nonzero_b(lora: &mut Lora, model: &mut TrainModel) {
    for p in lora.adapters.params.iter_mut().filter(|p| p.name.ends_with("lora_B")) {
        for (i, x) in p.data.iter_mut().enumerate() {
            *x = ((i * 7 % 11) as f32 - 5.0) * 0.01;
        }
    }
    lora.apply(&mut model.store);
}

/// Adapter gradients of the mean NLL of `ids` through the LoRA sink (no dense gradient), and
/// the scalars the sink allocated.
fn adapter_gradients(model: &TrainModel, lora: &Lora, ids: &[u32]) -> (Grads, usize) {
    let tape = model.forward(ids, None, TapeOptions::default()).unwrap();
    let out = mean_nll(&tape.logits, model.cfg.vocab_size, ids).unwrap();
    let mut sink = lora.sink(&model.store);
    model.backward(&tape, &out.dlogits, &mut sink).unwrap();
    let allocated = sink.allocated_scalars();
    (sink.finish(), allocated)
}

#[test]
fn adapter_gradients_from_activations_equal_the_projection_of_the_dense_gradient() {
    let mut model = TrainModel::load(Path::new("models/tiny-qwen35")).unwrap();
    // Every projection kind: attention, GDN, shared expert, routed experts (all 8 per layer).
    let kinds = ["self_attn.q_proj", "self_attn.o_proj", "linear_attn.in_proj_qkv", "linear_attn.out_proj", "shared_expert.", "mlp.experts."];
    let lcfg = LoraConfig { targets: kinds.map(String::from).to_vec(), ..cfg() };
    let mut lora = Lora::new(lcfg, &model.store).unwrap();
    nonzero_b(&mut lora, &mut model);
    let ids: Vec<u32> = (0..40u32).map(|i| (i * 131 + 7) % 1024).collect();
    let (got, allocated) = adapter_gradients(&model, &lora, &ids);
    let (_, dense) = model.nll_gradients(&ids, TapeOptions::default()).unwrap();
    let want = lora.project(&dense);
    let mut seen = [0usize; 6];
    for ((p, g), w) in lora.adapters.params.iter().zip(&got.0).zip(&want.0) {
        let scale = w.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let err = g.iter().zip(w).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(err <= 1e-4 * scale.max(1e-12), "{}: max |Δ| {err} (scale {scale})", p.name);
        let kind = kinds.iter().position(|k| p.name.contains(k)).unwrap();
        seen[kind] += (scale > 0.0) as usize;
    }
    // Routed experts: only the experts some token was routed to get a gradient.
    assert!(seen.iter().all(|&n| n > 0), "a projection kind got no gradient: {seen:?}");
    // No dense gradient: the sink holds the adapter gradients plus one scratch vector of a frozen
    // vector-sized parameter (norms, conv, gates), far below one adapted weight per kind.
    let vector_max = model.store.params.iter().filter(|p| p.shape.len() != 2).map(|p| p.data.len()).max().unwrap();
    assert!(allocated <= lora.adapters.numel() + vector_max, "allocated {allocated}");
    let dense_adapted: usize = lora.adapters.params.iter().filter(|p| p.name.ends_with("lora_A")).count();
    eprintln!(
        "sink: {allocated} scalars for {} adapter scalars; the {dense_adapted} adapted weights' dense gradients would be {}",
        lora.adapters.numel(),
        model.store.params.iter().filter(|p| p.shape.len() == 2 && kinds.iter().any(|k| p.name.contains(k))).map(|p| p.data.len()).sum::<usize>()
    );
}

#[test]
fn adapter_gradients_match_finite_differences() {
    let mut model = TrainModel::load(Path::new("models/tiny-qwen35")).unwrap();
    let before: Vec<Vec<f32>> = model.store.params.iter().map(|p| p.data.clone()).collect();
    let mut lora = Lora::new(cfg(), &model.store).unwrap();
    assert_eq!(lora.len(), 1 + 3 + 4 + 4, "q_proj ×1, in_proj_qkv ×3, shared down ×4, expert 3 up ×4");
    lora.apply(&mut model.store);
    assert!(model.store.params.iter().zip(&before).all(|(p, b)| &p.data == b), "B = 0 leaves W unchanged");
    nonzero_b(&mut lora, &mut model);
    let ids: Vec<u32> = (0..20u32).map(|i| (i * 97 + 3) % 1024).collect();
    let g = adapter_gradients(&model, &lora, &ids).0;
    // Hold the routing fixed (top-k is piecewise constant) while differencing.
    let experts = model.forward(&ids, None, TapeOptions::default()).unwrap().experts;
    let picks: Vec<usize> = (0..lora.adapters.len()).step_by(3).collect();
    for &pi in &picks {
        let name = lora.adapters.params[pi].name.clone();
        let an = g.0[pi].clone();
        let scale = an.iter().fold(0.0f32, |m, x| m.max(x.abs())) as f64;
        assert!(scale > 1e-4, "{name}: vacuous");
        let i = an.iter().enumerate().max_by(|a, b| a.1.abs().total_cmp(&b.1.abs())).unwrap().0;
        let h = 2.5e-3f32;
        let mut at = |d: f32| {
            lora.adapters.params[pi].data[i] += d;
            lora.apply(&mut model.store);
            let t = model.forward(&ids, Some(&experts), TapeOptions::default()).unwrap();
            let l = mean_nll(&t.logits, 1024, &ids).unwrap().loss;
            lora.adapters.params[pi].data[i] -= d;
            l
        };
        let fd = (at(h) - at(-h)) / (2.0 * h as f64);

        assert!((fd - an[i] as f64).abs() < 2e-2 * scale, "{name}[{i}]: fd {fd} vs {}", an[i]);
    }
}

#[test]
fn lora_sft_trains_only_adapters_and_merges_on_save() {
    let src = Path::new("models/tiny-qwen35");
    let model = TrainModel::load(src).unwrap();
    let frozen: Vec<Vec<f32>> = model.store.params.iter().map(|p| p.data.clone()).collect();
    let lora = Lora::new(cfg(), &model.store).unwrap();
    let opt = AdamW::new(AdamWConfig { lr: 1e-2, ..Default::default() }, &lora.adapters);
    let mut tr = Trainer {
        model,
        opt,
        schedule: Schedule::Constant,
        tape: TapeOptions::default(),
        grpo: GrpoConfig::default(),
        lora: Some(lora),
    };
    let ids: Vec<u32> = (0..24u32).map(|i| (i * 37 + 5) % 1024).collect();
    let batch = vec![SftExample { mask: (0..24).map(|i| i >= 8).collect(), ids: ids.clone() }];
    let losses: Vec<f64> = (0..4).map(|_| tr.sft_step(&batch).unwrap().loss).collect();
    eprintln!("LoRA SFT losses: {losses:?}");
    assert!(losses[3] < losses[0] - 0.05, "{losses:?}");
    let targets = cfg().targets;
    for (p, f) in tr.model.store.params.iter().zip(&frozen) {
        let adapted = targets.iter().any(|t| p.name.contains(t.as_str()));
        assert_eq!(&p.data == f, !adapted, "{}: adapted weights move, the rest stay frozen", p.name);
    }
    let tmp = tempfile::tempdir().unwrap();
    save(&tmp.path().join("merged"), src, &tr.model.store, None, usize::MAX).unwrap();
    let m = Model::load(&tmp.path().join("merged")).unwrap();
    let mut st = m.new_state();
    let out = m
        .forward(&mut [SeqInput::new(&ids, &mut st)], &ForwardOptions { logits: LogitsMode::All, ..Default::default() })
        .unwrap();
    let tape = tr.model.forward(&ids, None, TapeOptions::default()).unwrap();
    let max = out[0].logits.data().iter().zip(&tape.logits).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
    assert!(max < 1e-4, "merged checkpoint logits differ by {max}");
    assert!(Lora::new(LoraConfig { targets: vec!["nope".into()], ..cfg() }, &tr.model.store).is_err());
}

#[test]
fn train_sft_cli_with_lora_writes_a_merged_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    let model = std::fs::canonicalize("models/tiny-qwen35").unwrap();
    let ids: Vec<u32> = (0..16u32).map(|i| (i * 37 + 5) % 1024).collect();
    let ex = SftExample { mask: (0..16).map(|i| i >= 4).collect(), ids };
    std::fs::write(d.join("data.jsonl"), serde_json::to_string(&ex).unwrap()).unwrap();
    let toml = format!(
        "model = {:?}\ndata = \"data.jsonl\"\nout = \"out\"\nsteps = 1\nbatch_size = 1\n[optimizer]\nlr = 1e-2\n\
         [lora]\nrank = 2\nalpha = 4.0\ntargets = [\"self_attn.q_proj\"]\n",
        model.to_str().unwrap()
    );
    std::fs::write(d.join("sft.toml"), toml).unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_execcritic"))
        .args(["train", "sft", "--config"])
        .arg(d.join("sft.toml"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let fin = d.join("out/final");
    assert!(fin.join("model.safetensors.index.json").exists() && !fin.join("optimizer.safetensors").exists());
    Model::load(&fin).unwrap();
}

#[test]
fn an_adapted_weight_reached_element_wise_is_projected_from_its_own_gradient() {
    // The shared-expert gate `[1, hidden]` is 2-D (a valid target) but its backward accumulates
    // element-wise, not as a projection: the sink keeps its (vector-sized) dense gradient and
    // projects it, so its adapters still get the exact gradient.
    let mut model = TrainModel::load(Path::new("models/tiny-qwen35")).unwrap();
    let lcfg = LoraConfig { targets: vec!["shared_expert_gate".into()], ..cfg() };
    let mut lora = Lora::new(lcfg, &model.store).unwrap();
    assert_eq!(lora.len(), 4);
    nonzero_b(&mut lora, &mut model);
    let ids: Vec<u32> = (0..12u32).map(|i| (i * 57 + 1) % 1024).collect();
    let got = adapter_gradients(&model, &lora, &ids).0;
    let want = lora.project(&model.nll_gradients(&ids, TapeOptions::default()).unwrap().1);
    for ((p, g), w) in lora.adapters.params.iter().zip(&got.0).zip(&want.0) {
        let scale = w.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert!(scale > 0.0, "{}: vacuous", p.name);
        assert!(g.iter().zip(w).all(|(a, b)| (a - b).abs() <= 1e-5 * scale), "{}", p.name);
    }
}
