//! LoRA in the device trainer (`DeviceTrainer::new_lora`, f32 emulator, the tiny fixture),
//! against the CPU LoRA trainer (`train::lora`) started from the same seeded adapters:
//! (a) the device adapter gradients — formed from each projection's `X` and `dY`, no dense
//! gradient — equal the CPU sink's and `Lora::project` of the CPU dense gradient (relative
//! 1e-4), at a point where `B ≠ 0`; (b) two SFT steps give the CPU trainer's losses, adapters
//! and merged weights, every non-target weight bit-unchanged; (c) the served weights after a step
//! are `W₀ + s·B·A` of the downloaded adapters. The device allocates far less than dense
//! training (no gradient, master or moments of any frozen weight; measured on the emulator).
//! The bf16 build's step (bf16 GEMM operands, fp32 gradients, the merge rounded to bf16) moves
//! exactly the targets, to the bf16 rounding of `W₀ + s·B·A`, with the f32 build's loss within
//! 2 %. Routed-expert adapters (per expert over its routed rows) equal the CPU trainer's too, their
//! frozen bases held in host memory. Embedding and head targets are refused. `train grpo` with `[lora]` on the
//! emulator runs an iteration and saves a merged checkpoint that loads as a `TrainModel`.
//!
//! Tolerances: the device GEMMs sum in another order than the CPU's, so f32 results agree to
//! rounding (~1e-6 relative, gradients within 1e-4 of their largest value as (a)); AdamW divides
//! by `|g| + eps` (eps 1e-3, see `ocfg`), which turns a gradient difference δ into up to
//! `lr·δ/eps` in the adapters, so those agree to 1e-3 of their largest value, the merged weights
//! (dominated by W₀) to 1e-5, the loss to 1e-5 relative.

use execcritic::model::backend::cuda::CudaModel;
use execcritic::model::checkpoint::Checkpoint;
use execcritic::tensor::cuda::{Act, Gpu};
use execcritic::tensor::emu::EmuDevice;
use execcritic::train::device::{DeviceTrainModel, DeviceTrainer, NamedGrad};
use execcritic::train::grpo::GrpoConfig;
use execcritic::train::lora::{Lora, LoraConfig};
use execcritic::train::loss::mean_nll;
use execcritic::train::optim::{AdamW, AdamWConfig, Schedule};
use execcritic::train::plan::{plan, PlanConfig};
use execcritic::train::trainer::{SftExample, Trainer};
use execcritic::train::{TapeOptions, TrainModel};
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tiny-qwen35")
}

/// Attention, GDN, router and every shared-expert projection (with the `[1, hidden]` gate).
fn lcfg() -> LoraConfig {
    let targets = ["self_attn.q_proj", "self_attn.o_proj", "linear_attn.in_proj_qkv", "linear_attn.out_proj", "shared_expert", "mlp.gate.weight"];
    LoraConfig { rank: 4, alpha: 8.0, targets: targets.map(String::from).to_vec(), seed: 5 }
}

/// `eps = 1e-3`: AdamW's first update is `lr·g/(|g| + eps)`, which for gradients at rounding
/// level (|g| ≲ 1e-8, e.g. clipped near-zero elements) turns 1e-6 relative differences between
/// the CPU and device GEMMs into O(lr) differences with the default eps; at 1e-3 the update is
/// smooth in `g` and the comparison meaningful.
fn ocfg() -> AdamWConfig {
    AdamWConfig { lr: 1e-2, eps: 1e-3, ..Default::default() }
}

/// The routed experts' gate, up and down projections of every layer (per expert: 3 adapters
/// over the rows routed to it) and attention's q.
fn routed_cfg() -> LoraConfig {
    LoraConfig { targets: vec!["mlp.experts.".into(), "self_attn.q_proj".into()], ..lcfg() }
}

fn is_target(cfg: &LoraConfig, name: &str) -> bool {
    cfg.targets.iter().any(|t| name.contains(t.as_str())) && !name.ends_with("lora_A")
}

/// Every element within `rel` of the largest |reference| value; returns the largest error
/// relative to that value.
fn close(what: &str, got: &[f32], want: &[f32], rel: f32) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-12);
    let mut worst = 0.0f32;
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= rel * scale, "{what}[{i}]: device {a} vs cpu {b} (scale {scale})");
        worst = worst.max((a - b).abs() / scale);
    }
    worst
}

/// Device tensors against the CPU store's / adapters' (the same names); the largest relative
/// error.
fn close_named(what: &str, got: &[NamedGrad], want: &[(String, Vec<f32>)], rel: f32) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: count");
    let want: std::collections::HashMap<&str, &Vec<f32>> = want.iter().map(|(n, w)| (n.as_str(), w)).collect();
    let mut worst = 0.0f32;
    for g in got {
        let w = want.get(g.name.as_str()).unwrap_or_else(|| panic!("{what}: {} missing on the CPU", g.name));
        worst = worst.max(close(&format!("{what} {}", g.name), &g.data, w, rel));
    }
    eprintln!("{what}: max error {worst:.2e} of the largest value");
    worst
}

fn store_of(p: &execcritic::train::ParamStore) -> Vec<(String, Vec<f32>)> {
    p.params.iter().map(|p| (p.name.clone(), p.data.clone())).collect()
}

#[test]
fn device_lora_steps_and_gradients_equal_the_cpu_lora_trainer() {
    against_the_cpu_lora_trainer(lcfg());
}

/// As above for routed-expert adapters: per expert, gradients from the grouped rows routed to it
/// (its block of the gathered inputs, its half of the fused gate|up gradients), merged into its
/// block of the fused served weights, the frozen bases kept on the host.
#[test]
fn routed_expert_lora_equals_the_cpu_lora_trainer() {
    against_the_cpu_lora_trainer(routed_cfg());
}

fn against_the_cpu_lora_trainer(lcfg: LoraConfig) {
    let lcfg = || lcfg.clone();
    let is_target = |name: &str| is_target(&lcfg(), name);
    let dev = Arc::new(EmuDevice::new());
    let gpu = Gpu::from_device(dev.clone());
    let dir = fixture();
    let prefix = Checkpoint::open(&dir).unwrap().full_name("");
    let model = TrainModel::load(&dir).unwrap();
    let lora = Lora::new(lcfg(), &model.store).unwrap();
    let opt = AdamW::new(ocfg(), &lora.adapters);
    let (grpo, tape) = (GrpoConfig::default(), TapeOptions::default());
    let mut cpu = Trainer { model, opt, schedule: Schedule::Constant, tape, grpo, lora: Some(lora) };
    let frozen = store_of(&cpu.model.store);

    let mut tr = DeviceTrainer::new_lora(gpu.clone(), CudaModel::<f32>::load(&gpu, &dir).unwrap(), ocfg(), lcfg(), &prefix).unwrap();
    let dl = |tr: &DeviceTrainer<f32>| tr.model().unwrap().lora().unwrap().values(&gpu).unwrap();
    // The same seeded adapters on both sides, bit for bit.
    let cpu_lora = cpu.lora.as_ref().unwrap();
    assert_eq!(tr.model().unwrap().lora().unwrap().len(), cpu_lora.len());
    // The CPU adapters' index by name (the device lists fused experts in another order).
    let cpu_index: std::collections::HashMap<String, usize> =
        cpu_lora.adapters.params.iter().enumerate().map(|(i, p)| (p.name.clone(), i)).collect();
    let initial = dl(&tr);
    assert_eq!(initial.len(), cpu_lora.adapters.params.len());
    for g in &initial {
        assert_eq!(g.data, cpu_lora.adapters.params[cpu_index[&g.name]].data, "initial adapter {}", g.name);
    }

    // (b), (c): two SFT steps.
    let ids: Vec<u32> = (0..24u32).map(|i| (i * 37 + 5) % 1024).collect();
    let batch = vec![SftExample { mask: (0..24).map(|i| i >= 8).collect(), ids: ids.clone() }];
    for step in 0..2 {
        let (c, d) = (cpu.sft_step(&batch).unwrap(), tr.sft_step(&batch).unwrap());
        eprintln!("step {step}: loss cpu {:.7} device {:.7}, grad norm cpu {:.6} device {:.6}", c.loss, d.loss, c.stats.grad_norm, d.stats.grad_norm);
        assert!((c.loss - d.loss).abs() <= 1e-5 * c.loss.abs(), "step {step}: loss");
        assert!((c.stats.grad_norm - d.stats.grad_norm).abs() <= 1e-4 * c.stats.grad_norm, "step {step}: grad norm");
        let adapters = dl(&tr);
        close_named(&format!("step {step} adapters"), &adapters, &store_of(&cpu.lora.as_ref().unwrap().adapters), 1e-3);
        let served = tr.model().unwrap().weights(&gpu, &prefix).unwrap();
        close_named(&format!("step {step} merged"), &served, &store_of(&cpu.model.store), 1e-5);
        let s = lcfg().alpha / lcfg().rank as f32;
        let mut moved = 0;
        for w in &served {
            let (name, w0) = frozen.iter().find(|(n, _)| *n == w.name).unwrap();
            if !is_target(name) {
                assert!(w.data == *w0, "step {step}: non-target {name} changed");
                continue;
            }
            // (c) the served weight is W₀ + s·B·A of the device's adapters (host f64).
            let a = &adapters.iter().find(|x| x.name == format!("{name}.lora_A")).unwrap();
            let b = &adapters.iter().find(|x| x.name == format!("{name}.lora_B")).unwrap();
            let (out, inp, r) = (w.shape[0], w.shape[1], a.shape[0]);
            let want: Vec<f32> = (0..out * inp)
                .map(|j| {
                    let ba: f64 = (0..r).map(|k| b.data[j / inp * r + k] as f64 * a.data[k * inp + j % inp] as f64).sum();
                    (w0[j] as f64 + s as f64 * ba) as f32
                })
                .collect();
            close(&format!("step {step} W0 + sBA {name}"), &w.data, &want, 1e-6);
            moved += (w.data != *w0) as usize;
        }
        assert!(moved > 0, "step {step}: no target moved");
    }

    // (a) adapter gradients at the trained point (B ≠ 0, so dA is non-trivial), the CPU side
    // given the device's adapters (the two runs' adapters differ by ~1e-4 after two steps, see
    // the tolerances above) and merged with them, so both evaluate the same point.
    {
        let cpu_lora = cpu.lora.as_mut().unwrap();
        for g in dl(&tr) {
            cpu_lora.adapters.params[cpu_index[&g.name]].data = g.data;
        }
        cpu_lora.apply(&mut cpu.model.store);
    }
    let m = tr.model_mut().unwrap();
    m.zero_grads(&gpu).unwrap();
    m.nll_gradients(&gpu, &ids, TapeOptions { recompute: true }).unwrap(); // LoRA through recomputed layers
    assert!(m.gradients(&gpu, &prefix).is_err(), "LoRA keeps no dense gradients");
    let got = m.lora().unwrap().gradients(&gpu).unwrap();
    let lora = cpu.lora.as_ref().unwrap();
    let t = cpu.model.forward(&ids, None, TapeOptions::default()).unwrap();
    let out = mean_nll(&t.logits, cpu.model.cfg.vocab_size, &ids).unwrap();
    let mut sink = lora.sink(&cpu.model.store);
    cpu.model.backward(&t, &out.dlogits, &mut sink).unwrap();
    let via_sink = sink.finish();
    let projected = lora.project(&cpu.model.nll_gradients(&ids, TapeOptions::default()).unwrap().1);
    let mut worst = [0.0f32; 2];
    for g in &got {
        let i = cpu_index[&g.name];
        let scale = projected.0[i].iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert!(scale > 0.0, "{}: a zero gradient tests nothing", g.name);
        worst[0] = worst[0].max(close(&format!("{} vs Lora::project", g.name), &g.data, &projected.0[i], 1e-4));
        worst[1] = worst[1].max(close(&format!("{} vs the CPU sink", g.name), &g.data, &via_sink.0[i], 1e-4));
    }
    eprintln!("adapter gradients: max error {:.2e} (projection), {:.2e} (CPU sink) of the largest value", worst[0], worst[1]);
}

#[test]
fn device_lora_allocates_no_dense_training_state_and_keeps_expert_bases_on_the_host() {
    let dev = Arc::new(EmuDevice::new());
    let gpu = Gpu::from_device(dev.clone());
    let dir = fixture();
    let prefix = Checkpoint::open(&dir).unwrap().full_name("");
    let cpu = TrainModel::load(&dir).unwrap();
    let numel = |f: &dyn Fn(&str, &[usize]) -> bool| -> u64 {
        cpu.store.params.iter().filter(|p| f(&p.name, &p.shape)).map(|p| p.data.len() as u64).sum()
    };
    let all = numel(&|_, _| true);
    let targets = numel(&|n, s| s.len() == 2 && is_target(&lcfg(), n));
    let adapters = Lora::new(lcfg(), &cpu.store).unwrap().adapters.numel() as u64;

    let (dense, dense_allocs) = training_state::<f32>(&dev, &gpu, &dir, None, &prefix);
    let (lora, lora_allocs) = training_state::<f32>(&dev, &gpu, &dir, Some(lcfg()), &prefix);
    eprintln!(
        "tiny-qwen35 ({all} parameters, {targets} in the {} adapted weights, {adapters} adapter scalars): \
         dense training state {dense} B in {dense_allocs} allocations; LoRA {lora} B in {lora_allocs} allocations",
        adapters_count(&cpu)
    );
    // Dense: fp32 gradient + master + two moments of every parameter.
    assert!(dense >= 16 * all, "dense {dense} B");
    // LoRA: the frozen bases of the targets (fp32 here), adapters ×2 (serving copy and
    // gradient) + master and moments, the vector-sized parameters' gradient buffers, and small
    // change (empty buffers, optimizer partials).
    let vectors = numel(&|n, s| s.len() == 1 || n.ends_with("conv1d.weight"));
    assert!(lora >= 4 * targets + 20 * adapters, "LoRA {lora} B");
    assert!(lora <= 4 * targets + 20 * adapters + 4 * vectors + 64 * 1024, "LoRA {lora} B: more than bases, adapters and vectors");
    assert!(lora * 4 < dense, "LoRA {lora} B is not far below dense {dense} B");

    // The bf16 build against `train plan`'s rows for this model and these targets: frozen bases
    // and adapter copies (bf16), adapter masters, moments and gradients (fp32) — plus the
    // vector-sized gradient buffers and small change, which the plan does not list.
    let tmp = tempfile::tempdir().unwrap();
    // `train plan`'s LoRA rows (device bytes) and host bytes for this model and `targets`.
    let plan_of = |targets: &[String]| {
        let file = tmp.path().join("plan.toml");
        let plan_toml = format!(
            "model = {:?}\n[train]\nmode = \"lora\"\nlora_rank = {}\nlora_targets = {:?}\nmicro_batch_tokens = 16\n\
             [rollout]\nslots = 1\ncontext = 16\n",
            dir.to_str().unwrap(),
            lcfg().rank,
            targets
        );
        std::fs::write(&file, plan_toml).unwrap();
        let pc = PlanConfig::from_file(&file).unwrap();
        let p = plan(&pc, &pc.model_config().unwrap()).unwrap();
        let row = |c: &str| p.rows.iter().find(|r| r.category == c).unwrap_or_else(|| panic!("{c}")).bytes;
        let planned = row("LoRA bases (bf16)") + row("master (fp32)") + row("AdamW m, v (fp32)") + row("gradients (fp32)");
        (p.params.adapted, planned, p.host_bytes)
    };
    let (adapted, planned, _) = plan_of(&lcfg().targets);
    assert_eq!(adapted, targets);
    let (bf16, _) = training_state::<u16>(&dev, &gpu, &dir, Some(lcfg()), &prefix);
    eprintln!("bf16 LoRA training state {bf16} B; train plan's LoRA rows {planned} B; vector-sized gradients {} B", 4 * vectors);
    assert!(bf16 >= planned && bf16 <= planned + 4 * vectors + 64 * 1024, "bf16 LoRA {bf16} B vs plan {planned} B");

    // Routed experts: their frozen bases stay in host memory, so the device holds only the
    // adapters (and q_proj's base) beyond the vector-sized gradients.
    let rc = routed_cfg();
    let routed = numel(&|n, s| s.len() == 2 && is_target(&rc, n) && n.contains("mlp.experts."));
    let q = numel(&|n, s| s.len() == 2 && is_target(&rc, n) && !n.contains("mlp.experts."));
    let radapters = Lora::new(rc.clone(), &cpu.store).unwrap().adapters.numel() as u64;
    let (rbytes, _) = training_state::<f32>(&dev, &gpu, &dir, Some(rc.clone()), &prefix);
    eprintln!("routed-expert LoRA: {routed} adapted expert elements (bases on the host), device training state {rbytes} B");
    assert!(rbytes >= 4 * q + 20 * radapters, "routed LoRA {rbytes} B");
    assert!(rbytes <= 4 * q + 20 * radapters + 4 * vectors + 64 * 1024, "routed LoRA {rbytes} B: the expert bases are on the device");
    assert!(4 * routed > 64 * 1024 + 4 * vectors, "the fixture's expert bases would be visible in that bound");
    // The bf16 build against the plan with routed experts: its device rows exclude the expert
    // bases, its host line holds them (bf16).
    let (_, rplanned, host) = plan_of(&rc.targets);
    assert_eq!(host, 2 * routed);
    let (rbf16, _) = training_state::<u16>(&dev, &gpu, &dir, Some(rc.clone()), &prefix);
    eprintln!("bf16 routed-expert LoRA training state {rbf16} B; train plan's LoRA rows {rplanned} B, host {host} B");
    assert!(rbf16 >= rplanned && rbf16 <= rplanned + 4 * vectors + 64 * 1024, "bf16 routed LoRA {rbf16} B vs plan {rplanned} B");

    for (bad, why) in [("embed_tokens", "embedding"), ("nope", "no 2-D parameter")] {
        let model = CudaModel::<f32>::load(&gpu, &dir).unwrap();
        let cfg = LoraConfig { targets: vec![bad.into()], ..lcfg() };
        let err = DeviceTrainModel::with_lora(&gpu, model, cfg, &prefix).err().expect(bad).to_string();
        assert!(err.contains(why), "{bad}: {err}");
    }
}

/// Device bytes and allocations of the training side (`DeviceTrainModel` + its optimizer) built
/// over already-loaded weights: dense (`lora` = None) or LoRA.
fn training_state<A: Act>(dev: &EmuDevice, gpu: &Gpu, dir: &Path, lora: Option<LoraConfig>, prefix: &str) -> (u64, u64) {
    let model = CudaModel::<A>::load(gpu, dir).unwrap();
    let (bytes, allocs) = (dev.live_bytes() as u64, gpu.allocations());
    let mut m = match lora {
        Some(l) => DeviceTrainModel::with_lora(gpu, model, l, prefix).unwrap(),
        None => DeviceTrainModel::new(gpu, model).unwrap(),
    };
    let opt = m.optimizer(gpu, ocfg()).unwrap();
    let out = (dev.live_bytes() as u64 - bytes, gpu.allocations() - allocs);
    drop((m, opt));
    out
}

#[test]
fn bf16_device_lora_step_moves_only_the_targets() {
    let gpu = Gpu::emulator().unwrap();
    let dir = fixture();
    let prefix = Checkpoint::open(&dir).unwrap().full_name("");
    let ids: Vec<u32> = (0..24u32).map(|i| (i * 37 + 5) % 1024).collect();
    let batch = vec![SftExample { mask: (0..24).map(|i| i >= 8).collect(), ids }];
    let mut loss = vec![];
    for bf16 in [false, true] {
        let (before, after, adapters, l) = if bf16 {
            let mut tr = DeviceTrainer::new_lora(gpu.clone(), CudaModel::<u16>::load(&gpu, &dir).unwrap(), ocfg(), lcfg(), &prefix).unwrap();
            let w = |tr: &DeviceTrainer<u16>| tr.model().unwrap().masters(&gpu, &tr.opt, &prefix).unwrap();
            let before = w(&tr);
            let l = tr.sft_step(&batch).unwrap().loss;
            (before, w(&tr), tr.model().unwrap().lora().unwrap().values(&gpu).unwrap(), l)
        } else {
            let mut tr = DeviceTrainer::new_lora(gpu.clone(), CudaModel::<f32>::load(&gpu, &dir).unwrap(), ocfg(), lcfg(), &prefix).unwrap();
            let w = |tr: &DeviceTrainer<f32>| tr.model().unwrap().masters(&gpu, &tr.opt, &prefix).unwrap();
            let before = w(&tr);
            let l = tr.sft_step(&batch).unwrap().loss;
            (before, w(&tr), tr.model().unwrap().lora().unwrap().values(&gpu).unwrap(), l)
        };
        loss.push(l);
        let s = lcfg().alpha / lcfg().rank as f32;
        for (b, a) in before.iter().zip(&after) {
            if !is_target(&lcfg(), &b.name) {
                assert!(a.data == b.data, "bf16 {bf16}: non-target {} changed", b.name);
                continue;
            }
            assert!(a.data != b.data, "bf16 {bf16}: target {} did not move", b.name);
            let la = adapters.iter().find(|x| x.name == format!("{}.lora_A", b.name)).unwrap();
            let lb = adapters.iter().find(|x| x.name == format!("{}.lora_B", b.name)).unwrap();
            let (inp, r) = (b.shape[1], la.shape[0]);
            let want: Vec<f32> = (0..b.data.len())
                .map(|j| b.data[j] + s * (0..r).map(|k| lb.data[j / inp * r + k] * la.data[k * inp + j % inp]).sum::<f32>())
                .collect();
            // bf16: the merge is rounded to 8 mantissa bits (2⁻⁸ of the largest value).
            close(&format!("bf16 {bf16}: merged {}", b.name), &a.data, &want, if bf16 { 4e-3 } else { 1e-6 });
        }
    }
    eprintln!("LoRA SFT step loss: f32 {:.5}, bf16 {:.5}", loss[0], loss[1]);
    assert!((loss[0] - loss[1]).abs() < 2e-2 * loss[0], "bf16 loss {} vs f32 {}", loss[1], loss[0]);
}

fn adapters_count(cpu: &TrainModel) -> usize {
    Lora::new(lcfg(), &cpu.store).unwrap().len()
}

#[test]
fn train_grpo_with_lora_on_the_emulator_saves_a_merged_checkpoint() {
    use execcritic::train::grpo_run::{builtin_sampler, run_grpo, GrpoRunConfig};
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let cfg = std::fs::read_to_string(root.join("docs/train-grpo-toy.toml"))
        .unwrap()
        .replace("\"../models/", &format!("\"{}/models/", root.display()))
        .replace("out = \"../target/grpo-toy\"", &format!("out = {:?}", tmp.path().join("out")))
        .replace("steps = 100", "steps = 1")
        .replace("groups = 16 ", "groups = 2 ")
        .replace("device = \"cpu\"", "device = \"emulator:f32\"")
        + "\n[lora]\nrank = 2\nalpha = 4.0\ntargets = [\"self_attn.q_proj\", \"linear_attn.out_proj\"]\n";
    let path = tmp.path().join("grpo.toml");
    std::fs::write(&path, cfg).unwrap();
    let c = GrpoRunConfig::from_file(&path).unwrap();
    let mut sampler = builtin_sampler(&c).unwrap();
    let mut reports = vec![];
    let fin = run_grpo(&c, sampler.as_mut(), |r| reports.push(r.update.as_ref().map(|u| u.loss))).unwrap();
    assert_eq!(reports.len(), 1);
    let merged = TrainModel::load(&fin).unwrap();
    let source = TrainModel::load(&root.join("models/tiny-qwen35")).unwrap();
    let mut moved = 0;
    for (m, s) in merged.store.params.iter().zip(&source.store.params) {
        assert_eq!(m.name, s.name);
        let target = ["self_attn.q_proj", "linear_attn.out_proj"].iter().any(|t| m.name.contains(t));
        if !target {
            assert!(m.data == s.data, "{}: a frozen weight changed", m.name);
        }
        moved += (target && m.data != s.data) as usize;
    }
    eprintln!("one LoRA GRPO iteration on the emulator: update {:?}, {moved} merged targets moved", reports[0]);
    assert_eq!(moved > 0, reports[0].is_some(), "targets move exactly when an update ran");

    // The CPU path refuses [lora] (the device trainer has it).
    let cpu_cfg = std::fs::read_to_string(&path).unwrap().replace("device = \"emulator:f32\"", "device = \"cpu\"");
    std::fs::write(&path, cpu_cfg).unwrap();
    let c = GrpoRunConfig::from_file(&path).unwrap();
    let err = run_grpo(&c, builtin_sampler(&c).unwrap().as_mut(), |_| {}).unwrap_err().to_string();
    assert!(err.contains("lora"), "{err}");
}
