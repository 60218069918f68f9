//! The forward API's inputs and outputs: a batch of sequences (`SeqInput`, each with its own
//! tokens and mutable `SeqState`), what to return (`ForwardOptions`), and per-sequence results
//! (`SeqOutput`: logits, optional per-layer hidden states, optional routing record).

use super::state::SeqState;
use crate::tensor::Tensor;

/// One sequence of a batch: `tokens` are appended to `state` (prefill of any length, or decode
/// of one token).
pub struct SeqInput<'a> {
    pub tokens: &'a [u32],
    pub state: &'a mut SeqState,
    /// Routing replay: the expert indices to use, per layer `[T · top_k]` (row-major by token),
    /// instead of the router's top-k. Gate weights are still the router's renormalised
    /// probabilities of the forced experts.
    pub forced_experts: Option<&'a [Vec<u32>]>,
}

impl<'a> SeqInput<'a> {
    pub fn new(tokens: &'a [u32], state: &'a mut SeqState) -> Self {
        SeqInput {
            tokens,
            state,
            forced_experts: None,
        }
    }
}

/// Which logits rows to compute.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LogitsMode {
    /// Every input position.
    All,
    /// Only the last input position of each sequence (decode/sampling).
    #[default]
    Last,
    /// No logits (e.g. prefill of a prompt prefix whose logits are not needed).
    None,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct ForwardOptions {
    pub logits: LogitsMode,
    /// Return the residual stream after the embedding and after every layer.
    pub hidden_states: bool,
    /// Return router logits and the chosen experts per layer.
    pub routing: bool,
}

/// The routing record of one sequence.
#[derive(Clone, Debug)]
pub struct Routing {
    /// Per layer `[T, num_experts]` router logits.
    pub router_logits: Vec<Tensor>,
    /// Per layer `[T · top_k]` chosen expert indices (descending gate weight per token).
    pub experts: Vec<Vec<u32>>,
}

#[derive(Clone, Debug)]
pub struct SeqOutput {
    /// `[rows, vocab]`; rows = T (All), 1 (Last) or 0 (None).
    pub logits: Tensor,
    /// `num_layers + 1` tensors `[T, hidden]`: the embedding output, then each layer's output
    /// (before the final norm). Empty unless requested.
    pub hidden_states: Vec<Tensor>,
    pub routing: Option<Routing>,
}
