//! Shared by integration tests: a model folder with the tiny Qwen3.5-MoE fixture's config and
//! weights (models/tiny-qwen35) plus the test tokenizer and chat template (models/tokenizer).

use std::path::{Path, PathBuf};

/// The fixtures: `$EXECCRITIC_MODELS` (a prebuilt test binary run elsewhere, as on the GPU
/// host), else the crate's `models/`.
pub fn models_dir() -> PathBuf {
    std::env::var_os("EXECCRITIC_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("models"))
}

pub fn tiny_model_dir() -> tempfile::TempDir {
    let models = models_dir();
    let dir = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(models.join("tiny-qwen35").join(f), dir.path().join(f)).unwrap();
    }
    for f in ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"] {
        std::fs::copy(models.join("tokenizer").join(f), dir.path().join(f)).unwrap();
    }
    dir
}
