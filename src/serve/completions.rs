//! `POST /v1/completions`: raw prompts (text, token ids, or a list of either; no chat template),
//! `n` choices per prompt, legacy `logprobs` (top-k per token), as one JSON response or SSE.

use super::error::ApiError;
use super::generate::{self, Update};
use super::openai::{choice_seed, parse_body, CompletionRequest, Prompt, MAX_TOP_LOGPROBS};
use super::response::{completion_logprobs, finish_reason, response_id, unix_now, usage, visible_tokens};
use super::{sse, AppState};
use crate::engine::{Request, SamplingParams};
use axum::response::{IntoResponse, Response};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Instant;

/// OpenAI's default `max_tokens` for this endpoint.
const DEFAULT_MAX_TOKENS: i64 = 16;

/// The prompts of a request as token ids.
fn prompt_ids(state: &AppState, prompt: &Prompt) -> Result<Vec<Vec<u32>>, ApiError> {
    let vocab = state.engine.vocab_size();
    let ids = |v: &[i64]| {
        v.iter()
            .map(|&t| {
                u32::try_from(t)
                    .ok()
                    .filter(|&t| (t as usize) < vocab)
                    .ok_or_else(|| ApiError::invalid("prompt", format!("token id {t} is outside the vocabulary (0..{vocab})")))
            })
            .collect::<Result<Vec<u32>, ApiError>>()
    };
    let encode = |s: &str| state.engine.tokenizer().encode(s).map_err(ApiError::from);
    let prompts = match prompt {
        Prompt::Text(s) => vec![encode(s)?],
        Prompt::Texts(v) => v.iter().map(|s| encode(s)).collect::<Result<_, _>>()?,
        Prompt::Ids(v) => vec![ids(v)?],
        Prompt::IdLists(v) => v.iter().map(|x| ids(x)).collect::<Result<_, _>>()?,
    };
    if prompts.is_empty() || prompts.iter().any(Vec::is_empty) {
        return Err(ApiError::invalid("prompt", "prompt must not be empty"));
    }
    Ok(prompts)
}

pub async fn handle(state: Arc<AppState>, body: &[u8]) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let req: CompletionRequest = parse_body(body)?;
    state.check_model(&req.model)?;
    if req.echo.unwrap_or(false) {
        return Err(ApiError::invalid("echo", "echo is not supported"));
    }
    let prompts = prompt_ids(&state, &req.prompt)?;
    let n = req.sampling.choices()?;
    let top = match req.logprobs {
        None => None,
        Some(k) if (0..=MAX_TOP_LOGPROBS as i64).contains(&k) => Some(k as usize),
        Some(k) => return Err(ApiError::invalid("logprobs", format!("logprobs must be between 0 and {MAX_TOP_LOGPROBS}, got {k}"))),
    };
    let max_tokens = Some(req.sampling.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS));
    let mut requests = Vec::with_capacity(prompts.len() * n);
    for ids in &prompts {
        let sampling = req.sampling.params(ids.len(), max_tokens, "max_tokens", &state.config.limits)?;
        for i in 0..n {
            let mut r = Request::new(ids.clone(), SamplingParams { seed: choice_seed(sampling.seed, i), ..sampling.clone() });
            r.top_logprobs = top.unwrap_or(0);
            r.ignore_eos = req.sampling.ignore_eos.unwrap_or(false);
            requests.push(r);
        }
    }
    let prompt_tokens: usize = prompts.iter().map(Vec::len).sum();
    let count = requests.len();
    let permit = state.admission.admit(count)?;
    let id = response_id("cmpl", &state.next_id);
    let created = unix_now();
    let rx = generate::start(&state.engine, requests, state.metrics.clone(), arrived);
    let include_usage = req.stream_options.as_ref().and_then(|o| o.include_usage).unwrap_or(false);
    let envelope = {
        let (id, model) = (id.clone(), state.config.served_model_name.clone());
        move |choices: Value| json!({ "id": id, "object": "text_completion", "created": created, "model": model, "choices": choices })
    };
    if req.stream.unwrap_or(false) {
        let (tx, out) = tokio::sync::mpsc::channel(sse::BUFFER);
        tokio::spawn(async move {
            let _permit = permit;
            stream(&state, rx, tx, count, top.is_some(), include_usage, prompt_tokens, envelope).await;
        });
        return Ok(sse::response(out));
    }
    let completions = generate::collect(rx, count).await?;
    drop(permit);
    let tok = state.engine.tokenizer();
    let choices: Vec<Value> = completions
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let k = visible_tokens(c);
            let logprobs = match top {
                Some(_) => completion_logprobs(tok, &c.token_ids[..k], &c.logprobs[..k], &c.top_logprobs, 0),
                None => Value::Null,
            };
            json!({ "index": i, "text": c.text, "logprobs": logprobs, "finish_reason": finish_reason(&c.finish) })
        })
        .collect();
    let mut body = envelope(Value::Array(choices));
    body["usage"] = usage(&completions, prompt_tokens);
    Ok(axum::Json(body).into_response())
}

#[allow(clippy::too_many_arguments)]
async fn stream(
    state: &AppState,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<(usize, Update)>,
    tx: tokio::sync::mpsc::Sender<Value>,
    count: usize,
    logprobs: bool,
    include_usage: bool,
    prompt_tokens: usize,
    envelope: impl Fn(Value) -> Value,
) {
    let tok = state.engine.tokenizer();
    let stops = tok.stop_ids();
    let mut offsets = vec![0usize; count];
    let mut done = Vec::new();
    while done.len() < count {
        let Some((i, update)) = rx.recv().await else { return };
        let msg = match update {
            Update::Token(ev) => {
                let lp = (logprobs && !stops.contains(&ev.token)).then(|| {
                    completion_logprobs(tok, &[ev.token], &[ev.logprob], std::slice::from_ref(&ev.top_logprobs), offsets[i])
                });
                if ev.delta.is_empty() && lp.is_none() {
                    continue;
                }
                offsets[i] += ev.delta.len();
                envelope(json!([{ "index": i, "text": ev.delta, "logprobs": lp, "finish_reason": null }]))
            }
            Update::Done(Err(e)) => {
                let _ = tx.send(ApiError::from(e).body()).await;
                return;
            }
            Update::Done(Ok(c)) => {
                let m = envelope(json!([{ "index": i, "text": "", "logprobs": null, "finish_reason": finish_reason(&c.finish) }]));
                done.push(c);
                m
            }
        };
        if tx.send(msg).await.is_err() {
            return;
        }
    }
    if include_usage {
        let mut last = envelope(json!([]));
        last["usage"] = usage(&done, prompt_tokens);
        let _ = tx.send(last).await;
    }
}
