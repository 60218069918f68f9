//! Chat on the engine: render messages with the model's chat template, generate, and split the
//! completion into reasoning, content and tool calls with the Qwen3.5 parser.

use super::error::EngineError;
use super::sampler::SamplingParams;
use super::sequence::{Completion, Request};
use super::service::Engine;
use super::turns::{self, TurnRecords};
use crate::model::chat::{ChatOptions, Message};
use crate::model::toolcall::{parse_assistant, AssistantTurn, ParseOptions, ToolCallError};
use serde_json::Value;

/// A chat turn to generate.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    /// Tool definitions (OpenAI form), rendered into the system turn and used to type arguments.
    pub tools: Vec<Value>,
    /// `enable_thinking` etc.; a generation prompt is always added.
    pub options: ChatOptions,
    pub sampling: SamplingParams,
    /// Keep and reuse the model state of this conversation between turns.
    pub conversation: Option<String>,
    pub routing: bool,
}

impl ChatRequest {
    pub fn new(messages: Vec<Message>, sampling: SamplingParams) -> Self {
        ChatRequest {
            messages,
            tools: Vec::new(),
            options: ChatOptions {
                add_generation_prompt: true,
                enable_thinking: None,
            },
            sampling,
            conversation: None,
            routing: false,
        }
    }
}

/// A generated assistant turn.
#[derive(Debug, Clone)]
pub struct ChatCompletion {
    /// The rendered prompt text (the whole conversation through the chat template).
    pub prompt: String,
    /// The prompt's token ids, exactly as the engine read them: the tokenised `prompt`, or, for a
    /// conversation's later turn, its previous prompt + completion ids followed by the new
    /// messages' tokens (see [`super::turns`]).
    pub prompt_ids: Vec<u32>,
    pub completion: Completion,
    /// The completion split into reasoning / content / tool calls, or why a tool call is malformed.
    pub turn: Result<AssistantTurn, ToolCallError>,
}

impl Engine {
    /// Run `f` on the turn records (a poisoned lock is recovered: the records are plain data).
    fn inner_turns<T>(&self, f: impl FnOnce(&mut TurnRecords) -> T) -> T {
        let mut guard = self
            .turn_records()
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f(&mut guard)
    }

    /// Render a conversation with the chat template and tokenize it.
    pub fn render_chat(
        &self,
        messages: &[Message],
        tools: &[Value],
        options: ChatOptions,
    ) -> Result<(String, Vec<u32>), EngineError> {
        let template = self
            .template()
            .ok_or_else(|| EngineError::Chat("the model folder has no chat template".into()))?;
        let text = template.render(messages, tools, options)?;
        let ids = self.tokenizer().encode(&text)?;
        Ok((text, ids))
    }

    /// Generate the next assistant turn of a conversation.
    pub async fn chat(&self, request: ChatRequest) -> Result<ChatCompletion, EngineError> {
        let options = ChatOptions {
            add_generation_prompt: true,
            ..request.options
        };
        let (prompt, mut ids) = self.render_chat(&request.messages, &request.tools, options)?;
        let previous = match &request.conversation {
            Some(id) => self.inner_turns(|t| t.get(id)),
            None => None,
        };
        if let (Some(prev), Some(template)) = (&previous, self.template()) {
            let next = turns::continue_turn(
                template,
                self.tokenizer(),
                prev,
                &request.messages,
                &request.tools,
                options,
                &prompt,
            )?;
            self.counters().turn(next.is_some());
            if let Some(next) = next {
                ids = next;
            }
        }
        let mut r = Request::new(ids.clone(), request.sampling);
        r.conversation = request.conversation.clone();
        r.routing = request.routing;
        let mut completion = self.submit(r).await?;
        if let Some(rec) = completion.routing.as_mut() {
            let earlier = previous.as_ref().and_then(|p| p.routing.as_ref());
            turns::stitch_routing(earlier, rec);
        }
        if let Some(id) = request.conversation {
            let record = turns::TurnRecord {
                messages: request.messages.clone(),
                tokens: [&ids[..], &completion.token_ids[..]].concat(),
                routing: completion.routing.clone(),
            };
            self.inner_turns(|t| t.store(id, record));
        }
        let opts = ParseOptions {
            prompt_opened_think: prompt.ends_with("<think>\n"),
        };
        let turn = parse_assistant(&completion.text, &request.tools, opts);
        Ok(ChatCompletion {
            prompt,
            prompt_ids: ids,
            completion,
            turn,
        })
    }
}
