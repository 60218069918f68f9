//! `Trainer`: one optimizer update from a batch — SFT on token sequences with assistant masks,
//! or GRPO on rollouts (advantages given, optional routing replay) — with token-level loss
//! aggregation over the whole batch, gradient accumulation micro-batch by micro-batch under a
//! tokens-per-micro-batch cap (a micro-batch's forwards run in parallel; each tape is dropped
//! after its backward), clipping, AdamW and the lr schedule. With LoRA the backward forms the
//! adapter gradients only (`lora::AdapterGrads`), never the dense weight gradients.

use super::error::{Result, TrainError};
use super::grpo::{grpo_denominator, grpo_loss, GrpoConfig, GrpoSample};
use super::grad_sink::GradSink;
use super::lora::{AdapterGrads, Lora};
use super::loss::{sft_denominator, sft_loss, LossOut};
use super::network::{Tape, TapeOptions, TrainModel};
use super::optim::{AdamW, Schedule, StepStats};
use super::params::Grads;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::ops::Range;

/// One supervised sequence: token ids and, per token, whether it is trained (assistant).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct SftExample {
    pub ids: Vec<u32>,
    pub mask: Vec<bool>,
}

/// Result of one update.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct StepReport {
    pub step: u64,
    pub loss: f64,
    pub tokens: usize,
    /// Micro-batches the step was accumulated over.
    pub micro_batches: usize,
    #[serde(flatten)]
    pub stats: StepStats,
}

pub struct Trainer {
    pub model: TrainModel,
    pub opt: AdamW,
    pub schedule: Schedule,
    pub tape: TapeOptions,
    pub grpo: GrpoConfig,
    /// When set, only the adapters train (`opt` must then be built over `lora.adapters`).
    pub lora: Option<Lora>,
}

/// Where a step's backward accumulates: every dense gradient, or (LoRA) adapter gradients only.
enum Sink<'a> {
    Dense(Grads),
    Lora(AdapterGrads<'a>),
}

impl Sink<'_> {
    fn as_dyn(&mut self) -> &mut dyn GradSink {
        match self {
            Sink::Dense(g) => g,
            Sink::Lora(a) => a,
        }
    }

    /// The gradients the optimizer steps on (dense, or the adapters').
    fn finish(self) -> Grads {
        match self {
            Sink::Dense(g) => g,
            Sink::Lora(a) => a.finish(),
        }
    }
}

/// One sequence of a step: token ids and, for routing replay, the experts per layer.
type SeqRef<'a> = (&'a [u32], Option<&'a [Vec<u32>]>);

/// Split sequences of lengths `lens` (batch order kept) into consecutive micro-batches of at
/// most `cap` tokens each. A sequence longer than `cap` is allowed and forms a micro-batch alone.
pub fn plan_micro_batches(lens: &[usize], cap: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut tokens) = (0, 0usize);
    for (i, &l) in lens.iter().enumerate() {
        if i > start && tokens.saturating_add(l) > cap {
            out.push(start..i);
            (start, tokens) = (i, 0);
        }
        tokens = tokens.saturating_add(l);
    }
    if start < lens.len() {
        out.push(start..lens.len());
    }
    out
}

impl Trainer {
    /// Full-parameter training of `model` with AdamW under `opt` over all its parameters,
    /// constant schedule, default GRPO settings, activations kept (set the public fields for
    /// anything else).
    pub fn new(model: TrainModel, opt: super::optim::AdamWConfig) -> Self {
        let opt = AdamW::new(opt, &model.store);
        Trainer {
            model,
            opt,
            schedule: Schedule::Constant,
            tape: TapeOptions::default(),
            grpo: GrpoConfig::default(),
            lora: None,
        }
    }

    /// One SFT update over `batch` (loss = mean over the batch's trained tokens).
    pub fn sft_step(&mut self, batch: &[SftExample]) -> Result<StepReport> {
        self.sft_step_capped(batch, usize::MAX)
    }

    /// [`Trainer::sft_step`] in micro-batches of at most `max_tokens_per_micro_batch` tokens
    /// (see [`plan_micro_batches`]); the result equals the one-batch step.
    pub fn sft_step_capped(&mut self, batch: &[SftExample], max_tokens_per_micro_batch: usize) -> Result<StepReport> {
        let masks: Vec<&[bool]> = batch.iter().map(|e| &e.mask[..]).collect();
        let denom = sft_denominator(&masks);
        if denom == 0 {
            return Err(TrainError::BadInput(
                "SFT batch has no trained (assistant) tokens".into(),
            ));
        }
        let v = self.model.cfg.vocab_size;
        let seqs: Vec<SeqRef<'_>> = batch.iter().map(|e| (&e.ids[..], None)).collect();
        let (grads, loss, tokens, micro_batches) =
            self.accumulate(&seqs, max_tokens_per_micro_batch, |i, logits| {
                let e = &batch[i];
                sft_loss(logits, v, &e.ids, &e.mask, denom as f64)
            })?;
        let stats = self.update(grads);
        Ok(StepReport {
            step: self.opt.step,
            loss,
            tokens,
            micro_batches,
            stats,
        })
    }

    /// One GRPO update over `batch`; returns `None` when no sample is active (all advantages
    /// zero), in which case nothing changes.
    pub fn grpo_step(&mut self, batch: &[GrpoSample<'_>]) -> Result<Option<StepReport>> {
        self.grpo_step_capped(batch, usize::MAX)
    }

    /// [`Trainer::grpo_step`] in micro-batches of at most `max_tokens_per_micro_batch` tokens
    /// (see [`plan_micro_batches`]); the token denominator is the whole batch's, so the result
    /// equals the one-batch step.
    pub fn grpo_step_capped(
        &mut self,
        batch: &[GrpoSample<'_>],
        max_tokens_per_micro_batch: usize,
    ) -> Result<Option<StepReport>> {
        let denom = grpo_denominator(&self.grpo, batch);
        if denom == 0 {
            return Ok(None);
        }
        let v = self.model.cfg.vocab_size;
        let active: Vec<&GrpoSample<'_>> = batch.iter().filter(|s| super::grpo::is_active(&self.grpo, s)).collect();
        let seqs: Vec<SeqRef<'_>> = active.iter().map(|s| (s.ids, s.routing)).collect();
        let cfg = self.grpo;
        let (grads, loss, tokens, micro_batches) =
            self.accumulate(&seqs, max_tokens_per_micro_batch, |i, logits| {
                grpo_loss(&cfg, logits, v, active[i], denom as f64)
            })?;
        let stats = self.update(grads);
        Ok(Some(StepReport {
            step: self.opt.step,
            loss,
            tokens,
            micro_batches,
            stats,
        }))
    }

    /// Gradient accumulation over `seqs` (ids, optional routing replay), micro-batch by
    /// micro-batch: the forwards of one micro-batch run in parallel and their tapes live together;
    /// each tape is dropped after its backward. `loss(i, logits)` gives sequence `i`'s loss.
    /// Returns (grads, loss, tokens, micro-batches).
    fn accumulate(
        &self,
        seqs: &[SeqRef<'_>],
        cap: usize,
        loss: impl Fn(usize, &[f32]) -> Result<LossOut>,
    ) -> Result<(Grads, f64, usize, usize)> {
        if self.model.store.is_empty() {
            return Err(TrainError::WeightsAway);
        }
        let mut sink = match &self.lora {
            None => Sink::Dense(self.model.store.zero_grads()),
            Some(lora) => Sink::Lora(lora.sink(&self.model.store)),
        };
        let (mut total, mut tokens) = (0.0, 0);
        let lens: Vec<usize> = seqs.iter().map(|s| s.0.len()).collect();
        let plan = plan_micro_batches(&lens, cap);
        for mb in &plan {
            let tapes: Vec<Result<Tape>> = seqs[mb.clone()]
                .par_iter()
                .map(|(ids, routing)| self.model.forward(ids, *routing, self.tape))
                .collect();
            for (i, tape) in mb.clone().zip(tapes) {
                let tape = tape?;
                let out = loss(i, &tape.logits)?;
                self.model.backward(&tape, &out.dlogits, sink.as_dyn())?;
                total += out.loss;
                tokens += out.tokens;
            }
        }
        Ok((sink.finish(), total, tokens, plan.len()))
    }

    /// Clip + AdamW on the model's parameters, or on the LoRA adapters (then merged back);
    /// `grads` are the model's dense gradients or, with LoRA, the adapters'.
    fn update(&mut self, mut grads: Grads) -> StepStats {
        match &mut self.lora {
            None => self.opt.step(&mut self.model.store, &mut grads, &self.schedule),
            Some(lora) => {
                let stats = self.opt.step(&mut lora.adapters, &mut grads, &self.schedule);
                lora.apply(&mut self.model.store);
                stats
            }
        }
    }
}
