//! `Model`: the Qwen3.5-MoE text decoder — loading every tensor from a checkpoint folder and the
//! batched forward pass (embedding → [RMSNorm1p → GDN | gated attention → residual → RMSNorm1p →
//! MoE → residual] × L → final norm → head) over sequences of different lengths, each appending
//! to its own [`SeqState`].

use super::attention::{Attention, Segment};
use super::batch::{ForwardOptions, LogitsMode, Routing, SeqInput, SeqOutput};
use super::checkpoint::Checkpoint;
use super::config::{LayerType, ModelConfig};
use super::error::{ModelError, Result};
use super::gdn::GatedDeltaNet;
use super::moe::Moe;
use super::rope::Rope;
use super::source::WeightSource;
use super::state::{KvCache, LayerState, SeqState};
use crate::tensor::cpu::rms_norm_1p;
use crate::tensor::linear::linear;
use crate::tensor::profile::scope;
use crate::tensor::Tensor;
use std::path::Path;

enum Mixer {
    Attention(Attention),
    Gdn(GatedDeltaNet),
}

struct Layer {
    input_norm: Tensor,
    post_norm: Tensor,
    mixer: Mixer,
    moe: Moe,
}

pub struct Model {
    cfg: ModelConfig,
    embed: Tensor,
    layers: Vec<Layer>,
    norm: Tensor,
    /// The output head; shares the embedding storage when tied.
    lm_head: Tensor,
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
        let (v, h) = (cfg.vocab_size, cfg.hidden_size);
        let embed = ck.get_weight("embed_tokens.weight", &[v, h])?;
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        for (i, lt) in cfg.layer_types.iter().enumerate() {
            let p = format!("layers.{i}.");
            let mixer = match lt {
                LayerType::Full => {
                    Mixer::Attention(Attention::load(ck, &format!("{p}self_attn."), &cfg)?)
                }
                LayerType::Linear => {
                    Mixer::Gdn(GatedDeltaNet::load(ck, &format!("{p}linear_attn."), &cfg)?)
                }
            };
            layers.push(Layer {
                input_norm: ck.get(&format!("{p}input_layernorm.weight"), &[h])?,
                post_norm: ck.get(&format!("{p}post_attention_layernorm.weight"), &[h])?,
                mixer,
                moe: Moe::load(ck, &format!("{p}mlp."), &cfg)?,
            });
        }
        let norm = ck.get("norm.weight", &[h])?;
        let lm_head = if cfg.tie_word_embeddings {
            embed.clone()
        } else {
            ck.get_weight_exact("lm_head.weight", &[v, h])?
        };
        let rope = Rope::new(cfg.rotary_dim, cfg.rope_theta);
        Ok(Model {
            cfg,
            embed,
            layers,
            norm,
            lm_head,
            rope,
        })
    }

    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// Storage format of the weight matrices: bf16 when loaded from a bf16 checkpoint (kept as
    /// is, read by the linear kernels), else f32.
    pub fn matrix_dtype(&self) -> crate::tensor::DType {
        self.lm_head.dtype()
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
    pub fn forward(
        &self,
        batch: &mut [SeqInput<'_>],
        opts: &ForwardOptions,
    ) -> Result<Vec<SeqOutput>> {
        self.validate(batch)?;
        let c = &self.cfg;
        let (h, k) = (c.hidden_size, c.num_experts_per_tok);
        let lens: Vec<usize> = batch.iter().map(|s| s.tokens.len()).collect();
        let starts: Vec<usize> = lens
            .iter()
            .scan(0, |acc, &l| {
                let s = *acc;
                *acc += l;
                Some(s)
            })
            .collect();
        let n: usize = lens.iter().sum();
        let pos0: Vec<usize> = batch.iter().map(|s| s.state.len).collect();

        let mut x = vec![0.0; n * h];
        let tokens = batch.iter().flat_map(|s| s.tokens.iter());
        for (row, &t) in x.chunks_exact_mut(h).zip(tokens) {
            self.embed.row_into(t as usize, row);
        }
        let mut hidden_rec: Vec<Vec<f32>> = Vec::new();
        if opts.hidden_states {
            hidden_rec.push(x.clone());
        }
        let mut routing_rec: Vec<(Vec<f32>, Vec<u32>)> = Vec::new();

        for (li, layer) in self.layers.iter().enumerate() {
            let p = scope("norm");
            let mut u = x.clone();
            rms_norm_1p(&mut u, layer.input_norm.data(), c.rms_norm_eps);
            drop(p);
            let y = match &layer.mixer {
                Mixer::Attention(att) => {
                    let mut segs = segments(batch, &starts, &pos0, li, |ls| match ls {
                        LayerState::Attention(kv) => Some(kv),
                        _ => None,
                    });
                    att.forward(&u, n, &mut segs, &self.rope)
                }
                Mixer::Gdn(gdn) => {
                    let mut segs = segments(batch, &starts, &pos0, li, |ls| match ls {
                        LayerState::Gdn(g) => Some(g),
                        _ => None,
                    });
                    gdn.forward(&u, n, &mut segs)
                }
            };
            let p = scope("norm");
            for (a, b) in x.iter_mut().zip(&y) {
                *a += b;
            }
            let mut u = x.clone();
            rms_norm_1p(&mut u, layer.post_norm.data(), c.rms_norm_eps);
            drop(p);
            let forced: Option<Vec<u32>> = if batch.iter().any(|s| s.forced_experts.is_some()) {
                // Sequences without forced routing keep the router's choice: mark with u32::MAX.
                Some(
                    batch
                        .iter()
                        .flat_map(|s| match s.forced_experts {
                            Some(f) => f[li].clone(),
                            None => vec![u32::MAX; s.tokens.len() * k],
                        })
                        .collect(),
                )
            } else {
                None
            };
            let (y, rec) = layer.moe.forward(&u, n, forced.as_deref());
            for (a, b) in x.iter_mut().zip(&y) {
                *a += b;
            }
            if opts.hidden_states {
                hidden_rec.push(x.clone());
            }
            if opts.routing {
                routing_rec.push((rec.logits, rec.experts));
            }
        }
        for s in batch.iter_mut() {
            s.state.len += s.tokens.len();
        }

        // Final norm + head on the requested rows.
        let p = scope("head");
        let rows: Vec<usize> = match opts.logits {
            LogitsMode::All => (0..n).collect(),
            LogitsMode::Last => starts.iter().zip(&lens).map(|(s, l)| s + l - 1).collect(),
            LogitsMode::None => vec![],
        };
        let mut y: Vec<f32> = rows
            .iter()
            .flat_map(|&r| x[r * h..(r + 1) * h].iter().copied())
            .collect();
        rms_norm_1p(&mut y, self.norm.data(), c.rms_norm_eps);
        let v = c.vocab_size;
        let mut logits = vec![0.0; rows.len() * v];
        linear(&y, rows.len(), h, self.lm_head.weight(), v, &mut logits, true);
        drop(p);
        let _p = scope("outputs");

        let ne = c.num_experts;
        let mut outs = Vec::with_capacity(batch.len());
        let mut row_cursor = 0;
        for (&st, &len) in starts.iter().zip(&lens) {
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
            let hidden_states = hidden_rec
                .iter()
                .map(|hs| Tensor::new(vec![len, h], hs[st * h..(st + len) * h].to_vec()))
                .collect();
            let routing = opts.routing.then(|| Routing {
                router_logits: routing_rec
                    .iter()
                    .map(|(l, _)| Tensor::new(vec![len, ne], l[st * ne..(st + len) * ne].to_vec()))
                    .collect(),
                experts: routing_rec
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
        st.layers.len() == self.layers.len()
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
                if f.len() != self.layers.len() || f.iter().any(|l| l.len() != want) {
                    return Err(ModelError::BadInput(format!(
                        "sequence {i}: forced_experts needs {} layers of {want} indices",
                        self.layers.len()
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

/// The per-sequence segments of layer `li`, borrowing each sequence's state for that layer.
fn segments<'s, S>(
    batch: &'s mut [SeqInput<'_>],
    starts: &[usize],
    pos0: &[usize],
    li: usize,
    pick: impl Fn(&mut LayerState) -> Option<&mut S>,
) -> Vec<Segment<'s, S>> {
    batch
        .iter_mut()
        .enumerate()
        .map(|(i, s)| Segment {
            start: starts[i],
            len: s.tokens.len(),
            pos: pos0[i],
            state: pick(&mut s.state.layers[li]).expect("state layout checked in validate"),
        })
        .collect()
}
