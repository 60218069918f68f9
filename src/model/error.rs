//! `ModelError`: every way loading a checkpoint or running the forward pass can fail on bad
//! input (config, files, tensors, token ids, state), each naming the offending item.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("invalid config {path}: {msg}")]
    Config { path: PathBuf, msg: String },
    #[error("unsupported model_type {0:?} (expected \"qwen3_5_moe\" or \"qwen3_5_moe_text\")")]
    UnsupportedModelType(String),
    #[error("no weights in {0}: expected model.safetensors or model.safetensors.index.json")]
    NoWeights(PathBuf),
    #[error("invalid safetensors file {path}: {msg}")]
    Safetensors { path: PathBuf, msg: String },
    #[error("missing tensor {0}")]
    MissingTensor(String),
    #[error("tensor {name} has shape {found:?}, expected {expected:?}")]
    ShapeMismatch {
        name: String,
        expected: Vec<usize>,
        found: Vec<usize>,
    },
    #[error("tensor {name} has dtype {dtype}, expected F32, BF16 or F16")]
    UnsupportedDtype { name: String, dtype: String },
    #[error("token id {token} is outside the vocabulary (size {vocab})")]
    TokenOutOfRange { token: u32, vocab: usize },
    #[error("invalid forward input: {0}")]
    BadInput(String),
}

pub type Result<T> = std::result::Result<T, ModelError>;
