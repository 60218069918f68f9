//! `engine:MODEL_DIR[@DEVICE]` — the embedded Qwen3.5-MoE engine as a policy. Chats are rendered with the
//! checkpoint's own chat template (tools included), generated with continuous batching (all
//! requests of a batch are submitted together), and returned with token ids and policy
//! log-probabilities. Reasoning is split off here (the template may open `<think>` in the prompt);
//! the agent loop parses the tool call from the answer text.

use super::{BoxFuture, ChatMessage, ChatRequest, Completion, Policy, PolicyError, Usage};
use crate::engine::placement::{device_config, DEVICE_MAX_LEN};
use crate::engine::{self, Engine, EngineConfig, FinishReason, Placement};
use std::path::{Path, PathBuf};

/// The embedded engine serving one model directory (weights, tokenizer, chat template).
pub struct EnginePolicy {
    model_dir: PathBuf,
    placement: Placement,
    engine: Engine,
}


impl EnginePolicy {
    /// Load the model folder and start the engine thread (CPU engine).
    pub fn open(model_dir: &Path) -> Result<Self, PolicyError> {
        Self::open_on(model_dir, Placement::default())
    }

    /// Load the model folder onto `placement`'s device and start the engine thread.
    pub fn open_on(model_dir: &Path, placement: Placement) -> Result<Self, PolicyError> {
        let config = match placement.device {
            engine::DeviceChoice::Cpu => EngineConfig::default(),
            engine::DeviceChoice::Gpu(_) => device_config(EngineConfig::default()),
        };
        let engine = engine::open_engine(model_dir, placement, config, DEVICE_MAX_LEN)
            .map_err(|e| PolicyError::Engine(format!("loading {}: {e}", model_dir.display())))?;
        let mut policy = Self::from_engine(engine, model_dir)?;
        policy.placement = placement;
        Ok(policy)
    }

    /// A policy over an engine that is already running (e.g. on weights lent by the trainer);
    /// `model_dir` names it. Dropping the policy drops its handle to the engine.
    pub fn from_engine(engine: Engine, model_dir: &Path) -> Result<Self, PolicyError> {
        if engine.template().is_none() {
            return Err(PolicyError::Engine(format!(
                "{} has no chat template; the agents need one to render chats",
                model_dir.display()
            )));
        }
        Ok(EnginePolicy {
            model_dir: model_dir.to_path_buf(),
            placement: Placement::default(),
            engine,
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}

fn to_engine_request(req: &ChatRequest) -> engine::ChatRequest {
    let s = &req.sampling;
    let sampling = engine::SamplingParams {
        temperature: s.temperature,
        top_k: if s.top_k > 0 { s.top_k as usize } else { 0 },
        top_p: s.top_p,
        seed: s.seed,
        max_tokens: s.max_tokens as usize,
        stop_token_ids: Vec::new(),
        stop: Vec::new(),
    };
    let mut r = engine::ChatRequest::new(
        req.messages.iter().map(ChatMessage::to_model).collect(),
        sampling,
    );
    r.tools = req.tools.clone();
    r.routing = s.routing;
    r.conversation = req.conversation.clone();
    r
}

/// Split the raw completion into (reasoning, answer) the way the chat template produced it.
fn split(prompt: &str, text: &str) -> (Option<String>, String) {
    match text.find("</think>") {
        Some(end) => {
            let head = text[..end].trim_start();
            let head = head.strip_prefix("<think>").unwrap_or(head);
            (
                Some(head.trim_matches('\n').to_string()),
                text[end + "</think>".len()..]
                    .trim_start_matches('\n')
                    .to_string(),
            )
        }
        // The prompt opened <think> and generation never closed it: all reasoning, no answer.
        None if prompt.ends_with("<think>\n") => {
            (Some(text.trim_matches('\n').to_string()), String::new())
        }
        None => (None, text.to_string()),
    }
}

impl Policy for EnginePolicy {
    fn complete<'a>(
        &'a self,
        requests: &'a [ChatRequest],
    ) -> BoxFuture<'a, Result<Vec<Completion>, PolicyError>> {
        Box::pin(async move {
            let calls = requests
                .iter()
                .map(|r| self.engine.chat(to_engine_request(r)));
            let results = futures_util::future::join_all(calls).await;
            results
                .into_iter()
                .map(|r| {
                    let chat = r.map_err(|e| PolicyError::Engine(e.to_string()))?;
                    let c = chat.completion;
                    let (reasoning, text) = split(&chat.prompt, &c.text);
                    Ok(Completion {
                        text,
                        reasoning,
                        tool_calls: Vec::new(),
                        usage: Usage {
                            prompt_tokens: c.prompt_tokens as u64,
                            completion_tokens: c.token_ids.len() as u64,
                        },
                        finish_reason: Some(
                            match c.finish {
                                FinishReason::Length => "length",
                                _ => "stop",
                            }
                            .to_string(),
                        ),
                        token_ids: Some(c.token_ids),
                        logprobs: Some(c.logprobs),
                        prompt_ids: Some(chat.prompt_ids),
                        routing: c.routing,
                    })
                })
                .collect()
        })
    }

    fn describe(&self) -> String {
        match self.placement.device {
            engine::DeviceChoice::Cpu => format!("engine:{}", self.model_dir.display()),
            _ => format!("engine:{}@{}", self.model_dir.display(), self.placement),
        }
    }

    fn end_conversation(&self, id: &str) {
        self.engine.forget_conversation(id);
    }
}

#[cfg(test)]
mod tests {
    use super::split;

    #[test]
    fn reasoning_split() {
        assert_eq!(
            split("x<think>\n", "plan\n</think>\n\nls"),
            (Some("plan".into()), "ls".into())
        );
        assert_eq!(
            split("x<think>\n", "unfinished"),
            (Some("unfinished".into()), String::new())
        );
        assert_eq!(split("x", "answer"), (None, "answer".into()));
    }
}
