//! Gated full attention (`Qwen3_5MoeAttention`): q/gate projection with per-head interleave,
//! (1+w) q/k RMSNorm, partial RoPE, grouped-query causal attention over the KV cache, sigmoid
//! output gate, output projection.

use super::backend::schema::AttentionParams;
use super::source::WeightSource;
use super::config::ModelConfig;
use super::error::Result;
use super::rope::Rope;
use super::state::KvCache;
use crate::tensor::cpu::{
    axpy, dot, gemm_strided, mul_sigmoid, rms_norm_1p, simd_fn, softmax, FlushDenormals,
};
use crate::tensor::linear::{linear, linear_batch, LinearJob};
use crate::tensor::profile::scope;
use crate::tensor::Tensor;
use rayon::prelude::*;

pub struct Attention {
    q_proj: Tensor,
    k_proj: Tensor,
    v_proj: Tensor,
    o_proj: Tensor,
    q_norm: Tensor,
    k_norm: Tensor,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    eps: f32,
}

/// One sequence's slice of the batch for a mixer layer.
pub struct Segment<'a, S> {
    /// First row of this sequence in the batch matrices.
    pub start: usize,
    pub len: usize,
    /// Position of the first token (tokens already in the cache).
    pub pos: usize,
    pub state: &'a mut S,
}

impl Attention {
    pub fn load(ck: &mut dyn WeightSource, p: &str, c: &ModelConfig) -> Result<Self> {
        let n = AttentionParams::new(p, c);
        Ok(Attention {
            q_proj: ck.get_param_weight(&n.q_proj)?,
            k_proj: ck.get_param_weight(&n.k_proj)?,
            v_proj: ck.get_param_weight(&n.v_proj)?,
            o_proj: ck.get_param_weight(&n.o_proj)?,
            q_norm: ck.get_param(&n.q_norm)?,
            k_norm: ck.get_param(&n.k_norm)?,
            heads: c.num_attention_heads,
            kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim,
            eps: c.rms_norm_eps,
        })
    }

    /// `x`: normed input rows `[N, hidden]` of the whole batch; returns `[N, hidden]`.
    pub fn forward(
        &self,
        x: &[f32],
        n: usize,
        segs: &mut [Segment<'_, KvCache>],
        rope: &Rope,
    ) -> Vec<f32> {
        let hidden = self.o_proj.rows();
        let (hq, hkv, hd) = (self.heads, self.kv_heads, self.head_dim);
        let mut qg = vec![0.0; n * hq * hd * 2];
        let mut k = vec![0.0; n * hkv * hd];
        let mut v = vec![0.0; n * hkv * hd];
        let p = scope("attn.proj_qkv");
        linear_batch(
            &mut [
                LinearJob::of(x, n, &self.q_proj, &mut qg),
                LinearJob::of(x, n, &self.k_proj, &mut k),
                LinearJob::of(x, n, &self.v_proj, &mut v),
            ],
            true,
        );

        drop(p);
        let p = scope("attn.norm_rope");
        // Split query / gate (per-head interleave), q/k norm, RoPE.
        let mut q = vec![0.0; n * hq * hd];
        let mut gate = vec![0.0; n * hq * hd];
        for t in 0..n {
            for h in 0..hq {
                let src = &qg[(t * hq + h) * 2 * hd..(t * hq + h + 1) * 2 * hd];
                q[(t * hq + h) * hd..(t * hq + h + 1) * hd].copy_from_slice(&src[..hd]);
                gate[(t * hq + h) * hd..(t * hq + h + 1) * hd].copy_from_slice(&src[hd..]);
            }
        }
        rms_norm_1p(&mut q, self.q_norm.data(), self.eps);
        rms_norm_1p(&mut k, self.k_norm.data(), self.eps);
        for seg in segs.iter() {
            for i in 0..seg.len {
                let t = seg.start + i;
                let (cos, sin) = rope.cos_sin(seg.pos + i);
                for h in 0..hq {
                    Rope::apply(&mut q[(t * hq + h) * hd..(t * hq + h + 1) * hd], &cos, &sin);
                }
                for h in 0..hkv {
                    Rope::apply(
                        &mut k[(t * hkv + h) * hd..(t * hkv + h + 1) * hd],
                        &cos,
                        &sin,
                    );
                }
            }
        }
        // Append to caches.
        for seg in segs.iter_mut() {
            let r = seg.start * hkv * hd..(seg.start + seg.len) * hkv * hd;
            seg.state.k.extend_from_slice(&k[r.clone()]);
            seg.state.v.extend_from_slice(&v[r]);
        }

        drop(p);
        let p = scope("attn.attend");
        // Attention per (sequence, head), read-only over the caches.
        let group = hq / hkv;
        let scale = 1.0 / (hd as f32).sqrt();
        let work: Vec<(usize, usize)> = (0..segs.len())
            .flat_map(|s| (0..hq).map(move |h| (s, h)))
            .collect();
        let segs_ro: Vec<(usize, usize, usize, &KvCache)> = segs
            .iter()
            .map(|s| (s.start, s.len, s.pos, &*s.state))
            .collect();
        let outs: Vec<Vec<f32>> = work
            .par_iter()
            .map(|&(s, h)| {
                let (start, len, pos, cache) = segs_ro[s];
                let q_rows = &q[start * hq * hd..(start + len) * hq * hd];
                attend_head(
                    q_rows,
                    hq * hd,
                    h * hd,
                    pos,
                    &cache.k,
                    &cache.v,
                    hkv * hd,
                    (h / group) * hd,
                    hd,
                    scale,
                )
            })
            .collect();
        let mut o = vec![0.0; n * hq * hd];
        for (&(s, h), out) in work.iter().zip(&outs) {
            let (start, len, _, _) = segs_ro[s];
            for i in 0..len {
                let dst = ((start + i) * hq + h) * hd;
                o[dst..dst + hd].copy_from_slice(&out[i * hd..(i + 1) * hd]);
            }
        }
        mul_sigmoid(&mut o, &gate);
        drop(p);
        let _p = scope("attn.o_proj");
        let mut y = vec![0.0; n * hidden];
        linear(&o, n, hq * hd, self.o_proj.weight(), hidden, &mut y, true);
        y
    }
}

/// Query rows per block of the GEMM form of [`attend_head`] (fewer rows use dot products).
const PREFILL_GEMM_ROWS: usize = 64;

simd_fn! {
    /// Causal attention of one query head: rows `i` of `q` (`q[i·q_stride + q_off..][..hd]`, the
    /// query at position `pos + i`) over cache rows `0..=pos+i` of one KV head
    /// (`k/v[j·kv_stride + kv_off..][..hd]`). Returns `[rows, hd]`.
    #[allow(clippy::too_many_arguments)]
    fn attend_head(
        q: &[f32],
        q_stride: usize,
        q_off: usize,
        pos: usize,
        k: &[f32],
        v: &[f32],
        kv_stride: usize,
        kv_off: usize,
        hd: usize,
        scale: f32,
    ) -> Vec<f32> {
        let _ftz = FlushDenormals::new();
        let len = q.len() / q_stride;
        let mut out = vec![0.0; len * hd];
        if len >= PREFILL_GEMM_ROWS {
            // Prefill: blocks of query rows as two GEMMs, S = Q·Kᵀ over the visible keys, then
            // O = softmax(S)·V (masked entries zero).
            let total = pos + len;
            let mut kt = vec![0.0f32; hd * total];
            for j in 0..total {
                for (d, &x) in k[j * kv_stride + kv_off..j * kv_stride + kv_off + hd].iter().enumerate() {
                    kt[d * total + j] = x;
                }
            }
            let mut s = vec![0.0f32; PREFILL_GEMM_ROWS * total];
            for i0 in (0..len).step_by(PREFILL_GEMM_ROWS) {
                let rows = PREFILL_GEMM_ROWS.min(len - i0);
                let cols = pos + i0 + rows;
                let sb = &mut s[..rows * cols];
                gemm_strided((rows, cols, hd), &q[i0 * q_stride + q_off..], (q_stride, 1), &kt, (total, 1), sb, false);
                for (r, row) in sb.chunks_exact_mut(cols).enumerate() {
                    let visible = pos + i0 + r + 1;
                    for x in row[..visible].iter_mut() {
                        *x *= scale;
                    }
                    softmax(&mut row[..visible]);
                    row[visible..].fill(0.0);
                }
                gemm_strided((rows, hd, cols), sb, (cols, 1), &v[kv_off..], (kv_stride, 1), &mut out[i0 * hd..(i0 + rows) * hd], false);
            }
            return out;
        }
        let mut scores = vec![0.0; pos + len];
        for i in 0..len {
            let qi = &q[i * q_stride + q_off..i * q_stride + q_off + hd];
            let visible = pos + i + 1;
            for (j, sc) in scores[..visible].iter_mut().enumerate() {
                *sc = dot(qi, &k[j * kv_stride + kv_off..j * kv_stride + kv_off + hd]) * scale;
            }
            softmax(&mut scores[..visible]);
            let o = &mut out[i * hd..(i + 1) * hd];
            for (j, &p) in scores[..visible].iter().enumerate() {
                axpy(p, &v[j * kv_stride + kv_off..j * kv_stride + kv_off + hd], o);
            }
        }
        out
    }
}
