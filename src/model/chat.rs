//! Chat rendering: a checkpoint's own Jinja chat template turned into the prompt text.
//!
//! The template comes from `chat_template.jinja` in the model folder, else from the
//! `chat_template` field of `tokenizer_config.json` (a string, or a list of `{name, template}`
//! where `default` is used). It is rendered with minijinja set up like Hugging Face's
//! `apply_chat_template`: `trim_blocks` and `lstrip_blocks`, Python string methods (`strip`,
//! `split`, `startswith`, … via minijinja-contrib's pycompat, with Python's whitespace from
//! [`crate::model::chat_python`]), `raise_exception(msg)`, and a
//! `tojson` that writes exactly what Python's `json.dumps(x, ensure_ascii=False)` writes (`", "` and
//! `": "` separators, insertion order kept, no HTML escaping, Python float spelling; `indent=N`
//! supported). Context variables: `messages`, `tools` (only when non-empty), `add_generation_prompt`,
//! `enable_thinking` (only when set), `bos_token`, `eos_token`.
//!
//! **Not Python.** A value other than a string turned into text by `~` or `{{ }}` is spelled by
//! minijinja (`none`, `["a"]`, `10000000000000000.0`), not by Python (`None`, `['a']`,
//! `1e+16`); templates put values in prompts through `tojson`, and the committed one
//! joins only strings (its error messages name what they found). The `chat_template_render`
//! fuzz target compares prompts with jinja2's on generated conversations.
//!
//! **Bounds.** The files are read with the caps of [`crate::model::files`]. The conversation is
//! untrusted data: a render runs at most [`RENDER_FUEL`] template instructions and writes at most
//! [`MAX_RENDERED_BYTES`] (our `tojson` included); beyond either it stops with
//! [`ChatError::Bound`]. A panic inside minijinja while compiling or rendering is a
//! [`ChatError::Syntax`] or [`ChatError::Render`] (2.24 panics formatting the source excerpt of
//! `{%- for in messages %}`'s error, whose span ends before it starts; found by the
//! `chat_template_load` fuzz target), and errors are shown without that excerpt. minijinja caps some single operations itself (`range` at 100,000 items,
//! a repeated string at 100 MB, recursion depth).
//!
//! **Not bounded: the template as a program.** The template is code that comes with the
//! checkpoint, like its weights. One template operation can allocate or iterate in proportion
//! to a number the template chooses (`"x" | indent(10**12)`, `([0] * 10**12) | list`), and a
//! loop can double a string with `~`; the fuel counts instructions, not bytes or a filter's
//! inner loop, so such a template exhausts memory or time at its first render (with
//! transformers' jinja2 it is a `MemoryError` or a hang as well). Closing this needs an
//! allocation budget per render, which stable Rust can only give with a separate process; it is
//! not done. Published chat templates do none of this.

use crate::panics;
use crate::model::chat_python;
use crate::model::files::{read_text, MAX_CONFIG_BYTES, MAX_TEMPLATE_BYTES};
use crate::model::toolcall::ToolCall;
use minijinja::value::{Kwargs, Value as JinjaValue};
use minijinja::{Environment, ErrorKind};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// Who speaks a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    /// A tool result (rendered by Qwen3.5 as a `<tool_response>` inside a user turn).
    Tool,
}

/// One chat message. `reasoning_content` and `tool_calls` are meaningful for assistant messages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}

impl Message {
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
            reasoning_content: None,
            tool_calls: Vec::new(),
        }
    }
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }
    pub fn tool(content: impl Into<String>) -> Self {
        Self::new(Role::Tool, content)
    }
    pub fn with_reasoning(mut self, reasoning: impl Into<String>) -> Self {
        self.reasoning_content = Some(reasoning.into());
        self
    }
    pub fn with_tool_calls(mut self, calls: Vec<ToolCall>) -> Self {
        self.tool_calls = calls;
        self
    }
}

/// Rendering switches of `apply_chat_template`.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChatOptions {
    /// End with the opening of an assistant turn for the model to continue.
    pub add_generation_prompt: bool,
    /// `None` leaves `enable_thinking` undefined (the template's default).
    pub enable_thinking: Option<bool>,
}

#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    #[error("reading {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("parsing {path}: {source}")]
    Json {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("no chat template in {0} (neither chat_template.jinja nor tokenizer_config.json `chat_template`)")]
    NoTemplate(PathBuf),
    #[error("invalid chat template: {0}")]
    Syntax(String),
    #[error("chat template rejected the conversation: {0}")]
    Raised(String),
    #[error("rendering the chat template failed: {0}")]
    Render(String),
    #[error("the chat template exceeded its bound: {0}")]
    Bound(String),
}

/// Template instructions one render may run (a Qwen3.5 conversation of 1,001 messages with tools,
/// tool calls and reasoning renders within 1% of it: checked by hand with the fuel at 500,000).
pub const RENDER_FUEL: u64 = 50_000_000;

/// Bytes one render may write (a 262,144-token context is a few MiB of text).
pub const MAX_RENDERED_BYTES: usize = 64 << 20;

/// The render's output, refusing to grow past [`MAX_RENDERED_BYTES`].
#[derive(Default)]
struct BoundedOutput {
    bytes: Vec<u8>,
    overflowed: bool,
}

impl std::io::Write for BoundedOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.bytes.len() + buf.len() > MAX_RENDERED_BYTES {
            self.overflowed = true;
            return Err(std::io::Error::other("rendered prompt too large"));
        }
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: Option<String>,
    eos_token: Option<String>,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("eos_token", &self.eos_token)
            .finish_non_exhaustive()
    }
}

const TEMPLATE_NAME: &str = "chat";

impl ChatTemplate {
    /// Load the template of a model folder (see the module docs for the search order).
    pub fn from_dir(dir: &Path) -> Result<Self, ChatError> {
        let config_path = dir.join("tokenizer_config.json");
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| ChatError::Io { path, source }
        };
        let config: Option<Value> = read_text(&config_path, MAX_CONFIG_BYTES)
            .map_err(io(&config_path))?
            .map(|text| serde_json::from_str(&text))
            .transpose()
            .map_err(|source| ChatError::Json {
                path: config_path.clone(),
                source,
            })?;
        let jinja_path = dir.join("chat_template.jinja");
        let source = match read_text(&jinja_path, MAX_TEMPLATE_BYTES).map_err(io(&jinja_path))? {
            Some(text) => text,
            None => config
                .as_ref()
                .and_then(|c| template_from_config(c.get("chat_template")?))
                .ok_or_else(|| ChatError::NoTemplate(dir.to_path_buf()))?,
        };
        let token = |key: &str| config.as_ref().and_then(|c| token_string(c.get(key)?));
        Self::from_source(source, token("bos_token"), token("eos_token"))
    }

    /// Compile template text.
    pub fn from_source(
        source: String,
        bos_token: Option<String>,
        eos_token: Option<String>,
    ) -> Result<Self, ChatError> {
        let mut env = Environment::new();
        env.set_fuel(Some(RENDER_FUEL));
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(chat_python::unknown_method);
        env.add_filter("trim", chat_python::trim);
        env.add_function("raise_exception", raise_exception);
        env.add_filter("tojson", py_tojson);
        panics::caught("minijinja", || env.add_template_owned(TEMPLATE_NAME, source))
            .map_err(ChatError::Syntax)?
            .map_err(|e| ChatError::Syntax(e.to_string()))?;
        Ok(ChatTemplate {
            env,
            bos_token,
            eos_token,
        })
    }

    /// Render typed messages.
    pub fn render(
        &self,
        messages: &[Message],
        tools: &[Value],
        opts: ChatOptions,
    ) -> Result<String, ChatError> {
        let messages =
            serde_json::to_value(messages).map_err(|e| ChatError::Render(e.to_string()))?;
        self.render_json(&messages, tools, opts)
    }

    /// Render messages given as JSON (OpenAI chat format, e.g. content as a list of parts).
    pub fn render_json(
        &self,
        messages: &Value,
        tools: &[Value],
        opts: ChatOptions,
    ) -> Result<String, ChatError> {
        let mut ctx = serde_json::Map::new();
        ctx.insert("messages".into(), messages.clone());
        if !tools.is_empty() {
            ctx.insert("tools".into(), Value::Array(tools.to_vec()));
        }
        ctx.insert(
            "add_generation_prompt".into(),
            opts.add_generation_prompt.into(),
        );
        if let Some(thinking) = opts.enable_thinking {
            ctx.insert("enable_thinking".into(), thinking.into());
        }
        ctx.insert(
            "bos_token".into(),
            self.bos_token.clone().unwrap_or_default().into(),
        );
        ctx.insert(
            "eos_token".into(),
            self.eos_token.clone().unwrap_or_default().into(),
        );
        let template = self
            .env
            .get_template(TEMPLATE_NAME)
            .map_err(|e| ChatError::Syntax(e.to_string()))?;
        let mut out = BoundedOutput::default();
        let rendered = panics::caught("minijinja", || template.render_captured_to(JinjaValue::from_serialize(&ctx), &mut out))
            .map_err(ChatError::Render)?;
        if out.overflowed {
            return Err(ChatError::Bound(format!("the rendered prompt passed {MAX_RENDERED_BYTES} bytes")));
        }
        rendered
            .map(|_| ())
            .map_err(|e| {
                let ours = std::iter::successors(Some(&e as &dyn std::error::Error), |e| e.source())
                    .filter_map(|e| e.downcast_ref::<minijinja::Error>())
                    .filter(|e| e.kind() == ErrorKind::InvalidOperation)
                    .find_map(|e| {
                        let d = e.detail()?;
                        d.strip_prefix(RAISED)
                            .map(|m| ChatError::Raised(m.to_string()))
                            .or_else(|| d.strip_prefix(BOUNDED).map(|m| ChatError::Bound(m.to_string())))
                    });
                match ours {
                    Some(ours) => ours,
                    None if e.kind() == ErrorKind::OutOfFuel => {
                        ChatError::Bound(format!("the render ran more than {RENDER_FUEL} template instructions"))
                    }
                    None => ChatError::Render(e.to_string()),
                }
            })?;
        String::from_utf8(out.bytes).map_err(|e| ChatError::Render(e.to_string()))
    }
}


/// `chat_template` of tokenizer_config.json: a string or a list of named templates.
fn template_from_config(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(named) => named
            .iter()
            .find(|t| t.get("name").and_then(Value::as_str) == Some("default"))
            .and_then(|t| t.get("template")?.as_str().map(String::from)),
        _ => None,
    }
}

/// A special token in tokenizer_config.json: a string or an `AddedToken` object with `content`.
pub(crate) fn token_string(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content")?.as_str().map(String::from),
        _ => None,
    }
}

const RAISED: &str = "raise_exception: ";
/// The prefix of an error of ours that stops a render at a bound ([`ChatError::Bound`]).
const BOUNDED: &str = "execcritic bound: ";

fn raise_exception(message: String) -> Result<JinjaValue, minijinja::Error> {
    Err(minijinja::Error::new(
        ErrorKind::InvalidOperation,
        format!("{RAISED}{message}"),
    ))
}

/// `tojson` with Python `json.dumps(ensure_ascii=False)` output.
fn py_tojson(value: JinjaValue, kwargs: Kwargs) -> Result<JinjaValue, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(&value)
        .map_err(|e| minijinja::Error::new(ErrorKind::BadSerialization, e.to_string()))?;
    let bound = || {
        minijinja::Error::new(
            ErrorKind::InvalidOperation,
            format!("{BOUNDED}tojson passed {MAX_RENDERED_BYTES} bytes"),
        )
    };
    if indent.is_some_and(|n| n > MAX_RENDERED_BYTES) {
        return Err(bound());
    }
    let mut out = BoundedOutput::default();
    let indent_str = " ".repeat(indent.unwrap_or(0));
    let mut ser = serde_json::Serializer::with_formatter(
        &mut out,
        PyFormatter {
            indent: indent.map(|_| indent_str.as_bytes()),
            depth: 0,
            has_value: false,
        },
    );
    let written = serde::Serialize::serialize(&json, &mut ser);
    if out.overflowed {
        return Err(bound());
    }
    written.map_err(|e| minijinja::Error::new(ErrorKind::BadSerialization, e.to_string()))?;
    let text = String::from_utf8(out.bytes)
        .map_err(|e| minijinja::Error::new(ErrorKind::BadSerialization, e.to_string()))?;
    Ok(JinjaValue::from_safe_string(text))
}

/// serde_json formatter matching Python's `json.dumps` separators and float spelling.
struct PyFormatter<'a> {
    indent: Option<&'a [u8]>,
    depth: usize,
    has_value: bool,
}

impl PyFormatter<'_> {
    fn newline<W: ?Sized + std::io::Write>(&self, w: &mut W) -> std::io::Result<()> {
        if let Some(unit) = self.indent {
            w.write_all(b"\n")?;
            for _ in 0..self.depth {
                w.write_all(unit)?;
            }
        }
        Ok(())
    }
    fn separator<W: ?Sized + std::io::Write>(&self, w: &mut W, first: bool) -> std::io::Result<()> {
        if !first {
            w.write_all(if self.indent.is_some() { b"," } else { b", " })?;
        }
        self.newline(w)
    }
    fn open<W: ?Sized + std::io::Write>(&mut self, w: &mut W, c: &[u8]) -> std::io::Result<()> {
        self.depth += 1;
        self.has_value = false;
        w.write_all(c)
    }
    fn close<W: ?Sized + std::io::Write>(&mut self, w: &mut W, c: &[u8]) -> std::io::Result<()> {
        self.depth -= 1;
        if self.has_value {
            self.newline(w)?;
        }
        self.has_value = true;
        w.write_all(c)
    }
}

impl serde_json::ser::Formatter for PyFormatter<'_> {
    fn begin_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"[")
    }
    fn end_array<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"]")
    }
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.separator(w, first)
    }
    fn end_array_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
    fn begin_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.open(w, b"{")
    }
    fn end_object<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        self.close(w, b"}")
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.separator(w, first)
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
    fn end_object_value<W: ?Sized + std::io::Write>(&mut self, _w: &mut W) -> std::io::Result<()> {
        self.has_value = true;
        Ok(())
    }
    fn write_f64<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        value: f64,
    ) -> std::io::Result<()> {
        w.write_all(python_float_repr(value).as_bytes())
    }
    fn write_f32<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        value: f32,
    ) -> std::io::Result<()> {
        w.write_all(python_float_repr(value as f64).as_bytes())
    }
}

/// Python's `repr(float)`: shortest round-trip digits, fixed notation for exponents in [-4, 16),
/// otherwise `d.ddde±XX`; integral values keep a `.0`.
fn python_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..16).contains(&exp) {
        let fixed = format!("{f}");
        if fixed.contains('.') {
            fixed
        } else {
            format!("{fixed}.0")
        }
    } else {
        format!(
            "{mantissa}e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.abs()
        )
    }
}
