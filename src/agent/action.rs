//! Turning a completion into the one bash command it asks for.
//!
//! Accepted forms, in order: a tool call the backend already parsed (OpenAI `tool_calls`);
//! Qwen3.5 XML tool calls in the text (`<tool_call><function=bash><parameter=command>…`), also the
//! JSON form `<tool_call>{"name": "bash", "arguments": {...}}</tool_call>`; as a fallback, a single
//! fenced ```bash block. Exactly one call per response; anything else is a format error whose
//! message is shown to the model. Thinking (`<think>…</think>`) is split off and kept separately.

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

/// Split thinking from content: `<think>R</think>C` (the opening tag may be absent because the
/// chat template opens it in the prompt).
pub fn split_thinking(text: &str) -> (Option<String>, String) {
    match text.find("</think>") {
        Some(end) => {
            let head = &text[..end];
            let head = head.trim_start().strip_prefix("<think>").unwrap_or(head);
            let rest = &text[end + "</think>".len()..];
            (Some(head.trim().to_string()), rest.trim_start().to_string())
        }
        None => (None, text.to_string()),
    }
}

/// Parse a completion. `turn` numbers synthetic tool-call ids.
pub fn parse_response(completion: &Completion, turn: usize) -> ParsedResponse {
    let (think, visible) = split_thinking(&completion.text);
    let reasoning = completion.reasoning.clone().or(think);

    if !completion.tool_calls.is_empty() {
        let action = single_bash(&completion.tool_calls);
        return ParsedResponse {
            content: visible,
            reasoning,
            tool_calls: completion.tool_calls.clone(),
            action,
        };
    }

    let (content, xml_calls) = extract_xml_calls(&visible, turn);
    match xml_calls {
        Err(e) => ParsedResponse {
            content: visible,
            reasoning,
            tool_calls: Vec::new(),
            action: Err(e),
        },
        Ok(calls) if !calls.is_empty() => {
            let action = single_bash(&calls);
            ParsedResponse {
                content,
                reasoning,
                tool_calls: calls,
                action,
            }
        }
        Ok(_) => {
            let action = fenced_bash(&visible);
            ParsedResponse {
                content: visible,
                reasoning,
                tool_calls: Vec::new(),
                action,
            }
        }
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
            form: CallForm::ToolCall { id: call.id.clone() },
        }),
        Some(Value::String(_)) => Err(FormatError("The bash `command` parameter is empty.".into())),
        _ => Err(FormatError(
            "The bash tool call needs one string parameter `command`.".into(),
        )),
    }
}

/// Extract `<tool_call>…</tool_call>` blocks. Returns the content without them and the calls.
fn extract_xml_calls(text: &str, turn: usize) -> (String, Result<Vec<ToolCall>, FormatError>) {
    let mut calls = Vec::new();
    let mut content = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("<tool_call>") {
        content.push_str(&rest[..start]);
        let body_start = start + "<tool_call>".len();
        let (body, next) = match rest[body_start..].find("</tool_call>") {
            Some(end) => (&rest[body_start..body_start + end], &rest[body_start + end + "</tool_call>".len()..]),
            // A generation cut at the stop token may lack the closing tag.
            None => (&rest[body_start..], ""),
        };
        match parse_call_body(body, format!("call_{turn}_{}", calls.len())) {
            Ok(call) => calls.push(call),
            Err(e) => return (text.to_string(), Err(e)),
        }
        rest = next;
    }
    content.push_str(rest);
    (content.trim().to_string(), Ok(calls))
}

fn parse_call_body(body: &str, id: String) -> Result<ToolCall, FormatError> {
    let body = body.trim();
    if body.starts_with('{') {
        let v: Value = serde_json::from_str(body)
            .map_err(|e| FormatError(format!("The tool call is not valid JSON: {e}")))?;
        let name = v.get("name").and_then(Value::as_str).unwrap_or("").to_string();
        let arguments = match v.get("arguments") {
            Some(Value::String(s)) => serde_json::from_str(s).unwrap_or(Value::Null),
            Some(a) => a.clone(),
            None => Value::Null,
        };
        return Ok(ToolCall { id, name, arguments });
    }
    let name = body
        .strip_prefix("<function=")
        .and_then(|r| r.split_once('>'))
        .map(|(n, _)| n.trim().to_string())
        .ok_or_else(|| {
            FormatError("Malformed tool call: expected <function=bash> inside <tool_call>.".into())
        })?;
    let mut arguments = serde_json::Map::new();
    let mut rest = body;
    while let Some(p) = rest.find("<parameter=") {
        let after = &rest[p + "<parameter=".len()..];
        let (pname, value_and_rest) = after.split_once('>').ok_or_else(|| {
            FormatError("Malformed tool call: unterminated <parameter=...> tag.".into())
        })?;
        let end = value_and_rest.find("</parameter>").ok_or_else(|| {
            FormatError(format!("Malformed tool call: parameter {pname:?} lacks </parameter>."))
        })?;
        let raw = &value_and_rest[..end];
        let value = raw.strip_prefix('\n').unwrap_or(raw);
        let value = value.strip_suffix('\n').unwrap_or(value);
        arguments.insert(pname.trim().to_string(), Value::String(value.to_string()));
        rest = &value_and_rest[end + "</parameter>".len()..];
    }
    Ok(ToolCall {
        id,
        name,
        arguments: Value::Object(arguments),
    })
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
        let p = parse_response(&c, 3);
        assert_eq!(p.reasoning.as_deref(), Some("look first"));
        assert_eq!(p.content, "Let me list.");
        let a = p.action.unwrap();
        assert_eq!(a.command, "ls -la");
        assert_eq!(a.form, CallForm::ToolCall { id: "call_3_0".into() });
        assert_eq!(p.tool_calls.len(), 1);
    }

    #[test]
    fn json_form_and_multiline_command() {
        let c = text(r#"<tool_call>{"name": "bash", "arguments": {"command": "cat <<'E' > f\nx\nE"}}</tool_call>"#);
        assert_eq!(parse_response(&c, 0).action.unwrap().command, "cat <<'E' > f\nx\nE");
    }

    #[test]
    fn fenced_fallback() {
        let c = text("I will run:\n```bash\npytest -q\n```\n");
        let a = parse_response(&c, 0).action.unwrap();
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
        ] {
            assert!(parse_response(&text(t), 0).action.is_err(), "{t}");
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
        let a = parse_response(&c, 0).action.unwrap();
        assert_eq!(a.form, CallForm::ToolCall { id: "abc".into() });
    }
}
