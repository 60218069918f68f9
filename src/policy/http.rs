//! `http:URL` — an OpenAI-compatible `/v1/chat/completions` server (vLLM, SGLang, a hosted
//! teacher). Requests of a batch are sent concurrently; connection failures, timeouts, HTTP 429 and
//! 5xx are retried with exponential backoff; an unreachable server is an infrastructure error.

use super::{
    BoxFuture, ChatMessage, ChatRequest, Completion, Policy, PolicyError, Role, ToolCall, Usage,
};
use serde_json::{json, Value};
use std::time::Duration;

/// Connection settings of an HTTP policy.
#[derive(Debug, Clone)]
pub struct HttpPolicyConfig {
    /// Full URL of the chat-completions endpoint.
    pub endpoint: String,
    /// The `model` field sent with every request.
    pub model: String,
    pub api_key: Option<String>,
    pub request_timeout: Duration,
    /// Total attempts per request (1 = no retry).
    pub attempts: u32,
    pub initial_backoff: Duration,
}

impl HttpPolicyConfig {
    /// Settings for a base URL: `http://host:port`, `…/v1` or the full `…/chat/completions`.
    pub fn for_url(url: &str, model: &str) -> Self {
        let url = url.trim_end_matches('/');
        let endpoint = if url.ends_with("/chat/completions") {
            url.to_string()
        } else if url.ends_with("/v1") {
            format!("{url}/chat/completions")
        } else {
            format!("{url}/v1/chat/completions")
        };
        HttpPolicyConfig {
            endpoint,
            model: model.to_string(),
            api_key: None,
            request_timeout: Duration::from_secs(600),
            attempts: 4,
            initial_backoff: Duration::from_millis(500),
        }
    }
}

/// An OpenAI-compatible chat-completions client.
pub struct HttpPolicy {
    config: HttpPolicyConfig,
    client: reqwest::Client,
}

impl HttpPolicy {
    pub fn new(config: HttpPolicyConfig) -> Result<Self, PolicyError> {
        let client = reqwest::Client::builder()
            .timeout(config.request_timeout)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| PolicyError::BadSpec {
                spec: config.endpoint.clone(),
                reason: format!("cannot build HTTP client: {e}"),
            })?;
        Ok(HttpPolicy { config, client })
    }

    pub fn config(&self) -> &HttpPolicyConfig {
        &self.config
    }

    /// The JSON body of one request (OpenAI chat-completions schema).
    pub fn request_body(&self, req: &ChatRequest) -> Value {
        let messages: Vec<Value> = req.messages.iter().map(message_json).collect();
        let s = &req.sampling;
        let mut body = json!({
            "model": self.config.model,
            "messages": messages,
            "temperature": s.temperature,
            "top_p": s.top_p,
            "max_tokens": s.max_tokens,
        });
        if !req.tools.is_empty() {
            body["tools"] = Value::Array(req.tools.clone());
        }
        if s.top_k > 0 {
            body["top_k"] = json!(s.top_k);
        }
        if let Some(seed) = s.seed {
            body["seed"] = json!(seed);
        }
        if s.logprobs {
            body["logprobs"] = json!(true);
        }
        body
    }

    async fn complete_with_retries(&self, req: &ChatRequest) -> Result<Completion, PolicyError> {
        let body = self.request_body(req);
        let url = &self.config.endpoint;
        let mut backoff = self.config.initial_backoff;
        let mut last_reason = String::new();
        let attempts = self.config.attempts.max(1);
        for attempt in 1..=attempts {
            let mut builder = self.client.post(url).json(&body);
            if let Some(key) = &self.config.api_key {
                builder = builder.bearer_auth(key);
            }
            match builder.send().await {
                Err(e) => last_reason = format!("{e}"),
                Ok(resp) => {
                    let status = resp.status();
                    let text = resp.text().await.unwrap_or_default();
                    if status.is_success() {
                        return parse_response(url, &text);
                    }
                    if status.as_u16() != 429 && !status.is_server_error() {
                        return Err(PolicyError::Http {
                            url: url.clone(),
                            status: status.as_u16(),
                            body: text.chars().take(2000).collect(),
                        });
                    }
                    last_reason = format!(
                        "HTTP {status}: {}",
                        text.chars().take(500).collect::<String>()
                    );
                }
            }
            if attempt < attempts {
                tracing::warn!(url = %url, attempt, reason = %last_reason, "policy request failed, retrying");
                tokio::time::sleep(backoff).await;
                backoff *= 2;
            }
        }
        Err(PolicyError::Unreachable {
            url: url.clone(),
            attempts,
            reason: last_reason,
        })
    }
}

fn message_json(m: &ChatMessage) -> Value {
    let role = match m.role {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    };
    let mut v = json!({ "role": role, "content": m.content });
    if !m.tool_calls.is_empty() {
        v["tool_calls"] = m
            .tool_calls
            .iter()
            .map(|c| {
                json!({
                    "id": c.id,
                    "type": "function",
                    "function": { "name": c.name, "arguments": c.arguments.to_string() },
                })
            })
            .collect();
    }
    if let Some(id) = &m.tool_call_id {
        v["tool_call_id"] = json!(id);
    }
    v
}

/// Parse an OpenAI chat-completions response body into a completion.
fn parse_response(url: &str, text: &str) -> Result<Completion, PolicyError> {
    let bad = |reason: String| PolicyError::BadResponse {
        url: url.to_string(),
        reason,
    };
    let v: Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON: {e}")))?;
    let choice = v
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| bad("no choices[0]".into()))?;
    let msg = choice
        .get("message")
        .ok_or_else(|| bad("no choices[0].message".into()))?;
    let text = msg
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let reasoning = msg
        .get("reasoning_content")
        .or_else(|| msg.get("reasoning"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let mut tool_calls = Vec::new();
    if let Some(calls) = msg.get("tool_calls").and_then(Value::as_array) {
        for (i, c) in calls.iter().enumerate() {
            let f = c
                .get("function")
                .ok_or_else(|| bad("tool call without function".into()))?;
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            // Arguments arrive as a JSON string; keep unparsable ones as a string so the agent
            // loop can answer with a format error instead of failing the episode.
            let arguments = match f.get("arguments") {
                Some(Value::String(s)) => {
                    serde_json::from_str(s).unwrap_or(Value::String(s.clone()))
                }
                Some(other) => other.clone(),
                None => Value::Null,
            };
            let id = c
                .get("id")
                .and_then(Value::as_str)
                .map(str::to_string)
                .unwrap_or_else(|| format!("call_{i}"));
            tool_calls.push(ToolCall {
                id,
                name,
                arguments,
            });
        }
    }
    let usage = v
        .get("usage")
        .map(|u| Usage {
            prompt_tokens: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
            completion_tokens: u
                .get("completion_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0),
        })
        .unwrap_or_default();
    let logprobs = choice
        .get("logprobs")
        .and_then(|l| l.get("content"))
        .and_then(Value::as_array)
        .map(|items| {
            items
                .iter()
                .filter_map(|t| t.get("logprob").and_then(Value::as_f64).map(|x| x as f32))
                .collect::<Vec<f32>>()
        });
    Ok(Completion {
        text,
        reasoning,
        tool_calls,
        token_ids: None,
        logprobs,
        prompt_ids: None,
        routing: None,
        usage,
        finish_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

impl Policy for HttpPolicy {
    fn complete<'a>(
        &'a self,
        requests: &'a [ChatRequest],
    ) -> BoxFuture<'a, Result<Vec<Completion>, PolicyError>> {
        Box::pin(async move {
            let futures = requests.iter().map(|r| self.complete_with_retries(r));
            futures_util::future::join_all(futures)
                .await
                .into_iter()
                .collect()
        })
    }

    fn describe(&self) -> String {
        format!(
            "http:{} (model {})",
            self.config.endpoint, self.config.model
        )
    }
}
