//! Policy layer: the `Policy` trait (chats + sampling parameters in, completions out) and its
//! scripted, HTTP (OpenAI-compatible) and engine-backed implementations.
//!
//! A policy is batched and asynchronous: `complete` takes several chat requests at once (an engine
//! batches them; the HTTP policy sends them concurrently) and returns one completion per request,
//! in order. Everything above this layer (agent loop, episodes) reaches a model only through it.

mod chat;
mod engine;
mod http;
mod scripted;
mod spec;

pub use chat::{ChatMessage, ChatRequest, Completion, Role, SamplingParams, ToolCall, Usage};
pub use engine::EnginePolicy;
pub use http::{HttpPolicy, HttpPolicyConfig};
pub use scripted::ScriptedPolicy;
pub use spec::{open_policy, PolicySpec};

use std::future::Future;
use std::pin::Pin;

/// A boxed future, as returned by `Policy::complete` (object-safe async).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Errors of a policy backend. All of them are *infrastructure* failures (the model could not be
/// queried), never a model decision: episodes report them as `infra_error`.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("invalid policy spec {spec:?}: {reason}")]
    BadSpec { spec: String, reason: String },
    #[error("scripted policy {source_name}: {reason}")]
    Script { source_name: String, reason: String },
    #[error("scripted policy {source_name} ran out of responses after {served} assistant turns")]
    ScriptExhausted { source_name: String, served: usize },
    #[error("policy server {url} unreachable after {attempts} attempts: {reason}")]
    Unreachable {
        url: String,
        attempts: u32,
        reason: String,
    },
    #[error("policy server {url} answered HTTP {status}: {body}")]
    Http {
        url: String,
        status: u16,
        body: String,
    },
    #[error("policy server {url} sent an unusable response: {reason}")]
    BadResponse { url: String, reason: String },
    #[error("engine policy: {0}")]
    Engine(String),
}

/// A source of assistant turns.
pub trait Policy: Send + Sync {
    /// One completion per request, in the order of `requests`.
    fn complete<'a>(
        &'a self,
        requests: &'a [ChatRequest],
    ) -> BoxFuture<'a, Result<Vec<Completion>, PolicyError>>;

    /// A short human-readable description (recorded in trajectories).
    fn describe(&self) -> String;

    /// The conversation `id` has ended: drop whatever state the backend kept for it.
    fn end_conversation(&self, _id: &str) {}
}

/// Convenience: complete a single request.
pub async fn complete_one(
    policy: &dyn Policy,
    request: ChatRequest,
) -> Result<Completion, PolicyError> {
    let requests = [request];
    let mut out = policy.complete(&requests).await?;
    out.pop().ok_or_else(|| PolicyError::BadResponse {
        url: policy.describe(),
        reason: "no completion returned".into(),
    })
}
