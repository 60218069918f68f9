//! A generation request, its result, and the per-sequence bookkeeping in between: the token
//! history, how much of it the model state has consumed, the sampled tokens with their
//! log-probabilities, incremental text with stop checks, and the routing record.

use super::backend::{SampleSpec, Want};
use super::sampler::{top_logprobs, Sampled, Sampler, SamplingParams};
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
    /// Also return the `top_logprobs` most likely tokens (policy log-probabilities) at every
    /// sampled position (0 = none).
    pub top_logprobs: usize,
    /// Stream every sampled token here as it is sampled; when the receiver is gone (the client
    /// left), the request is cancelled and its sequence freed.
    pub events: Option<TokenSink>,
}

/// Where a streaming request's tokens go.
pub type TokenSink = tokio::sync::mpsc::UnboundedSender<TokenEvent>;

/// One sampled token of a streaming request.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenEvent {
    pub token: u32,
    /// Policy log-probability of `token` (as [`Completion::logprobs`]).
    pub logprob: f32,
    /// The most likely tokens at this position (only with [`Request::top_logprobs`]).
    pub top_logprobs: Vec<(u32, f32)>,
    /// Text that became final with this token: the concatenation of all deltas is the
    /// completion's `text` (text that could still turn into a stop string is held back until it
    /// cannot; a stop token or stop string adds nothing).
    pub delta: String,
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
            top_logprobs: 0,
            events: None,
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
    /// The [`Request::top_logprobs`] most likely tokens with their policy log-probabilities at
    /// each sampled position, most likely first (empty when not asked for).
    pub top_logprobs: Vec<Vec<(u32, f32)>>,
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
    /// Prompt position at which to stop reading and snapshot the state (conversations only).
    pub snapshot_at: Option<usize>,
    pub cached_tokens: usize,
    sampler: Sampler,
    /// The random stream's position before the last [`Self::want`]'s draw.
    drawn_from: u128,
    decoder: IncrementalDecoder,
    stop_ids: Vec<u32>,
    pub text: String,
    pub logprobs: Vec<f32>,
    pub sampling_logprobs: Vec<f32>,
    pub top_logprobs: Vec<Vec<(u32, f32)>>,
    pub logits: Vec<Vec<f32>>,
    pub routing: Option<RoutingRecord>,
    pub finish: Option<FinishReason>,
    /// The streaming receiver has gone: free the sequence without an answer.
    pub cancelled: bool,
    /// Bytes of `text` already streamed.
    streamed: usize,
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
        let sampler = Sampler::new(request.sampling.clone());
        Sequence {
            id,
            tokens: request.prompt.clone(),
            drawn_from: sampler.stream_position(),
            sampler,
            request,
            state,
            fed: cached,
            snapshot_at: None,
            cached_tokens: cached,
            decoder: IncrementalDecoder::new(false),
            stop_ids: stops,
            text: String::new(),
            logprobs: Vec::new(),
            sampling_logprobs: Vec::new(),
            top_logprobs: Vec::new(),
            logits: Vec::new(),
            routing,
            finish: None,
            cancelled: false,
            streamed: 0,
            admitted: Instant::now(),
            first_token: None,
        }
    }

    /// Tokens to forward next: the prompt remainder (up to the snapshot point while before it),
    /// or the last sampled token.
    pub fn pending(&self) -> &[u32] {
        match self.snapshot_at {
            Some(at) if self.fed < at => &self.tokens[self.fed..at],
            _ => &self.tokens[self.fed..],
        }
    }

    /// Still reading its prompt (more than the last sampled token is pending) — or, after a
    /// preemption, re-reading its prompt and sampled tokens.
    pub fn in_prefill(&self) -> bool {
        self.fed < self.request.prompt.len() || self.fed + 1 < self.tokens.len()
    }

    /// Add the experts of the tokens forwarded from position `from` (`[n, top_k]` per layer).
    /// Positions already recorded (re-read after a preemption) or served from the conversation
    /// cache before the record's start are skipped: the record covers each position once.
    pub fn record_routing(&mut self, from: usize, experts: Option<Vec<Vec<u32>>>) {
        let (Some(rec), Some(experts)) = (self.routing.as_mut(), experts) else {
            return;
        };
        let k = rec.top_k.max(1);
        let end = rec.start + rec.experts.first().map_or(0, |l| l.len() / k);
        let skip = end.saturating_sub(from) * k;
        if rec.experts.is_empty() {
            rec.experts = vec![Vec::new(); experts.len()];
        }
        for (acc, layer) in rec.experts.iter_mut().zip(experts) {
            acc.extend(layer.get(skip..).unwrap_or_default());
        }
    }

    /// Preempted: drop the model state (`fresh` replaces it) so the cache it held goes back;
    /// everything read so far — prompt and sampled tokens — is pending again, and the sampler,
    /// text, log-probabilities and routing record carry on where they were.
    pub fn restart(&mut self, fresh: S) {
        self.state = fresh;
        self.fed = 0;
    }

    /// Take back the draw of the last [`Self::want`]: its step did not run and is retried.
    pub fn unwant(&mut self) {
        self.sampler.rewind(self.drawn_from);
    }

    /// What a step forwarding `n` of the pending tokens must produce for this sequence: nothing
    /// while prompt remains to be read, else the next token — with the uniform draw taken here
    /// from the request's stream (exactly once per token, as the host sampler draws it).
    pub fn want(&mut self, n: usize) -> Want {
        self.drawn_from = self.sampler.stream_position();
        if self.fed + n < self.tokens.len() {
            return Want::Nothing;
        }
        let p = self.sampler.params();
        let (temperature, top_k, top_p) = (p.temperature, p.top_k, p.top_p);
        Want::Sample(SampleSpec {
            temperature,
            top_k,
            top_p,
            u: self.sampler.next_uniform(),
            logits: self.request.return_logits || self.request.top_logprobs > 0,
        })
    }

    /// Take the next token at the end of `tokens[..fed]` — the one the model sampled
    /// (`sampled`), or else one drawn here from `logits` with the spec's draw — and apply the
    /// stop rules. `logits` is the row (empty when the model sampled and it was not asked for).
    pub fn accept(
        &mut self,
        spec: &SampleSpec,
        sampled: Option<Sampled>,
        logits: Vec<f32>,
        tok: &Tokenizer,
    ) -> Sampled {
        let s = sampled.unwrap_or_else(|| self.sampler.sample_with(&logits, spec.u));
        self.first_token.get_or_insert_with(Instant::now);
        let top = match self.request.top_logprobs {
            0 => Vec::new(),
            n => top_logprobs(&logits, n),
        };
        if self.request.return_logits {
            self.logits.push(logits);
        }
        self.tokens.push(s.token);
        self.logprobs.push(s.logprob);
        self.sampling_logprobs.push(s.sampling_logprob);
        let generated = self.tokens.len() - self.request.prompt.len();
        self.apply_stops(s.token, generated, tok);
        if self.request.events.is_some() {
            self.stream(s, top.clone());
        }
        if self.request.top_logprobs > 0 {
            self.top_logprobs.push(top);
        }
        s
    }

    /// Send the token and the text that became final to the streaming receiver; mark the
    /// sequence cancelled when the receiver is gone.
    fn stream(&mut self, s: Sampled, top_logprobs: Vec<(u32, f32)>) {
        let hold = match self.finish {
            Some(_) => 0,
            None => self.request.sampling.stop.iter().map(String::len).max().unwrap_or(1) - 1,
        };
        // A stop string never cuts into streamed text (the hold-back covers it); clamp anyway.
        let start = self.streamed.min(self.text.len());
        let mut end = self.text.len().saturating_sub(hold).max(start);
        while !self.text.is_char_boundary(end) {
            end -= 1;
        }
        let event = TokenEvent {
            token: s.token,
            logprob: s.logprob,
            top_logprobs,
            delta: self.text.get(start..end).unwrap_or_default().to_string(),
        };
        self.streamed = end;
        if let Some(sink) = &self.request.events {
            if sink.send(event).is_err() {
                self.cancelled = true;
            }
        }
    }

    /// Append the token's text and decide whether generation ends here.
    fn apply_stops(&mut self, token: u32, generated: usize, tok: &Tokenizer) {
        if self.stop_ids.contains(&token) {
            self.finish_text(tok);
            self.finish = Some(FinishReason::StopToken(token));
            return;
        }
        let before = self.text.len();
        // An id the tokenizer cannot decode (e.g. padded embedding rows) adds no text.
        self.text
            .push_str(&self.decoder.push(tok, token).unwrap_or_default());
        if let Some(stop) = self.find_stop(before) {
            self.finish = Some(FinishReason::StopString(stop));
        } else if generated >= self.request.sampling.max_tokens {
            self.finish_text(tok);
            if let Some(stop) = self.find_stop(before) {
                self.finish = Some(FinishReason::StopString(stop));
            } else {
                self.finish = Some(FinishReason::Length);
            }
        }
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
            top_logprobs: self.top_logprobs,
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
