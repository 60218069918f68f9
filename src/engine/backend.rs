//! What the engine needs from a model: a fresh per-sequence state and one batched step that
//! appends tokens to each sequence's state and returns the last position's logits (plus, when
//! asked, the experts each token was routed to). [`crate::model::Model`] implements it; tests may
//! drive the scheduler with a small model of their own.

use super::error::EngineError;
use crate::model::{ForwardOptions, LogitsMode, Model, SeqInput, SeqState};

/// One sequence's share of a step: `tokens` to append to `state`.
pub struct StepInput<'a, S> {
    pub tokens: &'a [u32],
    pub state: &'a mut S,
}

/// One sequence's result of a step.
#[derive(Debug, Clone)]
pub struct StepOutput {
    /// Logits at the last appended position (`vocab_size` values).
    pub logits: Vec<f32>,
    /// When routing was requested: per layer, the chosen experts of every appended token,
    /// row-major `[tokens, top_k]`.
    pub experts: Option<Vec<Vec<u32>>>,
}

/// A batched, stateful next-token model.
pub trait DecoderModel: Send + Sync {
    type State: Clone + Send;
    fn new_state(&self) -> Self::State;
    /// Number of logits per position (ids `0..vocab_size` may be fed).
    fn vocab_size(&self) -> usize;
    /// Experts chosen per token and layer (0 when the model has no router).
    fn experts_per_token(&self) -> usize;
    /// Append each sequence's tokens to its state and return its last position's logits.
    /// On error no state may have been changed.
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

    fn step(
        &self,
        batch: &mut [StepInput<'_, SeqState>],
        routing: bool,
    ) -> Result<Vec<StepOutput>, EngineError> {
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
            .map(|o| StepOutput {
                logits: o.logits.data().to_vec(),
                experts: o.routing.map(|r| r.experts),
            })
            .collect())
    }
}
