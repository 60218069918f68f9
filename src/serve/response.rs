//! Pieces of OpenAI responses shared by both endpoints: ids, finish reasons, usage, the
//! per-token log-probability entries, and which sampled tokens a client sees (a stop token ends
//! the generation but is not part of the answer, so it gets no log-probability entry).

use crate::engine::{Completion, FinishReason};
use crate::model::tokenizer::Tokenizer;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};

/// A response id: `PREFIX-` then a per-process counter and random bits.
pub fn response_id(prefix: &str, counter: &AtomicU64) -> String {
    let n = counter.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{n:x}{:016x}", rand::random::<u64>())
}

/// Seconds since the Unix epoch.
pub fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// OpenAI's `finish_reason`.
pub fn finish_reason(f: &FinishReason) -> &'static str {
    match f {
        FinishReason::StopToken(_) | FinishReason::StopString(_) => "stop",
        FinishReason::Length => "length",
    }
}

/// The sampled tokens a client sees: all but a final stop token.
pub fn visible_tokens(c: &Completion) -> usize {
    match c.finish {
        FinishReason::StopToken(_) => c.token_ids.len().saturating_sub(1),
        _ => c.token_ids.len(),
    }
}

/// The text of one token (lossy where a token is part of a UTF-8 character).
pub fn token_text(tok: &Tokenizer, id: u32) -> String {
    tok.decode(&[id], false).unwrap_or_default()
}

/// `usage` of a set of completions sharing one prompt per `prompt_count` prompts.
pub fn usage(completions: &[Completion], prompt_tokens: usize) -> Value {
    let completion_tokens: usize = completions.iter().map(|c| c.token_ids.len()).sum();
    let cached: usize = completions.iter().map(|c| c.cached_tokens).max().unwrap_or(0);
    json!({
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "prompt_tokens_details": { "cached_tokens": cached },
    })
}

/// A chat `logprobs.content` entry for one token.
pub fn chat_logprob(tok: &Tokenizer, id: u32, logprob: f32, top: &[(u32, f32)]) -> Value {
    let entry = |id: u32, lp: f32| {
        let text = token_text(tok, id);
        json!({ "token": text, "logprob": lp, "bytes": text.as_bytes() })
    };
    let mut e = entry(id, logprob);
    e["top_logprobs"] = top.iter().map(|&(t, lp)| entry(t, lp)).collect();
    e
}

/// Chat `logprobs` of a finished completion.
pub fn chat_logprobs(tok: &Tokenizer, c: &Completion) -> Value {
    let n = visible_tokens(c);
    let content: Vec<Value> = (0..n)
        .map(|i| {
            let top = c.top_logprobs.get(i).map_or(&[][..], Vec::as_slice);
            chat_logprob(tok, c.token_ids[i], c.logprobs[i], top)
        })
        .collect();
    json!({ "content": content })
}

/// Legacy completions `logprobs` of tokens `ids` with their log-probabilities; `offset` is the
/// text offset of the first token.
pub fn completion_logprobs(
    tok: &Tokenizer,
    ids: &[u32],
    logprobs: &[f32],
    top: &[Vec<(u32, f32)>],
    offset: usize,
) -> Value {
    let mut text_offset = Vec::with_capacity(ids.len());
    let mut at = offset;
    let tokens: Vec<String> = ids
        .iter()
        .map(|&id| {
            let t = token_text(tok, id);
            text_offset.push(at);
            at += t.len();
            t
        })
        .collect();
    let top: Vec<Value> = (0..ids.len())
        .map(|i| {
            let mut m = serde_json::Map::new();
            for &(t, lp) in top.get(i).map_or(&[][..], Vec::as_slice) {
                m.entry(token_text(tok, t)).or_insert(json!(lp));
            }
            Value::Object(m)
        })
        .collect();
    json!({
        "tokens": tokens,
        "token_logprobs": logprobs,
        "top_logprobs": if top.iter().all(|t| t.as_object().is_some_and(|o| o.is_empty())) { Value::Null } else { Value::Array(top) },
        "text_offset": text_offset,
    })
}
