//! The CUDA backend of the model: [`CudaModel`] (weights on one GPU, `weights`) runs
//! [`crate::model::forward::forward`] as a [`CudaStep`] over a packed batch of sequences that
//! each own a cache slot of a [`CudaState`] (`state`; KV in a paged pool, `paged`). Each op is a few launches of the kernel
//! wrappers in `tensor::cuda::ops` (the residual add is fused into the next RMSNorm1p); the same
//! host code runs on a real GPU and on the emulated device ([`crate::tensor::cuda::Gpu`]).

mod decode_graphs;
pub mod perf;
mod paged;
mod state;
mod step_index;
mod weights;

pub use decode_graphs::DecodeGraphs;
pub use paged::{BlockCopy, BlockTables, PagedError};
pub use state::{CacheConfig, CudaState};
pub use step_index::{HostIndex, StepIndex};
pub use weights::{check_supported, AttnW, CudaModel, CudaWeights, GdnW, MoeW};

use super::{Backend, Site};
use crate::model::config::{GdnDims, ModelConfig};
use crate::tensor::cuda::gemm::linear;
use crate::tensor::cuda::gpu::{Act, DeviceBuffer, Gpu};
use crate::tensor::cuda::ops::{self, BlockTable, DeltaBufs, GdnPool, KvIndex, KvPool};
use crate::tensor::device::{DeviceError as CudaError, Result};
use state::Scratch;

type I32 = DeviceBuffer<i32>;

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

    /// As [`Self::forward_last`] but the logits stay on the device ([`CudaState::logits`]):
    /// returns the number of rows (one per sequence).
    pub fn forward_last_on_device(
        &self,
        gpu: &Gpu,
        st: &mut CudaState<A>,
        seqs: &[(usize, &[u32])],
    ) -> Result<usize> {
        self.step_on_device(gpu, st, seqs, false)
    }

    fn step(
        &self,
        gpu: &Gpu,
        st: &mut CudaState<A>,
        seqs: &[(usize, &[u32])],
        all_rows: bool,
    ) -> Result<Vec<f32>> {
        let rows = self.step_on_device(gpu, st, seqs, all_rows)?;
        gpu.download_prefix(&st.s.logits, rows * self.cfg.vocab_size)
    }

    /// One step; the logits rows stay in the scratch. Returns their number.
    fn step_on_device(
        &self,
        gpu: &Gpu,
        st: &mut CudaState<A>,
        seqs: &[(usize, &[u32])],
        all_rows: bool,
    ) -> Result<usize> {
        let c = &self.cfg;
        let bad = |msg: String| Err(CudaError::Shape { op: "forward", msg });
        let t: usize = seqs.iter().map(|(_, x)| x.len()).sum();
        if t == 0 || t > st.max_tokens {
            return bad(format!("{t} tokens per call (1..={})", st.max_tokens));
        }
        let mut seen = vec![false; st.lens.len()];
        let mut h = HostIndex {
            cu: vec![0],
            ..HostIndex::default()
        };
        for (b, (slot, toks)) in seqs.iter().enumerate() {
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
                h.ids.push(tk as i32);
                h.pos.push((st.lens[*slot] + j) as i32);
                h.seq_of_tok.push(b as i32);
            }
            h.cu.push(h.cu.last().copied().unwrap_or(0) + toks.len() as i32);
            h.slots.push(*slot as i32);
            h.lens_after.push((st.lens[*slot] + toks.len()) as i32);
        }
        // KV blocks for the new tokens (copy-on-write of shared partial blocks), then the
        // batch's block table: row b = the blocks of sequence b.
        let batch_slots: Vec<usize> = seqs.iter().map(|(s, _)| *s).collect();
        let news: Vec<usize> = seqs.iter().map(|(_, x)| x.len()).collect();
        st.reserve_kv(gpu, &batch_slots, &news)?;
        // taken only once the step will run (a full pool leaves it for the retried step)
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
        let (table, bt_stride) = st.blocks.batch_table(&batch_slots);
        h.table = table;
        if !all_rows {
            h.last_rows = h.cu[1..].iter().map(|e| e - 1).collect();
        }
        // into the persistent buffers: no device allocation per step
        st.idx.write(gpu, &h)?;
        let b = seqs.len();
        let decode = seqs.iter().all(|(_, x)| x.len() == 1);
        // a pure decode step is the same work each time for a (batch, stride): a CUDA graph
        // (unless switched off: `EXECCRITIC_CUDA_DISABLE=graphs`)
        let graph = st.graphs.enabled && gpu.switches().graphs && decode && st.routing.is_none() && forced.is_none();
        if graph {
            if let Some(id) = st.graphs.get(b, bt_stride) {
                gpu.launch_graph(id)?;
                for (slot, toks) in seqs {
                    st.lens[*slot] += toks.len();
                }
                return Ok(b);
            }
        }
        let capturing = graph
            && match gpu.begin_capture() {
                Ok(()) => true,
                Err(CudaError::Unsupported(_)) => {
                    st.graphs.enabled = false;
                    false
                }
                Err(e) => return Err(e),
            };
        let idx = &st.idx;
        let mut step = CudaStep {
            gpu,
            c,
            b,
            t,
            decode,
            // attention splits over the table's capacity (the longest context rounded up to
            // whole blocks: the same for every step of a graph; `ops::decode_splits`)
            max_len_now: bt_stride * st.blocks.block_size(),
            ids: &idx.ids,
            pos: &idx.pos,
            seq_of_tok: &idx.seq_of_tok,
            block_table: &idx.block_table,
            bt_stride,
            cu: &idx.cu,
            slots: &idx.slots,
            lens: &idx.lens,
            last_rows: (!all_rows).then_some(&idx.last_rows),
            forced,
            kv: &mut st.kv,
            gdn: &mut st.gdn,
            routing: st.routing.is_some().then_some(RouteRecord {
                buf: &mut st.route,
                layers: 0,
            }),
            s: &mut st.s,
        };
        let forwarded = crate::model::forward::forward(&mut step, &self.stack);
        if capturing {
            // the captured work has not run yet: end the capture, keep the graph, launch it
            match (forwarded, gpu.end_capture()) {
                (Ok(rows), Ok(id)) => {
                    st.graphs.insert(b, bt_stride, id);
                    gpu.launch_graph(id)?;
                    for (slot, toks) in seqs {
                        st.lens[*slot] += toks.len();
                    }
                    return Ok(rows);
                }
                (forwarded, captured) => {
                    // nothing ran: turn graphs off and run the step directly (a real error
                    // comes back from there)
                    if let Ok(id) = captured {
                        gpu.drop_graph(id);
                    }
                    let why = forwarded.err().map_or("the capture".into(), |e| e.to_string());
                    tracing::warn!("capturing a decode step failed ({why}); running steps directly");
                    st.use_graphs(false);
                    return self.step_on_device(gpu, st, seqs, all_rows);
                }
            }
        }
        let rows = forwarded?;
        let layers = step.routing.as_ref().map_or(0, |r| r.layers);
        for (slot, toks) in seqs {
            st.lens[*slot] += toks.len();
        }
        if let Some(rec) = st.routing.as_mut() {
            // the whole step's record in one copy
            let per = t * c.num_experts_per_tok;
            let all = gpu.download_prefix(&st.route, layers * per)?;
            rec.extend(all.chunks(per.max(1)).map(<[i32]>::to_vec));
        }
        Ok(rows)
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
        if t == 0 || t > st.max_tokens || layer >= self.stack.layers.len() {
            return Err(CudaError::Shape {
                op: "moe_layer_only",
                msg: format!("t={t} layer={layer}"),
            });
        }
        moe(
            gpu,
            &self.cfg,
            &self.stack.layers[layer].moe,
            &mut st.s,
            t,
            None,
        )
    }
}

/// One forward step on the device: the step's index arrays and block table (in the state's
/// persistent buffers, [`StepIndex`]) and
/// the pools and scratch it writes. Activations live in the scratch, so the op values are unit markers:
/// the residual in `s.resid`, a normed copy in `s.xn`, a block's output in `s.delta`.
pub struct CudaStep<'a, A: Act> {
    gpu: &'a Gpu,
    c: &'a ModelConfig,
    /// Sequences and packed tokens of the step.
    b: usize,
    t: usize,
    /// Every sequence brings one token (recurrent GDN, split-K attention).
    decode: bool,
    max_len_now: usize,
    ids: &'a I32,
    pos: &'a I32,
    /// Block-table row (batch index) of each packed token.
    seq_of_tok: &'a I32,
    /// The batch's KV block table `[b, bt_stride]`.
    block_table: &'a I32,
    bt_stride: usize,
    cu: &'a I32,
    slots: &'a I32,
    lens: &'a I32,
    /// The last row of each sequence when only those get logits.
    last_rows: Option<&'a I32>,
    forced: Option<Vec<Vec<i32>>>,
    kv: &'a mut [Option<KvPool<A>>],
    gdn: &'a mut [Option<GdnPool>],
    routing: Option<RouteRecord<'a>>,
    s: &'a mut Scratch<A>,
}

/// The step's routing record on the device: each MoE layer appends its `[T · k]` experts.
struct RouteRecord<'a> {
    buf: &'a mut I32,
    /// Layers recorded so far.
    layers: usize,
}

impl<A: Act> Backend for CudaStep<'_, A> {
    type W = CudaWeights<A>;
    type Hidden = ();
    type Normed = ();
    type Delta = ();
    /// Rows of logits written to the scratch.
    type Out = usize;
    type Error = CudaError;

    fn embed(&mut self, w: &DeviceBuffer<A>) -> Result<()> {
        let (c, s) = (self.c, &mut *self.s);
        ops::embedding(
            self.gpu,
            w,
            c.vocab_size,
            c.hidden_size,
            &self.ids,
            self.t,
            &mut s.resid,
        )
    }

    fn add_norm(
        &mut self,
        _: Site,
        _: &mut (),
        delta: Option<()>,
        w: &DeviceBuffer<A>,
    ) -> Result<()> {
        let (c, s) = (self.c, &mut *self.s);
        let d = delta.map(|_| &s.delta);
        ops::add_rms_norm_1p(
            self.gpu,
            &mut s.resid,
            d,
            w,
            &mut s.xn,
            self.t,
            c.hidden_size,
            c.rms_norm_eps,
        )
    }

    fn gdn(&mut self, li: usize, w: &GdnW<A>, _: ()) -> Result<()> {
        let (gpu, c, s, t, b) = (self.gpu, self.c, &mut *self.s, self.t, self.b);
        let pool = self.gdn[li].as_mut().expect("GDN pool for a linear layer");
        let (h, eps) = (c.hidden_size, c.rms_norm_eps);
        let GdnDims { hk, hv, dk, dv, conv: cd, value: vd, kernel: kk } = c.gdn_dims();
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
            &self.cu,
            &self.slots,
            b,
            t,
            cd,
            kk,
        )?;
        let gates = ops::GdnGates {
            bproj: &s.bb,
            aproj: &s.aa,
            a_log: &w.a_log,
            dt_bias: &w.dt_bias,
            beta: &mut s.beta,
            g: &mut s.g,
        };
        ops::gdn_qkv_prep_gates(
            gpu, &s.conv_y, gates, &mut s.qn, &mut s.kn, &mut s.vv, t, hk, hv, dk, dv,
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
        if self.decode {
            ops::gdn_recurrent(gpu, &x, pool, &self.slots, b, &mut s.o)?;
        } else {
            ops::gdn_chunked(
                gpu,
                &x,
                pool,
                &mut s.delta_scratch,
                &self.cu,
                &self.slots,
                b,
                t,
                &mut s.o,
            )?;
        }
        ops::gated_rms_norm(gpu, &s.o, &s.z, &w.norm, &mut s.on, t, hv, dv, eps)?;
        linear(gpu, &s.on, t, vd, &w.out, h, &mut s.delta)
    }

    fn attention(&mut self, li: usize, w: &AttnW<A>, _: ()) -> Result<()> {
        let (gpu, c, s, t) = (self.gpu, self.c, &mut *self.s, self.t);
        let pool = self.kv[li]
            .as_mut()
            .expect("KV pool for an attention layer");
        let (h, eps) = (c.hidden_size, c.rms_norm_eps);
        let (hq, hkv, hd) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        let theta = c.rope_theta as f32;
        linear(gpu, &s.xn, t, h, &w.q, 2 * hq * hd, &mut s.big)?;
        ops::split_q_gate(gpu, &s.big, &mut s.q, &mut s.gate, t, hq, hd)?;
        linear(gpu, &s.xn, t, h, &w.k, hkv * hd, &mut s.k)?;
        linear(gpu, &s.xn, t, h, &w.v, hkv * hd, &mut s.v)?;
        ops::head_rms_norm_1p(gpu, &mut s.q, &w.q_norm, t, hq, hd, hq * hd, eps)?;
        ops::head_rms_norm_1p(gpu, &mut s.k, &w.k_norm, t, hkv, hd, hkv * hd, eps)?;
        ops::rope_partial(
            gpu,
            &mut s.q,
            &self.pos,
            t,
            hq,
            hd,
            c.rotary_dim,
            theta,
            true,
        )?;
        ops::rope_partial(
            gpu,
            &mut s.k,
            &self.pos,
            t,
            hkv,
            hd,
            c.rotary_dim,
            theta,
            true,
        )?;
        let idx = KvIndex {
            cache_pos: &self.pos,
            seq_of_tok: &self.seq_of_tok,
            blocks: BlockTable {
                table: &self.block_table,
                stride: self.bt_stride,
            },
        };
        ops::kv_append(gpu, &s.k, &s.v, pool, &idx, t)?;
        if self.decode {
            ops::attn_decode(
                gpu,
                &s.q,
                pool,
                &self.lens,
                &idx.blocks,
                self.b,
                hq,
                self.max_len_now,
                &mut s.dec,
                &mut s.att,
            )?;
        } else {
            ops::attn_prefill(gpu, &s.q, pool, &idx, &mut s.att, t, hq)?;
        }
        ops::sigmoid_gate_mul(gpu, &mut s.att, &s.gate, t * hq * hd)?;
        linear(gpu, &s.att, t, hq * hd, &w.o, h, &mut s.delta)
    }

    fn moe(&mut self, li: usize, w: &MoeW<A>, _: ()) -> Result<()> {
        let gpu = self.gpu;
        let f = match &self.forced {
            Some(f) => Some(gpu.upload(&f[li])?),
            None => None,
        };
        moe(gpu, self.c, w, self.s, self.t, f.as_ref())?;
        if let Some(rec) = self.routing.as_mut() {
            let n = self.t * self.c.num_experts_per_tok;
            gpu.copy_into(&self.s.idx, 0, rec.buf, rec.layers * n, n)?;
            rec.layers += 1;
        }
        Ok(())
    }

    fn head(&mut self, _: (), w: &DeviceBuffer<A>) -> Result<usize> {
        let (gpu, c, s) = (self.gpu, self.c, &mut *self.s);
        let (h, v) = (c.hidden_size, c.vocab_size);
        match &self.last_rows {
            None => {
                linear(gpu, &s.xn, self.t, h, w, v, &mut s.logits)?;
                Ok(self.t)
            }
            Some(last) => {
                ops::gather_rows(gpu, &s.xn, last, &mut s.delta, self.b, h)?;
                linear(gpu, &s.delta, self.b, h, w, v, &mut s.logits)?;
                Ok(self.b)
            }
        }
    }
}

/// MoE of the normed rows `s.xn` into `s.delta`: router top-k (or the forced experts), grouped
/// expert GEMMs with SwiGLU, the gated shared expert, weighted combine.
fn moe<A: Act>(
    gpu: &Gpu,
    c: &ModelConfig,
    w: &MoeW<A>,
    s: &mut Scratch<A>,
    t: usize,
    forced: Option<&I32>,
) -> Result<()> {
    let (h, e, k, i, is) = (
        c.hidden_size,
        c.num_experts,
        c.num_experts_per_tok,
        c.moe_intermediate_size,
        c.shared_expert_intermediate_size,
    );
    let pairs = t * k;
    linear(gpu, &s.xn, t, h, &w.router, e, &mut s.router)?;
    ops::route_and_group::<A>(
        gpu,
        &s.router,
        &mut s.idx,
        &mut s.wts,
        forced,
        t,
        e,
        k,
        &mut s.groups,
    )?;
    if ops::fuses_swiglu::<A>(gpu, &s.groups) {
        ops::grouped_gemm_swiglu(
            gpu,
            ops::ExpertGemm::Auto,
            &s.xn,
            &w.gate_up,
            &mut s.act,
            &s.groups,
            k,
            e,
            i,
            h,
            pairs,
        )?;
    } else {
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
        )?;
        ops::swiglu(gpu, &s.gu, &mut s.act, pairs, i)?;
    }
    ops::grouped_gemm(
        gpu, &s.act, &w.down, &mut s.y, &s.groups, false, k, e, h, i, pairs,
    )?;
    linear(gpu, &s.xn, t, h, &w.s_gate, is, &mut s.sg_a)?;
    linear(gpu, &s.xn, t, h, &w.s_up, is, &mut s.sg_b)?;
    ops::silu_mul(gpu, &s.sg_a, &s.sg_b, &mut s.act, t * is)?;
    linear(gpu, &s.act, t, is, &w.s_down, h, &mut s.shared)?;
    linear(gpu, &s.xn, t, h, &w.s_gate_w, 1, &mut s.sgate)?;
    let shared = Some((&s.shared, &s.sgate));
    ops::moe_combine(gpu, &s.y, &s.groups, &s.wts, shared, &mut s.delta, t, h, k)
}
