//! `TrainModel`: the Qwen3.5-MoE decoder over a [`ParamStore`] with a training forward that
//! records a [`Tape`] (per layer: its input and, unless recomputation is on, every saved
//! activation) and the backward that walks the tape in reverse: head → final norm → per layer
//! [MoE → post norm → mixer (GDN | attention) → input norm] → embedding.

use super::error::{Result, TrainError};
use super::layers::attention::{AttentionSaved, AttentionW};
use super::layers::ffn::Ffn;
use super::layers::gdn::{GdnSaved, GdnW};
use super::layers::moe::{MoeSaved, MoeW};
use super::ops::{linear, linear_backward, rms_norm_1p_backward};
use super::params::{Grads, ParamStore, Pid};
use crate::model::checkpoint::Checkpoint;
use crate::model::config::{LayerType, ModelConfig};
use crate::model::rope::Rope;
use crate::tensor::cpu::rms_norm_1p;
use std::path::Path;

enum MixerW {
    Attention(AttentionW),
    Gdn(GdnW),
}

struct LayerW {
    input_norm: Pid,
    post_norm: Pid,
    mixer: MixerW,
    moe: MoeW,
}

pub struct TrainModel {
    pub cfg: ModelConfig,
    pub store: ParamStore,
    embed: Pid,
    layers: Vec<LayerW>,
    norm: Pid,
    /// The head; equals `embed` when the embedding is tied.
    head: Pid,
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
    forced: Option<Vec<u32>>,
}

/// Everything the backward needs from one training forward of one sequence.
pub struct Tape {
    ids: Vec<u32>,
    layers: Vec<LayerTape>,
    /// Residual stream after the last layer `[T, hidden]`.
    last: Vec<f32>,
    /// Final-normed hidden states `[T, hidden]`.
    normed: Vec<f32>,
    /// Logits `[T, vocab]`.
    pub logits: Vec<f32>,
    /// Chosen experts per layer `[T · top_k]` (the routing record of this forward).
    pub experts: Vec<Vec<u32>>,
}

impl TrainModel {
    /// Load a Hugging Face folder as f32 master parameters (fused experts are split per expert).
    pub fn load(dir: &Path) -> Result<Self> {
        let cfg = ModelConfig::from_dir(dir)?;
        let mut ck = Checkpoint::open(dir)?;
        let mut ps = ParamStore::default();
        let (v, h) = (cfg.vocab_size, cfg.hidden_size);
        let embed = ps.load(&mut ck, "embed_tokens.weight", &[v, h])?;
        let mut layers = Vec::new();
        for (i, lt) in cfg.layer_types.iter().enumerate() {
            let p = format!("layers.{i}.");
            let input_norm = ps.load(&mut ck, &format!("{p}input_layernorm.weight"), &[h])?;
            let mixer = match lt {
                LayerType::Full => {
                    MixerW::Attention(load_attention(&mut ck, &mut ps, &format!("{p}self_attn."), &cfg)?)
                }
                LayerType::Linear => MixerW::Gdn(load_gdn(&mut ck, &mut ps, &format!("{p}linear_attn."), &cfg)?),
            };
            let post_norm = ps.load(&mut ck, &format!("{p}post_attention_layernorm.weight"), &[h])?;
            let moe = load_moe(&mut ck, &mut ps, &format!("{p}mlp."), &cfg)?;
            layers.push(LayerW { input_norm, post_norm, mixer, moe });
        }
        let norm = ps.load(&mut ck, "norm.weight", &[h])?;
        let head = if cfg.tie_word_embeddings {
            embed
        } else {
            let t = ck.get_exact("lm_head.weight", &[v, h])?;
            ps.push("lm_head.weight".into(), &t)
        };
        let rope = Rope::new(cfg.rotary_dim, cfg.rope_theta);
        Ok(TrainModel { cfg, store: ps, embed, layers, norm, head, rope })
    }

    /// Training forward of one sequence (positions `0..T`, fresh state). `forced`: per layer
    /// `[T · top_k]` expert indices to replay instead of the router's top-k.
    pub fn forward(&self, ids: &[u32], forced: Option<&[Vec<u32>]>, opts: TapeOptions) -> Result<Tape> {
        let c = &self.cfg;
        let (h, v, n) = (c.hidden_size, c.vocab_size, ids.len());
        if n == 0 {
            return Err(TrainError::BadInput("empty sequence".into()));
        }
        if let Some(&t) = ids.iter().find(|&&t| t as usize >= v) {
            return Err(TrainError::BadInput(format!("token id {t} is outside the vocabulary (size {v})")));
        }
        if let Some(f) = forced {
            let want = n * c.num_experts_per_tok;
            if f.len() != self.layers.len()
                || f.iter().any(|l| l.len() != want || l.iter().any(|&e| e as usize >= c.num_experts))
            {
                return Err(TrainError::BadInput(format!(
                    "forced experts need {} layers of {want} indices < {}",
                    self.layers.len(),
                    c.num_experts
                )));
            }
        }
        let emb = self.store.get(self.embed);
        let mut x: Vec<f32> =
            ids.iter().flat_map(|&t| emb[t as usize * h..(t as usize + 1) * h].iter().copied()).collect();
        let mut layers = Vec::with_capacity(self.layers.len());
        let mut experts = Vec::with_capacity(self.layers.len());
        for (li, lw) in self.layers.iter().enumerate() {
            let fl = forced.map(|f| f[li].clone());
            let (out, saved) = self.layer_forward(lw, &x, fl.as_deref());
            experts.push(saved.moe.chosen.clone());
            let input = std::mem::replace(&mut x, out);
            layers.push(LayerTape { input, saved: (!opts.recompute).then_some(saved), forced: fl });
        }
        let mut normed = x.clone();
        rms_norm_1p(&mut normed, self.store.get(self.norm), c.rms_norm_eps);
        let logits = linear(&normed, n, h, self.store.get(self.head), v);
        Ok(Tape { ids: ids.to_vec(), layers, last: x, normed, logits, experts })
    }

    fn layer_forward(&self, lw: &LayerW, x: &[f32], forced: Option<&[u32]>) -> (Vec<f32>, LayerSaved) {
        let (c, ps) = (&self.cfg, &self.store);
        let n = x.len() / c.hidden_size;
        let mut u = x.to_vec();
        rms_norm_1p(&mut u, ps.get(lw.input_norm), c.rms_norm_eps);
        let (y, mixer) = match &lw.mixer {
            MixerW::Attention(a) => {
                let (y, s) = a.forward(ps, u, n, &self.rope);
                (y, MixerSaved::Attention(s))
            }
            MixerW::Gdn(g) => {
                let (y, s) = g.forward(ps, u, n);
                (y, MixerSaved::Gdn(s))
            }
        };
        let mid: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
        let mut u = mid.clone();
        rms_norm_1p(&mut u, ps.get(lw.post_norm), c.rms_norm_eps);
        let (y, moe) = lw.moe.forward(ps, u, n, forced);
        let out: Vec<f32> = mid.iter().zip(&y).map(|(a, b)| a + b).collect();
        (out, LayerSaved { mixer, mid, moe })
    }

    fn layer_backward(&self, lw: &LayerW, input: &[f32], s: &LayerSaved, dout: &[f32], gr: &mut Grads) -> Vec<f32> {
        let (c, ps) = (&self.cfg, &self.store);
        let du = lw.moe.backward(ps, &s.moe, dout, gr);
        let dn = rms_norm_1p_backward(&s.mid, ps.get(lw.post_norm), c.rms_norm_eps, &du, gr.get_mut(lw.post_norm));
        let dmid: Vec<f32> = dout.iter().zip(&dn).map(|(a, b)| a + b).collect();
        let du = match (&lw.mixer, &s.mixer) {
            (MixerW::Attention(a), MixerSaved::Attention(sv)) => a.backward(ps, &self.rope, sv, &dmid, gr),
            (MixerW::Gdn(g), MixerSaved::Gdn(sv)) => g.backward(ps, sv, &dmid, gr),
            _ => unreachable!("a layer's tape always matches its mixer"),
        };
        let dn = rms_norm_1p_backward(input, ps.get(lw.input_norm), c.rms_norm_eps, &du, gr.get_mut(lw.input_norm));
        dmid.iter().zip(&dn).map(|(a, b)| a + b).collect()
    }

    /// Backward from `dlogits [T, vocab]` (the loss gradient w.r.t. the logits), accumulating
    /// into `gr` (from [`ParamStore::zero_grads`] of this model's store).
    pub fn backward(&self, tape: &Tape, dlogits: &[f32], gr: &mut Grads) -> Result<()> {
        let c = &self.cfg;
        let (h, v, n) = (c.hidden_size, c.vocab_size, tape.ids.len());
        if dlogits.len() != n * v {
            return Err(TrainError::BadInput(format!("dlogits has {} values, expected {}", dlogits.len(), n * v)));
        }
        let ps = &self.store;
        let dnormed = linear_backward(dlogits, &tape.normed, n, h, ps.get(self.head), v, gr.get_mut(self.head));
        let mut dx =
            rms_norm_1p_backward(&tape.last, ps.get(self.norm), c.rms_norm_eps, &dnormed, gr.get_mut(self.norm));
        for (lw, lt) in self.layers.iter().zip(&tape.layers).rev() {
            dx = match &lt.saved {
                Some(s) => self.layer_backward(lw, &lt.input, s, &dx, gr),
                None => {
                    let (_, s) = self.layer_forward(lw, &lt.input, lt.forced.as_deref());
                    self.layer_backward(lw, &lt.input, &s, &dx, gr)
                }
            };
        }
        let de = gr.get_mut(self.embed);
        for (t, &id) in tape.ids.iter().enumerate() {
            for i in 0..h {
                de[id as usize * h + i] += dx[t * h + i];
            }
        }
        Ok(())
    }
}

fn load_attention(ck: &mut Checkpoint, ps: &mut ParamStore, p: &str, c: &ModelConfig) -> Result<AttentionW> {
    let (h, hq, hkv, hd) = (c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim);
    Ok(AttentionW {
        q_proj: ps.load(ck, &format!("{p}q_proj.weight"), &[hq * hd * 2, h])?,
        k_proj: ps.load(ck, &format!("{p}k_proj.weight"), &[hkv * hd, h])?,
        v_proj: ps.load(ck, &format!("{p}v_proj.weight"), &[hkv * hd, h])?,
        o_proj: ps.load(ck, &format!("{p}o_proj.weight"), &[h, hq * hd])?,
        q_norm: ps.load(ck, &format!("{p}q_norm.weight"), &[hd])?,
        k_norm: ps.load(ck, &format!("{p}k_norm.weight"), &[hd])?,
        hidden: h,
        heads: hq,
        kv_heads: hkv,
        head_dim: hd,
        eps: c.rms_norm_eps,
    })
}

fn load_gdn(ck: &mut Checkpoint, ps: &mut ParamStore, p: &str, c: &ModelConfig) -> Result<GdnW> {
    let h = c.hidden_size;
    let (cd, vd, hv, k) = (c.gdn_conv_dim(), c.gdn_value_dim(), c.linear_num_value_heads, c.linear_conv_kernel_dim);
    Ok(GdnW {
        in_proj_qkv: ps.load(ck, &format!("{p}in_proj_qkv.weight"), &[cd, h])?,
        in_proj_z: ps.load(ck, &format!("{p}in_proj_z.weight"), &[vd, h])?,
        in_proj_b: ps.load(ck, &format!("{p}in_proj_b.weight"), &[hv, h])?,
        in_proj_a: ps.load(ck, &format!("{p}in_proj_a.weight"), &[hv, h])?,
        conv: ps.load(ck, &format!("{p}conv1d.weight"), &[cd, 1, k])?,
        dt_bias: ps.load(ck, &format!("{p}dt_bias"), &[hv])?,
        a_log: ps.load(ck, &format!("{p}A_log"), &[hv])?,
        norm: ps.load(ck, &format!("{p}norm.weight"), &[c.linear_value_head_dim])?,
        out_proj: ps.load(ck, &format!("{p}out_proj.weight"), &[h, vd])?,
        hidden: h,
        kh: c.linear_num_key_heads,
        vh: hv,
        dk: c.linear_key_head_dim,
        dv: c.linear_value_head_dim,
        kernel: k,
        eps: c.rms_norm_eps,
    })
}

fn load_moe(ck: &mut Checkpoint, ps: &mut ParamStore, p: &str, c: &ModelConfig) -> Result<MoeW> {
    let (h, e, i, is) = (c.hidden_size, c.num_experts, c.moe_intermediate_size, c.shared_expert_intermediate_size);
    let fused = format!("{p}experts.gate_up_proj");
    let experts = if ck.contains(&fused) {
        // Fused `[E, 2I, H]` / `[E, H, I]` tensors become per-expert parameters under the
        // per-expert names (the layout transformers saves and loads).
        let gu = ck.get(&fused, &[e, 2 * i, h])?;
        let down = ck.get(&format!("{p}experts.down_proj"), &[e, h, i])?;
        (0..e)
            .map(|x| {
                let name = |w: &str| ck.full_name(&format!("{p}experts.{x}.{w}.weight"));
                let g = gu.index0(x);
                Ffn {
                    gate: ps.push(name("gate_proj"), &g.narrow0(0, i)),
                    up: ps.push(name("up_proj"), &g.narrow0(i, i)),
                    down: ps.push(name("down_proj"), &down.index0(x)),
                    hidden: h,
                    inter: i,
                }
            })
            .collect()
    } else {
        (0..e)
            .map(|x| {
                let q = format!("{p}experts.{x}.");
                Ok(Ffn {
                    gate: ps.load(ck, &format!("{q}gate_proj.weight"), &[i, h])?,
                    up: ps.load(ck, &format!("{q}up_proj.weight"), &[i, h])?,
                    down: ps.load(ck, &format!("{q}down_proj.weight"), &[h, i])?,
                    hidden: h,
                    inter: i,
                })
            })
            .collect::<Result<Vec<_>>>()?
    };
    Ok(MoeW {
        router: ps.load(ck, &format!("{p}gate.weight"), &[e, h])?,
        experts,
        shared: Ffn {
            gate: ps.load(ck, &format!("{p}shared_expert.gate_proj.weight"), &[is, h])?,
            up: ps.load(ck, &format!("{p}shared_expert.up_proj.weight"), &[is, h])?,
            down: ps.load(ck, &format!("{p}shared_expert.down_proj.weight"), &[h, is])?,
            hidden: h,
            inter: is,
        },
        shared_gate: ps.load(ck, &format!("{p}shared_expert_gate.weight"), &[1, h])?,
        top_k: c.num_experts_per_tok,
        hidden: h,
    })
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
