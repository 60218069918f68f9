//! Parsing a Qwen3.5 assistant completion into reasoning, content and tool calls.
//!
//! Qwen3.5 writes its reasoning inside `<think>…</think>` and calls tools in the XML style of
//! Qwen3-Coder (vLLM `--reasoning-parser qwen3 --tool-call-parser qwen3_coder`):
//!
//! ```text
//! <think>
//! reasoning
//! </think>
//!
//! optional content
//!
//! <tool_call>
//! <function=NAME>
//! <parameter=P>
//! VALUE (may span lines)
//! </parameter>
//! </function>
//! </tool_call>
//! ```
//!
//! **Reasoning split.** If the text contains `</think>`, everything before it (minus an optional
//! leading `<think>`) is the reasoning and everything after it the answer. This also covers the
//! usual case where the generation prompt already opened `<think>\n`, so the completion holds only
//! `…</think>`. Without `</think>`: a completion that starts with `<think>`, or any completion when
//! [`ParseOptions::prompt_opened_think`] is set, is unterminated reasoning (reasoning = all of it,
//! no content, no tool calls; [`AssistantTurn::reasoning_truncated`] is set); otherwise the whole
//! text is the answer. Reasoning is stripped of surrounding newlines, the answer of leading ones
//! (the same normalisation the chat template applies when it renders history).
//!
//! **Tool calls** are parsed from the answer only. Text before the first `<tool_call>` is the
//! content (trailing whitespace removed). Calls may be separated only by whitespace; anything else
//! between or after calls, a missing closing tag, an empty or duplicate name, or a value that does
//! not match its declared type is a [`ToolCallError`] with the byte offset in the completion and the
//! reason — never guessed. A parameter value is the text between `<parameter=P>` and
//! `</parameter>` with one leading and one trailing newline removed (exactly what the template's
//! instructions ask the model to emit).
//!
//! **Argument types** follow the qwen3_coder parser's rules, keyed by the tool's JSON schema
//! (`parameters.properties.P.type`):
//! * parameter not in the schema (or no schema for the tool) → the raw string;
//! * `string`, `str`, `text`, `varchar`, `char`, `enum` → the raw string (also `null` stays a string);
//! * `integer`/`int*`/`uint*`/`long`/`short`/`unsigned` → an integer; `number`/`num*`/`float*`
//!   → a number (integer when it has no `.`/`e`); `boolean`/`bool`/`binary` → `true`/`false`;
//!   `null` (any case) → JSON null for these non-string types;
//! * `object`, `array`, `arr`, `dict*`, `list*` → parsed as JSON;
//! * any other type name → JSON if the value parses as JSON, else the raw string.
//!
//! One deliberate difference from vLLM: where vLLM logs a warning and falls back to the raw
//! string when a typed value does not convert (e.g. `integer` given `abc`), we return
//! [`ToolCallReason::BadValue`] so the caller can tell the model its call was malformed.

use serde_json::{Map, Value};

/// One tool call: the function name and its decoded arguments (in the order written).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ToolCall {
    pub name: String,
    pub arguments: Map<String, Value>,
}

/// An assistant completion split into its parts.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct AssistantTurn {
    /// The `<think>` content, if any.
    pub reasoning: Option<String>,
    /// True when the completion ended inside `<think>` (no `</think>` seen).
    pub reasoning_truncated: bool,
    /// The answer text before the first tool call.
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
}

/// How the completion was produced.
#[derive(Debug, Clone, Copy, Default)]
pub struct ParseOptions {
    /// The generation prompt ended with an opened `<think>` (thinking mode), so a completion
    /// without `</think>` is unterminated reasoning rather than an answer.
    pub prompt_opened_think: bool,
}

/// Why a tool call could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolCallReason {
    /// `<tool_call>` without `</tool_call>` (e.g. generation hit the token limit).
    UnterminatedCall,
    /// `<tool_call>` not followed by `<function=NAME>`.
    ExpectedFunction,
    /// `<function=` without a closing `>` or with an empty / multi-line name.
    BadFunctionName,
    /// `<parameter=` without a closing `>` or with an empty / multi-line name.
    BadParameterName,
    /// `<parameter=P>` without `</parameter>`.
    UnterminatedParameter(String),
    /// The same parameter given twice.
    DuplicateParameter(String),
    /// Expected `<parameter=…>` or `</function>` here.
    ExpectedParameterOrEnd,
    /// Expected `</tool_call>` after `</function>`.
    ExpectedCallEnd,
    /// Non-whitespace text between or after tool calls.
    TextAfterCall,
    /// A value that does not convert to the type its schema declares.
    BadValue { parameter: String, expected: String },
}

impl std::fmt::Display for ToolCallReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        use ToolCallReason::*;
        match self {
            UnterminatedCall => write!(f, "<tool_call> is never closed by </tool_call>"),
            ExpectedFunction => write!(f, "expected <function=NAME> after <tool_call>"),
            BadFunctionName => write!(f, "malformed <function=NAME> tag"),
            BadParameterName => write!(f, "malformed <parameter=NAME> tag"),
            UnterminatedParameter(p) => {
                write!(f, "parameter `{p}` is never closed by </parameter>")
            }
            DuplicateParameter(p) => write!(f, "parameter `{p}` is given twice"),
            ExpectedParameterOrEnd => write!(f, "expected <parameter=NAME> or </function>"),
            ExpectedCallEnd => write!(f, "expected </tool_call> after </function>"),
            TextAfterCall => write!(f, "text after a tool call (only whitespace may follow)"),
            BadValue {
                parameter,
                expected,
            } => {
                write!(
                    f,
                    "value of parameter `{parameter}` is not a valid {expected}"
                )
            }
        }
    }
}

/// A malformed tool call: byte offset into the completion text and the reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed tool call at byte {position}: {reason}")]
pub struct ToolCallError {
    pub position: usize,
    pub reason: ToolCallReason,
}

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";
const CALL_OPEN: &str = "<tool_call>";
const CALL_CLOSE: &str = "</tool_call>";
const FUNCTION_OPEN: &str = "<function=";
const FUNCTION_CLOSE: &str = "</function>";
const PARAM_OPEN: &str = "<parameter=";
const PARAM_CLOSE: &str = "</parameter>";

/// Parse a completion (special tokens such as `<|im_end|>` already removed). `tools` are the tool
/// definitions given to the chat template, in OpenAI form (`{"type":"function","function":{…}}`)
/// or bare (`{"name":…,"parameters":…}`); they only decide argument types.
pub fn parse_assistant(
    text: &str,
    tools: &[Value],
    opts: ParseOptions,
) -> Result<AssistantTurn, ToolCallError> {
    let mut turn = AssistantTurn::default();
    let (answer, answer_offset) = match text.find(THINK_CLOSE) {
        Some(end) => {
            let head = &text[..end];
            let head = head.trim_start().strip_prefix(THINK_OPEN).unwrap_or(head);
            turn.reasoning = Some(head.trim_matches('\n').to_string());
            (&text[end + THINK_CLOSE.len()..], end + THINK_CLOSE.len())
        }
        None => {
            let trimmed = text.trim_start();
            if opts.prompt_opened_think || trimmed.starts_with(THINK_OPEN) {
                let body = trimmed.strip_prefix(THINK_OPEN).unwrap_or(trimmed);
                turn.reasoning = Some(body.trim_matches('\n').to_string());
                turn.reasoning_truncated = true;
                return Ok(turn);
            }
            (text, 0)
        }
    };
    let leading = answer.len() - answer.trim_start_matches('\n').len();
    let answer = &answer[leading..];
    let base = answer_offset + leading;
    match answer.find(CALL_OPEN) {
        None => turn.content = answer.to_string(),
        Some(first) => {
            turn.content = answer[..first].trim_end().to_string();
            let mut cursor = Cursor {
                text: answer,
                pos: first,
                base,
            };
            while cursor.skip_ws_and_eat(CALL_OPEN) {
                turn.tool_calls.push(cursor.call(tools)?);
            }
            cursor.skip_ws();
            if cursor.pos != answer.len() {
                return Err(cursor.error(ToolCallReason::TextAfterCall));
            }
        }
    }
    Ok(turn)
}

/// A position in the answer text; `base` maps it back to an offset in the whole completion.
struct Cursor<'a> {
    text: &'a str,
    pos: usize,
    base: usize,
}

impl<'a> Cursor<'a> {
    fn rest(&self) -> &'a str {
        &self.text[self.pos..]
    }
    fn error(&self, reason: ToolCallReason) -> ToolCallError {
        ToolCallError {
            position: self.base + self.pos,
            reason,
        }
    }
    fn skip_ws(&mut self) {
        let rest = self.rest();
        self.pos += rest.len() - rest.trim_start().len();
    }
    /// Skip whitespace, then consume `tag` if it is next (else leave the position after the
    /// whitespace).
    fn skip_ws_and_eat(&mut self, tag: &str) -> bool {
        self.skip_ws();
        if self.rest().starts_with(tag) {
            self.pos += tag.len();
            true
        } else {
            false
        }
    }
    /// `NAME>` after `<function=` / `<parameter=`: a non-empty single-line name.
    fn tag_name(&mut self, bad: ToolCallReason) -> Result<String, ToolCallError> {
        let rest = self.rest();
        match rest.find('>') {
            Some(end) if end > 0 && !rest[..end].contains('\n') && !rest[..end].contains('<') => {
                self.pos += end + 1;
                Ok(rest[..end].trim().to_string())
            }
            _ => Err(self.error(bad)),
        }
    }

    /// One call, positioned just after `<tool_call>`.
    fn call(&mut self, tools: &[Value]) -> Result<ToolCall, ToolCallError> {
        let open = self.pos - CALL_OPEN.len();
        if !self.rest().contains(CALL_CLOSE) {
            self.pos = open;
            return Err(self.error(ToolCallReason::UnterminatedCall));
        }
        if !self.skip_ws_and_eat(FUNCTION_OPEN) {
            return Err(self.error(ToolCallReason::ExpectedFunction));
        }
        let name = self.tag_name(ToolCallReason::BadFunctionName)?;
        let schema = parameter_schema(tools, &name);
        let mut arguments = Map::new();
        loop {
            if self.skip_ws_and_eat(FUNCTION_CLOSE) {
                break;
            }
            let at = self.pos;
            if !self.rest().starts_with(PARAM_OPEN) {
                return Err(self.error(ToolCallReason::ExpectedParameterOrEnd));
            }
            self.pos += PARAM_OPEN.len();
            let param = self.tag_name(ToolCallReason::BadParameterName)?;
            let rest = self.rest();
            let Some(end) = rest.find(PARAM_CLOSE) else {
                self.pos = at;
                return Err(self.error(ToolCallReason::UnterminatedParameter(param)));
            };
            let raw = rest[..end].strip_prefix('\n').unwrap_or(&rest[..end]);
            let raw = raw.strip_suffix('\n').unwrap_or(raw);
            let declared = schema.and_then(|s| s.get(&param)).map(declared_type);
            let value =
                convert_value(raw, declared.as_deref()).map_err(|expected| ToolCallError {
                    position: self.base + at,
                    reason: ToolCallReason::BadValue {
                        parameter: param.clone(),
                        expected,
                    },
                })?;
            if arguments.contains_key(&param) {
                self.pos = at;
                return Err(self.error(ToolCallReason::DuplicateParameter(param)));
            }
            arguments.insert(param, value);
            self.pos += end + PARAM_CLOSE.len();
        }
        if !self.skip_ws_and_eat(CALL_CLOSE) {
            return Err(self.error(ToolCallReason::ExpectedCallEnd));
        }
        Ok(ToolCall { name, arguments })
    }
}

/// `parameters.properties` of the tool named `name`, in either the OpenAI or the bare form.
fn parameter_schema<'t>(tools: &'t [Value], name: &str) -> Option<&'t Map<String, Value>> {
    tools.iter().find_map(|tool| {
        let f = tool.get("function").unwrap_or(tool);
        if f.get("name").and_then(Value::as_str) != Some(name) {
            return None;
        }
        f.get("parameters")?.get("properties")?.as_object()
    })
}

/// The declared type of one property, lower-cased; a property without `type` is a string.
fn declared_type(property: &Value) -> String {
    match property.get("type") {
        Some(Value::String(t)) => t.trim().to_ascii_lowercase(),
        // A union such as ["integer", "null"]: the first non-null member decides.
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .find(|t| *t != "null")
            .unwrap_or("string")
            .to_ascii_lowercase(),
        _ => "string".to_string(),
    }
}

/// Convert a raw parameter value by its declared type (see the module docs). `Err` carries the
/// expected type's name.
fn convert_value(raw: &str, declared: Option<&str>) -> Result<Value, String> {
    let Some(ty) = declared else {
        return Ok(Value::String(raw.to_string()));
    };
    if matches!(ty, "string" | "str" | "text" | "varchar" | "char" | "enum") {
        return Ok(Value::String(raw.to_string()));
    }
    let v = raw.trim();
    if v.eq_ignore_ascii_case("null") {
        return Ok(Value::Null);
    }
    let is = |prefixes: &[&str]| prefixes.iter().any(|p| ty.starts_with(p));
    if is(&["int", "uint", "long", "short", "unsigned"]) {
        if let Ok(i) = v.parse::<i64>() {
            return Ok(Value::from(i));
        }
        if let Ok(u) = v.parse::<u64>() {
            return Ok(Value::from(u));
        }
        return Err("integer".into());
    }
    if is(&["num", "float", "double"]) {
        let f: f64 = v.parse().map_err(|_| "number".to_string())?;
        if !f.is_finite() {
            return Err("number".into());
        }
        if !v.contains(['.', 'e', 'E']) {
            if let Ok(i) = v.parse::<i64>() {
                return Ok(Value::from(i));
            }
        }
        return Ok(Value::from(f));
    }
    if matches!(ty, "boolean" | "bool" | "binary") {
        return match v.to_ascii_lowercase().as_str() {
            "true" => Ok(Value::Bool(true)),
            "false" => Ok(Value::Bool(false)),
            _ => Err("boolean".into()),
        };
    }
    if matches!(ty, "object" | "array" | "arr") || is(&["dict", "list"]) {
        return serde_json::from_str(v).map_err(|_| format!("JSON {ty}"));
    }
    Ok(serde_json::from_str(v).unwrap_or_else(|_| Value::String(raw.to_string())))
}
