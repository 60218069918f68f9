//! The Qwen3.5-MoE forward on one GPU, layer by layer as the CPU model (`model::qwen35`):
//! embedding → [add + RMSNorm1p → GDN | gated attention → add + RMSNorm1p → MoE] × L → final
//! norm → head, over a packed batch of sequences that each own a cache slot (KV, conv and
//! recurrent pools allocated up front for `slots` sequences of up to `max_len` tokens).
//! Weights are bf16 on device: uploaded from a checkpoint ([`CudaModel::load`]) or generated on
//! the GPU with the exact shapes of a config ([`CudaModel::random`], for benchmarks).

use super::gemm::linear;
use super::gpu::{Act, DeviceBuffer, Gpu};
use super::ops::{self, DecodeScratch, DeltaBufs, GdnPool, KvIndex, KvPool, MoeGroups};
use crate::model::checkpoint::Checkpoint;
use crate::model::source::WeightSource;
use crate::model::config::{LayerType, ModelConfig};
use crate::tensor::device::{DeviceError as CudaError, Result};
use std::path::Path;

type F32 = DeviceBuffer<f32>;
type I32 = DeviceBuffer<i32>;

struct AttnW<A: Act> {
    q: DeviceBuffer<A>,
    k: DeviceBuffer<A>,
    v: DeviceBuffer<A>,
    o: DeviceBuffer<A>,
    q_norm: DeviceBuffer<A>,
    k_norm: DeviceBuffer<A>,
}

struct GdnW<A: Act> {
    qkv: DeviceBuffer<A>,
    z: DeviceBuffer<A>,
    b: DeviceBuffer<A>,
    a: DeviceBuffer<A>,
    conv: DeviceBuffer<A>,
    dt_bias: F32,
    a_log: F32,
    norm: DeviceBuffer<A>,
    out: DeviceBuffer<A>,
}

struct MoeW<A: Act> {
    router: DeviceBuffer<A>,
    /// `[E, 2I, H]`: rows 0..I gate, I..2I up (the fused checkpoint layout).
    gate_up: DeviceBuffer<A>,
    /// `[E, H, I]`
    down: DeviceBuffer<A>,
    s_gate: DeviceBuffer<A>,
    s_up: DeviceBuffer<A>,
    s_down: DeviceBuffer<A>,
    s_gate_w: DeviceBuffer<A>,
}

enum MixerW<A: Act> {
    Attn(AttnW<A>),
    Gdn(GdnW<A>),
}

struct LayerW<A: Act> {
    in_norm: DeviceBuffer<A>,
    post_norm: DeviceBuffer<A>,
    mixer: MixerW<A>,
    moe: MoeW<A>,
}

/// Where weights come from: a checkpoint (f32 on the host, converted to bf16) or a seeded
/// device-side random fill.
enum Source<'a> {
    Ckpt(&'a mut dyn WeightSource),
    Random { seed: u64, next: u64 },
}

impl Source<'_> {
    fn act<A: Act>(&mut self, gpu: &Gpu, name: &str, shape: &[usize]) -> Result<DeviceBuffer<A>> {
        match self {
            Source::Ckpt(ck) => {
                let t = ck.get_weight(name, shape).map_err(|e| CudaError::Shape {
                    op: "load",
                    msg: e.to_string(),
                })?;
                gpu.upload(&A::from_weight(t.weight()))
            }
            Source::Random { seed, next } => {
                let n: usize = shape.iter().product();
                let mut x = gpu.zeros::<A>(n)?;
                // uniform(±1/sqrt(fan_in)) keeps activations O(1); norm weights small around 0
                let fan_in = *shape.last().unwrap_or(&1) as f32;
                let s = if shape.len() == 1 {
                    0.1
                } else {
                    1.0 / fan_in.sqrt()
                };
                *next += 1;
                ops::fill_uniform(gpu, &mut x, *seed ^ next.wrapping_mul(0x9e37_79b9), -s, s)?;
                Ok(x)
            }
        }
    }
    fn f32s(&mut self, gpu: &Gpu, name: &str, n: usize, random_value: f32) -> Result<F32> {
        match self {
            Source::Ckpt(ck) => {
                let t = ck.get(name, &[n]).map_err(|e| CudaError::Shape {
                    op: "load",
                    msg: e.to_string(),
                })?;
                gpu.upload(t.data())
            }
            Source::Random { .. } => {
                let mut x = gpu.zeros::<f32>(n)?;
                ops::fill_f32(gpu, &mut x, random_value)?;
                Ok(x)
            }
        }
    }
}

/// The shapes the kernels support (docs/cuda.md, "Supported shapes"); anything else is refused
/// at load with the limit it breaks, never run to a wrong result.
pub fn check_supported(c: &ModelConfig) -> Result<()> {
    let mut bad = vec![];
    let mut need = |ok: bool, what: String| {
        if !ok {
            bad.push(what)
        }
    };
    let (hq, hkv, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
    need(
        hd <= 256,
        format!("head_dim {hd} > 256 (attention kernels)"),
    );
    need(
        hkv > 0 && hq % hkv == 0 && hq / hkv <= 16,
        format!("{hq} query heads over {hkv} KV heads (a multiple, at most 16 per KV head)"),
    );
    need(
        c.rotary_dim % 2 == 0 && c.rotary_dim <= hd && c.rotary_dim <= 2048,
        format!("rotary dim {} (even, <= head_dim)", c.rotary_dim),
    );
    let (hk, hv, dk, dv) = (
        c.linear_num_key_heads,
        c.linear_num_value_heads,
        c.linear_key_head_dim,
        c.linear_value_head_dim,
    );
    need(
        hk > 0 && hv % hk == 0,
        format!("{hv} GDN value heads over {hk} key heads (a multiple)"),
    );
    need(
        dv <= 1024,
        format!("GDN value head dim {dv} > 1024 (gdn_recurrent block)"),
    );
    need(
        dk <= 4096,
        format!("GDN key head dim {dk} > 4096 (gdn_recurrent shared memory)"),
    );
    need(
        (2..=8).contains(&c.linear_conv_kernel_dim),
        format!("conv kernel {} (2..=8)", c.linear_conv_kernel_dim),
    );
    let (e, k) = (c.num_experts, c.num_experts_per_tok);
    need(
        e <= 1024 && k <= 32 && k >= 1 && k <= e,
        format!("{e} experts, top-{k} (at most 1024 experts, top-k 1..=32)"),
    );
    if bad.is_empty() {
        Ok(())
    } else {
        Err(CudaError::Unsupported(format!(
            "model shape not supported by the CUDA kernels: {}",
            bad.join("; ")
        )))
    }
}

/// Model weights on one GPU.
pub struct CudaModel<A: Act = u16> {
    pub cfg: ModelConfig,
    embed: DeviceBuffer<A>,
    layers: Vec<LayerW<A>>,
    norm: DeviceBuffer<A>,
    lm_head: DeviceBuffer<A>,
}

impl<A: Act> CudaModel<A> {
    /// Upload a Hugging Face folder's weights (fused or per-expert MoE layouts).
    pub fn load(gpu: &Gpu, dir: &Path) -> Result<CudaModel<A>> {
        let err = |e: crate::model::ModelError| CudaError::Shape {
            op: "load",
            msg: e.to_string(),
        };
        let cfg = ModelConfig::from_dir(dir).map_err(err)?;
        let mut ck = Checkpoint::open(dir).map_err(err)?;
        Self::build(gpu, cfg, Source::Ckpt(&mut ck))
    }

    /// Upload weights from any source (e.g. the trainer's parameters, lent for the upload).
    pub fn from_source(gpu: &Gpu, cfg: ModelConfig, src: &mut dyn WeightSource) -> Result<CudaModel<A>> {
        Self::build(gpu, cfg, Source::Ckpt(src))
    }

    /// Random bf16 weights of `cfg`'s exact shapes, generated on the GPU.
    pub fn random(gpu: &Gpu, cfg: ModelConfig, seed: u64) -> Result<CudaModel<A>> {
        Self::build(gpu, cfg, Source::Random { seed, next: 0 })
    }

    fn build(gpu: &Gpu, cfg: ModelConfig, mut src: Source<'_>) -> Result<CudaModel<A>> {
        check_supported(&cfg)?;
        let c = &cfg;
        let (v, h) = (c.vocab_size, c.hidden_size);
        let embed = src.act(gpu, "embed_tokens.weight", &[v, h])?;
        let mut layers = vec![];
        for (li, lt) in c.layer_types.iter().enumerate() {
            let p = format!("layers.{li}.");
            let mixer = match lt {
                LayerType::Full => {
                    let (hq, hkv, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
                    let a = format!("{p}self_attn.");
                    MixerW::Attn(AttnW {
                        q: src.act(gpu, &format!("{a}q_proj.weight"), &[2 * hq * hd, h])?,
                        k: src.act(gpu, &format!("{a}k_proj.weight"), &[hkv * hd, h])?,
                        v: src.act(gpu, &format!("{a}v_proj.weight"), &[hkv * hd, h])?,
                        o: src.act(gpu, &format!("{a}o_proj.weight"), &[h, hq * hd])?,
                        q_norm: src.act(gpu, &format!("{a}q_norm.weight"), &[hd])?,
                        k_norm: src.act(gpu, &format!("{a}k_norm.weight"), &[hd])?,
                    })
                }
                LayerType::Linear => {
                    let g = format!("{p}linear_attn.");
                    let (cd, vd, hv, k) = (
                        c.gdn_conv_dim(),
                        c.gdn_value_dim(),
                        c.linear_num_value_heads,
                        c.linear_conv_kernel_dim,
                    );
                    MixerW::Gdn(GdnW {
                        qkv: src.act(gpu, &format!("{g}in_proj_qkv.weight"), &[cd, h])?,
                        z: src.act(gpu, &format!("{g}in_proj_z.weight"), &[vd, h])?,
                        b: src.act(gpu, &format!("{g}in_proj_b.weight"), &[hv, h])?,
                        a: src.act(gpu, &format!("{g}in_proj_a.weight"), &[hv, h])?,
                        conv: src.act(gpu, &format!("{g}conv1d.weight"), &[cd, 1, k])?,
                        dt_bias: src.f32s(gpu, &format!("{g}dt_bias"), hv, 1.0)?,
                        a_log: src.f32s(gpu, &format!("{g}A_log"), hv, 0.0)?,
                        norm: src.act(
                            gpu,
                            &format!("{g}norm.weight"),
                            &[c.linear_value_head_dim],
                        )?,
                        out: src.act(gpu, &format!("{g}out_proj.weight"), &[h, vd])?,
                    })
                }
            };
            layers.push(LayerW {
                in_norm: src.act(gpu, &format!("{p}input_layernorm.weight"), &[h])?,
                post_norm: src.act(gpu, &format!("{p}post_attention_layernorm.weight"), &[h])?,
                mixer,
                moe: Self::load_moe(gpu, c, &mut src, &format!("{p}mlp."))?,
            });
        }
        let norm = src.act(gpu, "norm.weight", &[h])?;
        let lm_head = match (&mut src, c.tie_word_embeddings) {
            (_, true) => gpu.duplicate(&embed)?,
            (Source::Ckpt(ck), false) => {
                let t = ck
                    .get_weight_exact("lm_head.weight", &[v, h])
                    .map_err(|e| CudaError::Shape {
                        op: "load",
                        msg: e.to_string(),
                    })?;
                gpu.upload(&A::from_weight(t.weight()))?
            }
            (s, false) => s.act(gpu, "lm_head.weight", &[v, h])?,
        };
        Ok(CudaModel {
            cfg,
            embed,
            layers,
            norm,
            lm_head,
        })
    }

    fn load_moe(gpu: &Gpu, c: &ModelConfig, src: &mut Source<'_>, p: &str) -> Result<MoeW<A>> {
        let (h, e, i, is) = (
            c.hidden_size,
            c.num_experts,
            c.moe_intermediate_size,
            c.shared_expert_intermediate_size,
        );
        let fused = format!("{p}experts.gate_up_proj");
        let (gate_up, down) = match &mut *src {
            Source::Ckpt(ck) if !ck.contains(&fused) => {
                // per-expert tensors: concatenate [gate; up] per expert on the host
                let (mut gu, mut dn) = (
                    Vec::with_capacity(e * 2 * i * h),
                    Vec::with_capacity(e * h * i),
                );
                for x in 0..e {
                    for part in ["gate_proj", "up_proj"] {
                        let t = ck
                            .get_weight(&format!("{p}experts.{x}.{part}.weight"), &[i, h])
                            .map_err(|e| CudaError::Shape {
                                op: "load",
                                msg: e.to_string(),
                            })?;
                        gu.extend(A::from_weight(t.weight()));
                    }
                    let t = ck
                        .get_weight(&format!("{p}experts.{x}.down_proj.weight"), &[h, i])
                        .map_err(|e| CudaError::Shape {
                            op: "load",
                            msg: e.to_string(),
                        })?;
                    dn.extend(A::from_weight(t.weight()));
                }
                (gpu.upload(&gu)?, gpu.upload(&dn)?)
            }
            s => (
                s.act(gpu, &fused, &[e, 2 * i, h])?,
                s.act(gpu, &format!("{p}experts.down_proj"), &[e, h, i])?,
            ),
        };
        Ok(MoeW {
            router: src.act(gpu, &format!("{p}gate.weight"), &[e, h])?,
            gate_up,
            down,
            s_gate: src.act(gpu, &format!("{p}shared_expert.gate_proj.weight"), &[is, h])?,
            s_up: src.act(gpu, &format!("{p}shared_expert.up_proj.weight"), &[is, h])?,
            s_down: src.act(gpu, &format!("{p}shared_expert.down_proj.weight"), &[h, is])?,
            s_gate_w: src.act(gpu, &format!("{p}shared_expert_gate.weight"), &[1, h])?,
        })
    }
}

/// Per-sequence caches for `slots` sequences (all allocated up front) and the step scratch for
/// up to `max_tokens` tokens per forward call.
pub struct CudaState<A: Act = u16> {
    kv: Vec<Option<KvPool<A>>>,
    gdn: Vec<Option<GdnPool>>,
    /// Tokens already consumed per slot (host copy; the kernels get positions per call).
    pub lens: Vec<usize>,
    pub max_len: usize,
    max_tokens: usize,
    /// Set to `Some(vec![])` to record the routing of the next steps: per layer, the `[T · k]`
    /// chosen experts of that step's packed tokens (costs one device→host copy per layer).
    pub routing: Option<Vec<Vec<i32>>>,
    /// Routing replay for the next step: per layer `[T · k]` expert indices used instead of the
    /// router's top-k (weights are still the router's renormalised probabilities). Consumed.
    pub forced: Option<Vec<Vec<i32>>>,
    s: Scratch<A>,
}

struct Scratch<A: Act> {
    resid: DeviceBuffer<A>,
    xn: DeviceBuffer<A>,
    delta: DeviceBuffer<A>,
    big: DeviceBuffer<A>,
    z: DeviceBuffer<A>,
    conv_y: DeviceBuffer<A>,
    bb: DeviceBuffer<A>,
    aa: DeviceBuffer<A>,
    beta: F32,
    g: F32,
    qn: F32,
    kn: F32,
    vv: F32,
    o: DeviceBuffer<A>,
    on: DeviceBuffer<A>,
    q: DeviceBuffer<A>,
    gate: DeviceBuffer<A>,
    k: DeviceBuffer<A>,
    v: DeviceBuffer<A>,
    att: DeviceBuffer<A>,
    dec: DecodeScratch,
    delta_scratch: F32,
    router: F32,
    idx: I32,
    wts: F32,
    groups: MoeGroups,
    gu: DeviceBuffer<A>,
    act: DeviceBuffer<A>,
    y: DeviceBuffer<A>,
    sg_a: DeviceBuffer<A>,
    sg_b: DeviceBuffer<A>,
    shared: DeviceBuffer<A>,
    sgate: DeviceBuffer<A>,
    logits: F32,
}

impl<A: Act> CudaState<A> {
    pub fn new(
        gpu: &Gpu,
        cfg: &ModelConfig,
        slots: usize,
        max_len: usize,
        max_tokens: usize,
    ) -> Result<CudaState<A>> {
        let c = cfg;
        let t = max_tokens;
        let (h, hq, hkv, hd) = (
            c.hidden_size,
            c.num_attention_heads,
            c.num_key_value_heads,
            c.head_dim,
        );
        let (hk, hv, dk, dv, cd, vd) = (
            c.linear_num_key_heads,
            c.linear_num_value_heads,
            c.linear_key_head_dim,
            c.linear_value_head_dim,
            c.gdn_conv_dim(),
            c.gdn_value_dim(),
        );
        let (e, k, i, is) = (
            c.num_experts,
            c.num_experts_per_tok,
            c.moe_intermediate_size,
            c.shared_expert_intermediate_size,
        );
        let mut kv = vec![];
        let mut gdn = vec![];
        for lt in &c.layer_types {
            match lt {
                LayerType::Full => {
                    kv.push(Some(KvPool::new(gpu, slots, hkv, max_len, hd)?));
                    gdn.push(None);
                }
                LayerType::Linear => {
                    kv.push(None);
                    gdn.push(Some(GdnPool::new(
                        gpu,
                        slots,
                        cd,
                        c.linear_conv_kernel_dim,
                        hv,
                        dk,
                        dv,
                    )?));
                }
            }
        }
        let z = |n: usize| gpu.zeros::<A>(n);
        let f = |n: usize| gpu.zeros::<f32>(n);
        let s = Scratch {
            resid: z(t * h)?,
            xn: z(t * h)?,
            delta: z(t * h)?,
            big: z(t * (2 * hq * hd).max(cd))?,
            z: z(t * vd)?,
            conv_y: z(t * cd)?,
            bb: z(t * hv)?,
            aa: z(t * hv)?,
            beta: f(t * hv)?,
            g: f(t * hv)?,
            qn: f(t * hk * dk)?,
            kn: f(t * hk * dk)?,
            vv: f(t * hv * dv)?,
            o: z(t * vd.max(hq * hd))?,
            on: z(t * vd)?,
            q: z(t * hq * hd)?,
            gate: z(t * hq * hd)?,
            k: z(t * hkv * hd)?,
            v: z(t * hkv * hd)?,
            att: z(t * hq * hd)?,
            dec: DecodeScratch::new(gpu, t, hq, hd, 8)?,
            delta_scratch: f(slots.min(t) * hv * 64 * (dk + dv))?,
            router: f(t * e)?,
            idx: gpu.zeros::<i32>(t * k)?,
            wts: f(t * k)?,
            groups: MoeGroups::new(gpu, t * k, e)?,
            gu: z(t * k * 2 * i)?,
            act: z(t * k * i)?,
            y: z(t * k * h)?,
            sg_a: z(t * is)?,
            sg_b: z(t * is)?,
            shared: z(t * h)?,
            sgate: z(t)?,
            logits: f(t * c.vocab_size)?,
        };
        Ok(CudaState {
            kv,
            gdn,
            lens: vec![0; slots],
            max_len,
            max_tokens,
            routing: None,
            forced: None,
            s,
        })
    }

    /// Forget a slot's tokens (its pools are overwritten from position 0 on reuse; the GDN
    /// states are zeroed here).
    pub fn reset_slot(&mut self, gpu: &Gpu, slot: usize) -> Result<()> {
        if slot >= self.lens.len() {
            return Err(CudaError::Shape {
                op: "reset_slot",
                msg: format!("slot {slot} of {}", self.lens.len()),
            });
        }
        self.lens[slot] = 0;
        // zero the slot's regions of every GDN pool on the device
        for p in self.gdn.iter_mut().flatten() {
            let conv_per = p.conv.len() / p.slots;
            let rec_per = p.rec.len() / p.slots;
            gpu.zero_range(&mut p.conv, slot * conv_per..(slot + 1) * conv_per)?;
            gpu.zero_range(&mut p.rec, slot * rec_per..(slot + 1) * rec_per)?;
        }
        Ok(())
    }

    /// Make slot `to` a copy of slot `from` (turn-boundary snapshots and resume): the KV rows of
    /// its consumed tokens and its GDN conv/recurrent states, as device-to-device copies.
    pub fn copy_slot(&mut self, gpu: &Gpu, from: usize, to: usize) -> Result<()> {
        let slots = self.lens.len();
        if from >= slots || to >= slots || from == to {
            return Err(CudaError::Shape {
                op: "copy_slot",
                msg: format!("slot {from} to slot {to} of {slots}"),
            });
        }
        let len = self.lens[from];
        for p in self.kv.iter_mut().flatten() {
            let row = p.max_len * p.hd;
            for h in 0..p.hkv {
                let (s, d) = ((from * p.hkv + h) * row, (to * p.hkv + h) * row);
                gpu.copy_within(&mut p.k, s, d, len * p.hd)?;
                gpu.copy_within(&mut p.v, s, d, len * p.hd)?;
            }
        }
        for p in self.gdn.iter_mut().flatten() {
            let conv_per = p.conv.len() / p.slots;
            let rec_per = p.rec.len() / p.slots;
            gpu.copy_within(&mut p.conv, from * conv_per, to * conv_per, conv_per)?;
            gpu.copy_within(&mut p.rec, from * rec_per, to * rec_per, rec_per)?;
        }
        self.lens[to] = len;
        Ok(())
    }
}

impl<A: Act> CudaModel<A> {
    /// One step over a batch: `seqs[b] = (slot, tokens)`; the tokens are appended to the slot's
    /// caches. Returns fp32 logits `[T, vocab]` for every input row (packed in batch order).
    pub fn forward(
        &self,
        gpu: &Gpu,
        st: &mut CudaState<A>,
        seqs: &[(usize, &[u32])],
    ) -> Result<Vec<f32>> {
        self.step(gpu, st, seqs, true)
    }

    /// As [`Self::forward`] but only the last row of each sequence gets logits: `[B, vocab]`.
    pub fn forward_last(
        &self,
        gpu: &Gpu,
        st: &mut CudaState<A>,
        seqs: &[(usize, &[u32])],
    ) -> Result<Vec<f32>> {
        self.step(gpu, st, seqs, false)
    }

    fn step(
        &self,
        gpu: &Gpu,
        st: &mut CudaState<A>,
        seqs: &[(usize, &[u32])],
        all_rows: bool,
    ) -> Result<Vec<f32>> {
        let c = &self.cfg;
        let bad = |msg: String| Err(CudaError::Shape { op: "forward", msg });
        let t: usize = seqs.iter().map(|(_, x)| x.len()).sum();
        if t == 0 || t > st.max_tokens {
            return bad(format!("{t} tokens per call (1..={})", st.max_tokens));
        }
        let mut seen = vec![false; st.lens.len()];
        let (mut ids, mut pos, mut slot_of_tok, mut cu, mut slots, mut lens_after) =
            (vec![], vec![], vec![], vec![0i32], vec![], vec![]);
        for (slot, toks) in seqs {
            if *slot >= st.lens.len() || seen[*slot] || toks.is_empty() {
                return bad(format!(
                    "slot {slot} out of range, repeated or with no tokens"
                ));
            }
            seen[*slot] = true;
            if st.lens[*slot] + toks.len() > st.max_len {
                return bad(format!(
                    "slot {slot}: {} + {} tokens exceed max_len {}",
                    st.lens[*slot],
                    toks.len(),
                    st.max_len
                ));
            }
            for (j, &tk) in toks.iter().enumerate() {
                if tk as usize >= c.vocab_size {
                    return bad(format!("token id {tk} >= vocab {}", c.vocab_size));
                }
                ids.push(tk as i32);
                pos.push((st.lens[*slot] + j) as i32);
                slot_of_tok.push(*slot as i32);
            }
            cu.push(cu.last().copied().unwrap_or(0) + toks.len() as i32);
            slots.push(*slot as i32);
            lens_after.push((st.lens[*slot] + toks.len()) as i32);
        }
        let b = seqs.len();
        let forced = st.forced.take();
        if let Some(f) = &forced {
            let k = c.num_experts_per_tok;
            if f.len() != c.num_hidden_layers
                || f.iter().any(|l| {
                    l.len() != t * k || l.iter().any(|&e| e < 0 || e as usize >= c.num_experts)
                })
            {
                return bad(format!(
                    "forced routing must be {} layers of {t}x{k} expert ids < {}",
                    c.num_hidden_layers, c.num_experts
                ));
            }
        }
        let decode = seqs.iter().all(|(_, x)| x.len() == 1);
        let max_len_now = lens_after.iter().copied().max().unwrap_or(1) as usize;
        let (d_ids, d_pos, d_sot, d_cu, d_slots, d_lens) = (
            gpu.upload(&ids)?,
            gpu.upload(&pos)?,
            gpu.upload(&slot_of_tok)?,
            gpu.upload(&cu)?,
            gpu.upload(&slots)?,
            gpu.upload(&lens_after)?,
        );
        let (h, eps) = (c.hidden_size, c.rms_norm_eps);
        let s = &mut st.s;
        ops::embedding(gpu, &self.embed, c.vocab_size, h, &d_ids, t, &mut s.resid)?;
        let mut first = true;
        for (li, layer) in self.layers.iter().enumerate() {
            ops::add_rms_norm_1p(
                gpu,
                &mut s.resid,
                if first { None } else { Some(&s.delta) },
                &layer.in_norm,
                &mut s.xn,
                t,
                h,
                eps,
            )?;
            first = false;
            match &layer.mixer {
                MixerW::Gdn(w) => {
                    let pool = st.gdn[li].as_mut().expect("GDN pool for a linear layer");
                    let (hk, hv, dk, dv, cd, vd, kk) = (
                        c.linear_num_key_heads,
                        c.linear_num_value_heads,
                        c.linear_key_head_dim,
                        c.linear_value_head_dim,
                        c.gdn_conv_dim(),
                        c.gdn_value_dim(),
                        c.linear_conv_kernel_dim,
                    );
                    linear(gpu, &s.xn, t, h, &w.qkv, cd, &mut s.big)?;
                    linear(gpu, &s.xn, t, h, &w.z, vd, &mut s.z)?;
                    linear(gpu, &s.xn, t, h, &w.b, hv, &mut s.bb)?;
                    linear(gpu, &s.xn, t, h, &w.a, hv, &mut s.aa)?;
                    ops::causal_conv(
                        gpu,
                        &s.big,
                        pool,
                        &w.conv,
                        &mut s.conv_y,
                        &d_cu,
                        &d_slots,
                        b,
                        t,
                        cd,
                        kk,
                    )?;
                    ops::gdn_gates(
                        gpu,
                        &s.bb,
                        &s.aa,
                        &w.a_log,
                        &w.dt_bias,
                        &mut s.beta,
                        &mut s.g,
                        t,
                        hv,
                    )?;
                    ops::gdn_qkv_prep(
                        gpu, &s.conv_y, &mut s.qn, &mut s.kn, &mut s.vv, t, hk, hv, dk, dv,
                    )?;
                    let x = DeltaBufs {
                        qn: &s.qn,
                        kn: &s.kn,
                        v: &s.vv,
                        beta: &s.beta,
                        g: &s.g,
                        hk,
                        hv,
                        dk,
                        dv,
                    };
                    if decode {
                        ops::gdn_recurrent(gpu, &x, pool, &d_slots, b, &mut s.o)?;
                    } else {
                        ops::gdn_chunked(
                            gpu,
                            &x,
                            pool,
                            &mut s.delta_scratch,
                            &d_cu,
                            &d_slots,
                            b,
                            t,
                            &mut s.o,
                        )?;
                    }
                    ops::gated_rms_norm(gpu, &s.o, &s.z, &w.norm, &mut s.on, t, hv, dv, eps)?;
                    linear(gpu, &s.on, t, vd, &w.out, h, &mut s.delta)?;
                }
                MixerW::Attn(w) => {
                    let pool = st.kv[li].as_mut().expect("KV pool for an attention layer");
                    let (hq, hkv, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
                    linear(gpu, &s.xn, t, h, &w.q, 2 * hq * hd, &mut s.big)?;
                    ops::split_q_gate(gpu, &s.big, &mut s.q, &mut s.gate, t, hq, hd)?;
                    linear(gpu, &s.xn, t, h, &w.k, hkv * hd, &mut s.k)?;
                    linear(gpu, &s.xn, t, h, &w.v, hkv * hd, &mut s.v)?;
                    ops::head_rms_norm_1p(gpu, &mut s.q, &w.q_norm, t, hq, hd, hq * hd, eps)?;
                    ops::head_rms_norm_1p(gpu, &mut s.k, &w.k_norm, t, hkv, hd, hkv * hd, eps)?;
                    ops::rope_partial(
                        gpu,
                        &mut s.q,
                        &d_pos,
                        t,
                        hq,
                        hd,
                        c.rotary_dim,
                        c.rope_theta as f32,
                        true,
                    )?;
                    ops::rope_partial(
                        gpu,
                        &mut s.k,
                        &d_pos,
                        t,
                        hkv,
                        hd,
                        c.rotary_dim,
                        c.rope_theta as f32,
                        true,
                    )?;
                    let idx = KvIndex {
                        cache_pos: &d_pos,
                        slot_of_tok: &d_sot,
                    };
                    ops::kv_append(gpu, &s.k, &s.v, pool, &idx, t)?;
                    if decode {
                        ops::attn_decode(
                            gpu,
                            &s.q,
                            pool,
                            &d_lens,
                            &d_slots,
                            b,
                            hq,
                            max_len_now,
                            &mut s.dec,
                            &mut s.att,
                        )?;
                    } else {
                        ops::attn_prefill(gpu, &s.q, pool, &idx, &mut s.att, t, hq)?;
                    }
                    ops::sigmoid_gate_mul(gpu, &mut s.att, &s.gate, t * hq * hd)?;
                    linear(gpu, &s.att, t, hq * hd, &w.o, h, &mut s.delta)?;
                }
            }
            ops::add_rms_norm_1p(
                gpu,
                &mut s.resid,
                Some(&s.delta),
                &layer.post_norm,
                &mut s.xn,
                t,
                h,
                eps,
            )?;
            let f = match &forced {
                Some(f) => Some(gpu.upload(&f[li])?),
                None => None,
            };
            self.moe(gpu, &layer.moe, s, t, f.as_ref())?;
            if let Some(rec) = st.routing.as_mut() {
                let n = t * c.num_experts_per_tok;
                rec.push(gpu.download_prefix(&s.idx, n)?);
            }
        }
        ops::add_rms_norm_1p(
            gpu,
            &mut s.resid,
            Some(&s.delta),
            &self.norm,
            &mut s.xn,
            t,
            h,
            eps,
        )?;
        let rows = if all_rows {
            linear(gpu, &s.xn, t, h, &self.lm_head, c.vocab_size, &mut s.logits)?;
            t
        } else {
            let last: Vec<i32> = cu[1..].iter().map(|e| e - 1).collect();
            ops::gather_rows(gpu, &s.xn, &gpu.upload(&last)?, &mut s.delta, b, h)?;
            linear(
                gpu,
                &s.delta,
                b,
                h,
                &self.lm_head,
                c.vocab_size,
                &mut s.logits,
            )?;
            b
        };
        for (slot, toks) in seqs {
            st.lens[*slot] += toks.len();
        }
        let n = rows * c.vocab_size;
        gpu.download_prefix(&s.logits, n)
    }

    /// Run only layer `layer`'s MoE on the first `t` rows of the scratch (whatever they hold):
    /// the MoE-layer benchmark. Enqueues without synchronising.
    pub fn moe_layer_only(
        &self,
        gpu: &Gpu,
        st: &mut CudaState<A>,
        layer: usize,
        t: usize,
    ) -> Result<()> {
        if t == 0 || t > st.max_tokens || layer >= self.layers.len() {
            return Err(CudaError::Shape {
                op: "moe_layer_only",
                msg: format!("t={t} layer={layer}"),
            });
        }
        self.moe(gpu, &self.layers[layer].moe, &mut st.s, t, None)
    }

    /// MoE of the normed rows `s.xn` into `s.delta`.
    fn moe(
        &self,
        gpu: &Gpu,
        w: &MoeW<A>,
        s: &mut Scratch<A>,
        t: usize,
        forced: Option<&I32>,
    ) -> Result<()> {
        let c = &self.cfg;
        let (h, e, k, i, is) = (
            c.hidden_size,
            c.num_experts,
            c.num_experts_per_tok,
            c.moe_intermediate_size,
            c.shared_expert_intermediate_size,
        );
        let pairs = t * k;
        linear(gpu, &s.xn, t, h, &w.router, e, &mut s.router)?;
        ops::router_topk::<A>(gpu, &s.router, &mut s.idx, &mut s.wts, forced, t, e, k)?;
        ops::moe_group(gpu, &s.idx, pairs, e, &mut s.groups)?;
        ops::grouped_gemm(
            gpu,
            &s.xn,
            &w.gate_up,
            &mut s.gu,
            &s.groups,
            true,
            k,
            e,
            2 * i,
            h,
            pairs,
            pairs,
        )?;
        ops::swiglu(gpu, &s.gu, &mut s.act, pairs, i)?;
        ops::grouped_gemm(
            gpu, &s.act, &w.down, &mut s.y, &s.groups, false, k, e, h, i, pairs, pairs,
        )?;
        linear(gpu, &s.xn, t, h, &w.s_gate, is, &mut s.sg_a)?;
        linear(gpu, &s.xn, t, h, &w.s_up, is, &mut s.sg_b)?;
        ops::silu_mul(gpu, &s.sg_a, &s.sg_b, &mut s.act, t * is)?;
        linear(gpu, &s.act, t, is, &w.s_down, h, &mut s.shared)?;
        linear(gpu, &s.xn, t, h, &w.s_gate_w, 1, &mut s.sgate)?;
        ops::moe_combine(
            gpu,
            &s.y,
            &s.groups,
            &s.wts,
            Some((&s.shared, &s.sgate)),
            &mut s.delta,
            t,
            h,
            k,
        )
    }
}
