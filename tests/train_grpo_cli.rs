//! `execcritic train grpo --config FILE.toml` on the built-in toy task: one JSON line of
//! metrics per iteration (mean reward, kept groups, tokens, loss, …) and an HF checkpoint with
//! optimizer state that our loader reads back. A bad config is a clear error.

use execcritic::model::Model;
use std::path::Path;
use std::process::Command;

#[test]
fn train_grpo_runs_the_toy_task_and_saves_a_checkpoint() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::read_to_string(root.join("docs/train-grpo-toy.toml")).unwrap();
    let cfg = base
        .replace("\"../models/", &format!("\"{}/models/", root.display()))
        .replace(
            "out = \"../target/grpo-toy\"",
            &format!("out = {:?}", dir.path().join("out")),
        )
        .replace("steps = 100", "steps = 3")
        .replace("save_every = 10 ", "save_every = 2 ")
        .replace("groups = 16 ", "groups = 2 ");
    let path = dir.path().join("grpo.toml");
    std::fs::write(&path, &cfg).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_execcritic"))
        .args(["train", "grpo", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "one JSON line per iteration");
    for (i, l) in lines.iter().enumerate() {
        eprintln!("{l}");
        assert_eq!(l["iteration"], i as u64);
        assert_eq!(l["kept_groups"], 2);
        let r = l["mean_reward"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&r));
        assert!(l["tokens"].as_u64().unwrap() > 0 && l["loss"].is_f64() && l["micro_batches"] == 1);
    }
    for ck in ["step-2", "final"] {
        let d = dir.path().join("out").join(ck);
        assert!(d.join("config.json").exists(), "{ck} saved");
        Model::load(&d).unwrap();
    }

    // `device = "…"`: rollouts and updates on the emulated CUDA device (one iteration, the device
    // trainer's checkpoint written), a bad device refused.
    let train = |cfg: String| {
        std::fs::write(&path, cfg).unwrap();
        Command::new(env!("CARGO_BIN_EXE_execcritic"))
            .args(["train", "grpo", "--config"])
            .arg(&path)
            .output()
            .unwrap()
    };
    let on = |device: &str| {
        let (a, b) = ("device = \"cpu\"", format!("device = {device:?}"));
        assert!(cfg.contains(a), "the example config names its device");
        cfg.replace(a, &b).replace("steps = 3", "steps = 1")
    };
    let out = train(on("emulator:f32"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 1);
    let out = train(on("tpu"));
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown device"));

    std::fs::write(
        &path,
        "model = \"x\"\nout = \"y\"\ntask = \"no-such-task\"\nsteps = 1\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_execcritic"))
        .args(["train", "grpo", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no-such-task"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
