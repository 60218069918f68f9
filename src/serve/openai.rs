//! The OpenAI request bodies this server reads (unknown fields are ignored, as OpenAI-compatible
//! servers do) and the checks that turn their sampling fields into the engine's
//! [`SamplingParams`]: every bad value is a 400 naming the field.

use super::error::ApiError;
use super::limits::TokenLimits;
use crate::engine::SamplingParams;
use serde::Deserialize;
use serde_json::{Map, Value};

/// Most choices one request may ask for.
pub const MAX_N: usize = 16;
/// Most `top_logprobs` (OpenAI allows 20).
pub const MAX_TOP_LOGPROBS: usize = 20;
/// Most stop strings.
const MAX_STOP: usize = 16;

/// `stop`: one string or a list.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    One(String),
    Many(Vec<String>),
}

/// Sampling fields shared by both endpoints.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct SamplingFields {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    /// vLLM's extension; 0 or -1 = no top-k.
    pub top_k: Option<i64>,
    pub max_tokens: Option<i64>,
    pub stop: Option<Stop>,
    pub seed: Option<i64>,
    pub n: Option<i64>,
    /// vLLM's extension: keep generating past the model's stop tokens (benchmarks, load tests).
    pub ignore_eos: Option<bool>,
}

/// `stream_options`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct StreamOptions {
    #[serde(default)]
    pub include_usage: Option<bool>,
}

/// `POST /v1/chat/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct ChatCompletionRequest {
    pub model: String,
    pub messages: Vec<Value>,
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(flatten)]
    pub sampling: SamplingFields,
    #[serde(default)]
    pub max_completion_tokens: Option<i64>,
    #[serde(default)]
    pub logprobs: Option<bool>,
    #[serde(default)]
    pub top_logprobs: Option<i64>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// vLLM's extension: `{"enable_thinking": false}`.
    #[serde(default)]
    pub chat_template_kwargs: Option<Map<String, Value>>,
}

/// `prompt` of `/v1/completions`: text, token ids, or a list of either.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Prompt {
    Text(String),
    Ids(Vec<i64>),
    Texts(Vec<String>),
    IdLists(Vec<Vec<i64>>),
}

/// `POST /v1/completions`.
#[derive(Debug, Clone, Deserialize)]
pub struct CompletionRequest {
    pub model: String,
    pub prompt: Prompt,
    #[serde(flatten)]
    pub sampling: SamplingFields,
    /// Number of top log-probabilities per token (0 = just the sampled token's).
    #[serde(default)]
    pub logprobs: Option<i64>,
    #[serde(default)]
    pub echo: Option<bool>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
}

/// Parse a JSON body into `T`, or a 400 that says what is wrong with it.
pub fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::bad_request("the request body must be a JSON object"));
    }
    serde_json::from_value(value)
        .map_err(|e| ApiError::bad_request(format!("invalid request: {e}")))
}

impl SamplingFields {
    /// Number of choices (`n`, default 1).
    pub fn choices(&self) -> Result<usize, ApiError> {
        match self.n {
            None => Ok(1),
            Some(n) if (1..=MAX_N as i64).contains(&n) => Ok(n as usize),
            Some(n) => Err(ApiError::invalid("n", format!("n must be between 1 and {MAX_N}, got {n}"))),
        }
    }

    /// The engine's sampling settings for a prompt of `prompt_len` tokens; `max_tokens`
    /// (named `param` in errors) has been taken from the request by the caller.
    pub fn params(
        &self,
        prompt_len: usize,
        max_tokens: Option<i64>,
        param: &str,
        limits: &TokenLimits,
    ) -> Result<SamplingParams, ApiError> {
        let temperature = self.temperature.unwrap_or(1.0);
        if !(temperature.is_finite() && (0.0..=2.0).contains(&temperature)) {
            return Err(ApiError::invalid("temperature", format!("temperature must be in [0, 2], got {temperature}")));
        }
        let top_p = self.top_p.unwrap_or(1.0);
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(ApiError::invalid("top_p", format!("top_p must be in (0, 1], got {top_p}")));
        }
        let top_k = match self.top_k {
            None | Some(-1) | Some(0) => 0,
            Some(k) if k > 0 => usize::try_from(k).unwrap_or(usize::MAX),
            Some(k) => return Err(ApiError::invalid("top_k", format!("top_k must be -1, 0 or positive, got {k}"))),
        };
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) => v.clone(),
        };
        if stop.len() > MAX_STOP || stop.iter().any(String::is_empty) {
            return Err(ApiError::invalid("stop", format!("stop must be at most {MAX_STOP} non-empty strings")));
        }
        Ok(SamplingParams {
            temperature,
            top_k,
            top_p,
            // Any 64-bit seed; negative ones keep their bits.
            seed: self.seed.map(|s| s as u64),
            max_tokens: limits.completion_budget(prompt_len, max_tokens, param)?,
            stop_token_ids: Vec::new(),
            stop,
        })
    }
}

/// Seed of choice `i` of a seeded request with `n` choices: the seed itself for one choice,
/// else `seed + i`, so the choices differ and each is reproducible.
pub fn choice_seed(seed: Option<u64>, i: usize) -> Option<u64> {
    seed.map(|s| s.wrapping_add(i as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> TokenLimits {
        TokenLimits { max_model_len: 1000, max_tokens: 100 }
    }

    #[test]
    fn sampling_fields_are_checked() {
        let ok: SamplingFields = serde_json::from_value(serde_json::json!({
            "temperature": 0.5, "top_p": 0.9, "top_k": -1, "max_tokens": 7, "stop": "END", "seed": -1, "n": 3
        })).unwrap();
        let p = ok.params(10, ok.max_tokens, "max_tokens", &limits()).unwrap();
        assert_eq!((p.temperature, p.top_p, p.top_k, p.max_tokens), (0.5, 0.9, 0, 7));
        assert_eq!(p.stop, ["END"]);
        assert_eq!(p.seed, Some(u64::MAX));
        assert_eq!(ok.choices().unwrap(), 3);
        for (field, bad) in [
            ("temperature", serde_json::json!({"temperature": -1.0})),
            ("top_p", serde_json::json!({"top_p": 0.0})),
            ("top_k", serde_json::json!({"top_k": -5})),
            ("stop", serde_json::json!({"stop": [""]})),
            ("max_tokens", serde_json::json!({"max_tokens": -2})),
        ] {
            let f: SamplingFields = serde_json::from_value(bad).unwrap();
            let e = f.params(10, f.max_tokens, "max_tokens", &limits()).unwrap_err();
            assert_eq!(e.param.as_deref(), Some(field));
        }
        let f: SamplingFields = serde_json::from_value(serde_json::json!({"n": 0})).unwrap();
        assert_eq!(f.choices().unwrap_err().param.as_deref(), Some("n"));
    }

    #[test]
    fn bodies_that_are_not_json_objects_are_400() {
        for body in [&b"{not json"[..], b"[1,2]", b"{\"model\": 3}"] {
            let e = parse_body::<ChatCompletionRequest>(body).unwrap_err();
            assert_eq!(e.status, axum::http::StatusCode::BAD_REQUEST);
        }
    }
}
