//! `engine:MODEL_DIR` — the embedded Qwen3.5-MoE engine as a policy.
//!
//! The engine's generation API (branch `engine`) had not landed in this build, so opening this
//! policy fails with a clear error instead of pretending to generate.

use super::{BoxFuture, ChatRequest, Completion, Policy, PolicyError};
use std::path::{Path, PathBuf};

/// The embedded engine serving one model directory.
#[derive(Debug)]
pub struct EnginePolicy {
    model_dir: PathBuf,
}

impl EnginePolicy {
    pub fn open(model_dir: &Path) -> Result<Self, PolicyError> {
        Err(PolicyError::Engine(format!(
            "the embedded engine is not available in this build (model dir {}); use \
             http:URL or scripted:FILE",
            model_dir.display()
        )))
    }
}

impl Policy for EnginePolicy {
    fn complete<'a>(
        &'a self,
        _requests: &'a [ChatRequest],
    ) -> BoxFuture<'a, Result<Vec<Completion>, PolicyError>> {
        Box::pin(async move {
            Err(PolicyError::Engine(format!(
                "the embedded engine is not available in this build ({})",
                self.model_dir.display()
            )))
        })
    }

    fn describe(&self) -> String {
        format!("engine:{}", self.model_dir.display())
    }
}
