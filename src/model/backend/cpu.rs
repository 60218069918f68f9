//! The CPU inference backend: [`CpuStep`] runs one batched step of [`crate::model::forward`]
//! over sequences of different lengths, each appending to its own [`SeqState`], with the host
//! kernels of `model::{attention, gdn, moe}` (f32 or bf16 weight matrices). It records the
//! hidden states and routing a [`ForwardOptions`] asks for.

use super::{Backend, Site, StackLoader, WeightTypes};
use crate::model::attention::{Attention, Segment};
use crate::model::batch::{ForwardOptions, LogitsMode, SeqInput};
use crate::model::config::ModelConfig;
use crate::model::error::{ModelError, Result};
use crate::model::gdn::GatedDeltaNet;
use crate::model::moe::Moe;
use crate::model::rope::Rope;
use crate::model::source::WeightSource;
use crate::model::state::LayerState;
use crate::tensor::cpu::add_rms_norm_1p;
use crate::tensor::linear::linear;
use crate::tensor::profile::scope;
use crate::tensor::Tensor;

/// Host tensors (weight matrices f32 or bf16, vectors f32).
pub struct CpuWeights;

impl WeightTypes for CpuWeights {
    type Embed = Tensor;
    type Norm = Tensor;
    type Attention = Attention;
    type Gdn = GatedDeltaNet;
    type Moe = Moe;
    type Head = Tensor;
}

/// Builds [`CpuWeights`] from any [`WeightSource`].
pub struct SourceLoader<'a>(pub &'a mut dyn WeightSource);

impl StackLoader<CpuWeights> for SourceLoader<'_> {
    type Error = ModelError;
    fn embed(&mut self, name: &str, shape: [usize; 2]) -> Result<Tensor> {
        self.0.get_weight(name, &shape)
    }
    fn norm(&mut self, name: &str, len: usize) -> Result<Tensor> {
        self.0.get(name, &[len])
    }
    fn attention(&mut self, prefix: &str, c: &ModelConfig) -> Result<Attention> {
        Attention::load(self.0, prefix, c)
    }
    fn gdn(&mut self, prefix: &str, c: &ModelConfig) -> Result<GatedDeltaNet> {
        GatedDeltaNet::load(self.0, prefix, c)
    }
    fn moe(&mut self, prefix: &str, c: &ModelConfig) -> Result<Moe> {
        Moe::load(self.0, prefix, c)
    }
    fn head(&mut self, name: &str, shape: [usize; 2]) -> Result<Tensor> {
        self.0.get_weight_exact(name, &shape)
    }
    fn tied_head(&mut self, embed: &Tensor) -> Result<Tensor> {
        Ok(embed.clone())
    }
}

/// One forward step over a batch on the host.
pub struct CpuStep<'s, 'b> {
    cfg: &'s ModelConfig,
    rope: &'s Rope,
    batch: &'s mut [SeqInput<'b>],
    opts: ForwardOptions,
    /// First packed row of each sequence.
    pub starts: Vec<usize>,
    pub lens: Vec<usize>,
    pos0: Vec<usize>,
    n: usize,
    /// The residual stream after the embedding and after each layer (when asked).
    pub hidden: Vec<Vec<f32>>,
    /// Per layer: router logits `[N, E]` and chosen experts `[N · k]` (when asked).
    pub routing: Vec<(Vec<f32>, Vec<u32>)>,
}

impl<'s, 'b> CpuStep<'s, 'b> {
    /// A step over `batch` (already validated against the model).
    pub fn new(
        cfg: &'s ModelConfig,
        rope: &'s Rope,
        batch: &'s mut [SeqInput<'b>],
        opts: ForwardOptions,
    ) -> Self {
        let lens: Vec<usize> = batch.iter().map(|s| s.tokens.len()).collect();
        let starts: Vec<usize> = lens
            .iter()
            .scan(0, |acc, &l| {
                let s = *acc;
                *acc += l;
                Some(s)
            })
            .collect();
        let n = lens.iter().sum();
        let pos0 = batch.iter().map(|s| s.state.len).collect();
        CpuStep {
            cfg,
            rope,
            batch,
            opts,
            starts,
            lens,
            pos0,
            n,
            hidden: vec![],
            routing: vec![],
        }
    }

    /// Advance every sequence's length by its tokens (after the forward).
    pub fn commit(&mut self) {
        for s in self.batch.iter_mut() {
            s.state.len += s.tokens.len();
        }
    }

    /// The per-sequence segments of layer `li`, borrowing each sequence's state for that layer.
    fn segments<S>(
        &mut self,
        li: usize,
        pick: impl Fn(&mut LayerState) -> Option<&mut S>,
    ) -> Vec<Segment<'_, S>> {
        let (starts, pos0) = (&self.starts, &self.pos0);
        self.batch
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
}

impl Backend for CpuStep<'_, '_> {
    type W = CpuWeights;
    type Hidden = Vec<f32>;
    type Normed = Vec<f32>;
    type Delta = Vec<f32>;
    /// Logits of the rows [`ForwardOptions::logits`] asks for, packed `[rows, vocab]`.
    type Out = Vec<f32>;
    type Error = ModelError;

    fn embed(&mut self, w: &Tensor) -> Result<Vec<f32>> {
        let h = self.cfg.hidden_size;
        let mut x = vec![0.0; self.n * h];
        let tokens = self.batch.iter().flat_map(|s| s.tokens.iter());
        for (row, &t) in x.chunks_exact_mut(h).zip(tokens) {
            w.row_into(t as usize, row);
        }
        if self.opts.hidden_states {
            self.hidden.push(x.clone());
        }
        Ok(x)
    }

    fn add_norm(
        &mut self,
        site: Site,
        x: &mut Vec<f32>,
        delta: Option<Vec<f32>>,
        w: &Tensor,
    ) -> Result<Vec<f32>> {
        let _p = scope("norm");
        let u = add_rms_norm_1p(x, delta.as_deref(), w.data(), self.cfg.rms_norm_eps);
        // After an MoE output the residual is the previous layer's output.
        let layer_out = delta.is_some() && !matches!(site, Site::Post(_));
        if self.opts.hidden_states && layer_out {
            self.hidden.push(x.clone());
        }
        Ok(u)
    }

    fn attention(&mut self, li: usize, w: &Attention, u: Vec<f32>) -> Result<Vec<f32>> {
        let (n, rope) = (self.n, self.rope);
        let mut segs = self.segments(li, |ls| match ls {
            LayerState::Attention(kv) => Some(kv),
            _ => None,
        });
        Ok(w.forward(&u, n, &mut segs, rope))
    }

    fn gdn(&mut self, li: usize, w: &GatedDeltaNet, u: Vec<f32>) -> Result<Vec<f32>> {
        let n = self.n;
        let mut segs = self.segments(li, |ls| match ls {
            LayerState::Gdn(g) => Some(g),
            _ => None,
        });
        Ok(w.forward(&u, n, &mut segs))
    }

    fn moe(&mut self, li: usize, w: &Moe, u: Vec<f32>) -> Result<Vec<f32>> {
        let k = self.cfg.num_experts_per_tok;
        // Sequences without forced routing keep the router's choice: marked with u32::MAX.
        let forced: Option<Vec<u32>> =
            self.batch
                .iter()
                .any(|s| s.forced_experts.is_some())
                .then(|| {
                    self.batch
                        .iter()
                        .flat_map(|s| match s.forced_experts {
                            Some(f) => f[li].clone(),
                            None => vec![u32::MAX; s.tokens.len() * k],
                        })
                        .collect()
                });
        let (y, rec) = w.forward(&u, self.n, forced.as_deref());
        if self.opts.routing {
            self.routing.push((rec.logits, rec.experts));
        }
        Ok(y)
    }

    fn head(&mut self, u: Vec<f32>, w: &Tensor) -> Result<Vec<f32>> {
        let _p = scope("head");
        let (h, v) = (self.cfg.hidden_size, self.cfg.vocab_size);
        let rows: Vec<usize> = match self.opts.logits {
            LogitsMode::All => (0..self.n).collect(),
            LogitsMode::Last => self
                .starts
                .iter()
                .zip(&self.lens)
                .map(|(s, l)| s + l - 1)
                .collect(),
            LogitsMode::None => vec![],
        };
        let y: Vec<f32> = rows
            .iter()
            .flat_map(|&r| u[r * h..(r + 1) * h].iter().copied())
            .collect();
        let mut logits = vec![0.0; rows.len() * v];
        linear(&y, rows.len(), h, w.weight(), v, &mut logits, true);
        Ok(logits)
    }
}
