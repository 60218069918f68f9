//! `Model`: the Qwen3.5-MoE text decoder on the CPU — its weights loaded from a checkpoint folder
//! (or any [`WeightSource`]) through the one loading skeleton, and the batched forward over
//! sequences of different lengths, each appending to its own [`SeqState`]. The layer sequence
//! itself is [`crate::model::forward`], run by the CPU backend
//! ([`crate::model::backend::cpu::CpuStep`]).

use super::backend::cpu::{CpuStep, CpuWeights, SourceLoader};
use super::backend::Stack;
use super::batch::{ForwardOptions, LogitsMode, Routing, SeqInput, SeqOutput};
use super::checkpoint::Checkpoint;
use super::config::{LayerType, ModelConfig};
use super::error::{ModelError, Result};
use super::gdn::GatedDeltaNet;
use super::rope::Rope;
use super::source::WeightSource;
use super::state::{KvCache, LayerState, SeqState};
use crate::tensor::profile::scope;
use crate::tensor::Tensor;
use std::path::Path;

pub struct Model {
    cfg: ModelConfig,
    stack: Stack<CpuWeights>,
    rope: Rope,
}

impl Model {
    /// Load `config.json` and the safetensors weights of a Hugging Face model folder.
    pub fn load(dir: &Path) -> Result<Self> {
        let cfg = ModelConfig::from_dir(dir)?;
        let mut ck = Checkpoint::open(dir)?;
        let m = Self::from_checkpoint(cfg, &mut ck)?;
        ck.report_unused();
        Ok(m)
    }

    /// Build from an already opened checkpoint.
    pub fn from_checkpoint(cfg: ModelConfig, ck: &mut Checkpoint) -> Result<Self> {
        Self::from_source(cfg, ck)
    }

    /// Build from any [`WeightSource`] (a checkpoint, or the trainer's lent parameters).
    pub fn from_source(cfg: ModelConfig, ck: &mut dyn WeightSource) -> Result<Self> {
        // The forward pass frees and reallocates its buffers every layer: keep them (see the module).
        crate::tensor::host_heap::retain_freed_memory();
        let stack = Stack::load(&cfg, &mut SourceLoader(ck))?;
        let rope = Rope::new(cfg.rotary_dim, cfg.rope_theta);
        Ok(Model { cfg, stack, rope })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// Storage format of the weight matrices: bf16 when loaded from a bf16 checkpoint (kept as
    /// is, read by the linear kernels), else f32.
    pub fn matrix_dtype(&self) -> crate::tensor::DType {
        self.stack.head.dtype()
    }

    /// An empty state (no tokens consumed) for a new sequence.
    pub fn new_state(&self) -> SeqState {
        let layers = self
            .cfg
            .layer_types
            .iter()
            .map(|lt| match lt {
                LayerType::Full => LayerState::Attention(KvCache::default()),
                LayerType::Linear => LayerState::Gdn(GatedDeltaNet::new_state(&self.cfg)),
            })
            .collect();
        SeqState { len: 0, layers }
    }

    /// Run one step over a batch: each sequence's tokens are appended to its state and its
    /// outputs returned in batch order. Inputs are validated before any state is touched.
    /// The layer sequence is [`crate::model::forward::forward`] over a [`CpuStep`].
    pub fn forward(
        &self,
        batch: &mut [SeqInput<'_>],
        opts: &ForwardOptions,
    ) -> Result<Vec<SeqOutput>> {
        self.validate(batch)?;
        let c = &self.cfg;
        let mut step = CpuStep::new(c, &self.rope, batch, *opts);
        let logits = super::forward::forward(&mut step, &self.stack)?;
        step.commit();
        let _p = scope("outputs");

        let (h, v, k, ne) = (
            c.hidden_size,
            c.vocab_size,
            c.num_experts_per_tok,
            c.num_experts,
        );
        let mut outs = Vec::with_capacity(step.lens.len());
        let mut row_cursor = 0;
        for (&st, &len) in step.starts.iter().zip(&step.lens) {
            let nrows = match opts.logits {
                LogitsMode::All => len,
                LogitsMode::Last => 1,
                LogitsMode::None => 0,
            };
            let lg = Tensor::new(
                vec![nrows, v],
                logits[row_cursor * v..(row_cursor + nrows) * v].to_vec(),
            );
            row_cursor += nrows;
            let hidden_states = step
                .hidden
                .iter()
                .map(|hs| Tensor::new(vec![len, h], hs[st * h..(st + len) * h].to_vec()))
                .collect();
            let routing = opts.routing.then(|| Routing {
                router_logits: step
                    .routing
                    .iter()
                    .map(|(l, _)| Tensor::new(vec![len, ne], l[st * ne..(st + len) * ne].to_vec()))
                    .collect(),
                experts: step
                    .routing
                    .iter()
                    .map(|(_, e)| e[st * k..(st + len) * k].to_vec())
                    .collect(),
            });
            outs.push(SeqOutput {
                logits: lg,
                hidden_states,
                routing,
            });
        }
        Ok(outs)
    }

    /// True when `st` has this model's layer layout and cache sizes.
    fn state_fits(&self, st: &SeqState) -> bool {
        let c = &self.cfg;
        let fresh = GatedDeltaNet::new_state(c);
        st.layers.len() == self.stack.layers.len()
            && st
                .layers
                .iter()
                .zip(&c.layer_types)
                .all(|(ls, lt)| match (ls, lt) {
                    (LayerState::Attention(kv), LayerType::Full) => {
                        let want = st.len * c.num_key_value_heads * c.head_dim;
                        kv.k.len() == want && kv.v.len() == want
                    }
                    (LayerState::Gdn(g), LayerType::Linear) => {
                        g.conv.len() == fresh.conv.len()
                            && g.recurrent.len() == fresh.recurrent.len()
                    }
                    _ => false,
                })
    }

    fn validate(&self, batch: &[SeqInput<'_>]) -> Result<()> {
        let c = &self.cfg;
        for (i, s) in batch.iter().enumerate() {
            if s.tokens.is_empty() {
                return Err(ModelError::BadInput(format!("sequence {i} has no tokens")));
            }
            if let Some(&t) = s.tokens.iter().find(|&&t| t as usize >= c.vocab_size) {
                return Err(ModelError::TokenOutOfRange {
                    token: t,
                    vocab: c.vocab_size,
                });
            }
            if !self.state_fits(s.state) {
                return Err(ModelError::BadInput(format!(
                    "sequence {i}: state is not from this model"
                )));
            }
            if let Some(f) = s.forced_experts {
                let want = s.tokens.len() * c.num_experts_per_tok;
                if f.len() != self.stack.layers.len() || f.iter().any(|l| l.len() != want) {
                    return Err(ModelError::BadInput(format!(
                        "sequence {i}: forced_experts needs {} layers of {want} indices",
                        self.stack.layers.len()
                    )));
                }
                for l in f {
                    for tok in l.chunks_exact(c.num_experts_per_tok) {
                        if tok.iter().any(|&e| e as usize >= c.num_experts) {
                            return Err(ModelError::BadInput(format!(
                                "sequence {i}: forced expert index out of range"
                            )));
                        }
                        if (1..tok.len()).any(|a| tok[..a].contains(&tok[a])) {
                            return Err(ModelError::BadInput(format!(
                                "sequence {i}: forced experts repeat an index"
                            )));
                        }
                    }
                }
            }
        }
        Ok(())
    }
}
