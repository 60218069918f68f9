//! In-process GRPO learning on a verifiable toy task: the tiny model sees `[BOS, p]` for a few
//! prompts `p`, samples one token (temperature 1) from the very weights being trained, and gets
//! reward 1 when the token is a multiple of 8 (1/8 of the vocabulary), else 0. Groups of 8
//! rollouts per prompt, group-mean advantages without std division, the paper's clip
//! (0.2/0.28), token-level aggregation, AdamW. Mean reward must rise from ≤ 0.2 to ≥ 0.8.
//! Sampling here uses the training model's forward (same weights, same process), not the
//! batched engine.

use execcritic::train::grpo::{GrpoConfig, GrpoSample};
use execcritic::train::loss::log_softmax_row;
use execcritic::train::optim::{AdamW, AdamWConfig, Schedule};
use execcritic::train::trainer::Trainer;
use execcritic::train::{TapeOptions, TrainModel};
use rand::{Rng, SeedableRng};
use std::path::Path;

const PROMPTS: [u32; 4] = [11, 222, 333, 444];
const GROUP: usize = 8;

fn sample(rng: &mut rand_chacha::ChaCha8Rng, logp: &[f32]) -> u32 {
    let u: f32 = rng.random_range(0.0..1.0);
    let mut acc = 0.0;
    for (i, l) in logp.iter().enumerate() {
        acc += l.exp();
        if u < acc {
            return i as u32;
        }
    }
    (logp.len() - 1) as u32
}

#[test]
fn grpo_raises_mean_reward_on_a_toy_task() {
    let model = TrainModel::load(Path::new("models/tiny-qwen35")).unwrap();
    let v = model.cfg.vocab_size;
    let opt = AdamW::new(AdamWConfig { lr: 3e-3, ..Default::default() }, &model.store);
    let mut tr =
        Trainer { model, opt, schedule: Schedule::Constant, tape: TapeOptions::default(), grpo: GrpoConfig::default(), lora: None };
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
    let reward = |t: u32| if t % 8 == 0 { 1.0f32 } else { 0.0 };
    let mut curve = Vec::new();
    for step in 0..60 {
        // Rollouts: one forward per prompt, GROUP samples from its last row.
        let mut seqs: Vec<(Vec<u32>, Vec<f32>, f32)> = Vec::new();
        for &p in &PROMPTS {
            let tape = tr.model.forward(&[1, p], None, TapeOptions::default()).unwrap();
            let lp = log_softmax_row(&tape.logits[v..2 * v]);
            let group: Vec<(u32, f32)> = (0..GROUP)
                .map(|_| {
                    let t = sample(&mut rng, &lp);
                    (t, reward(t))
                })
                .collect();
            let mean = group.iter().map(|g| g.1).sum::<f32>() / GROUP as f32;
            for (t, r) in group {
                seqs.push((vec![1, p, t], vec![0.0, 0.0, lp[t as usize]], r - mean));
            }
        }
        let mean_reward = seqs.iter().map(|s| reward(s.0[2])).sum::<f32>() / seqs.len() as f32;
        curve.push(mean_reward);
        eprintln!("step {step:2}: mean reward {mean_reward:.3}");
        if step == 0 {
            assert!(mean_reward <= 0.2, "the task must start hard: {mean_reward}");
        }
        if curve.len() >= 3 && curve[curve.len() - 3..].iter().all(|&r| r >= 0.8) {
            break;
        }
        let mask = [false, false, true];
        let batch: Vec<GrpoSample<'_>> = seqs
            .iter()
            .map(|(ids, old, a)| GrpoSample {
                ids,
                train_mask: &mask,
                old_logprobs: old,
                ref_logprobs: None,
                advantage: *a,
                routing: None,
            })
            .collect();
        // On-policy: the training forward recomputes the rollout's log-probabilities.
        if step == 0 {
            let (ids, old, _) = &seqs[0];
            let t = tr.model.forward(ids, None, TapeOptions::default()).unwrap();
            let lp = log_softmax_row(&t.logits[v..2 * v])[ids[2] as usize];
            assert!((lp - old[2]).abs() < 1e-5, "recomputed {lp} vs rollout {}", old[2]);
        }
        tr.grpo_step(&batch).unwrap();
    }
    let last = *curve.last().unwrap();
    eprintln!("reward curve: {curve:?}");
    assert!(curve[0] <= 0.2 && last >= 0.8, "mean reward {} → {last}", curve[0]);
}
