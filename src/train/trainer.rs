//! `Trainer`: one optimizer update from a batch — SFT on token sequences with assistant masks,
//! or GRPO on rollouts (advantages given, optional routing replay) — with token-level loss
//! aggregation over the whole batch, gradient accumulation sequence by sequence (each
//! sequence's tape is dropped after its backward), clipping, AdamW and the lr schedule.

use super::error::{Result, TrainError};
use super::grpo::{grpo_denominator, grpo_loss, GrpoConfig, GrpoSample};
use super::lora::Lora;
use super::loss::{sft_denominator, sft_loss};
use super::network::{TapeOptions, TrainModel};
use super::optim::{AdamW, Schedule, StepStats};
use super::params::Grads;
use serde::{Deserialize, Serialize};

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

impl Trainer {
    /// One SFT update over `batch` (loss = mean over the batch's trained tokens).
    pub fn sft_step(&mut self, batch: &[SftExample]) -> Result<StepReport> {
        let masks: Vec<&[bool]> = batch.iter().map(|e| &e.mask[..]).collect();
        let denom = sft_denominator(&masks);
        if denom == 0 {
            return Err(TrainError::BadInput("SFT batch has no trained (assistant) tokens".into()));
        }
        let v = self.model.cfg.vocab_size;
        let mut grads = self.model.store.zero_grads();
        let (mut loss, mut tokens) = (0.0, 0);
        for e in batch {
            let tape = self.model.forward(&e.ids, None, self.tape)?;
            let out = sft_loss(&tape.logits, v, &e.ids, &e.mask, denom as f64)?;
            self.model.backward(&tape, &out.dlogits, &mut grads)?;
            loss += out.loss;
            tokens += out.tokens;
        }
        let stats = self.update(grads);
        Ok(StepReport { step: self.opt.step, loss, tokens, stats })
    }

    /// One GRPO update over `batch`; returns `None` when no sample is active (all advantages
    /// zero), in which case nothing changes.
    pub fn grpo_step(&mut self, batch: &[GrpoSample<'_>]) -> Result<Option<StepReport>> {
        let denom = grpo_denominator(&self.grpo, batch);
        if denom == 0 {
            return Ok(None);
        }
        let v = self.model.cfg.vocab_size;
        let mut grads = self.model.store.zero_grads();
        let (mut loss, mut tokens) = (0.0, 0);
        for s in batch {
            if !super::grpo::is_active(&self.grpo, s) {
                continue;
            }
            let tape = self.model.forward(s.ids, s.routing, self.tape)?;
            let out = grpo_loss(&self.grpo, &tape.logits, v, s, denom as f64)?;
            self.model.backward(&tape, &out.dlogits, &mut grads)?;
            loss += out.loss;
            tokens += out.tokens;
        }
        let stats = self.update(grads);
        Ok(Some(StepReport { step: self.opt.step, loss, tokens, stats }))
    }

    /// Clip + AdamW on the model's parameters, or on the LoRA adapters (then merged back).
    fn update(&mut self, mut grads: Grads) -> StepStats {
        match &mut self.lora {
            None => self.opt.step(&mut self.model.store, &mut grads, &self.schedule),
            Some(lora) => {
                let mut g = lora.project(&grads);
                let stats = self.opt.step(&mut lora.adapters, &mut g, &self.schedule);
                lora.apply(&mut self.model.store);
                stats
            }
        }
    }
}
