//! `TrainModel`: the Qwen3.5-MoE decoder over a [`ParamStore`]. Its training forward is the one
//! layer sequence of [`crate::model::forward`] run by a [`Recorder`] backend whose ops push the
//! activations each backward needs onto a [`Tape`] (per layer: its input and, unless
//! recomputation is on, every saved activation); the backward is the one reverse sequence of
//! [`crate::model::backward`] run by [`Backprop`], which implements each op's backward on the
//! CPU (`train::layers`) and recomputes a layer through the same forward when only its input was
//! kept.

use super::error::{Result, TrainError};
use super::layers::attention::{AttentionSaved, AttentionW};
use super::layers::ffn::Ffn;
use super::layers::gdn::{GdnSaved, GdnW};
use super::layers::moe::{MoeSaved, MoeW};
use super::grad_sink::GradSink;
use super::ops::{linear, rms_norm_1p_backward};
use super::params::{Grads, ParamStore, Pid};
use crate::model::backend::{Backend, Layer, Site, Stack, StackLoader, WeightTypes};
use crate::model::backend::schema::{AttentionParams, FfnParams, GdnParams, MoeParams, Param};
use crate::model::backward::{backward, BackwardOps};
use crate::model::checkpoint::Checkpoint;
use crate::model::config::ModelConfig;
use crate::model::forward::{forward, layer_forward};
use crate::model::rope::Rope;
use crate::tensor::cpu::add_rms_norm_1p;
use std::path::Path;

/// Parameters of the training model: handles into its [`ParamStore`].
pub struct TrainWeights;

impl WeightTypes for TrainWeights {
    type Embed = Pid;
    type Norm = Pid;
    type Attention = AttentionW;
    type Gdn = GdnW;
    type Moe = MoeW;
    type Head = Pid;
}

pub struct TrainModel {
    pub cfg: ModelConfig,
    pub store: ParamStore,
    stack: Stack<TrainWeights>,
    rope: Rope,
}

#[derive(Clone, Copy, Debug, Default)]
pub struct TapeOptions {
    /// Keep only each layer's input and recompute its activations during the backward.
    pub recompute: bool,
}

enum MixerSaved {
    Attention(AttentionSaved),
    Gdn(GdnSaved),
}

struct LayerSaved {
    mixer: MixerSaved,
    /// Residual stream after the mixer.
    mid: Vec<f32>,
    moe: MoeSaved,
}

struct LayerTape {
    input: Vec<f32>,
    saved: Option<LayerSaved>,
}

/// Everything the backward needs from one training forward of one sequence.
pub struct Tape {
    ids: Vec<u32>,
    layers: Vec<LayerTape>,
    /// The replayed routing of the forward (per layer), replayed again by recomputation.
    forced: Option<Vec<Vec<u32>>>,
    /// Residual stream after the last layer `[T, hidden]`.
    last: Vec<f32>,
    /// Final-normed hidden states `[T, hidden]`.
    normed: Vec<f32>,
    /// Logits `[T, vocab]`.
    pub logits: Vec<f32>,
    /// Chosen experts per layer `[T · top_k]` (the routing record of this forward).
    pub experts: Vec<Vec<u32>>,
}

/// Builds [`TrainWeights`] as f32 master parameters (fused experts are split per expert).
struct ParamLoader<'a> {
    ck: &'a mut Checkpoint,
    ps: &'a mut ParamStore,
}

impl StackLoader<TrainWeights> for ParamLoader<'_> {
    type Error = TrainError;
    fn embed(&mut self, name: &str, shape: [usize; 2]) -> Result<Pid> {
        self.ps.load(self.ck, name, &shape)
    }
    fn norm(&mut self, name: &str, len: usize) -> Result<Pid> {
        self.ps.load(self.ck, name, &[len])
    }
    fn attention(&mut self, prefix: &str, c: &ModelConfig) -> Result<AttentionW> {
        self.load_attention(prefix, c)
    }
    fn gdn(&mut self, prefix: &str, c: &ModelConfig) -> Result<GdnW> {
        self.load_gdn(prefix, c)
    }
    fn moe(&mut self, prefix: &str, c: &ModelConfig) -> Result<MoeW> {
        self.load_moe(prefix, c)
    }
    fn head(&mut self, name: &str, shape: [usize; 2]) -> Result<Pid> {
        let t = self.ck.get_exact(name, &shape)?;
        Ok(self.ps.push(name.into(), &t))
    }
    fn tied_head(&mut self, embed: &Pid) -> Result<Pid> {
        Ok(*embed)
    }
}

impl TrainModel {
    /// Load a Hugging Face folder as f32 master parameters (fused experts are split per expert).
    pub fn load(dir: &Path) -> Result<Self> {
        // Forward and backward free and reallocate their buffers every layer: keep them.
        crate::tensor::host_heap::retain_freed_memory();
        let cfg = ModelConfig::from_dir(dir)?;
        let mut ck = Checkpoint::open(dir)?;
        let mut store = ParamStore::default();
        let stack = Stack::load(&cfg, &mut ParamLoader { ck: &mut ck, ps: &mut store })?;
        let rope = Rope::new(cfg.rotary_dim, cfg.rope_theta);
        Ok(TrainModel { cfg, store, stack, rope })
    }

    /// Training forward of one sequence (positions `0..T`, fresh state). `forced`: per layer
    /// `[T · top_k]` expert indices to replay instead of the router's top-k.
    pub fn forward(&self, ids: &[u32], forced: Option<&[Vec<u32>]>, opts: TapeOptions) -> Result<Tape> {
        check_sequence(&self.cfg, ids, forced)?;
        let mut rec = Recorder::new(self, ids, forced, !opts.recompute);
        let logits = forward(&mut rec, &self.stack)?;
        Ok(Tape {
            ids: ids.to_vec(),
            layers: rec.layers,
            forced: forced.map(|f| f.to_vec()),
            last: rec.last,
            normed: rec.normed,
            logits,
            experts: rec.experts,
        })
    }

    /// Backward from `dlogits [T, vocab]` (the loss gradient w.r.t. the logits), accumulating
    /// into `gr`: dense [`Grads`] from [`ParamStore::zero_grads`] of this model's store, or a
    /// LoRA `AdapterGrads` (adapter gradients only).
    pub fn backward(&self, tape: &Tape, dlogits: &[f32], gr: &mut dyn GradSink) -> Result<()> {
        let want = tape.ids.len() * self.cfg.vocab_size;
        if dlogits.len() != want {
            return Err(TrainError::BadInput(format!("dlogits has {} values, expected {want}", dlogits.len())));
        }
        let mut bp = Backprop { m: self, tape, dlogits, gr, recomputed: None };
        backward(&mut bp, &self.stack)
    }
}

/// Checks one training sequence of `c`'s model: non-empty, ids inside the vocabulary, and the
/// forced routing (when given) `[layers][T · top_k]` expert indices in range. Every training
/// backend's forward starts here.
pub(crate) fn check_sequence(c: &ModelConfig, ids: &[u32], forced: Option<&[Vec<u32>]>) -> Result<()> {
    let (v, n) = (c.vocab_size, ids.len());
    if n == 0 {
        return Err(TrainError::BadInput("empty sequence".into()));
    }
    if let Some(&t) = ids.iter().find(|&&t| t as usize >= v) {
        return Err(TrainError::BadInput(format!("token id {t} is outside the vocabulary (size {v})")));
    }
    let layers = c.num_hidden_layers;
    if let Some(f) = forced {
        let want = n * c.num_experts_per_tok;
        if f.len() != layers || f.iter().any(|l| l.len() != want || l.iter().any(|&e| e as usize >= c.num_experts)) {
            return Err(TrainError::BadInput(format!(
                "forced experts need {layers} layers of {want} indices < {}",
                c.num_experts
            )));
        }
    }
    Ok(())
}

/// The training forward's backend: the CPU training ops, each pushing what its backward needs.
struct Recorder<'a> {
    m: &'a TrainModel,
    ids: &'a [u32],
    forced: Option<&'a [Vec<u32>]>,
    /// Keep every saved activation (else only each layer's input: recomputation).
    keep: bool,
    layers: Vec<LayerTape>,
    mixer: Option<MixerSaved>,
    mid: Option<Vec<f32>>,
    experts: Vec<Vec<u32>>,
    last: Vec<f32>,
    normed: Vec<f32>,
}

impl<'a> Recorder<'a> {
    fn new(m: &'a TrainModel, ids: &'a [u32], forced: Option<&'a [Vec<u32>]>, keep: bool) -> Self {
        Recorder {
            m,
            ids,
            forced,
            keep,
            layers: Vec::with_capacity(m.stack.layers.len()),
            mixer: None,
            mid: None,
            experts: Vec::with_capacity(m.stack.layers.len()),
            last: vec![],
            normed: vec![],
        }
    }
}

impl Backend for Recorder<'_> {
    type W = TrainWeights;
    type Hidden = Vec<f32>;
    type Normed = Vec<f32>;
    type Delta = Vec<f32>;
    /// Logits `[T, vocab]`.
    type Out = Vec<f32>;
    type Error = TrainError;

    fn embed(&mut self, w: &Pid) -> Result<Vec<f32>> {
        let (emb, h) = (self.m.store.get(*w), self.m.cfg.hidden_size);
        Ok(self.ids.iter().flat_map(|&t| emb[t as usize * h..(t as usize + 1) * h].iter().copied()).collect())
    }

    fn add_norm(&mut self, site: Site, x: &mut Vec<f32>, delta: Option<Vec<f32>>, w: &Pid) -> Result<Vec<f32>> {
        let u = add_rms_norm_1p(x, delta.as_deref(), self.m.store.get(*w), self.m.cfg.rms_norm_eps);
        match site {
            Site::Input(_) => self.layers.push(LayerTape { input: x.clone(), saved: None }),
            Site::Post(_) => self.mid = Some(x.clone()),
            Site::Final => self.last = x.clone(),
        }
        if site == Site::Final {
            self.normed = u.clone();
        }
        Ok(u)
    }

    fn attention(&mut self, _: usize, w: &AttentionW, u: Vec<f32>) -> Result<Vec<f32>> {
        let (y, s) = w.forward(&self.m.store, u, self.ids.len(), &self.m.rope);
        self.mixer = Some(MixerSaved::Attention(s));
        Ok(y)
    }

    fn gdn(&mut self, _: usize, w: &GdnW, u: Vec<f32>) -> Result<Vec<f32>> {
        let (y, s) = w.forward(&self.m.store, u, self.ids.len());
        self.mixer = Some(MixerSaved::Gdn(s));
        Ok(y)
    }

    fn moe(&mut self, li: usize, w: &MoeW, u: Vec<f32>) -> Result<Vec<f32>> {
        let forced = self.forced.map(|f| f[li].as_slice());
        let (y, moe) = w.forward(&self.m.store, u, self.ids.len(), forced);
        self.experts.push(moe.chosen.clone());
        let (mixer, mid) = (self.mixer.take(), self.mid.take());
        if let (true, Some(mixer), Some(mid), Some(lt)) = (self.keep, mixer, mid, self.layers.last_mut()) {
            lt.saved = Some(LayerSaved { mixer, mid, moe });
        }
        Ok(y)
    }

    fn head(&mut self, u: Vec<f32>, w: &Pid) -> Result<Vec<f32>> {
        let c = &self.m.cfg;
        Ok(linear(&u, self.ids.len(), c.hidden_size, self.m.store.get(*w), c.vocab_size))
    }
}

/// The backward's backend: each op's CPU backward from the tape (or from a layer recomputed
/// through the one forward when the tape kept only its input).
struct Backprop<'a> {
    m: &'a TrainModel,
    tape: &'a Tape,
    dlogits: &'a [f32],
    gr: &'a mut dyn GradSink,
    recomputed: Option<LayerSaved>,
}

/// Layer `li`'s saved activations: the recomputed ones, else the tape's.
fn saved<'s>(recomputed: &'s Option<LayerSaved>, tape: &'s Tape, li: usize) -> &'s LayerSaved {
    recomputed
        .as_ref()
        .or(tape.layers[li].saved.as_ref())
        .expect("prepare_layer recomputes a layer the tape did not keep")
}

impl BackwardOps for Backprop<'_> {
    type W = TrainWeights;
    type Grad = Vec<f32>;
    type Error = TrainError;

    fn head_backward(&mut self, w: &Pid) -> Result<Vec<f32>> {
        let (c, t) = (&self.m.cfg, self.tape);
        let n = t.ids.len();
        Ok(self.gr.linear(*w, self.dlogits, &t.normed, n, c.hidden_size, self.m.store.get(*w), c.vocab_size))
    }

    fn norm_backward(&mut self, site: Site, w: &Pid, dy: &Vec<f32>) -> Result<Vec<f32>> {
        let x = match site {
            Site::Final => &self.tape.last,
            Site::Post(li) => &saved(&self.recomputed, self.tape, li).mid,
            Site::Input(li) => &self.tape.layers[li].input,
        };
        let eps = self.m.cfg.rms_norm_eps;
        Ok(rms_norm_1p_backward(x, self.m.store.get(*w), eps, dy, self.gr.vector(*w)))
    }

    fn attention_backward(&mut self, li: usize, w: &AttentionW, dy: &Vec<f32>) -> Result<Vec<f32>> {
        match &saved(&self.recomputed, self.tape, li).mixer {
            MixerSaved::Attention(s) => Ok(w.backward(&self.m.store, &self.m.rope, s, dy, self.gr)),
            MixerSaved::Gdn(_) => unreachable!("a layer's tape always matches its mixer"),
        }
    }

    fn gdn_backward(&mut self, li: usize, w: &GdnW, dy: &Vec<f32>) -> Result<Vec<f32>> {
        match &saved(&self.recomputed, self.tape, li).mixer {
            MixerSaved::Gdn(s) => Ok(w.backward(&self.m.store, s, dy, self.gr)),
            MixerSaved::Attention(_) => unreachable!("a layer's tape always matches its mixer"),
        }
    }

    fn moe_backward(&mut self, li: usize, w: &MoeW, dy: &Vec<f32>) -> Result<Vec<f32>> {
        let s = saved(&self.recomputed, self.tape, li);
        Ok(w.backward(&self.m.store, &s.moe, dy, self.gr))
    }

    fn accumulate(&mut self, acc: &mut Vec<f32>, g: Vec<f32>) -> Result<()> {
        acc.iter_mut().zip(&g).for_each(|(a, b)| *a += b);
        Ok(())
    }

    fn embed_backward(&mut self, w: &Pid, dx: Vec<f32>) -> Result<()> {
        let h = self.m.cfg.hidden_size;
        let Some(de) = self.gr.table(*w) else { return Ok(()) };
        for (row, &id) in dx.chunks_exact(h).zip(&self.tape.ids) {
            for (d, g) in de[id as usize * h..(id as usize + 1) * h].iter_mut().zip(row) {
                *d += g;
            }
        }
        Ok(())
    }

    fn prepare_layer(&mut self, li: usize, w: &Layer<TrainWeights>) -> Result<()> {
        self.recomputed = None;
        let t = self.tape;
        if t.layers[li].saved.is_none() {
            let mut rec = Recorder::new(self.m, &t.ids, t.forced.as_deref(), true);
            let mut x = t.layers[li].input.clone();
            layer_forward(&mut rec, li, w, &mut x, None)?;
            self.recomputed = rec.layers.pop().and_then(|lt| lt.saved);
        }
        Ok(())
    }
}

impl ParamLoader<'_> {
    /// The f32 master parameter of a schema tensor.
    fn param(&mut self, n: &Param) -> Result<Pid> {
        self.ps.load(self.ck, &n.name, &n.shape)
    }

    fn ffn(&mut self, n: &FfnParams, hidden: usize) -> Result<Ffn> {
        let (gate, up, down) = (self.param(&n.gate)?, self.param(&n.up)?, self.param(&n.down)?);
        Ok(Ffn { gate, up, down, hidden, inter: n.gate.shape[0] })
    }

    fn load_attention(&mut self, p: &str, c: &ModelConfig) -> Result<AttentionW> {
        let n = AttentionParams::new(p, c);
        Ok(AttentionW {
            q_proj: self.param(&n.q_proj)?,
            k_proj: self.param(&n.k_proj)?,
            v_proj: self.param(&n.v_proj)?,
            o_proj: self.param(&n.o_proj)?,
            q_norm: self.param(&n.q_norm)?,
            k_norm: self.param(&n.k_norm)?,
            hidden: c.hidden_size,
            heads: c.num_attention_heads,
            kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim,
            eps: c.rms_norm_eps,
        })
    }

    fn load_gdn(&mut self, p: &str, c: &ModelConfig) -> Result<GdnW> {
        let n = GdnParams::new(p, c);
        Ok(GdnW {
            in_proj_qkv: self.param(&n.in_proj_qkv)?,
            in_proj_z: self.param(&n.in_proj_z)?,
            in_proj_b: self.param(&n.in_proj_b)?,
            in_proj_a: self.param(&n.in_proj_a)?,
            conv: self.param(&n.conv1d)?,
            dt_bias: self.param(&n.dt_bias)?,
            a_log: self.param(&n.a_log)?,
            norm: self.param(&n.norm)?,
            out_proj: self.param(&n.out_proj)?,
            hidden: c.hidden_size,
            kh: c.linear_num_key_heads,
            vh: c.linear_num_value_heads,
            dk: c.linear_key_head_dim,
            dv: c.linear_value_head_dim,
            kernel: c.linear_conv_kernel_dim,
            eps: c.rms_norm_eps,
        })
    }

    fn load_moe(&mut self, p: &str, c: &ModelConfig) -> Result<MoeW> {
        let (h, e, i) = (c.hidden_size, c.num_experts, c.moe_intermediate_size);
        let n = MoeParams::new(p, c);
        let experts = if self.ck.contains(&n.fused_gate_up.name) {
            // Fused `[E, 2I, H]` / `[E, H, I]` tensors become per-expert parameters under the
            // per-expert names (the layout transformers saves and loads).
            let gu = self.ck.get(&n.fused_gate_up.name, &n.fused_gate_up.shape)?;
            let down = self.ck.get(&n.fused_down.name, &n.fused_down.shape)?;
            (0..e)
                .map(|x| {
                    let names = n.expert(x);
                    let name = |w: &Param| self.ck.full_name(&w.name);
                    let (gn, un, dn) = (name(&names.gate), name(&names.up), name(&names.down));
                    let g = gu.index0(x);
                    Ffn {
                        gate: self.ps.push(gn, &g.narrow0(0, i)),
                        up: self.ps.push(un, &g.narrow0(i, i)),
                        down: self.ps.push(dn, &down.index0(x)),
                        hidden: h,
                        inter: i,
                    }
                })
                .collect()
        } else {
            (0..e).map(|x| self.ffn(&n.expert(x), h)).collect::<Result<Vec<_>>>()?
        };
        Ok(MoeW {
            router: self.param(&n.router)?,
            experts,
            shared: self.ffn(&n.shared, h)?,
            shared_gate: self.param(&n.shared_gate)?,
            top_k: c.num_experts_per_tok,
            hidden: h,
        })
    }
}

impl TrainModel {
    /// Mean next-token NLL of `ids` and the gradient of every parameter (what `execcritic grads`
    /// prints and writes).
    pub fn nll_gradients(&self, ids: &[u32], opts: TapeOptions) -> Result<(f64, Grads)> {
        let tape = self.forward(ids, None, opts)?;
        let out = super::loss::mean_nll(&tape.logits, self.cfg.vocab_size, ids)?;
        let mut gr = self.store.zero_grads();
        self.backward(&tape, &out.dlogits, &mut gr)?;
        Ok((out.loss, gr))
    }
}
