//! `EngineCore`: the synchronous generation loop. Requests wait in a queue, are admitted into the
//! running set, and every [`EngineCore::step`] forwards one batch chosen by the scheduler, samples
//! a token for every sequence whose pending tokens are all consumed, and retires finished
//! sequences (storing their states in the conversation cache). When the model's cache cannot
//! take a step's tokens, cached conversations are evicted and then the youngest running
//! sequences preempted (`scheduler::preemption_victim`) until the step fits.

use super::backend::{DecoderModel, SampleSpec, StepInput, StepOutput, Want};
use super::conversation::{ConversationCache, Snapshot};
use super::error::EngineError;
use super::scheduler::{plan, preemption_victim, Pending, SchedulerConfig};
use super::sequence::{Completion, Request, Sequence};
use super::stats::{Counters, EngineStats};
use crate::model::tokenizer::Tokenizer;
use rayon::prelude::*;
use std::collections::VecDeque;
use std::sync::Arc;

/// Engine settings.
#[derive(Debug, Clone, Copy)]
pub struct EngineConfig {
    pub scheduler: SchedulerConfig,
    /// Conversations whose states are kept (least recently used evicted).
    pub max_conversations: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            scheduler: SchedulerConfig::default(),
            max_conversations: 256,
        }
    }
}

/// A finished request: its id and its completion or error.
pub type Finished = (u64, Result<Completion, EngineError>);

pub struct EngineCore<M: DecoderModel> {
    model: Arc<M>,
    tokenizer: Arc<Tokenizer>,
    config: EngineConfig,
    waiting: VecDeque<Waiting<M::State>>,
    /// In admission order (the youngest last).
    running: Vec<Running<M::State>>,
    /// No admission after a preemption until a sequence has finished (or none runs).
    admission_paused: bool,
    conversations: ConversationCache<M::State>,
    next_id: u64,
    counters: Arc<Counters>,
}

/// A queued request, or a preempted sequence waiting to re-read what it had read.
enum Waiting<S> {
    New(u64, Request),
    Preempted(Sequence<S>),
}

impl<S> Waiting<S> {
    fn id(&self) -> u64 {
        match self {
            Waiting::New(id, _) => *id,
            Waiting::Preempted(seq) => seq.id,
        }
    }
}

/// A running sequence plus its turn-boundary snapshot (conversations only).
struct Running<S> {
    seq: Sequence<S>,
    boundary_snapshot: Option<Snapshot<S>>,
}

impl<M: DecoderModel> EngineCore<M> {
    pub fn new(
        model: Arc<M>,
        tokenizer: Arc<Tokenizer>,
        config: EngineConfig,
    ) -> Result<Self, EngineError> {
        let s = &config.scheduler;
        if s.max_running == 0 || s.prefill_chunk == 0 || s.max_batch_tokens <= s.max_running {
            return Err(EngineError::BadRequest(format!(
                "scheduler limits need max_running >= 1, prefill_chunk >= 1 and max_batch_tokens > max_running: {s:?}"
            )));
        }
        Ok(EngineCore {
            model,
            tokenizer,
            conversations: ConversationCache::new(config.max_conversations),
            config,
            waiting: VecDeque::new(),
            running: Vec::new(),
            admission_paused: false,
            next_id: 0,
            counters: Arc::default(),
        })
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    /// Queue a request; returns its id.
    pub fn add(&mut self, request: Request) -> Result<u64, EngineError> {
        request.sampling.validate()?;
        if request.prompt.is_empty() {
            return Err(EngineError::BadRequest("empty prompt".into()));
        }
        let vocab = self.model.vocab_size();
        if let Some(&t) = request.prompt.iter().find(|&&t| t as usize >= vocab) {
            return Err(EngineError::BadRequest(format!(
                "prompt token {t} is outside the vocabulary ({vocab})"
            )));
        }
        let id = self.next_id;
        self.next_id += 1;
        self.waiting.push_back(Waiting::New(id, request));
        Ok(id)
    }

    /// True while requests are waiting or running.
    pub fn has_work(&self) -> bool {
        !self.waiting.is_empty() || !self.running.is_empty()
    }

    /// Number of sequences in flight.
    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Number of requests queued and not yet admitted.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Drop a waiting or running request at once (its caller has gone); its state is freed and
    /// not kept for its conversation. Returns whether it was found.
    pub fn cancel(&mut self, id: u64) -> bool {
        if let Some(i) = self.waiting.iter().position(|w| w.id() == id) {
            self.waiting.remove(i);
            return true;
        }
        if let Some(i) = self.running.iter().position(|r| r.seq.id == id) {
            self.running.remove(i);
            return true;
        }
        false
    }

    /// Drop a conversation's cached states.
    pub fn forget_conversation(&mut self, id: &str) {
        self.conversations.forget(id);
    }

    /// Token and turn counters since the engine started.
    pub fn stats(&self) -> EngineStats {
        self.counters.snapshot()
    }

    /// The live counters (shared with the async front-end's handles).
    pub(crate) fn counters(&self) -> Arc<Counters> {
        self.counters.clone()
    }

    /// Number of conversations with cached states.
    pub fn cached_conversations(&self) -> usize {
        self.conversations.len()
    }

    /// Fail every waiting and running request (used at shutdown).
    pub fn abort_all(&mut self, err: EngineError) -> Vec<Finished> {
        let mut out: Vec<Finished> = self
            .waiting
            .drain(..)
            .map(|w| (w.id(), Err(err.clone())))
            .collect();
        out.extend(self.running.drain(..).map(|r| (r.seq.id, Err(err.clone()))));
        out
    }

    /// Run until every queued request has finished.
    pub fn run_to_completion(&mut self) -> Vec<Finished> {
        let mut done = Vec::new();
        while self.has_work() {
            done.extend(self.step());
        }
        done
    }

    /// Admit waiting requests, forward one scheduled batch, sample, retire finished sequences.
    /// A batch the model's cache cannot hold is planned again after making room (cached
    /// conversations evicted, then the youngest sequences preempted); it fails only when a
    /// single sequence cannot fit alone.
    pub fn step(&mut self) -> Vec<Finished> {
        self.admit();
        loop {
            let pending: Vec<Pending> = self
                .running
                .iter()
                .map(|r| Pending {
                    tokens: r.seq.pending().len(),
                    prefill: r.seq.in_prefill(),
                })
                .collect();
            let batch = plan(&pending, &self.config.scheduler);
            if batch.is_empty() {
                return Vec::new();
            }
            let (wants, result) = self.forward(&batch);
            match result {
                Err(EngineError::CacheFull(m)) => {
                    // the step did not run: take its draws back, make room, plan again
                    for &(i, _) in &batch {
                        self.running[i].seq.unwant();
                    }
                    if !self.make_room() {
                        return self.fail(&batch, EngineError::CacheFull(m));
                    }
                }
                result => return self.finish_step(&batch, wants, result),
            }
        }
    }

    /// Free cache for the running sequences: evict the least recently used cached
    /// conversation, else preempt the youngest running sequence. False when nothing is left to
    /// free.
    fn make_room(&mut self) -> bool {
        if self.conversations.evict_oldest() {
            return true;
        }
        let Some(i) = preemption_victim(self.running.len()) else {
            return false;
        };
        // its turn-boundary snapshot goes too (it holds cache); re-reading the prompt takes it again
        let Running { mut seq, .. } = self.running.remove(i);
        seq.restart(self.model.new_state());
        self.waiting.push_front(Waiting::Preempted(seq));
        self.counters.preempted();
        self.admission_paused = true;
        true
    }

    /// Forward one planned batch: what each sequence wants (its draw taken) and the model's
    /// answer.
    fn forward(
        &mut self,
        batch: &[(usize, usize)],
    ) -> (Vec<Want>, Result<Vec<StepOutput>, EngineError>) {
        let routing = batch
            .iter()
            .any(|&(i, _)| self.running[i].seq.request.routing);
        let mut wants = Vec::with_capacity(batch.len());
        let mut chosen = batch.iter().peekable();
        let mut inputs = Vec::with_capacity(batch.len());
        for (i, r) in self.running.iter_mut().enumerate() {
            if let Some(&(_, n)) = chosen.next_if(|(j, _)| *j == i) {
                let seq = &mut r.seq;
                let want = seq.want(n);
                wants.push(want);
                inputs.push(StepInput {
                    tokens: &seq.tokens[seq.fed..seq.fed + n],
                    state: &mut seq.state,
                    want,
                });
            }
        }
        let result = self.model.step(&mut inputs, routing);
        (wants, result)
    }

    /// Take a step's outputs: advance the states, sample, retire finished sequences.
    fn finish_step(
        &mut self,
        batch: &[(usize, usize)],
        wants: Vec<Want>,
        result: Result<Vec<StepOutput>, EngineError>,
    ) -> Vec<Finished> {
        let vocab = self.model.vocab_size();
        let outputs = match result {
            Ok(outputs)
                if outputs.len() == batch.len()
                    && outputs
                        .iter()
                        .zip(&wants)
                        .all(|(o, w)| answers(w, o, vocab)) =>
            {
                outputs
            }
            Ok(outputs) => {
                let e = EngineError::Model(format!(
                    "the model returned {} outputs for {} sequences (or logits of the wrong size, or a token outside the vocabulary)",
                    outputs.len(),
                    batch.len()
                ));
                return self.fail(batch, e);
            }
            Err(e) => return self.fail(batch, e),
        };
        let logit_bytes: usize = outputs
            .iter()
            .map(|o| std::mem::size_of_val(&o.logits[..]))
            .sum();
        self.counters.step(logit_bytes);
        // Advance the states; sequences with nothing left pending take their token (sampled by
        // the model, or here in parallel: each sequence has its own generator, so the order does
        // not matter).
        let mut next: Vec<Option<(SampleSpec, StepOutput)>> = vec![None; self.running.len()];
        for ((&(i, n), mut out), want) in batch.iter().zip(outputs).zip(wants) {
            let r = &mut self.running[i];
            if r.seq.in_prefill() {
                self.counters.prefilled(n);
            } else {
                self.counters.decoded(n);
            }
            r.seq.record_routing(r.seq.fed, out.experts.take());
            r.seq.fed += n;
            if r.seq.snapshot_at == Some(r.seq.fed) {
                r.boundary_snapshot = Some(Snapshot {
                    tokens: r.seq.tokens[..r.seq.fed].to_vec(),
                    state: r.seq.state.clone(),
                });
            }
            if let Want::Sample(spec) = want {
                next[i] = Some((spec, out));
            }
        }
        let tokenizer = &*self.tokenizer;
        self.running.par_iter_mut().zip(next).for_each(|(r, n)| {
            if let Some((spec, out)) = n {
                r.seq.accept(&spec, out.sampled, out.logits, tokenizer);
            }
        });
        self.retire()
    }

    fn admit(&mut self) {
        if self.running.is_empty() {
            self.admission_paused = false;
        }
        while self.running.len() < self.config.scheduler.max_running && !self.admission_paused {
            let (id, request) = match self.waiting.pop_front() {
                None => break,
                Some(Waiting::Preempted(seq)) => {
                    self.running.push(Running {
                        seq,
                        boundary_snapshot: None,
                    });
                    continue;
                }
                Some(Waiting::New(id, request)) => (id, request),
            };
            let resumed = request
                .conversation
                .as_deref()
                .and_then(|c| self.conversations.take(c, &request.prompt));
            let (state, cached) = match resumed {
                Some(s) => {
                    let n = s.tokens.len();
                    (s.state, n)
                }
                None => (self.model.new_state(), 0),
            };
            let mut seq = Sequence::new(
                id,
                request,
                state,
                cached,
                self.tokenizer.stop_ids(),
                self.model.experts_per_token(),
            );
            if seq.request.conversation.is_some() {
                seq.snapshot_at = Some(self.turn_boundary(&seq.request.prompt, cached));
            }
            self.running.push(Running {
                seq,
                boundary_snapshot: None,
            });
        }
    }

    /// Where to snapshot a conversation's prompt: right after its last added token (for a chat
    /// prompt, the `<think>` or `</think>` of the generation prompt, else `<|im_start|>`), the
    /// last point the next turn's re-rendered, re-tokenised prompt is sure to share; the end of
    /// the prompt when no added token follows the cached prefix.
    fn turn_boundary(&self, prompt: &[u32], cached: usize) -> usize {
        prompt[cached..]
            .iter()
            .rposition(|&t| self.tokenizer.is_added_token(t))
            .map_or(prompt.len(), |i| cached + i + 1)
    }

    fn fail(&mut self, batch: &[(usize, usize)], err: EngineError) -> Vec<Finished> {
        self.admission_paused = false;
        let mut out = Vec::new();
        for &(i, _) in batch.iter().rev() {
            let r = self.running.remove(i);
            out.push((r.seq.id, Err(err.clone())));
        }
        out.reverse();
        out
    }

    fn retire(&mut self) -> Vec<Finished> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < self.running.len() {
            if self.running[i].seq.cancelled {
                let r = self.running.remove(i);
                out.push((r.seq.id, Err(EngineError::Cancelled)));
                continue;
            }
            if self.running[i].seq.finish.is_none() {
                i += 1;
                continue;
            }
            let Running {
                seq,
                boundary_snapshot,
            } = self.running.remove(i);
            let (id, conversation) = (seq.id, seq.request.conversation.clone());
            let (completion, state, consumed) = seq.into_completion();
            self.admission_paused = false;
            self.counters.finished(completion.cached_tokens);
            if let Some(conv) = conversation {
                let mut snapshots: Vec<Snapshot<M::State>> =
                    boundary_snapshot.into_iter().collect();
                if snapshots
                    .first()
                    .is_none_or(|s| s.tokens.len() < consumed.len())
                {
                    snapshots.push(Snapshot {
                        tokens: consumed,
                        state,
                    });
                }
                self.conversations.store(conv, snapshots);
            }
            out.push((id, Ok(completion)));
        }
        out
    }
}

/// Whether a step output answers what was wanted: logits of the vocabulary's size where they are
/// needed, a sampled token inside the vocabulary.
fn answers(want: &Want, out: &StepOutput, vocab: usize) -> bool {
    let full = out.logits.len() == vocab;
    match (want, &out.sampled) {
        (Want::Nothing, None) => true,
        (Want::Logits, None) => full,
        (Want::Sample(_), None) => full,
        (Want::Sample(spec), Some(s)) => (s.token as usize) < vocab && (full || !spec.logits),
        (_, Some(_)) => false,
    }
}
