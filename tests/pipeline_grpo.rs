//! GRPO on agent tasks: Repair episodes on a bundled task, sampled by the engine running on the
//! trainer's lent weights (tiny fixture model + the real tokenizer and chat template), scored by
//! the harness, turned into training sequences whose recomputed log-probabilities (routing
//! replay) equal the rollout's; an update on those sequences moves the policy towards the
//! better-scored rollout. And `train grpo` with `task = "repair"` end to end: every rollout
//! logged with its reward; with no reward variance the iteration reaches the dynamic-sampling
//! cap and makes no update (`capped`), and the run goes on.

#[path = "common/sft.rs"]
mod common;

use execcritic::engine::EngineConfig;
use execcritic::model::chat::ChatTemplate;
use execcritic::model::tokenizer::Tokenizer;
use execcritic::pipeline::grpo::{AgentSampler, AgentTaskConfig, Role};
use execcritic::train::dynamic::{Collected, KeptGroup, Scored};
use execcritic::train::iteration::update_phase;
use execcritic::train::loss::log_softmax_row;
use execcritic::train::optim::AdamWConfig;
use execcritic::train::rollout::{GroupSampler, Rollout};
use execcritic::train::trainer::Trainer;
use execcritic::train::{TapeOptions, TrainModel};
use std::path::Path;
use std::process::Command;

const TASK: &str = "inikit__inikit-1";

fn small_budget() -> AgentTaskConfig {
    AgentTaskConfig {
        instances: vec![TASK.into()],
        max_tokens: Some(24),
        round0_turns: 2,
        revision_rounds: 1,
        revision_turns: 1,
        command_timeout_secs: 30,
        ..AgentTaskConfig::default()
    }
}

/// Σ advantage · (mean log-probability of the sampled tokens) of the rollouts under `model`,
/// and the largest |recomputed − rollout| log-probability (routing replayed).
fn objective(model: &TrainModel, group: &[(Vec<Rollout>, f64)]) -> (f64, f32) {
    let v = model.cfg.vocab_size;
    let (mut j, mut worst) = (0.0, 0f32);
    for (seqs, adv) in group {
        let (mut sum, mut n) = (0.0, 0usize);
        for r in seqs {
            let tape = model.forward(&r.ids, r.routing.as_deref(), TapeOptions::default()).unwrap();
            for t in 1..r.ids.len() {
                if r.train_mask[t] {
                    let lp = log_softmax_row(&tape.logits[(t - 1) * v..t * v])[r.ids[t] as usize];
                    worst = worst.max((lp - r.logprobs[t]).abs());
                    sum += lp as f64;
                    n += 1;
                }
            }
        }
        j += adv * sum / n.max(1) as f64;
    }
    (j, worst)
}

#[test]
fn repair_rollouts_through_the_lent_engine_train_the_policy() {
    let dir = common::model_dir("tiny-qwen35");
    let model = TrainModel::load(dir.path()).unwrap();
    let mut trainer = Trainer::new(model, AdamWConfig { lr: 1e-4, ..Default::default() });
    let mut sampler = AgentSampler::new(Role::Repair, small_budget(), dir.path(), 11, None).unwrap();
    assert!(sampler.needs_chat_template());

    let tokenizer = Tokenizer::from_dir(dir.path()).unwrap();
    let template = ChatTemplate::from_dir(dir.path()).unwrap();
    let lent = trainer.lend(tokenizer, Some(template), EngineConfig::default()).unwrap();
    let group = sampler.sample_group(lent.engine(), 0, 2).unwrap();
    lent.give_back().map_err(|e| e.error).unwrap();

    assert_eq!(group.len(), 2);
    for s in &group {
        // The random model cannot write a patch: an empty terminal patch is invalid (reward 0),
        // a behavioural outcome, not an aborted rollout.
        assert!(!s.aborted, "{s:?}");
        assert_eq!(s.reward, 0.0);
        assert!(!s.sample.is_empty() && s.sample.iter().all(|r| r.sampled_tokens() > 0));
        for r in &s.sample {
            assert_eq!((r.train_mask.len(), r.logprobs.len()), (r.ids.len(), r.ids.len()));
            assert!(r.routing.is_some(), "routing recorded for replay");
        }
    }
    assert_ne!(group[0].sample, group[1].sample, "differently seeded rollouts differ");

    // Pretend the first rollout scored better, so the group carries a learning signal.
    let scored: Vec<(Vec<Rollout>, f64)> = vec![(group[0].sample.clone(), 0.5), (group[1].sample.clone(), -0.5)];
    let (before, worst) = objective(&trainer.model, &scored);
    eprintln!("rollout vs recomputed log-probabilities: max |Δ| = {worst:.2e}");
    // The engine decodes token by token (recurrent GDN form), the trainer reads the whole
    // sequence (chunked form): equal up to f32 rounding, within the engine's 1e-4 parity bound.
    assert!(worst < 1e-4, "recomputed log-probabilities must equal the rollout's: {worst}");
    let kept = KeptGroup {
        attempt: 0,
        samples: scored.iter().map(|(s, _)| Scored { sample: s.clone(), reward: 0.0, aborted: false }).collect(),
        advantages: scored.iter().map(|(_, a)| *a).collect(),
    };
    let collected = Collected { kept: vec![kept], attempts: 1, skipped: 0, mean_reward: 0.0, aborted_samples: 0 };
    let report = update_phase(&mut trainer, &collected, 1 << 20).unwrap();
    let update = report.update.expect("an update on agent sequences");
    let sampled: usize = scored.iter().flat_map(|(s, _)| s).map(Rollout::sampled_tokens).sum();
    assert_eq!(update.tokens, sampled, "every sampled token of every turn is trained");
    let (after, _) = objective(&trainer.model, &scored);
    eprintln!("advantage-weighted mean log-probability: {before:.5} → {after:.5}");
    assert!(after > before, "the update must favour the better rollout: {before} → {after}");
}

#[test]
fn train_grpo_cli_runs_repair_episodes_and_logs_every_rollout() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let work = tempfile::tempdir().unwrap();
    let out = work.path().join("out");
    let cfg = std::fs::read_to_string(root.join("docs/train-grpo-repair.toml"))
        .unwrap()
        .replace("\"../models/", &format!("\"{}/models/", root.display()))
        .replace("out = \"../target/grpo-repair\"", &format!("out = {:?}", out))
        .replace("steps = 100 ", "steps = 1 ")
        .replace("groups = 16 ", "groups = 1 ")
        .replace("group_size = 8 ", "group_size = 2 ")
        .replace("max_attempts = 200", "max_attempts = 2")
        .replace("max_tokens = 6122 ", "max_tokens = 24 ")
        .replace("round0_turns = 200", &format!("round0_turns = 2\ninstances = [{TASK:?}]"))
        .replace("revision_rounds = 5", "revision_rounds = 1")
        .replace("revision_turns = 40", "revision_turns = 1");
    let path = work.path().join("repair.toml");
    std::fs::write(&path, cfg).unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_execcritic")).args(["train", "grpo", "--config"]).arg(&path).output().unwrap();
    let (stderr, stdout) = (String::from_utf8_lossy(&run.stderr), String::from_utf8_lossy(&run.stdout));
    // Every rollout of the random model scores the same (no patch): no group has variance, the
    // collection reaches the dynamic-sampling cap, and the iteration makes no update — the run
    // goes on and saves its final checkpoint.
    assert!(run.status.success(), "{stderr}");
    let rep: serde_json::Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap();
    assert_eq!(rep["capped"], true, "{stdout}");
    assert_eq!((rep["kept_groups"].as_u64(), rep["skipped_groups"].as_u64()), (Some(0), Some(2)), "{stdout}");
    assert!(rep.get("loss").is_none(), "a capped iteration makes no update: {stdout}");
    assert!(out.join("final").join("config.json").is_file(), "{stderr}");
    let log = std::fs::read_to_string(out.join("rollouts.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = log.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 4, "2 groups × 2 rollouts: {log}");
    for l in &lines {
        assert_eq!(l["instance_id"], TASK);
        assert_eq!(l["role"], "repair");
        assert_eq!(l["reward"], 0.0, "{l}");
        assert!(l["aborted"].is_null() && l["sampled_tokens"].as_u64().unwrap() > 0, "{l}");
    }

    // A bad [agent] table is a clear error naming the field.
    let bad = std::fs::read_to_string(&path).unwrap().replace("sandbox = \"local\"", "sandbox = \"local\"\nno_such_field = 1");
    std::fs::write(&path, bad).unwrap();
    let run = Command::new(env!("CARGO_BIN_EXE_execcritic")).args(["train", "grpo", "--config"]).arg(&path).output().unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(!run.status.success() && stderr.contains("no_such_field"), "{stderr}");
}
