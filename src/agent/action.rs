//! Turning a completion into the one bash command it asks for.
//!
//! Accepted forms, in order: a tool call the backend already parsed (OpenAI `tool_calls`);
//! Qwen3.5 XML tool calls in the text (`<tool_call><function=bash><parameter=command>…`, parsed by
//! `model::toolcall`); as a fallback, a single fenced ```bash block. Exactly one call per response; anything else is a format error whose
//! message is shown to the model. Thinking (`<think>…</think>`) is split off and kept separately.

use crate::model::toolcall::{self, ParseOptions};
use crate::policy::{Completion, ToolCall};
use serde_json::Value;

/// Where the command came from (decides how the observation is attached to the conversation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallForm {
    /// A tool call (structured or XML): the observation is a `tool` message answering `id`.
    ToolCall { id: String },
    /// A fenced bash block: the observation is a user message.
    Fenced,
}

/// The bash command of one response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BashAction {
    pub command: String,
    pub form: CallForm,
}

/// A response the loop cannot act on; `0` is the explanation shown to the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FormatError(pub String);

/// A completion split into its parts.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedResponse {
    /// Visible content with thinking and parsed XML tool calls removed.
    pub content: String,
    pub reasoning: Option<String>,
    /// The calls as recorded on the assistant message (empty for the fenced form).
    pub tool_calls: Vec<ToolCall>,
    pub action: Result<BashAction, FormatError>,
}

/// Parse a completion. `turn` numbers the tool-call ids of calls parsed from text; `tools` are
/// the tool schemas of the request (they type the arguments).
pub fn parse_response(completion: &Completion, turn: usize, tools: &[Value]) -> ParsedResponse {
    if !completion.tool_calls.is_empty() {
        // The backend parsed the calls itself (OpenAI server with a tool parser).
        let (reasoning, content) =
            match toolcall::parse_assistant(&completion.text, &[], ParseOptions::default()) {
                Ok(t) => (t.reasoning, t.content),
                Err(_) => (None, completion.text.clone()),
            };
        return ParsedResponse {
            content,
            reasoning: completion.reasoning.clone().or(reasoning),
            tool_calls: completion.tool_calls.clone(),
            action: single_bash(&completion.tool_calls),
        };
    }
    match toolcall::parse_assistant(&completion.text, tools, ParseOptions::default()) {
        Err(e) => ParsedResponse {
            content: completion.text.clone(),
            reasoning: completion.reasoning.clone(),
            tool_calls: Vec::new(),
            action: Err(FormatError(format!("Malformed tool call: {}.", e.reason))),
        },
        Ok(t) if t.reasoning_truncated => ParsedResponse {
            content: String::new(),
            reasoning: t.reasoning,
            tool_calls: Vec::new(),
            action: Err(FormatError(
                "The response ended inside <think> without an answer or a tool call.".into(),
            )),
        },
        Ok(t) if !t.tool_calls.is_empty() => {
            let calls: Vec<ToolCall> = t
                .tool_calls
                .into_iter()
                .enumerate()
                .map(|(i, c)| ToolCall {
                    id: format!("call_{turn}_{i}"),
                    name: c.name,
                    arguments: Value::Object(c.arguments),
                })
                .collect();
            ParsedResponse {
                action: single_bash(&calls),
                content: t.content,
                reasoning: completion.reasoning.clone().or(t.reasoning),
                tool_calls: calls,
            }
        }
        Ok(t) => ParsedResponse {
            action: fenced_bash(&t.content),
            content: t.content,
            reasoning: completion.reasoning.clone().or(t.reasoning),
            tool_calls: Vec::new(),
        },
    }
}

fn single_bash(calls: &[ToolCall]) -> Result<BashAction, FormatError> {
    if calls.len() != 1 {
        return Err(FormatError(format!(
            "Found {} tool calls in one response; exactly one bash call is allowed per response.",
            calls.len()
        )));
    }
    let call = &calls[0];
    if call.name != "bash" {
        return Err(FormatError(format!(
            "Unknown tool {:?}: the only tool is `bash` with one string parameter `command`.",
            call.name
        )));
    }
    match call.arguments.get("command") {
        Some(Value::String(c)) if !c.trim().is_empty() => Ok(BashAction {
            command: c.clone(),
            form: CallForm::ToolCall {
                id: call.id.clone(),
            },
        }),
        Some(Value::String(_)) => Err(FormatError("The bash `command` parameter is empty.".into())),
        _ => Err(FormatError(
            "The bash tool call needs one string parameter `command`.".into(),
        )),
    }
}

/// The fallback: exactly one fenced block labelled bash/sh (or unlabelled).
fn fenced_bash(text: &str) -> Result<BashAction, FormatError> {
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find("```") {
        let after = &rest[open + 3..];
        let Some(nl) = after.find('\n') else { break };
        let lang = after[..nl].trim();
        let body = &after[nl + 1..];
        let Some(close) = body.find("```") else { break };
        if matches!(lang, "bash" | "sh" | "shell" | "") {
            blocks.push(body[..close].trim_end_matches('\n').to_string());
        }
        rest = &body[close + 3..];
    }
    match blocks.len() {
        0 => Err(FormatError(
            "No tool call found. Call the bash tool with one `command` (for example \
             <tool_call><function=bash><parameter=command>ls</parameter></function></tool_call>)."
                .into(),
        )),
        1 if blocks[0].trim().is_empty() => Err(FormatError("The bash block is empty.".into())),
        1 => Ok(BashAction {
            command: blocks.remove(0),
            form: CallForm::Fenced,
        }),
        n => Err(FormatError(format!(
            "Found {n} bash blocks in one response; exactly one command is allowed per response."
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(t: &str) -> Completion {
        Completion {
            text: t.into(),
            ..Completion::default()
        }
    }

    #[test]
    fn qwen_xml_call_with_thinking() {
        let c = text("<think>look first</think>\nLet me list.\n<tool_call>\n<function=bash>\n<parameter=command>\nls -la\n</parameter>\n</function>\n</tool_call>");
        let p = parse_response(&c, 3, &crate::agent::tool::bash_tools());
        assert_eq!(p.reasoning.as_deref(), Some("look first"));
        assert_eq!(p.content, "Let me list.");
        let a = p.action.unwrap();
        assert_eq!(a.command, "ls -la");
        assert_eq!(
            a.form,
            CallForm::ToolCall {
                id: "call_3_0".into()
            }
        );
        assert_eq!(p.tool_calls.len(), 1);
    }

    #[test]
    fn multiline_command() {
        let c = text("<tool_call>\n<function=bash>\n<parameter=command>\ncat <<'E' > f\nx\nE\n</parameter>\n</function>\n</tool_call>");
        assert_eq!(
            parse_response(&c, 0, &crate::agent::tool::bash_tools())
                .action
                .unwrap()
                .command,
            "cat <<'E' > f\nx\nE"
        );
    }

    #[test]
    fn fenced_fallback() {
        let c = text("I will run:\n```bash\npytest -q\n```\n");
        let a = parse_response(&c, 0, &crate::agent::tool::bash_tools())
            .action
            .unwrap();
        assert_eq!(a.command, "pytest -q");
        assert_eq!(a.form, CallForm::Fenced);
    }

    #[test]
    fn format_errors() {
        for t in [
            "just prose",
            "```bash\nls\n```\n```bash\npwd\n```",
            "<tool_call><function=python><parameter=code>1</parameter></function></tool_call>",
            "<tool_call><function=bash><parameter=command>a</parameter></function></tool_call><tool_call><function=bash><parameter=command>b</parameter></function></tool_call>",
            "<tool_call><function=bash><parameter=cmd>ls</parameter></function></tool_call>",
            "<tool_call><function=bash><parameter=command>ls</function></tool_call>",
            "<tool_call>{not json}</tool_call>",
            "<think>never closed",
        ] {
            assert!(parse_response(&text(t), 0, &crate::agent::tool::bash_tools()).action.is_err(), "{t}");
        }
    }

    #[test]
    fn structured_tool_calls_win() {
        let c = Completion {
            text: "ok".into(),
            tool_calls: vec![ToolCall {
                id: "abc".into(),
                name: "bash".into(),
                arguments: serde_json::json!({"command": "pwd"}),
            }],
            ..Completion::default()
        };
        let a = parse_response(&c, 0, &crate::agent::tool::bash_tools())
            .action
            .unwrap();
        assert_eq!(a.form, CallForm::ToolCall { id: "abc".into() });
    }
}
