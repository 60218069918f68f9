//! `EngineError`: why a generation request failed (bad request, model failure, tokenizer or chat
//! template failure, the request being cancelled, the engine thread being gone, or a request
//! the model's cache cannot hold).

use crate::model::chat::ChatError;
use crate::model::tokenizer::TokenizerError;

#[derive(Debug, Clone, thiserror::Error)]
pub enum EngineError {
    #[error("invalid request: {0}")]
    BadRequest(String),
    #[error("model forward failed: {0}")]
    Model(String),
    #[error("loading the model failed: {0}")]
    Load(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    #[error("chat template: {0}")]
    Chat(String),
    #[error("the engine has shut down")]
    Shutdown,
    #[error("the request was cancelled")]
    Cancelled,
    /// The model's cache (a device's paged KV pool, its sequence slots) cannot hold the
    /// request even with every other sequence preempted and every cached conversation evicted.
    #[error("{0}")]
    CacheFull(String),
}

impl From<crate::model::ModelError> for EngineError {
    fn from(e: crate::model::ModelError) -> Self {
        EngineError::Model(e.to_string())
    }
}

impl From<TokenizerError> for EngineError {
    fn from(e: TokenizerError) -> Self {
        EngineError::Tokenizer(e.to_string())
    }
}

impl From<ChatError> for EngineError {
    fn from(e: ChatError) -> Self {
        EngineError::Chat(e.to_string())
    }
}
