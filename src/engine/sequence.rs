//! A generation request, its result, and the per-sequence bookkeeping in between: the token
//! history, how much of it the model state has consumed, the sampled tokens with their
//! log-probabilities, incremental text with stop checks, and the routing record.

use super::sampler::{Sampled, Sampler, SamplingParams};
use crate::model::tokenizer::{IncrementalDecoder, Tokenizer};
use std::time::{Duration, Instant};

/// What a caller asks the engine for.
#[derive(Debug, Clone)]
pub struct Request {
    /// Prompt token ids (e.g. a rendered chat).
    pub prompt: Vec<u32>,
    pub sampling: SamplingParams,
    /// A conversation id: the engine keeps this conversation's model state after the request and
    /// continues from it when the next request's prompt extends a cached prefix.
    pub conversation: Option<String>,
    /// Record the experts each forwarded token was routed to, per layer.
    pub routing: bool,
    /// Return the full logits row of every sampled position (large; for tests and debugging).
    pub return_logits: bool,
    /// Ignore the tokenizer's stop ids (`sampling.stop_token_ids` still apply); for benchmarks.
    pub ignore_eos: bool,
}

impl Request {
    pub fn new(prompt: Vec<u32>, sampling: SamplingParams) -> Self {
        Request {
            prompt,
            sampling,
            conversation: None,
            routing: false,
            return_logits: false,
            ignore_eos: false,
        }
    }
    pub fn in_conversation(mut self, id: impl Into<String>) -> Self {
        self.conversation = Some(id.into());
        self
    }
    pub fn with_routing(mut self) -> Self {
        self.routing = true;
        self
    }
    pub fn with_logits(mut self) -> Self {
        self.return_logits = true;
        self
    }
}

/// Why generation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FinishReason {
    /// A stop token was sampled (it is the last of `token_ids`, and not part of `text`).
    StopToken(u32),
    /// The text reached a stop string (`text` is cut before it; `token_ids` end with the token
    /// that completed it).
    StopString(String),
    /// `max_tokens` reached.
    Length,
}

/// Experts chosen for the tokens this request forwarded through the model.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RoutingRecord {
    /// Position (in prompt + completion) of the first token covered; positions before it were
    /// served from the conversation cache and were recorded by the earlier request.
    pub start: usize,
    pub top_k: usize,
    /// Per layer, row-major `[tokens, top_k]`: the prompt tokens from `start`, then every
    /// completion token except the last (a sampled token is forwarded only when the next one is
    /// needed).
    pub experts: Vec<Vec<u32>>,
}

/// The result of one request.
#[derive(Debug, Clone)]
pub struct Completion {
    pub prompt_tokens: usize,
    /// Prompt tokens served from the conversation cache (not recomputed).
    pub cached_tokens: usize,
    /// Sampled ids, stop token included.
    pub token_ids: Vec<u32>,
    /// Decoded completion (stop token excluded, cut before a stop string).
    pub text: String,
    /// Policy log-probability of each sampled token: `log_softmax(logits)[token]` at
    /// temperature 1 (see `engine::sampler`).
    pub logprobs: Vec<f32>,
    /// Log-probability of each sampled token under the sampling distribution.
    pub sampling_logprobs: Vec<f32>,
    pub finish: FinishReason,
    pub routing: Option<RoutingRecord>,
    /// Logits row of each sampled position (only with `return_logits`).
    pub logits: Vec<Vec<f32>>,
    pub timing: Timing,
}

/// Wall-clock time of a request inside the engine (shared with whatever it was batched with).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timing {
    /// From admission to the first sampled token (reading the prompt).
    pub prefill: Duration,
    /// From the first sampled token to the last.
    pub decode: Duration,
}

/// One request in flight.
pub(crate) struct Sequence<S> {
    pub id: u64,
    pub request: Request,
    pub state: S,
    /// Prompt followed by the sampled tokens.
    pub tokens: Vec<u32>,
    /// How many of `tokens` the state has consumed.
    pub fed: usize,
    pub cached_tokens: usize,
    sampler: Sampler,
    decoder: IncrementalDecoder,
    stop_ids: Vec<u32>,
    pub text: String,
    pub logprobs: Vec<f32>,
    pub sampling_logprobs: Vec<f32>,
    pub logits: Vec<Vec<f32>>,
    pub routing: Option<RoutingRecord>,
    pub finish: Option<FinishReason>,
    admitted: Instant,
    first_token: Option<Instant>,
}

impl<S> Sequence<S> {
    /// `state` has consumed `tokens[..cached]` of the prompt already.
    pub fn new(
        id: u64,
        request: Request,
        state: S,
        cached: usize,
        stop_ids: &[u32],
        top_k: usize,
    ) -> Self {
        let default_stops = if request.ignore_eos {
            &[][..]
        } else {
            stop_ids
        };
        let mut stops: Vec<u32> = default_stops
            .iter()
            .chain(&request.sampling.stop_token_ids)
            .copied()
            .collect();
        stops.sort_unstable();
        stops.dedup();
        let routing = request.routing.then(|| RoutingRecord {
            start: cached,
            top_k,
            experts: Vec::new(),
        });
        Sequence {
            id,
            tokens: request.prompt.clone(),
            sampler: Sampler::new(request.sampling.clone()),
            request,
            state,
            fed: cached,
            cached_tokens: cached,
            decoder: IncrementalDecoder::new(false),
            stop_ids: stops,
            text: String::new(),
            logprobs: Vec::new(),
            sampling_logprobs: Vec::new(),
            logits: Vec::new(),
            routing,
            finish: None,
            admitted: Instant::now(),
            first_token: None,
        }
    }

    /// Tokens not yet consumed by the state (the prompt remainder, or the last sampled token).
    pub fn pending(&self) -> &[u32] {
        &self.tokens[self.fed..]
    }

    /// Still reading its prompt (more than the last sampled token is pending).
    pub fn in_prefill(&self) -> bool {
        self.fed < self.request.prompt.len()
    }

    /// Add the experts of `n` newly forwarded tokens.
    pub fn record_routing(&mut self, experts: Option<Vec<Vec<u32>>>) {
        if let (Some(rec), Some(experts)) = (self.routing.as_mut(), experts) {
            if rec.experts.is_empty() {
                rec.experts = experts;
            } else {
                for (acc, layer) in rec.experts.iter_mut().zip(experts) {
                    acc.extend(layer);
                }
            }
        }
    }

    /// Sample the next token from the logits at the end of `tokens[..fed]` and apply the stop
    /// rules. Returns the sampled token.
    pub fn sample(&mut self, logits: Vec<f32>, tok: &Tokenizer) -> Sampled {
        let s = self.sampler.sample(&logits);
        self.first_token.get_or_insert_with(Instant::now);
        if self.request.return_logits {
            self.logits.push(logits);
        }
        self.tokens.push(s.token);
        self.logprobs.push(s.logprob);
        self.sampling_logprobs.push(s.sampling_logprob);
        let generated = self.tokens.len() - self.request.prompt.len();
        if self.stop_ids.contains(&s.token) {
            self.finish_text(tok);
            self.finish = Some(FinishReason::StopToken(s.token));
            return s;
        }
        let before = self.text.len();
        // An id the tokenizer cannot decode (e.g. padded embedding rows) adds no text.
        self.text
            .push_str(&self.decoder.push(tok, s.token).unwrap_or_default());
        if let Some(stop) = self.find_stop(before) {
            self.finish = Some(FinishReason::StopString(stop));
        } else if generated >= self.request.sampling.max_tokens {
            self.finish_text(tok);
            if self.find_stop(before).is_none() {
                self.finish = Some(FinishReason::Length);
            }
        }
        s
    }

    fn finish_text(&mut self, tok: &Tokenizer) {
        self.text
            .push_str(&self.decoder.flush(tok).unwrap_or_default());
    }

    /// Look for a stop string that ends in the text added since byte `before`; cut the text at
    /// the earliest one.
    fn find_stop(&mut self, before: usize) -> Option<String> {
        let longest = self.request.sampling.stop.iter().map(String::len).max()?;
        let mut from = before.saturating_sub(longest - 1);
        while !self.text.is_char_boundary(from) {
            from -= 1;
        }
        let (at, stop) = self
            .request
            .sampling
            .stop
            .iter()
            .filter_map(|s| self.text[from..].find(s.as_str()).map(|i| (from + i, s)))
            .min_by_key(|(i, _)| *i)?;
        let stop = stop.clone();
        self.text.truncate(at);
        Some(stop)
    }

    pub fn into_completion(self) -> (Completion, S, Vec<u32>) {
        let first = self.first_token.unwrap_or(self.admitted);
        let timing = Timing {
            prefill: first - self.admitted,
            decode: first.elapsed(),
        };
        let completion = Completion {
            prompt_tokens: self.request.prompt.len(),
            cached_tokens: self.cached_tokens,
            token_ids: self.tokens[self.request.prompt.len()..].to_vec(),
            text: self.text,
            logprobs: self.logprobs,
            sampling_logprobs: self.sampling_logprobs,
            finish: self.finish.unwrap_or(FinishReason::Length),
            routing: self.routing,
            logits: self.logits,
            timing,
        };
        let mut consumed = self.tokens;
        consumed.truncate(self.fed);
        (completion, self.state, consumed)
    }
}
