//! Shared by integration tests: a model folder with the tiny Qwen3.5-MoE fixture's config and
//! weights (models/tiny-qwen35) plus the test tokenizer and chat template (models/tokenizer).

use std::path::Path;

pub fn tiny_model_dir() -> tempfile::TempDir {
    let models = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    let dir = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(models.join("tiny-qwen35").join(f), dir.path().join(f)).unwrap();
    }
    for f in ["tokenizer.json", "tokenizer_config.json", "chat_template.jinja"] {
        std::fs::copy(models.join("tokenizer").join(f), dir.path().join(f)).unwrap();
    }
    dir
}
