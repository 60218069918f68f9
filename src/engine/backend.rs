//! What the engine needs from a model: a fresh per-sequence state and one batched step that
//! appends tokens to each sequence's state and returns, per sequence, what the engine wants from
//! that step ([`Want`]): the last position's logits, nothing (the sequence reads more of its
//! prompt next step), or the next token. For the next token the engine hands the model the
//! request's sampling settings and the uniform draw of its random stream ([`SampleSpec`]); a
//! model may sample on its own device and return only the token and its two log-probabilities
//! ([`StepOutput::sampled`], the CUDA backend does), or return the logits and leave the draw to
//! the engine's host sampler (the CPU model does) — either way with the same draw, so a seeded
//! request picks the same tokens on every backend. Experts each token was routed to come back
//! when asked. [`crate::model::Model`] implements it; tests may drive the scheduler with a small
//! model of their own.

use super::error::EngineError;
use super::sampler::Sampled;
use crate::model::{ForwardOptions, LogitsMode, Model, SeqInput, SeqState};

/// How the next token of a sequence is drawn, and whether its logits are needed on the host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SampleSpec {
    /// 0 = greedy.
    pub temperature: f32,
    /// 0 = no top-k restriction.
    pub top_k: usize,
    /// 1 = no nucleus restriction.
    pub top_p: f32,
    /// The uniform draw in `[0, 1)` from the request's random stream (0 when greedy).
    pub u: f64,
    /// The logits row is needed on the host as well (top log-probabilities, returned logits).
    pub logits: bool,
}

/// What the engine wants from a step for one sequence.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Want {
    /// The logits of the last appended position, in [`StepOutput::logits`].
    Logits,
    /// Nothing: the sequence reads more of its prompt next step (logits may be left empty).
    Nothing,
    /// The next token: either [`StepOutput::sampled`] (drawn with `u` under these settings,
    /// logits returned too when [`SampleSpec::logits`]) or the logits for the host sampler.
    Sample(SampleSpec),
}

/// One sequence's share of a step: `tokens` to append to `state`.
pub struct StepInput<'a, S> {
    pub tokens: &'a [u32],
    pub state: &'a mut S,
    pub want: Want,
}

impl<'a, S> StepInput<'a, S> {
    /// Append `tokens` and return the last position's logits.
    pub fn new(tokens: &'a [u32], state: &'a mut S) -> Self {
        StepInput {
            tokens,
            state,
            want: Want::Logits,
        }
    }
}

/// One sequence's result of a step.
#[derive(Debug, Clone)]
pub struct StepOutput {
    /// Logits at the last appended position (`vocab_size` values); may be empty when the step
    /// wanted [`Want::Nothing`], or a [`Want::Sample`] without logits that `sampled` answers.
    pub logits: Vec<f32>,
    /// When routing was requested: per layer, the chosen experts of every appended token,
    /// row-major `[tokens, top_k]`.
    pub experts: Option<Vec<Vec<u32>>>,
    /// The next token, sampled by the model itself for a [`Want::Sample`] (`None`: the engine
    /// samples from `logits`).
    pub sampled: Option<Sampled>,
}

/// A batched, stateful next-token model.
pub trait DecoderModel: Send + Sync {
    type State: Clone + Send;
    fn new_state(&self) -> Self::State;
    /// Number of logits per position (ids `0..vocab_size` may be fed).
    fn vocab_size(&self) -> usize;
    /// Experts chosen per token and layer (0 when the model has no router).
    fn experts_per_token(&self) -> usize;
    /// Append each sequence's tokens to its state and return what each input's
    /// [`StepInput::want`] asks for. On error no state may have been changed.
    fn step(
        &self,
        batch: &mut [StepInput<'_, Self::State>],
        routing: bool,
    ) -> Result<Vec<StepOutput>, EngineError>;
}

impl DecoderModel for Model {
    type State = SeqState;

    fn new_state(&self) -> SeqState {
        Model::new_state(self)
    }

    fn vocab_size(&self) -> usize {
        self.config().vocab_size
    }

    fn experts_per_token(&self) -> usize {
        self.config().num_experts_per_tok
    }

    /// Logits for every input but [`Want::Nothing`]; sampling is left to the engine.
    fn step(
        &self,
        batch: &mut [StepInput<'_, SeqState>],
        routing: bool,
    ) -> Result<Vec<StepOutput>, EngineError> {
        let wants: Vec<Want> = batch.iter().map(|s| s.want).collect();
        let mut inputs: Vec<SeqInput<'_>> = batch
            .iter_mut()
            .map(|s| SeqInput::new(s.tokens, &mut *s.state))
            .collect();
        let opts = ForwardOptions {
            logits: LogitsMode::Last,
            hidden_states: false,
            routing,
        };
        let outs = self.forward(&mut inputs, &opts)?;
        Ok(outs
            .into_iter()
            .zip(wants)
            .map(|(o, want)| StepOutput {
                logits: match want {
                    Want::Nothing => Vec::new(),
                    _ => o.logits.data().to_vec(),
                },
                experts: o.routing.map(|r| r.experts),
                sampled: None,
            })
            .collect())
    }
}
