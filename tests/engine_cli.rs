//! `execcritic generate` end to end on the tiny fixture model (with the test tokenizer and chat
//! template): prints a completion, reports speed, reproduces with a seed, and fails cleanly on a
//! bad model folder.

use std::path::Path;
use std::process::Command;

fn model_dir() -> tempfile::TempDir {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    let dir = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(root.join("tiny-qwen35").join(f), dir.path().join(f)).unwrap();
    }
    for f in [
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
    ] {
        std::fs::copy(root.join("tokenizer").join(f), dir.path().join(f)).unwrap();
    }
    dir
}

fn generate(dir: &Path, extra: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_execcritic"))
        .args(["generate", "--model"])
        .arg(dir)
        .args(["--prompt", "List the files."])
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn generate_prints_completion_and_speed() {
    let dir = model_dir();
    let args = [
        "--max-tokens",
        "12",
        "--temperature",
        "0.9",
        "--top-k",
        "50",
        "--top-p",
        "0.95",
        "--seed",
        "4",
    ];
    let a = generate(dir.path(), &args);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    let stderr = String::from_utf8_lossy(&a.stderr);
    assert!(
        stderr.contains("tok/s") && stderr.contains("prompt") && stderr.contains("completion"),
        "{stderr}"
    );
    // The chat template wrapped the prompt: more prompt tokens than the raw text has.
    let raw = generate(dir.path(), &[&args[..], &["--raw"]].concat());
    let count = |o: &std::process::Output| {
        let s = String::from_utf8_lossy(&o.stderr).to_string();
        let i = s.find("prompt ").unwrap() + 7;
        s[i..]
            .split_whitespace()
            .next()
            .unwrap()
            .parse::<usize>()
            .unwrap()
    };
    assert!(count(&a) > count(&raw) + 5);
    // Seeded: the same completion again.
    let b = generate(dir.path(), &args);
    assert_eq!(a.stdout, b.stdout);
}

#[test]
fn generate_reports_a_bad_model_folder() {
    let dir = tempfile::tempdir().unwrap();
    let out = generate(dir.path(), &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("config.json"));
    let model = model_dir();
    let out = generate(model.path(), &["--temperature=-1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("temperature"));
}
