//! In-process GRPO learning through the real engine path (issue 6): every iteration the
//! trainer's weights are lent (moved, not copied) to an `Engine`, which samples batched,
//! seeded requests at temperature 1 with log-probabilities and routing records; DAPO dynamic
//! sampling keeps groups with reward variance; the weights go back to the `Trainer`, which
//! replays the rollout's routing and takes one clipped-policy step (paper settings: clip
//! 0.2/0.28, group-mean advantages without std, token-level aggregation). The verifiable task
//! (`train::toy`): after `[BOS, p]`, sample 2 tokens; reward 1 iff their ids sum to a multiple
//! of 8. Mean reward must rise from ≤ 0.2 to ≥ 0.8; at step 0 the training forward's
//! recomputed log-probabilities of the sampled tokens equal the engine's within 1e-5.

use execcritic::engine::EngineConfig;
use execcritic::model::tokenizer::Tokenizer;
use execcritic::train::dynamic::DynamicSamplingConfig;
use execcritic::train::iteration::{rollout_phase, update_phase, EngineSetup};
use execcritic::train::loss::log_softmax_row;
use execcritic::train::optim::AdamWConfig;
use execcritic::train::toy::{MultipleOf8Task, ToyTaskConfig};
use execcritic::train::trainer::Trainer;
use execcritic::train::{TapeOptions, TrainModel};
use std::path::Path;
use std::time::Instant;

/// The tiny fixture's trainer, the rollout engine's setup and the toy task (seed 7).
fn toy() -> (Trainer, EngineSetup, MultipleOf8Task) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    let model = TrainModel::load(&root.join("tiny-qwen35")).unwrap();
    let tr = Trainer::new(
        model,
        AdamWConfig {
            lr: 3e-3,
            ..Default::default()
        },
    );
    let setup = EngineSetup {
        tokenizer: Tokenizer::from_dir(&root.join("tokenizer")).unwrap(),
        template_dir: None,
        config: EngineConfig::default(),
    };
    let task = MultipleOf8Task::new(
        ToyTaskConfig {
            prompts: vec![11, 222, 333, 444],
            completion_tokens: 2,
            bos: 1,
            prompt_tokens: 2,
        },
        7,
    );
    (tr, setup, task)
}

#[test]
fn grpo_through_the_engine_raises_mean_reward_on_a_toy_task() {
    let (mut tr, setup, mut task) = toy();
    let v = tr.model.cfg.vocab_size;
    let sampling = DynamicSamplingConfig {
        groups: 4,
        group_size: 8,
        max_attempts: 200,
    };
    let t0 = Instant::now();
    let mut curve = Vec::new();
    for step in 0..150 {
        let collected = rollout_phase(&mut tr, &setup, &mut task, &sampling).unwrap();
        if step == 0 {
            assert!(
                collected.mean_reward <= 0.2,
                "the task must start hard: {}",
                collected.mean_reward
            );
            // On-policy with routing replay: the training forward on the returned weights
            // recomputes exactly what the engine sampled with.
            let (mut worst, mut n) = (0.0f32, 0);
            for r in collected
                .kept
                .iter()
                .flat_map(|g| &g.samples)
                .flat_map(|s| &s.sample)
            {
                assert!(r.routing.is_some(), "the engine returned a routing record");
                let tape = tr
                    .model
                    .forward(&r.ids, r.routing.as_deref(), TapeOptions::default())
                    .unwrap();
                for t in (1..r.ids.len()).filter(|&t| r.train_mask[t]) {
                    let lp = log_softmax_row(&tape.logits[(t - 1) * v..t * v])[r.ids[t] as usize];
                    worst = worst.max((lp - r.logprobs[t]).abs());
                    n += 1;
                }
            }
            eprintln!(
                "step 0: {n} sampled tokens, max |recomputed − rollout log-prob| = {worst:e}"
            );
            assert!(
                n > 0 && worst <= 1e-5,
                "recomputed log-probabilities differ from the rollout's by {worst}"
            );
        }
        let report = update_phase(&mut tr, &collected, usize::MAX).unwrap();
        curve.push(report.mean_reward);
        eprintln!(
            "step {step:3}: mean reward {:.3}  kept {} skipped {}  loss {:+.4}  ({:.1} s)",
            report.mean_reward,
            report.kept_groups,
            report.skipped_groups,
            report.update.map_or(0.0, |u| u.loss),
            t0.elapsed().as_secs_f64()
        );
        if curve.len() >= 3 && curve[curve.len() - 3..].iter().all(|&r| r >= 0.8) {
            break;
        }
    }
    eprintln!(
        "reward curve: {:?}",
        curve
            .iter()
            .map(|r| (r * 1000.0).round() / 1000.0)
            .collect::<Vec<_>>()
    );
    let last = *curve.last().unwrap();
    assert!(
        curve[0] <= 0.2 && last >= 0.8,
        "mean reward {} → {last}",
        curve[0]
    );
}

/// `device = "emulator:f32"`: rollouts on the emulated CUDA device from weights uploaded after
/// every update, the update on the CPU trainer. Two iterations give the CPU engine's rollouts
/// (same tokens, log-probabilities within 1e-4, same routing) and the same updates — the second
/// iteration samples from the updated weights on both.
#[test]
fn grpo_rollouts_on_the_emulated_device_equal_the_cpu_engine() {
    use execcritic::engine::Placement;
    use execcritic::train::iteration::rollout_phase_at;
    let run = |placement: Placement| {
        let (mut tr, setup, mut task) = toy();
        let sampling = DynamicSamplingConfig {
            groups: 2,
            group_size: 8,
            max_attempts: 50,
        };
        let mut out = Vec::new();
        for _ in 0..2 {
            let collected = rollout_phase_at(&mut tr, &setup, placement, &mut task, &sampling).unwrap();
            let samples: Vec<_> = collected
                .kept
                .iter()
                .flat_map(|g| &g.samples)
                .flat_map(|s| &s.sample)
                .map(|r| (r.ids.clone(), r.logprobs.clone(), r.routing.clone()))
                .collect();
            let report = update_phase(&mut tr, &collected, usize::MAX).unwrap();
            out.push((samples, report.update.map(|u| u.loss)));
        }
        out
    };
    let cpu = run(Placement::default());
    let emu = run("emulator:f32".parse().unwrap());
    for (it, ((cs, cl), (es, el))) in cpu.iter().zip(&emu).enumerate() {
        assert_eq!(cs.len(), es.len(), "iteration {it}: kept samples");
        assert!(!cs.is_empty());
        for ((ci, clp, cr), (ei, elp, er)) in cs.iter().zip(es) {
            assert_eq!(ci, ei, "iteration {it}: sampled ids");
            assert_eq!(cr, er, "iteration {it}: routing");
            let err = clp.iter().zip(elp).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
            assert!(err <= 1e-4, "iteration {it}: log-probabilities differ by {err}");
        }
        match (cl, el) {
            (Some(a), Some(b)) => assert!((a - b).abs() <= 1e-4, "iteration {it}: loss {a} vs {b}"),
            (a, b) => assert_eq!(a.is_some(), b.is_some(), "iteration {it}: an update on one only"),
        }
    }
}

/// A policy that always succeeds: every group lacks reward variance.
struct Saturated(MultipleOf8Task);

impl execcritic::train::rollout::GroupSampler for Saturated {
    fn sample_group(
        &mut self,
        engine: &execcritic::engine::Engine,
        attempt: usize,
        size: usize,
    ) -> execcritic::train::error::Result<Vec<execcritic::train::dynamic::Scored<Vec<execcritic::train::rollout::Rollout>>>> {
        let mut group = self.0.sample_group(engine, attempt, size)?;
        group.iter_mut().for_each(|s| s.reward = 1.0);
        Ok(group)
    }
}

/// A collection that reaches the dynamic-sampling cap (a saturated task) is an iteration
/// without an update — the run goes on — reported with its mean reward and `capped`; nothing
/// moves: weights and optimizer step are unchanged. Other errors still fail the iteration.
#[test]
fn a_capped_collection_is_an_iteration_without_an_update() {
    use execcritic::train::iteration::grpo_iteration;
    let (mut tr, setup, task) = toy();
    let before: Vec<Vec<f32>> = tr.model.store.params.iter().map(|p| p.data.clone()).collect();
    let mut sat = Saturated(task);
    let sampling = DynamicSamplingConfig { groups: 2, group_size: 4, max_attempts: 3 };
    let rep = grpo_iteration(&mut tr, &setup, &mut sat, &sampling, usize::MAX).unwrap();
    assert!(rep.capped && rep.update.is_none(), "{rep:?}");
    assert_eq!((rep.kept_groups, rep.skipped_groups, rep.mean_reward), (0, 3, 1.0));
    assert_eq!(tr.opt.step, 0);
    assert!(tr.model.store.params.iter().zip(&before).all(|(p, b)| &p.data == b), "weights moved");
    let json = serde_json::to_value(&rep).unwrap();
    assert_eq!(json["capped"], true);

    let bad = DynamicSamplingConfig { groups: 2, group_size: 1, max_attempts: 3 };
    assert!(grpo_iteration(&mut tr, &setup, &mut sat, &bad, usize::MAX).is_err(), "a bad config is still an error");
}
