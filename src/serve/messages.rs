//! OpenAI chat messages and tools, checked and turned into what the chat template renders:
//! roles `system` (also `developer`), `user`, `assistant` (with `reasoning_content` and
//! `tool_calls`, whose JSON-string arguments become objects) and `tool`; tools must be
//! `{"type": "function", "function": {"name", "parameters"?, "description"?}}`.

use super::error::ApiError;
use serde_json::{json, Map, Value};

/// Check and convert `messages` for the chat template.
pub fn template_messages(messages: &[Value]) -> Result<Value, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::invalid("messages", "messages must not be empty"));
    }
    let converted = messages
        .iter()
        .enumerate()
        .map(|(i, m)| convert(i, m))
        .collect::<Result<Vec<Value>, ApiError>>()?;
    Ok(Value::Array(converted))
}

fn convert(i: usize, m: &Value) -> Result<Value, ApiError> {
    let at = |what: &str| ApiError::invalid(&format!("messages[{i}]"), format!("messages[{i}]: {what}"));
    let obj = m.as_object().ok_or_else(|| at("a message must be an object"))?;
    let role = obj.get("role").and_then(Value::as_str).ok_or_else(|| at("missing role"))?;
    let role = match role {
        "system" | "developer" => "system",
        "user" | "assistant" | "tool" => role,
        other => return Err(at(&format!("unknown role {other:?} (system, developer, user, assistant or tool)"))),
    };
    let content = match obj.get("content") {
        None | Some(Value::Null) if role == "assistant" => Value::String(String::new()),
        Some(Value::String(s)) => Value::String(s.clone()),
        Some(Value::Array(parts)) => {
            for p in parts {
                // A template prints `part.text` as it is: a number there would be spelled by
                // minijinja (`1e16` as `10000000000000000.0`), not as transformers spells it.
                let typed_text = p.get("type").and_then(Value::as_str) == Some("text");
                if (typed_text || p.get("text").is_some()) && !p.get("text").is_some_and(Value::is_string) {
                    return Err(at("a text part needs a string `text`"));
                }
            }
            Value::Array(parts.clone())
        }
        _ => return Err(at("content must be a string or a list of parts")),
    };
    let mut out = Map::new();
    out.insert("role".into(), role.into());
    out.insert("content".into(), content);
    if role == "assistant" {
        if let Some(r) = obj.get("reasoning_content").or_else(|| obj.get("reasoning")) {
            if let Some(r) = r.as_str() {
                out.insert("reasoning_content".into(), r.into());
            }
        }
        if let Some(calls) = obj.get("tool_calls").filter(|c| !c.is_null()) {
            let calls = calls.as_array().ok_or_else(|| at("tool_calls must be a list"))?;
            let calls = calls
                .iter()
                .map(|c| {
                    let f = c.get("function").ok_or_else(|| at("a tool call needs `function`"))?;
                    let name = f.get("name").and_then(Value::as_str).ok_or_else(|| at("a tool call needs a function name"))?;
                    let arguments = match f.get("arguments") {
                        None | Some(Value::Null) => Value::Object(Map::new()),
                        Some(Value::String(s)) if s.trim().is_empty() => Value::Object(Map::new()),
                        Some(Value::String(s)) => serde_json::from_str::<Value>(s)
                            .ok()
                            .filter(Value::is_object)
                            .ok_or_else(|| at("tool call arguments must be a JSON object"))?,
                        Some(v @ Value::Object(_)) => v.clone(),
                        Some(_) => return Err(at("tool call arguments must be a JSON object")),
                    };
                    Ok(json!({ "name": name, "arguments": arguments }))
                })
                .collect::<Result<Vec<Value>, ApiError>>()?;
            out.insert("tool_calls".into(), Value::Array(calls));
        }
    }
    Ok(Value::Object(out))
}

/// Check `tools`; returns them as given (the template renders them, the parser types arguments).
pub fn check_tools(tools: &[Value]) -> Result<(), ApiError> {
    for (i, t) in tools.iter().enumerate() {
        let bad = |what: &str| ApiError::invalid("tools", format!("tools[{i}]: {what}"));
        if t.get("type").and_then(Value::as_str) != Some("function") {
            return Err(bad("type must be \"function\""));
        }
        let f = t.get("function").and_then(Value::as_object).ok_or_else(|| bad("missing `function` object"))?;
        match f.get("name").and_then(Value::as_str) {
            Some(n) if !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.') => {}
            _ => return Err(bad("function.name must be a non-empty string of letters, digits, _ - .")),
        }
        if let Some(p) = f.get("parameters") {
            if !p.is_object() {
                return Err(bad("function.parameters must be a JSON Schema object"));
            }
            if let Some(props) = p.get("properties") {
                if !props.is_object() {
                    return Err(bad("function.parameters.properties must be an object"));
                }
            }
        }
        if f.get("description").is_some_and(|d| !d.is_string()) {
            return Err(bad("function.description must be a string"));
        }
    }
    Ok(())
}

/// Whether tool calls are read from the completion: tools offered and `tool_choice` not
/// `"none"`. A named `tool_choice` must name an offered tool. (`"required"` and named choices are
/// not enforced by constrained decoding; the model is asked through the template as for `auto`.)
pub fn tool_calls_enabled(tools: &[Value], choice: Option<&Value>) -> Result<bool, ApiError> {
    let bad = |what: String| ApiError::invalid("tool_choice", what);
    match choice {
        None | Some(Value::Null) => Ok(!tools.is_empty()),
        Some(Value::String(s)) => match s.as_str() {
            "none" => Ok(false),
            "auto" | "required" if !tools.is_empty() || s == "auto" => Ok(!tools.is_empty()),
            "required" => Err(bad("tool_choice \"required\" needs tools".into())),
            other => Err(bad(format!("unknown tool_choice {other:?}"))),
        },
        Some(v) => {
            let name = v.pointer("/function/name").and_then(Value::as_str).ok_or_else(|| bad("tool_choice must be none, auto, required or {\"type\": \"function\", \"function\": {\"name\": …}}".into()))?;
            if tools.iter().any(|t| t.pointer("/function/name").and_then(Value::as_str) == Some(name)) {
                Ok(true)
            } else {
                Err(bad(format!("tool_choice names {name:?}, which is not among the tools")))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_part_with_text_needs_a_string() {
        for part in [json!({ "type": "text", "text": 1e16 }), json!({ "text": 1e16 }), json!({ "type": "text" })] {
            let m = json!({ "role": "user", "content": [part] });
            assert!(template_messages(&[m]).is_err());
        }
        let m = json!({ "role": "user", "content": [{ "text": "hi" }, { "type": "image" }] });
        assert!(template_messages(&[m]).is_ok());
    }

    #[test]
    fn converts_roles_and_tool_call_arguments() {
        let m = template_messages(&[
            json!({"role": "developer", "content": "sys"}),
            json!({"role": "user", "content": [{"type": "text", "text": "hi"}]}),
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}}]}),
            json!({"role": "tool", "tool_call_id": "c1", "content": "a.py"}),
        ])
        .unwrap();
        assert_eq!(m[0]["role"], "system");
        assert_eq!(m[2]["content"], "");
        assert_eq!(m[2]["tool_calls"][0], json!({"name": "bash", "arguments": {"command": "ls"}}));
        for bad in [
            json!({"role": "wizard", "content": "x"}),
            json!({"content": "x"}),
            json!({"role": "user", "content": 3}),
            json!({"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "[1]"}}]}),
        ] {
            let e = template_messages(&[bad]).unwrap_err();
            assert_eq!(e.param.as_deref(), Some("messages[0]"));
        }
        assert!(template_messages(&[]).is_err());
    }

    #[test]
    fn checks_tools_and_tool_choice() {
        let good = json!({"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}});
        check_tools(&[good.clone()]).unwrap();
        for bad in [
            json!({"type": "function"}),
            json!({"type": "retrieval", "function": {"name": "x"}}),
            json!({"type": "function", "function": {"name": ""}}),
            json!({"type": "function", "function": {"name": "x", "parameters": "object"}}),
            json!({"type": "function", "function": {"name": "x", "parameters": {"properties": []}}}),
        ] {
            assert_eq!(check_tools(&[bad]).unwrap_err().param.as_deref(), Some("tools"));
        }
        let tools = [good];
        assert!(tool_calls_enabled(&tools, None).unwrap());
        assert!(!tool_calls_enabled(&tools, Some(&json!("none"))).unwrap());
        assert!(!tool_calls_enabled(&[], Some(&json!("auto"))).unwrap());
        assert!(tool_calls_enabled(&tools, Some(&json!({"type": "function", "function": {"name": "bash"}}))).unwrap());
        assert!(tool_calls_enabled(&tools, Some(&json!({"type": "function", "function": {"name": "nope"}}))).is_err());
        assert!(tool_calls_enabled(&tools, Some(&json!("sometimes"))).is_err());
        assert!(tool_calls_enabled(&[], Some(&json!("required"))).is_err());
    }
}
