//! `execcritic logits` and `execcritic generate` on the CUDA backend's devices, end to end: the
//! emulated device in f32 mode prints the CPU engine's logits to 1e-4 and the same greedy (and
//! seeded sampled, drawn on the device) completions; bad devices, dtypes and shapes are clear
//! errors before any run.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn models() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models")
}

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_execcritic"))
        .args(args)
        // The CPU engine as the exact reference, whatever the caller's environment asks for.
        .env("EXECCRITIC_BF16_ACTIVATIONS", "f32")
        .output()
        .unwrap()
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn logits(model: &Path, ids: &str, device: &[&str]) -> Vec<Vec<f32>> {
    let m = model.to_str().unwrap();
    let args = [
        &["logits", "--model", m, "--ids", ids, "--decode-after", "9"][..],
        device,
    ]
    .concat();
    let v: serde_json::Value = serde_json::from_str(&ok(&run(&args))).unwrap();
    serde_json::from_value(v["logits"].clone()).unwrap()
}

#[test]
fn logits_on_the_emulator_in_f32_equal_the_cpu_engine() {
    let ids = (0..16)
        .map(|i| (i * 37 % 500).to_string())
        .collect::<Vec<_>>()
        .join(",");
    for name in ["tiny-qwen35", "tiny-qwen35-b", "tiny-qwen35-bf16"] {
        let dir = models().join(name);
        let cpu = logits(&dir, &ids, &["--device", "cpu"]);
        let emu = logits(&dir, &ids, &["--device", "emulator", "--dtype", "f32"]);
        assert_eq!(cpu.len(), 16, "{name}: one row per id");
        assert_eq!(emu.len(), cpu.len());
        let err = cpu
            .iter()
            .flatten()
            .zip(emu.iter().flatten())
            .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(err <= 1e-4, "{name}: max |emulator f32 − cpu| = {err}");
    }
}

/// The fixture model with the test tokenizer and chat template (as tests/engine_cli.rs).
fn chat_model() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(models().join("tiny-qwen35").join(f), dir.path().join(f)).unwrap();
    }
    for f in [
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
    ] {
        std::fs::copy(models().join("tokenizer").join(f), dir.path().join(f)).unwrap();
    }
    dir
}

fn generate(dir: &Path, extra: &[&str]) -> String {
    let m = dir.to_str().unwrap();
    let base = [
        "generate",
        "--model",
        m,
        "--prompt",
        "List the files.",
        "--max-tokens",
        "64",
    ];
    ok(&run(&[&base[..], extra].concat()))
}

#[test]
fn generate_on_the_emulator_in_f32_prints_the_cpu_tokens() {
    let dir = chat_model();
    let emu = ["--device", "emulator", "--dtype", "f32"];
    let greedy = ["--temperature", "0"];
    let cpu = generate(dir.path(), &greedy);
    assert!(!cpu.trim().is_empty(), "empty completion");
    assert_eq!(generate(dir.path(), &[&greedy[..], &emu].concat()), cpu);
    // seeded sampling draws the same tokens when the logits agree
    let sampled = [
        "--temperature",
        "0.9",
        "--top-k",
        "50",
        "--top-p",
        "0.95",
        "--seed",
        "4",
    ];
    assert_eq!(
        generate(dir.path(), &[&sampled[..], &emu].concat()),
        generate(dir.path(), &sampled)
    );
    // temperature 1 over the whole vocabulary, drawn on the device
    let plain = ["--temperature", "1", "--seed", "9"];
    assert_eq!(
        generate(dir.path(), &[&plain[..], &emu].concat()),
        generate(dir.path(), &plain)
    );
}

#[test]
fn bad_devices_dtypes_and_shapes_are_clear_errors() {
    let dir = models().join("tiny-qwen35");
    let m = dir.to_str().unwrap();
    let err = |args: &[&str]| {
        let o = run(&[&["logits", "--model", m, "--ids", "1,2"][..], args].concat());
        assert!(!o.status.success(), "{args:?} should fail");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    assert!(err(&["--device", "tpu"]).contains("unknown device"));
    assert!(err(&["--device", "cpu", "--dtype", "bf16"]).contains("--dtype bf16 needs"));
    assert!(err(&["--device", "emulator", "--dtype", "f16"]).contains("unknown dtype"));
    // a head dimension the attention kernels do not support: refused at load, not run
    let tmp = tempfile::tempdir().unwrap();
    let mut cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    cfg["head_dim"] = 512.into();
    std::fs::write(tmp.path().join("config.json"), cfg.to_string()).unwrap();
    std::fs::copy(
        dir.join("model.safetensors"),
        tmp.path().join("model.safetensors"),
    )
    .unwrap();
    let o = run(&[
        "logits",
        "--model",
        tmp.path().to_str().unwrap(),
        "--ids",
        "1,2",
        "--device",
        "emulator",
    ]);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && stderr.contains("head_dim 512"),
        "{stderr}"
    );
}
