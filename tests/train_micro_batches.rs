//! Micro-batches under a tokens-per-micro-batch cap (issue 6 item 3): a step accumulated over
//! small micro-batches equals the one-batch step — same loss, same token count, updated
//! weights equal within 1e-6 — for GRPO (with routing replay) and SFT; the planner keeps batch
//! order, respects the cap, and lets an over-long sequence form a micro-batch alone.

use execcritic::train::grpo::GrpoSample;
use execcritic::train::optim::AdamWConfig;
use execcritic::train::trainer::{plan_micro_batches, SftExample, Trainer};
use execcritic::train::{TapeOptions, TrainModel};
use std::path::Path;

fn trainer() -> Trainer {
    let model = TrainModel::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tiny-qwen35"))
        .unwrap();
    Trainer::new(
        model,
        AdamWConfig {
            lr: 1e-2,
            ..Default::default()
        },
    )
}

fn max_param_diff(a: &Trainer, b: &Trainer) -> f32 {
    a.model
        .store
        .params
        .iter()
        .zip(&b.model.store.params)
        .flat_map(|(x, y)| x.data.iter().zip(&y.data).map(|(p, q)| (p - q).abs()))
        .fold(0.0, f32::max)
}

#[test]
fn the_planner_respects_the_cap_and_keeps_order() {
    assert_eq!(
        plan_micro_batches(&[3, 4, 2, 9, 1], 7),
        vec![0..2, 2..3, 3..4, 4..5]
    );
    assert_eq!(plan_micro_batches(&[3, 4, 2], usize::MAX), vec![0..3]);
    assert_eq!(
        plan_micro_batches(&[10], 4),
        vec![0..1],
        "an over-long sequence goes alone"
    );
    assert!(plan_micro_batches(&[], 4).is_empty());
}

#[test]
fn a_grpo_step_in_micro_batches_equals_the_one_batch_step() {
    let probe = trainer();
    let seqs: Vec<Vec<u32>> = vec![
        vec![1, 5, 9, 200, 31],
        vec![1, 7, 44],
        vec![1, 3, 3, 3, 3, 3, 8],
        vec![1, 900, 2, 5],
    ];
    let advs = [0.75f32, -0.25, 0.5, -1.0];
    // Rollout log-probabilities off the current policy so the ratio (and clipping) matter, and
    // routing replay from the model's own routing of each sequence.
    let mut rec = Vec::new();
    for (k, ids) in seqs.iter().enumerate() {
        let tape = probe
            .model
            .forward(ids, None, TapeOptions::default())
            .unwrap();
        let old: Vec<f32> = (0..ids.len())
            .map(|t| -3.0 - 0.1 * (t + k) as f32)
            .collect();
        let mask: Vec<bool> = (0..ids.len()).map(|t| t >= 2).collect();
        rec.push((old, mask, tape.experts));
    }
    let batch: Vec<GrpoSample<'_>> = seqs
        .iter()
        .zip(&rec)
        .zip(advs)
        .map(|((ids, (old, mask, routing)), advantage)| GrpoSample {
            ids,
            train_mask: mask,
            old_logprobs: old,
            ref_logprobs: None,
            advantage,
            routing: Some(routing),
        })
        .collect();
    let (mut one, mut many) = (trainer(), trainer());
    let a = one.grpo_step(&batch).unwrap().unwrap();
    let b = many.grpo_step_capped(&batch, 6).unwrap().unwrap();
    let d = max_param_diff(&one, &many);
    eprintln!(
        "GRPO: {} vs {} micro-batches, loss {} vs {}, max |Δparam| {d:e}",
        a.micro_batches, b.micro_batches, a.loss, b.loss
    );
    assert_eq!((a.micro_batches, b.micro_batches), (1, 4));
    assert_eq!(a.tokens, b.tokens);
    assert!((a.loss - b.loss).abs() <= 1e-6 * a.loss.abs().max(1.0));
    assert!((a.stats.grad_norm - b.stats.grad_norm).abs() <= 1e-6 * a.stats.grad_norm.max(1.0));
    assert!(d <= 1e-6);
    assert!(
        max_param_diff(&one, &probe) > 1e-4,
        "the step changed the weights"
    );
}

#[test]
fn an_sft_step_in_micro_batches_equals_the_one_batch_step() {
    let batch = vec![
        SftExample {
            ids: vec![1, 5, 9, 13, 17],
            mask: vec![false, false, true, true, true],
        },
        SftExample {
            ids: vec![1, 2, 3],
            mask: vec![false, true, true],
        },
        SftExample {
            ids: vec![1, 8, 16, 24, 32, 40, 48],
            mask: vec![false, true, false, true, true, true, true],
        },
    ];
    let (mut one, mut many) = (trainer(), trainer());
    let a = one.sft_step(&batch).unwrap();
    let b = many.sft_step_capped(&batch, 4).unwrap();
    let d = max_param_diff(&one, &many);
    eprintln!(
        "SFT: {} vs {} micro-batches, loss {} vs {}, max |Δparam| {d:e}",
        a.micro_batches, b.micro_batches, a.loss, b.loss
    );
    assert_eq!((a.micro_batches, b.micro_batches), (1, 3));
    assert!((a.loss - b.loss).abs() <= 1e-9);
    assert!(d <= 1e-6);
}
