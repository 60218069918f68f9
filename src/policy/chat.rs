//! Chat data exchanged with a policy: messages (OpenAI chat shape, plus the reasoning content
//! Qwen3.5 emits), tool calls, sampling parameters, completions and token usage.

use crate::engine::RoutingRecord;
use crate::model::chat::{Message, Role as ModelRole};
use crate::model::toolcall::ToolCall as ModelToolCall;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

/// One call of a tool, with its arguments as a JSON object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: serde_json::Value,
}

/// One chat message. `reasoning_content` holds the assistant's thinking (kept in trajectories,
/// rendered or dropped as the chat template requires); `tool_calls` the parsed calls of an
/// assistant turn; `tool_call_id` ties a `tool` observation to its call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    fn plain(role: Role, content: impl Into<String>) -> Self {
        ChatMessage {
            role,
            content: content.into(),
            reasoning_content: None,
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }
    pub fn system(content: impl Into<String>) -> Self {
        Self::plain(Role::System, content)
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self::plain(Role::User, content)
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::plain(Role::Assistant, content)
    }
    pub fn tool(call_id: impl Into<String>, content: impl Into<String>) -> Self {
        ChatMessage {
            tool_call_id: Some(call_id.into()),
            ..Self::plain(Role::Tool, content)
        }
    }

    /// The message as the chat template renders it (tool-call ids dropped: the template ties a
    /// `tool` observation to its call by position).
    pub fn to_model(&self) -> Message {
        let role = match self.role {
            Role::System => ModelRole::System,
            Role::User => ModelRole::User,
            Role::Assistant => ModelRole::Assistant,
            Role::Tool => ModelRole::Tool,
        };
        let mut out = Message::new(role, self.content.clone());
        out.reasoning_content = self.reasoning_content.clone();
        out.tool_calls = self
            .tool_calls
            .iter()
            .map(|c| ModelToolCall {
                name: c.name.clone(),
                arguments: c.arguments.as_object().cloned().unwrap_or_default(),
            })
            .collect();
        out
    }
}

/// Sampling parameters of one request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingParams {
    pub temperature: f32,
    pub top_p: f32,
    /// -1 disables top-k.
    pub top_k: i32,
    pub max_tokens: u32,
    pub seed: Option<u64>,
    /// Ask the backend for token ids and log-probabilities of the completion.
    pub logprobs: bool,
    /// Ask the backend for the routing record (experts per token and layer) of the prompt and
    /// completion; only the engine has one (GRPO routing replay).
    #[serde(default)]
    pub routing: bool,
}

impl Default for SamplingParams {
    /// The paper's Test-agent rollout sampling (temperature 1.0, top-p 1.0, no top-k, 8,192 tokens).
    fn default() -> Self {
        SamplingParams {
            temperature: 1.0,
            top_p: 1.0,
            top_k: -1,
            max_tokens: 8192,
            seed: None,
            logprobs: false,
            routing: false,
        }
    }
}

/// One chat to complete: the conversation, the tools declared to the model (OpenAI function
/// schemas) and sampling parameters.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ChatRequest {
    pub messages: Vec<ChatMessage>,
    pub tools: Vec<serde_json::Value>,
    pub sampling: SamplingParams,
    /// The conversation this chat continues (an agent run): a backend that keeps per-conversation
    /// state (the engine's cache) reads only what was added since the conversation's last turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<String>,
}

/// Token usage of one completion.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// One completion. `text` is the visible content (thinking removed when the backend separates it),
/// `tool_calls` the calls a backend parsed itself (an OpenAI server with a tool parser); token ids
/// and log-probabilities are present when the backend has them. `prompt_ids` are the exact tokens
/// the backend read for this turn (the engine: the rendered, tokenised chat) and `routing` the
/// experts it chose for them and the completion (engine only, when requested; never serialised —
/// it is derived data, `layers × tokens × top_k` per turn).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Completion {
    pub text: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_ids: Option<Vec<u32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Vec<f32>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_ids: Option<Vec<u32>>,
    #[serde(skip)]
    pub routing: Option<RoutingRecord>,
    pub usage: Usage,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}
