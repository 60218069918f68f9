//! Acceptance (issue 18): the CI-sized `demo train` run — scripted teacher trajectories on the
//! easy suite (real Repair episodes in bubblewrap sandboxes, harness-scored), SFT of the tiny
//! random-initialised Qwen3.5-MoE on them, then GRPO from the SFT checkpoint with rollouts through
//! the engine on the trainer's lent weights, eq. 6 rewards from the harness, DAPO dynamic
//! sampling and routing replay. Seeded. Asserts that updates used non-zero advantages from real
//! episodes and that the mean reward of the last iterations exceeds that of the first by a
//! margin, and that the run directory holds what the command promises.

use execcritic::pipeline::demo::{run_demo, DemoConfig};
use std::path::Path;

/// Mean reward gain (eq. 6 units, max 1.5) required between the first and the last quarter of
/// the iterations (2 of 8). Chosen from the measured run (benches/results/demo-train-cpu.md): the
/// per-iteration mean reward over 8–16 episodes varies with a standard deviation of ≈ 0.12
/// between neighbouring iterations (iterations 3–6: 0.40, 0.14, 0.39, 0.27), so the mean of two
/// iterations has ≈ 0.085 and the difference of two such means ≈ 0.12; the margin is ≈ 1.7 of
/// those. Measured: first quarter 0.096 in both runs; last quarter 0.394 (recorded CLI run) and
/// 0.312 (this test, 2028 s on the loaded shared machine): the margin is met, but narrowly.
const MARGIN: f64 = 0.2;

#[test]
fn demo_train_learns_on_real_episodes() {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    let cfg = DemoConfig::ci(&models);
    let out = tempfile::tempdir().unwrap();
    let t0 = std::time::Instant::now();
    let s = run_demo(&cfg, out.path(), &mut |line| eprintln!("{line}")).unwrap();
    eprintln!("demo train (CI size) took {:.0} s", t0.elapsed().as_secs_f64());

    // The teacher's paths are what they claim, by the harness's own verdicts.
    for r in &s.teacher {
        let reward = r.reward.unwrap_or_else(|| panic!("teacher episode masked: {r:?}"));
        assert_eq!(reward >= 1.0, r.correct, "{r:?}");
    }
    // SFT learned the trajectories.
    assert!(s.sft_losses.last().unwrap() < &(s.sft_losses[0] / 4.0), "SFT loss {:?}", s.sft_losses);

    // GRPO updates from real episodes with non-zero advantages.
    let updates: Vec<_> = s.iterations.iter().filter(|m| m.update.is_some() && m.nonzero_advantages > 0).collect();
    assert!(!updates.is_empty(), "no GRPO update with non-zero advantages");
    for m in &updates {
        assert!(m.update.as_ref().unwrap().tokens > 0 && m.score.rollouts > 0);
    }
    let n = s.iterations.len();
    let k = n / 4;
    let (first, last) = (s.mean_reward(0..k), s.mean_reward(n - k..n));
    eprintln!("mean reward: first {k} iterations {first:.3}, last {k} {last:.3}");
    assert!(last > first + MARGIN, "mean reward did not rise: first {first:.3}, last {last:.3}");

    // The run directory.
    for f in ["config.toml", "teacher.jsonl", "trajectories.jsonl", "sft.toml", "rollouts.jsonl", "eval.jsonl", "reward_curve.svg", "report.md", "summary.json"] {
        assert!(out.path().join(f).is_file(), "{f} missing");
    }
    for d in ["sft/final", "grpo/step-4", "grpo/final"] {
        assert!(out.path().join(d).join("config.json").is_file(), "{d} missing");
    }
    let metrics = std::fs::read_to_string(out.path().join("metrics.jsonl")).unwrap();
    let phases: Vec<String> = metrics
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["phase"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(phases.iter().filter(|p| *p == "sft").count() as u64, cfg.sft_steps);
    assert_eq!(phases.iter().filter(|p| *p == "grpo").count() as u64, cfg.grpo_iterations);
    assert!(s.eval("grpo", "held_back").is_some() && s.eval("sft", "held_back").is_some());
    let svg = std::fs::read_to_string(out.path().join("reward_curve.svg")).unwrap();
    assert!(svg.contains("Resolve rate") && svg.contains("<polyline"));
}
