//! The training backend on a device (`train::device::DeviceTrainModel`) against the CPU trainer
//! (`TrainModel`), on the real GPU when present and on the emulated device otherwise, f32 build:
//! one sequence of 20 tokens of each committed fixture (GDN and attention layers, MoE with a
//! shared expert), SFT-style loss gradient computed on the CPU and uploaded, with the router's
//! own routing and with a replayed one. The logits equal the CPU forward's (1e-4 relative to the
//! largest), the routing records are identical, and the gradient of every parameter equals the
//! CPU's with a relative error ‖device − cpu‖ / ‖cpu‖ within 1e-4, and no element further than
//! 3e-4 of the largest value of that parameter's reference gradient (fused device experts
//! compared per expert, under the CPU's per-expert names). Measured (emulator, f32): worst
//! relative error 7.7e-5 and worst element 1.6e-4 of the largest, both on routed experts of
//! `tiny-qwen35-b` that see one or two tokens; the device kernels sum in other orders than the
//! CPU (tiled online-softmax attention, the chunk-parallel GDN form), and 1e-4 element-wise was
//! at the edge of that float noise. Then one device
//! AdamW step over those gradients rewrites the serving weights in place as the CPU AdamW does.

use execcritic::model::checkpoint::Checkpoint;
use execcritic::tensor::cuda::Gpu;
use execcritic::train::device::DeviceTrainModel;
use execcritic::train::loss::{sft_denominator, sft_loss};
use execcritic::train::optim::{AdamW, AdamWConfig, Schedule};
use execcritic::train::{TapeOptions, TrainModel};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join(name)
}

/// A gradient: relative error (norm) within `rel`, every element within `3·rel` of the largest
/// |reference| value.
fn close_grad(name: &str, got: &[f32], want: &[f32], rel: f64) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|x| x * x).sum::<f64>().sqrt();
    let err = norm(&mut got.iter().zip(want).map(|(a, b)| f64::from(a - b)));
    let reference = norm(&mut want.iter().map(|&b| f64::from(b)));
    assert!(err <= rel * reference.max(1e-12), "{name}: relative error {:.2e} > {rel:.0e}", err / reference);
    close(name, got, want, 3.0 * rel as f32);
}

/// The largest |reference| scales the allowed error (`rel` of it).
fn close(name: &str, got: &[f32], want: &[f32], rel: f32) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-6);
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= rel * scale, "{name}[{i}]: device {a} vs cpu {b} (scale {scale})");
    }
}

/// Each token's experts moved to the next expert (still distinct within a token).
fn shifted(experts: &[Vec<u32>], e: u32) -> Vec<Vec<u32>> {
    experts.iter().map(|l| l.iter().map(|&x| (x + 1) % e).collect()).collect()
}

fn check_fixture(gpu: &Gpu, name: &str) {
    let dir = fixture(name);
    let mut cpu = TrainModel::load(&dir).unwrap();
    let c = cpu.cfg.clone();
    let ids: Vec<u32> = (0..20u32).map(|i| (i * 37 + 11) % c.vocab_size as u32).collect();
    // A prompt of 6 tokens without loss, then trained tokens.
    let mask: Vec<bool> = (0..ids.len()).map(|i| i >= 6).collect();
    let denom = sft_denominator(&[&mask]) as f64;
    let prefix = Checkpoint::open(&dir).unwrap().full_name("");
    let natural = cpu.forward(&ids, None, TapeOptions::default()).unwrap().experts;
    let forced = shifted(&natural, c.num_experts as u32);
    assert_ne!(forced, natural);

    let mut dev = DeviceTrainModel::<f32>::load(gpu, &dir).unwrap();
    let mut last = None;
    for routing in [None, Some(&forced[..])] {
        let what = if routing.is_some() { "replayed" } else { "router" };
        let tape = cpu.forward(&ids, routing, TapeOptions::default()).unwrap();
        let out = sft_loss(&tape.logits, c.vocab_size, &ids, &mask, denom).unwrap();
        let mut want = cpu.store.zero_grads();
        cpu.backward(&tape, &out.dlogits, &mut want).unwrap();

        dev.zero_grads(gpu).unwrap();
        let dtape = dev.forward(gpu, &ids, routing).unwrap();
        close(&format!("{name} {what} logits"), &gpu.download(&dtape.logits).unwrap(), &tape.logits, 1e-4);
        assert_eq!(dtape.experts, tape.experts, "{name} {what}: routing record");
        if let Some(f) = routing {
            assert_eq!(&dtape.experts[..], f, "{name}: the replayed experts are the ones used");
        }
        let dl = gpu.upload(&out.dlogits).unwrap();
        dev.backward(gpu, &dtape, &dl).unwrap();
        let got = dev.gradients(gpu, &prefix).unwrap();
        let index: HashMap<&str, usize> = cpu.store.params.iter().enumerate().map(|(i, p)| (p.name.as_str(), i)).collect();
        assert_eq!(got.len(), cpu.store.len(), "{name}: one gradient per CPU parameter");
        let mut nonzero = 0;
        for g in &got {
            let &i = index.get(g.name.as_str()).unwrap_or_else(|| panic!("{name}: no CPU parameter {}", g.name));
            assert_eq!(g.shape, cpu.store.params[i].shape, "{}", g.name);
            let w = &want.0[i];
            close_grad(&format!("{name} {what} d {}", g.name), &g.data, w, 1e-4);
            nonzero += w.iter().any(|&x| x != 0.0) as usize;
        }
        // Every parameter but the experts no token chose gets a gradient.
        assert!(nonzero * 10 >= got.len() * 8, "{name}: only {nonzero} of {} gradients nonzero", got.len());
        last = Some(want);
    }
    // One AdamW step over the last gradients. eps = 1 keeps the update smooth in the gradient
    // (near-zero gradients of either sign move a weight by ~0, not by ±lr), so the updates of
    // the two sides differ as their gradients do.
    let cfg = AdamWConfig { lr: 1e-2, eps: 1.0, ..AdamWConfig::default() };
    let before = dev.weights(gpu, &prefix).unwrap();
    let mut want = last.unwrap();
    let mut opt = AdamW::new(cfg, &cpu.store);
    let cs = opt.step(&mut cpu.store, &mut want, &Schedule::Constant);
    let mut dopt = dev.optimizer(gpu, cfg).unwrap();
    let ds = dev.step(gpu, &mut dopt, &Schedule::Constant).unwrap();
    assert!((ds.grad_norm - cs.grad_norm).abs() <= 1e-4 * cs.grad_norm, "{name}: norm {} vs {}", ds.grad_norm, cs.grad_norm);
    assert_eq!((ds.clipped, ds.lr), (cs.clipped, cs.lr));
    let after = dev.weights(gpu, &prefix).unwrap();
    assert_eq!(after.len(), cpu.store.len());
    for (w, b) in after.iter().zip(&before) {
        let p = cpu.store.params.iter().find(|p| p.name == w.name).unwrap();
        let got: Vec<f32> = w.data.iter().zip(&b.data).map(|(n, o)| n - o).collect();
        let exp: Vec<f32> = p.data.iter().zip(&b.data).map(|(n, o)| n - o).collect();
        assert!(exp.iter().any(|&u| u != 0.0), "{name} {}: the CPU step moved nothing", w.name);
        close(&format!("{name} update of {}", w.name), &got, &exp, 1e-3);
    }
    let bad = dev.forward(gpu, &[c.vocab_size as u32], None);
    assert!(bad.is_err(), "an id outside the vocabulary is refused");
    assert!(dev.forward(gpu, &ids, Some(&forced[..1])).is_err(), "a routing of the wrong shape is refused");
}

#[test]
fn device_gradients_equal_the_cpu_trainers_on_the_fixtures() {
    let gpu = Gpu::auto().expect("no device: neither a GPU nor the emulator");
    for name in ["tiny-qwen35", "tiny-qwen35-b"] {
        check_fixture(&gpu, name);
    }
}
