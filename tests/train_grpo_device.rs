//! GRPO with rollouts AND updates on the emulated CUDA device, in one process, over one copy of
//! the weights (`train::device::DeviceTrainer`, f32 build): every iteration the trainer's
//! `CudaModel` is moved into an engine on the same `Gpu`, which samples the toy task of
//! `tests/train_grpo_toy.rs` (after `[BOS, p]` sample 2 tokens; reward 1 iff their ids sum to a
//! multiple of 8), and taken back for the device update (routing replayed, GRPO loss on the
//! device, backward, one device AdamW step rewriting the served weights in place). At step 0
//! the device training forward's log-probabilities of the sampled tokens equal the engine's
//! within 1e-5; the mean reward rises from ≤ 0.2 to ≥ 0.8.

use execcritic::engine::EngineConfig;
use execcritic::model::backend::cuda::CudaModel;
use execcritic::model::tokenizer::Tokenizer;
use execcritic::tensor::cuda::Gpu;
use execcritic::train::device::DeviceTrainer;
use execcritic::train::dynamic::DynamicSamplingConfig;
use execcritic::train::iteration::EngineSetup;
use execcritic::train::optim::AdamWConfig;
use execcritic::train::toy::{MultipleOf8Task, ToyTaskConfig};
use std::path::Path;
use std::time::Instant;

#[test]
fn grpo_on_the_emulated_device_raises_mean_reward_on_a_toy_task() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    let gpu = Gpu::emulator().unwrap();
    let model = CudaModel::<f32>::load(&gpu, &root.join("tiny-qwen35")).unwrap();
    let mut tr = DeviceTrainer::new(gpu, model, AdamWConfig { lr: 3e-3, ..Default::default() }).unwrap();
    let setup = EngineSetup {
        tokenizer: Tokenizer::from_dir(&root.join("tokenizer")).unwrap(),
        template_dir: None,
        config: EngineConfig::default(),
    };
    let mut task = MultipleOf8Task::new(ToyTaskConfig { prompts: vec![11, 222, 333, 444], completion_tokens: 2, bos: 1 }, 7);
    let sampling = DynamicSamplingConfig { groups: 4, group_size: 8, max_attempts: 200 };
    let t0 = Instant::now();
    let mut curve = Vec::new();
    for step in 0..150 {
        let collected = tr.rollout_phase(&setup, &mut task, &sampling).unwrap();
        if step == 0 {
            assert!(collected.mean_reward <= 0.2, "the task must start hard: {}", collected.mean_reward);
            let (mut worst, mut n) = (0.0f32, 0);
            for r in collected.kept.iter().flat_map(|g| &g.samples).flat_map(|s| &s.sample) {
                assert!(r.routing.is_some(), "the engine returned a routing record");
                let lp = tr.token_logprobs(&r.ids, &r.train_mask, r.routing.as_deref()).unwrap();
                for t in (1..r.ids.len()).filter(|&t| r.train_mask[t]) {
                    worst = worst.max((lp[t] - r.logprobs[t]).abs());
                    n += 1;
                }
            }
            eprintln!("step 0: {n} sampled tokens, max |device training − engine log-prob| = {worst:e}");
            assert!(n > 0 && worst <= 1e-5, "recomputed log-probabilities differ from the engine's by {worst}");
        }
        let report = tr.update_phase(&collected).unwrap();
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
    eprintln!("reward curve: {:?}", curve.iter().map(|r| (r * 1000.0).round() / 1000.0).collect::<Vec<_>>());
    let last = *curve.last().unwrap();
    assert!(curve[0] <= 0.2 && last >= 0.8, "mean reward {} → {last}", curve[0]);
}
