//! Activation recomputation on the device (`TapeOptions::recompute` of the device trainer, the
//! CPU trainer's option): the training forward keeps only each layer's input and the backward
//! re-runs that layer's forward (its recorded routing replayed, the same kernels) right before
//! the layer's backward. On the emulated device, f32 build, `models/tiny-qwen35`, one sequence
//! of 64 tokens (a prompt of 8 without loss):
//! - the gradient of every parameter with recomputation is bit-equal to the one from the full
//!   tape, with the router's routing and with a replayed (shifted) routing — the recomputation
//!   must replay the tape's experts, not route again;
//! - the tape left after the forward and the device memory high-water mark of the forward +
//!   backward (`EmuDevice::peak_bytes`, above what the weights and gradients hold) are lower
//!   with recomputation. Measured: tape 1,785,648 → 362,512 bytes (−80 %; what is left is the 4
//!   layer inputs, the last stream, the final-normed rows and the [64, 1024] fp32 logits), peak
//!   2,488,896 → 1,406,184 bytes (−43 %; the logits and their gradient, 512 KiB, are in both);
//! - the same in the bf16 build: gradients bit-equal; measured tape 1,085,744 → 313,360 bytes,
//!   peak 1,608,768 → 1,026,152 bytes;
//! - a `DeviceTrainer` SFT step with `tape.recompute` set gives the same loss and the same
//!   serving weights as one without.

use execcritic::model::backend::cuda::CudaModel;
use execcritic::model::checkpoint::Checkpoint;
use execcritic::tensor::cuda::backward::{token_loss, LossRows, TokenObjective};
use execcritic::tensor::cuda::{Act, Gpu};
use execcritic::tensor::emu::EmuDevice;
use execcritic::train::device::{DeviceTrainModel, DeviceTrainer, NamedGrad};
use execcritic::train::optim::AdamWConfig;
use execcritic::train::trainer::SftExample;
use execcritic::train::TapeOptions;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const TOKENS: u32 = 64;
const PROMPT: usize = 8;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models").join("tiny-qwen35")
}

fn ids(vocab: usize) -> Vec<u32> {
    (0..TOKENS).map(|i| (i * 37 + 11) % vocab as u32).collect()
}

fn mask() -> Vec<bool> {
    (0..TOKENS as usize).map(|i| i >= PROMPT).collect()
}

/// What one forward + backward left and used on the device.
struct Run {
    grads: Vec<NamedGrad>,
    experts: Vec<Vec<u32>>,
    /// Bytes the tape holds after the forward (above the weights and gradients).
    tape_bytes: usize,
    /// High-water mark of the forward + backward (above the weights and gradients).
    peak_bytes: usize,
}

/// SFT loss gradient of `ids` with `routing` replayed (or the router's), every parameter's
/// gradient from a fresh zero.
fn run<A: Act>(dev: &EmuDevice, gpu: &Gpu, m: &mut DeviceTrainModel<A>, routing: Option<&[Vec<u32>]>, recompute: bool) -> Run {
    let v = m.cfg().vocab_size;
    let (ids, mask) = (ids(v), mask());
    m.zero_grads(gpu).unwrap();
    let base = dev.live_bytes();
    dev.reset_peak();
    let tape = m.forward_with(gpu, &ids, routing, TapeOptions { recompute }).unwrap();
    let tape_bytes = dev.live_bytes() - base;
    let rows = LossRows::sft(gpu, &ids, &mask, v).unwrap();
    let t = ids.len();
    let (mut loss, mut logp, mut dlogits) = (gpu.zeros::<f32>(t).unwrap(), gpu.zeros::<f32>(t).unwrap(), gpu.zeros::<A>(t * v).unwrap());
    let denom = mask.iter().skip(1).filter(|&&b| b).count() as f64;
    token_loss(gpu, &tape.logits, v, &rows, TokenObjective::Sft, denom, &mut loss, &mut logp, &mut dlogits).unwrap();
    m.backward(gpu, &tape, &dlogits).unwrap();
    let peak_bytes = dev.peak_bytes() - base;
    let experts = tape.experts.clone();
    drop((tape, rows, loss, logp, dlogits));
    let prefix = Checkpoint::open(&fixture()).unwrap().full_name("");
    Run { grads: m.gradients(gpu, &prefix).unwrap(), experts, tape_bytes, peak_bytes }
}

/// Every tensor bit-equal, and at least one gradient not zero (the backward ran).
fn bit_equal(what: &str, got: &[NamedGrad], want: &[NamedGrad]) {
    assert_eq!(got.len(), want.len(), "{what}: one gradient per parameter");
    let mut nonzero = 0;
    for (a, b) in got.iter().zip(want) {
        assert_eq!((&a.name, &a.shape), (&b.name, &b.shape), "{what}: same parameter order");
        let differ = a.data.iter().zip(&b.data).filter(|(x, y)| x.to_bits() != y.to_bits()).count();
        assert_eq!(differ, 0, "{what}: {} has {differ} of {} values not bit-equal", a.name, a.data.len());
        nonzero += b.data.iter().any(|&x| x != 0.0) as usize;
    }
    assert!(nonzero * 2 > want.len(), "{what}: only {nonzero} of {} gradients are non-zero", want.len());
}

#[test]
fn recomputed_gradients_equal_the_full_tape_and_use_less_memory() {
    let dev = Arc::new(EmuDevice::new());
    let gpu = Gpu::from_device(dev.clone());
    let mut m = DeviceTrainModel::<f32>::load(&gpu, &fixture()).unwrap();
    let e = m.cfg().num_experts as u32;

    let full = run(&dev, &gpu, &mut m, None, false);
    let recomputed = run(&dev, &gpu, &mut m, None, true);
    eprintln!(
        "tape bytes {} -> {}, peak bytes {} -> {} (full tape -> recomputation)",
        full.tape_bytes, recomputed.tape_bytes, full.peak_bytes, recomputed.peak_bytes
    );
    assert_eq!(recomputed.experts, full.experts, "the same routing record");
    bit_equal("router's routing", &recomputed.grads, &full.grads);
    assert!(recomputed.tape_bytes < full.tape_bytes, "the tape: {} vs {}", recomputed.tape_bytes, full.tape_bytes);
    assert!(recomputed.peak_bytes < full.peak_bytes, "the peak: {} vs {}", recomputed.peak_bytes, full.peak_bytes);

    // A routing the router would not choose: recomputation must replay it, not route again.
    let forced: Vec<Vec<u32>> = full.experts.iter().map(|l| l.iter().map(|&x| (x + 1) % e).collect()).collect();
    let full_forced = run(&dev, &gpu, &mut m, Some(&forced), false);
    let recomputed_forced = run(&dev, &gpu, &mut m, Some(&forced), true);
    assert_eq!(full_forced.experts, forced);
    bit_equal("replayed routing", &recomputed_forced.grads, &full_forced.grads);
    let moved = full_forced.grads.iter().zip(&full.grads).any(|(a, b)| a.data != b.data);
    assert!(moved, "the replayed routing changes the gradients");
}

/// The bf16 build (what a GPU runs): the recomputed layer input is the stored bf16 stream the
/// forward normed (its fused add rounds before the norm), so the gradients are bit-equal too.
#[test]
fn recomputed_gradients_equal_the_full_tape_in_bf16() {
    let dev = Arc::new(EmuDevice::new());
    let gpu = Gpu::from_device(dev.clone());
    let mut m = DeviceTrainModel::<u16>::load(&gpu, &fixture()).unwrap();
    let full = run(&dev, &gpu, &mut m, None, false);
    let recomputed = run(&dev, &gpu, &mut m, None, true);
    eprintln!("bf16: tape bytes {} -> {}, peak bytes {} -> {}", full.tape_bytes, recomputed.tape_bytes, full.peak_bytes, recomputed.peak_bytes);
    bit_equal("bf16", &recomputed.grads, &full.grads);
    assert!(recomputed.peak_bytes < full.peak_bytes, "the peak: {} vs {}", recomputed.peak_bytes, full.peak_bytes);
}

#[test]
fn device_trainer_step_with_recomputation_equals_the_full_tape() {
    let gpu = Gpu::from_device(Arc::new(EmuDevice::new()));
    let prefix = Checkpoint::open(&fixture()).unwrap().full_name("");
    let step = |recompute: bool| {
        let model = CudaModel::<f32>::load(&gpu, &fixture()).unwrap();
        let v = model.cfg.vocab_size;
        let mut tr = DeviceTrainer::new(gpu.clone(), model, AdamWConfig { lr: 1e-2, ..Default::default() }).unwrap();
        tr.tape = TapeOptions { recompute };
        let report = tr.sft_step(&[SftExample { ids: ids(v), mask: mask() }]).unwrap();
        (report.loss, tr.model().unwrap().weights(&gpu, &prefix).unwrap())
    };
    let (loss_full, w_full) = step(false);
    let (loss_re, w_re) = step(true);
    assert_eq!(loss_re.to_bits(), loss_full.to_bits(), "the same loss");
    bit_equal("weights after one step", &w_re, &w_full);
}
