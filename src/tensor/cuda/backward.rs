//! Launch wrappers of the backward kernels (`kernels/*_bwd.cu`, `kernels/loss.cu`): the
//! gradients of the forward ops of [`super::ops`], the same formulas as the CPU trainer
//! (`train::ops`, `train::layers`, `train::loss`, `train::grpo`), checked against it by
//! `tests/cuda_backward.rs` on the emulated device. Gradients w.r.t. activations are in the
//! storage type `A`; gradients w.r.t. weights are fp32 and accumulated (`dw += …`, as
//! `train::params::Grads`), always in a fixed order (no atomics: the same bits on every run).
//! This layer knows no trainer: the loss takes its GRPO settings and rows as plain values.
#![allow(clippy::too_many_arguments)] // wrappers mirror the kernels' argument lists

use super::gpu::{Act, Arg, DeviceBuffer, Gpu};
use super::ops::{self, cfg, launch, need, stride_cfg, MoeGroups};
use crate::tensor::device::{DeviceError, Gemm, Result};

type F32 = DeviceBuffer<f32>;
type I32 = DeviceBuffer<i32>;

// ---------------------------------------------------------------- norms

/// Column-parallel weight gradient of a norm: `dw[i] += Σ_r dy·x·rstd[r]·(SiLU(z) if gated)`.
fn norm_dw<A: Act>(
    gpu: &Gpu,
    x: &DeviceBuffer<A>,
    dy: &DeviceBuffer<A>,
    z: Option<&DeviceBuffer<A>>,
    rstd: &F32,
    dw: &mut F32,
    rows: usize,
    d: usize,
) -> Result<()> {
    launch!(
        gpu,
        A::kernel("norm_dw"),
        stride_cfg(d),
        x,
        dy,
        z,
        rstd,
        dw,
        &(rows as i32),
        &(d as i32)
    )
}

/// Backward of the zero-centred RMSNorm `y = x̂·(1+w)` over `rows` rows of width `d` (also the
/// per-head q/k norm with `rows = tokens·heads`): writes `dx`, accumulates `dw` (fp32).
pub fn rms_norm_1p_backward<A: Act>(
    gpu: &Gpu,
    x: &DeviceBuffer<A>,
    w: &DeviceBuffer<A>,
    dy: &DeviceBuffer<A>,
    dx: &mut DeviceBuffer<A>,
    dw: &mut F32,
    rows: usize,
    d: usize,
    eps: f32,
) -> Result<()> {
    let n = rows * d;
    need(
        "rms_norm_1p_backward",
        x.len() >= n && dy.len() >= n && dx.len() >= n && w.len() >= d && dw.len() >= d,
        || format!("rows={rows} d={d}"),
    )?;
    let mut rstd = gpu.zeros::<f32>(rows.max(1))?;
    launch!(
        gpu,
        A::kernel("rms_norm_1p_bwd"),
        cfg((rows, 1, 1), 256, 0),
        x,
        w,
        dy,
        dx,
        &mut rstd,
        &(d as i32),
        &eps
    )?;
    norm_dw(gpu, x, dy, None, &rstd, dw, rows, d)
}

/// Backward of the GDN gated RMSNorm `y = w·x̂·SiLU(z)` over `rows` rows of width `d`: writes
/// `dx` and `dz`, accumulates `dw` (fp32).
pub fn gated_rms_norm_backward<A: Act>(
    gpu: &Gpu,
    x: &DeviceBuffer<A>,
    z: &DeviceBuffer<A>,
    w: &DeviceBuffer<A>,
    dy: &DeviceBuffer<A>,
    dx: &mut DeviceBuffer<A>,
    dz: &mut DeviceBuffer<A>,
    dw: &mut F32,
    rows: usize,
    d: usize,
    eps: f32,
) -> Result<()> {
    let n = rows * d;
    need(
        "gated_rms_norm_backward",
        x.len() >= n
            && z.len() >= n
            && dy.len() >= n
            && dx.len() >= n
            && dz.len() >= n
            && w.len() >= d
            && dw.len() >= d,
        || format!("rows={rows} d={d}"),
    )?;
    let mut rstd = gpu.zeros::<f32>(rows.max(1))?;
    launch!(
        gpu,
        A::kernel("gated_rms_norm_bwd"),
        cfg((rows, 1, 1), 128, 0),
        x,
        z,
        w,
        dy,
        dx,
        dz,
        &mut rstd,
        &(d as i32),
        &eps
    )?;
    norm_dw(gpu, x, dy, Some(z), &rstd, dw, rows, d)
}

/// The residual path of the fused add + norm in the backward: `acc += g` over `n` values (the
/// stream's gradient plus the norm branch's; also any other sum of two activation gradients).
pub fn residual_grad_add<A: Act>(gpu: &Gpu, acc: &mut DeviceBuffer<A>, g: &DeviceBuffer<A>, n: usize) -> Result<()> {
    need("residual_grad_add", acc.len() >= n && g.len() >= n, || format!("n={n}"))?;
    launch!(gpu, A::kernel("residual_grad_add"), stride_cfg(n), acc, g, &(n as i64))
}

// ---------------------------------------------------------------- RoPE and activations

/// Backward of partial RoPE, in place on the gradient `[t, heads, hd]` (the inverse rotation).
pub fn rope_partial_backward<A: Act>(
    gpu: &Gpu,
    dx: &mut DeviceBuffer<A>,
    pos: &I32,
    t: usize,
    heads: usize,
    hd: usize,
    rot: usize,
    theta: f32,
    round_cs: bool,
) -> Result<()> {
    need(
        "rope_partial_backward",
        dx.len() >= t * heads * hd && pos.len() >= t && rot <= hd && rot.is_multiple_of(2) && rot / 2 <= 1024,
        || format!("t={t} heads={heads} hd={hd} rot={rot}"),
    )?;
    launch!(
        gpu,
        A::kernel("rope_partial_bwd"),
        cfg((t, heads, 1), (rot / 2).div_ceil(32) * 32, 0),
        dx,
        pos,
        &(hd as i32),
        &(rot as i32),
        &theta,
        &(round_cs as i32)
    )
}

/// Backward of `h = SiLU(g)·u` over `n` values: `dg`, `du` from `dh`.
pub fn silu_mul_backward<A: Act>(
    gpu: &Gpu,
    g: &DeviceBuffer<A>,
    u: &DeviceBuffer<A>,
    dh: &DeviceBuffer<A>,
    dg: &mut DeviceBuffer<A>,
    du: &mut DeviceBuffer<A>,
    n: usize,
) -> Result<()> {
    need(
        "silu_mul_backward",
        [g.len(), u.len(), dh.len(), dg.len(), du.len()].iter().all(|&l| l >= n),
        || format!("n={n}"),
    )?;
    launch!(gpu, A::kernel("silu_mul_bwd"), stride_cfg(n), g, u, dh, dg, du, &(n as i64))
}

/// Backward of SwiGLU on fused `gu [rows, 2·inter]` rows: `dgu [rows, 2·inter]` from `dh [rows, inter]`.
pub fn swiglu_backward<A: Act>(
    gpu: &Gpu,
    gu: &DeviceBuffer<A>,
    dh: &DeviceBuffer<A>,
    dgu: &mut DeviceBuffer<A>,
    inter: usize,
    rows: usize,
) -> Result<()> {
    need(
        "swiglu_backward",
        gu.len() >= rows * 2 * inter && dgu.len() >= rows * 2 * inter && dh.len() >= rows * inter,
        || format!("rows={rows} inter={inter}"),
    )?;
    launch!(
        gpu,
        A::kernel("swiglu_bwd"),
        stride_cfg(rows * inter),
        gu,
        dh,
        dgu,
        &(inter as i32),
        &(rows as i64)
    )
}

/// Backward of the attention output gate `o' = o·σ(gate)` over `n` values: `d_o`, `dgate`.
pub fn sigmoid_gate_mul_backward<A: Act>(
    gpu: &Gpu,
    o: &DeviceBuffer<A>,
    gate: &DeviceBuffer<A>,
    dy: &DeviceBuffer<A>,
    d_o: &mut DeviceBuffer<A>,
    dgate: &mut DeviceBuffer<A>,
    n: usize,
) -> Result<()> {
    need(
        "sigmoid_gate_mul_backward",
        [o.len(), gate.len(), dy.len(), d_o.len(), dgate.len()].iter().all(|&l| l >= n),
        || format!("n={n}"),
    )?;
    launch!(gpu, A::kernel("sigmoid_gate_mul_bwd"), stride_cfg(n), o, gate, dy, d_o, dgate, &(n as i64))
}

// ---------------------------------------------------------------- embedding and head

/// The token positions of a batch grouped by id, for the deterministic embedding backward:
/// positions in ascending order within each id, ids ascending.
pub struct EmbeddingGroups {
    order: I32,
    seg: I32,
    uniq: I32,
    tokens: usize,
    distinct: usize,
}

impl EmbeddingGroups {
    /// Groups `ids` (checked against `vocab` here: a bad id is an error, not a stray write).
    pub fn new(gpu: &Gpu, ids: &[u32], vocab: usize) -> Result<EmbeddingGroups> {
        if let Some(&bad) = ids.iter().find(|&&t| t as usize >= vocab) {
            return Err(DeviceError::Shape {
                op: "embedding_backward",
                msg: format!("token id {bad} is outside the vocabulary (size {vocab})"),
            });
        }
        let mut order: Vec<i32> = (0..ids.len() as i32).collect();
        order.sort_by_key(|&t| (ids[t as usize], t));
        let (mut seg, mut uniq) = (vec![], vec![]);
        for (p, &t) in order.iter().enumerate() {
            let id = ids[t as usize] as i32;
            if uniq.last() != Some(&id) {
                uniq.push(id);
                seg.push(p as i32);
            }
        }
        seg.push(order.len() as i32);
        Ok(EmbeddingGroups {
            order: gpu.upload(&order)?,
            seg: gpu.upload(&seg)?,
            uniq: gpu.upload(&uniq.iter().copied().chain([0]).collect::<Vec<_>>())?,
            tokens: ids.len(),
            distinct: uniq.len(),
        })
    }
}

/// Embedding backward: `d_table[id] += Σ_{t: ids[t] = id} dy[t]` (fp32 `[vocab, hidden]`).
pub fn embedding_backward<A: Act>(
    gpu: &Gpu,
    dy: &DeviceBuffer<A>,
    groups: &EmbeddingGroups,
    d_table: &mut F32,
    vocab: usize,
    hidden: usize,
) -> Result<()> {
    need(
        "embedding_backward",
        dy.len() >= groups.tokens * hidden && d_table.len() >= vocab * hidden,
        || format!("tokens={} hidden={hidden} vocab={vocab}", groups.tokens),
    )?;
    if groups.distinct == 0 {
        return Ok(());
    }
    launch!(
        gpu,
        A::kernel("embedding_bwd"),
        cfg((groups.distinct, 1, 1), 256, 0),
        dy,
        &groups.order,
        &groups.seg,
        &groups.uniq,
        d_table,
        &(hidden as i32)
    )
}

/// Backward of the linear layer `y[m, n] = x[m, k]·w[n, k]ᵀ` (every projection and the LM head)
/// through the device GEMM (fp32 compute): `dx = dy·w` (added to `dx` when `accumulate_dx`),
/// `dw += dyᵀ·x` in fp32. Column-major: `dxᵀ[k, m] = w(col-major [k, n])·dyᵀ` and
/// `dwᵀ[k, n] = xᵀ[k, m]·dy`, the second with `beta = 1`.
pub fn linear_backward<A: Act>(
    gpu: &Gpu,
    dy: &DeviceBuffer<A>,
    x: &DeviceBuffer<A>,
    m: usize,
    k: usize,
    w: &DeviceBuffer<A>,
    n: usize,
    dx: &mut DeviceBuffer<A>,
    accumulate_dx: bool,
    dw: &mut F32,
) -> Result<()> {
    need(
        "linear_backward",
        x.len() >= m * k && dw.len() >= n * k,
        || format!("m={m} k={k} n={n}"),
    )?;
    linear_backward_dx(gpu, dy, m, k, w, n, dx, accumulate_dx)?;
    if m == 0 || n == 0 || k == 0 {
        return Ok(());
    }
    let t = A::TYPE.gemm_type();
    gpu.gemm(&Gemm {
        trans_a: false,
        trans_b: true,
        m: k,
        n,
        k: m,
        alpha: 1.0,
        a: x.ptr(),
        a_type: t,
        lda: k,
        b: dy.ptr(),
        b_type: t,
        ldb: n,
        beta: 1.0,
        c: dw.ptr(),
        c_type: <f32 as super::gpu::GemmElem>::GEMM,
        ldc: k,
    })
}

/// The input gradient of [`linear_backward`] only, `dx (+)= dy·w`: the backward of a frozen
/// projection (LoRA training forms no dense weight gradient).
#[allow(clippy::too_many_arguments)]
pub fn linear_backward_dx<A: Act>(
    gpu: &Gpu,
    dy: &DeviceBuffer<A>,
    m: usize,
    k: usize,
    w: &DeviceBuffer<A>,
    n: usize,
    dx: &mut DeviceBuffer<A>,
    accumulate_dx: bool,
) -> Result<()> {
    need(
        "linear_backward_dx",
        dy.len() >= m * n && w.len() >= n * k && dx.len() >= m * k,
        || format!("m={m} k={k} n={n}"),
    )?;
    if m == 0 || n == 0 || k == 0 {
        return Ok(());
    }
    let t = A::TYPE.gemm_type();
    gpu.gemm(&Gemm {
        trans_a: false,
        trans_b: false,
        m: k,
        n: m,
        k: n,
        alpha: 1.0,
        a: w.ptr(),
        a_type: t,
        lda: k,
        b: dy.ptr(),
        b_type: t,
        ldb: n,
        beta: if accumulate_dx { 1.0 } else { 0.0 },
        c: dx.ptr(),
        c_type: A::GEMM,
        ldc: k,
    })
}

// ---------------------------------------------------------------- losses

/// Which per-token objective [`token_loss`] computes.
#[derive(Clone, Copy, Debug)]
pub enum TokenObjective {
    /// Cross-entropy `−log p(target)` (SFT, `grads`).
    Sft,
    /// The GRPO clipped-ratio objective (`train::grpo::token_term`): ratio clipped to
    /// `[1 − clip_low, 1 + clip_high]` (clip-higher), plus `kl_coef` × the k3 KL estimator.
    Grpo { clip_low: f32, clip_high: f32, kl_coef: f32 },
}

/// Per logits row: the target token (−1: no loss), and for GRPO the rollout and reference
/// log-probabilities of that target and the advantage — on the device.
pub struct LossRows {
    target: I32,
    old: Option<F32>,
    reference: Option<F32>,
    adv: Option<F32>,
    rows: usize,
}

/// The next-token targets of one sequence: row `t` predicts `ids[t+1]` when `mask[t+1]`.
fn next_targets(ids: &[u32], mask: &[bool], vocab: usize) -> Result<Vec<i32>> {
    let bad = |msg: String| DeviceError::Shape { op: "token_loss", msg };
    if ids.len() < 2 || mask.len() != ids.len() {
        return Err(bad(format!("{} tokens with {} mask entries (need ≥ 2, equal)", ids.len(), mask.len())));
    }
    if let Some(&t) = ids.iter().find(|&&t| t as usize >= vocab) {
        return Err(bad(format!("token id {t} is outside the vocabulary (size {vocab})")));
    }
    Ok((0..ids.len())
        .map(|t| if t + 1 < ids.len() && mask[t + 1] { ids[t + 1] as i32 } else { -1 })
        .collect())
}

/// `x[t+1]` for row `t` (the last row takes 0: it predicts nothing).
fn shifted(x: &[f32]) -> Vec<f32> {
    x.iter().skip(1).copied().chain([0.0]).collect()
}

impl LossRows {
    /// Rows of one SFT sequence (as `train::loss::sft_loss`).
    pub fn sft(gpu: &Gpu, ids: &[u32], train_mask: &[bool], vocab: usize) -> Result<LossRows> {
        let target = next_targets(ids, train_mask, vocab)?;
        Ok(LossRows { target: gpu.upload(&target)?, old: None, reference: None, adv: None, rows: ids.len() })
    }

    /// Rows of one GRPO sample (as `train::grpo::grpo_loss`): per token the rollout's (and, for
    /// the KL term, the reference policy's) log-probabilities, one advantage for the sample. A
    /// sample left out of the update (zero advantage under `mask_zero_advantage`) is simply not
    /// passed: it contributes nothing.
    pub fn grpo(
        gpu: &Gpu,
        ids: &[u32],
        train_mask: &[bool],
        old_logprobs: &[f32],
        ref_logprobs: Option<&[f32]>,
        advantage: f32,
        vocab: usize,
    ) -> Result<LossRows> {
        let n = ids.len();
        let target = next_targets(ids, train_mask, vocab)?;
        if old_logprobs.len() != n || ref_logprobs.is_some_and(|r| r.len() != n) {
            return Err(DeviceError::Shape {
                op: "token_loss",
                msg: "log-probabilities per token differ from the tokens".into(),
            });
        }
        Ok(LossRows {
            target: gpu.upload(&target)?,
            old: Some(gpu.upload(&shifted(old_logprobs))?),
            reference: ref_logprobs.map(|r| gpu.upload(&shifted(r))).transpose()?,
            adv: Some(gpu.upload(&vec![advantage; n])?),
            rows: n,
        })
    }

    pub fn rows(&self) -> usize {
        self.rows
    }
}

/// Per-token loss on the device from fp32 `logits [rows, vocab]`: `loss[r]` (already divided by
/// `denom`, the batch's token denominator), `logp[r]` (log-probability of the target) and
/// `dlogits [rows, vocab]` (zero on rows without a target). The batch loss is `Σ loss`.
pub fn token_loss<A: Act>(
    gpu: &Gpu,
    logits: &F32,
    vocab: usize,
    rows: &LossRows,
    objective: TokenObjective,
    denom: f64,
    loss: &mut F32,
    logp: &mut F32,
    dlogits: &mut DeviceBuffer<A>,
) -> Result<()> {
    let r = rows.rows;
    need(
        "token_loss",
        logits.len() >= r * vocab && loss.len() >= r && logp.len() >= r && dlogits.len() >= r * vocab && denom > 0.0,
        || format!("rows={r} vocab={vocab} denom={denom}"),
    )?;
    let (mode, clip_low, clip_high, kl_coef) = match objective {
        TokenObjective::Sft => (0i32, 0.0f32, 0.0f32, 0.0f32),
        TokenObjective::Grpo { clip_low, clip_high, kl_coef } => {
            need("token_loss", rows.old.is_some() && rows.adv.is_some(), || {
                "GRPO needs the rollout rows (LossRows::grpo)".into()
            })?;
            need("token_loss", kl_coef == 0.0 || rows.reference.is_some(), || {
                "kl_coef > 0 needs reference logprobs".into()
            })?;
            (1, clip_low, clip_high, kl_coef)
        }
    };
    launch!(
        gpu,
        A::kernel("token_loss"),
        cfg((r, 1, 1), 256, 0),
        logits,
        &rows.target,
        rows.old.as_ref(),
        rows.reference.as_ref(),
        rows.adv.as_ref(),
        &mode,
        &clip_low,
        &clip_high,
        &kl_coef,
        &((1.0 / denom) as f32),
        &(vocab as i32),
        loss,
        logp,
        dlogits
    )
}

// ---------------------------------------------------------------- MoE

/// [`ops::moe_group`] with the pairs of each expert in ascending pair order (a stable scatter
/// after the forward's counts and offsets), so the grouped weight gradients sum rows in a fixed
/// order.
pub fn moe_group_stable(gpu: &Gpu, idx: &I32, pairs: usize, e: usize, g: &mut MoeGroups) -> Result<()> {
    ops::moe_group(gpu, idx, pairs, e, g)?;
    launch!(
        gpu,
        <f32 as Act>::kernel("moe_scatter_stable"),
        cfg((e, 1, 1), 32, 0),
        idx,
        &g.offsets,
        &mut g.perm,
        &mut g.row_of_pair,
        &(pairs as i64)
    )
}

/// The gated shared expert of a MoE block as the combine saw it (`out`, gate logit `sg [t]`)
/// and where its gradients go (`dout`, `dsg`).
pub struct SharedGrad<'a, A: Act> {
    pub out: &'a DeviceBuffer<A>,
    pub sg: &'a DeviceBuffer<A>,
    pub dout: &'a mut DeviceBuffer<A>,
    pub dsg: &'a mut DeviceBuffer<A>,
}

/// Backward of [`ops::moe_combine`]: `dwts [t, k]` (fp32, gradient of the renormalised router
/// weights), `dye` (grouped rows `[t·k, h]`: each routed row's output gradient) and, with a
/// shared expert, its output gradient and the gradient of its gate logit.
pub fn moe_combine_backward<A: Act>(
    gpu: &Gpu,
    dy: &DeviceBuffer<A>,
    y: &DeviceBuffer<A>,
    g: &MoeGroups,
    wts: &F32,
    shared: Option<SharedGrad<'_, A>>,
    dwts: &mut F32,
    dye: &mut DeviceBuffer<A>,
    t: usize,
    h: usize,
    k: usize,
) -> Result<()> {
    need(
        "moe_combine_backward",
        dy.len() >= t * h
            && y.len() >= t * k * h
            && dye.len() >= t * k * h
            && wts.len() >= t * k
            && dwts.len() >= t * k
            && g.row_of_pair.len() >= t * k
            && shared.as_ref().is_none_or(|s| {
                s.out.len() >= t * h && s.dout.len() >= t * h && s.sg.len() >= t && s.dsg.len() >= t
            }),
        || format!("t={t} h={h} k={k}"),
    )?;
    let (so, sg, sdo, sdg) = match &shared {
        Some(s) => (Some(s.out), Some(s.sg), Some(&*s.dout), Some(&*s.dsg)),
        None => (None, None, None, None),
    };
    launch!(
        gpu,
        A::kernel("moe_combine_bwd"),
        cfg((t, 1, 1), 256, 0),
        dy,
        y,
        &g.row_of_pair,
        wts,
        so,
        sg,
        dwts,
        dye,
        sdo,
        sdg,
        &(h as i32),
        &(k as i32)
    )
}

/// Router backward with the forward's experts replayed (`idx`, renormalised `wts`): from the
/// weight gradients `dwts` to the router logits' gradient `dlogits [t, e]` (renormalisation,
/// then softmax backward; the top-k choice is not differentiated).
pub fn router_backward<A: Act>(
    gpu: &Gpu,
    logits: &F32,
    idx: &I32,
    wts: &F32,
    dwts: &F32,
    dlogits: &mut DeviceBuffer<A>,
    t: usize,
    e: usize,
    k: usize,
) -> Result<()> {
    need(
        "router_backward",
        logits.len() >= t * e
            && dlogits.len() >= t * e
            && idx.len() >= t * k
            && wts.len() >= t * k
            && dwts.len() >= t * k
            && k <= e,
        || format!("t={t} e={e} k={k}"),
    )?;
    launch!(
        gpu,
        A::kernel("router_bwd"),
        cfg((t.div_ceil(4), 1, 1), 128, 0),
        logits,
        idx,
        wts,
        dwts,
        dlogits,
        &(t as i32),
        &(e as i32),
        &(k as i32)
    )
}

/// Grouped input gradient of the experts' linear layers: for the rows of each group,
/// `out[row] (+)= dy[row]·w[e]` (`w` `[E, n, kd]`, `dy` `[pairs, n]`, `out` `[pairs, kd]`).
pub fn grouped_gemm_dx<A: Act>(
    gpu: &Gpu,
    dy: &DeviceBuffer<A>,
    w: &DeviceBuffer<A>,
    out: &mut DeviceBuffer<A>,
    g: &MoeGroups,
    e: usize,
    n: usize,
    kd: usize,
    max_rows: usize,
    pairs: usize,
    accumulate: bool,
) -> Result<()> {
    need(
        "grouped_gemm_dx",
        w.len() >= e * n * kd && dy.len() >= pairs * n && out.len() >= pairs * kd && g.offsets.len() > e,
        || format!("e={e} n={n} kd={kd} pairs={pairs}"),
    )?;
    launch!(
        gpu,
        A::kernel("grouped_gemm_dx"),
        cfg((kd.div_ceil(64), max_rows.div_ceil(64), e), 256, 0),
        dy,
        w,
        out,
        &g.offsets,
        &(n as i32),
        &(kd as i32),
        &(accumulate as i32)
    )
}

/// Grouped weight gradient of the experts' linear layers: `dw[e] += Σ_rows dy[row]ᵀ·in(row)`
/// (fp32 `[E, n, kd]`), `in(row)` the token row `x[perm[row] / topk]` when `gather`, else `x[row]`.
pub fn grouped_gemm_dw<A: Act>(
    gpu: &Gpu,
    dy: &DeviceBuffer<A>,
    x: &DeviceBuffer<A>,
    dw: &mut F32,
    g: &MoeGroups,
    gather: bool,
    topk: usize,
    e: usize,
    n: usize,
    kd: usize,
    pairs: usize,
) -> Result<()> {
    need(
        "grouped_gemm_dw",
        dw.len() >= e * n * kd
            && dy.len() >= pairs * n
            && x.len() >= if gather { pairs.div_ceil(topk.max(1)) * kd } else { pairs * kd }
            && topk > 0
            && g.offsets.len() > e,
        || format!("e={e} n={n} kd={kd} pairs={pairs}"),
    )?;
    launch!(
        gpu,
        A::kernel("grouped_gemm_dw"),
        cfg((kd.div_ceil(64), n.div_ceil(64), e), 256, 0),
        dy,
        x,
        dw,
        &g.offsets,
        &g.perm,
        &(gather as i32),
        &(topk as i32),
        &(n as i32),
        &(kd as i32)
    )
}

/// `dx[t] (+)= Σ_k dxr[row_of_pair[t·k + k]]`: the routed rows' input gradients back onto
/// their tokens, in slot order.
pub fn moe_gather_add<A: Act>(
    gpu: &Gpu,
    dxr: &DeviceBuffer<A>,
    g: &MoeGroups,
    dx: &mut DeviceBuffer<A>,
    t: usize,
    h: usize,
    k: usize,
    accumulate: bool,
) -> Result<()> {
    need(
        "moe_gather_add",
        dxr.len() >= t * k * h && dx.len() >= t * h && g.row_of_pair.len() >= t * k,
        || format!("t={t} h={h} k={k}"),
    )?;
    launch!(
        gpu,
        A::kernel("moe_gather_add"),
        cfg((t, 1, 1), 256, 0),
        dxr,
        &g.row_of_pair,
        dx,
        &(h as i32),
        &(k as i32),
        &(accumulate as i32)
    )
}

// ---------------------------------------------------------------- gated attention

/// The packed sequences of a training batch, per token: the first token of its sequence and one
/// past its last (causal attention inside each sequence).
pub struct SeqSpans {
    start: I32,
    end: I32,
    t: usize,
}

impl SeqSpans {
    /// From the `B+1` token offsets `cu` of the packed batch (`cu[0] = 0`, ascending).
    pub fn new(gpu: &Gpu, cu: &[usize]) -> Result<SeqSpans> {
        if cu.first() != Some(&0) || cu.windows(2).any(|w| w[0] > w[1]) || *cu.last().unwrap_or(&0) > i32::MAX as usize {
            return Err(DeviceError::Shape { op: "attention_backward", msg: format!("bad sequence offsets {cu:?}") });
        }
        let (mut start, mut end) = (vec![], vec![]);
        for w in cu.windows(2) {
            for _ in w[0]..w[1] {
                start.push(w[0] as i32);
                end.push(w[1] as i32);
            }
        }
        let t = start.len();
        Ok(SeqSpans { start: gpu.upload(&start)?, end: gpu.upload(&end)?, t })
    }

    /// Tokens of the batch.
    pub fn tokens(&self) -> usize {
        self.t
    }
}

/// Backward of [`ops::split_q_gate`]: `dq [t, hq, hd]` and `dgate` back into `dqg [t, hq, 2·hd]`.
pub fn merge_q_gate<A: Act>(
    gpu: &Gpu,
    dq: &DeviceBuffer<A>,
    dgate: &DeviceBuffer<A>,
    dqg: &mut DeviceBuffer<A>,
    t: usize,
    hq: usize,
    hd: usize,
) -> Result<()> {
    let n = t * hq * hd;
    need("merge_q_gate", dq.len() >= n && dgate.len() >= n && dqg.len() >= 2 * n, || format!("t={t} hq={hq} hd={hd}"))?;
    launch!(gpu, A::kernel("merge_q_gate"), cfg((t, 1, 1), 256, 0), dq, dgate, dqg, &(hq as i32), &(hd as i32))
}

/// Causal GQA softmax attention backward over packed sequences (flash-style: probabilities
/// recomputed from `q`, `k` and each row's log-sum-exp): `dq [t, hq, hd]`, `dk`, `dv`
/// `[t, hkv, hd]` from `q`, `k`, `v`, the forward output `o` and its gradient `dout`.
pub fn attention_backward<A: Act>(
    gpu: &Gpu,
    q: &DeviceBuffer<A>,
    k: &DeviceBuffer<A>,
    v: &DeviceBuffer<A>,
    o: &DeviceBuffer<A>,
    dout: &DeviceBuffer<A>,
    spans: &SeqSpans,
    dq: &mut DeviceBuffer<A>,
    dk: &mut DeviceBuffer<A>,
    dv: &mut DeviceBuffer<A>,
    hq: usize,
    hkv: usize,
    hd: usize,
) -> Result<()> {
    let t = spans.t;
    let (nq, nk) = (t * hq * hd, t * hkv * hd);
    need(
        "attention_backward",
        hd <= 256
            && hkv > 0
            && hq.is_multiple_of(hkv)
            && [q.len(), o.len(), dout.len(), dq.len()].iter().all(|&l| l >= nq)
            && [k.len(), v.len(), dk.len(), dv.len()].iter().all(|&l| l >= nk),
        || format!("t={t} hq={hq} hkv={hkv} hd={hd}"),
    )?;
    if t == 0 {
        return Ok(());
    }
    let scale = 1.0 / (hd as f32).sqrt();
    let (mut lse, mut dsum) = (gpu.zeros::<f32>(t * hq)?, gpu.zeros::<f32>(t * hq)?);
    let (hq32, hkv32, hd32) = (hq as i32, hkv as i32, hd as i32);
    launch!(
        gpu,
        A::kernel("attn_bwd_prep"),
        cfg((t, hq, 1), 128, 0),
        q,
        k,
        o,
        dout,
        &spans.start,
        &mut lse,
        &mut dsum,
        &hq32,
        &hkv32,
        &hd32,
        &scale
    )?;
    launch!(
        gpu,
        A::kernel("attn_bwd_dq"),
        cfg((t, hq, 1), 128, 0),
        q,
        k,
        v,
        dout,
        &lse,
        &dsum,
        &spans.start,
        dq,
        &hq32,
        &hkv32,
        &hd32,
        &scale
    )?;
    launch!(
        gpu,
        A::kernel("attn_bwd_dkv"),
        cfg((t, hkv, 1), 128, 0),
        q,
        k,
        v,
        dout,
        &lse,
        &dsum,
        &spans.end,
        dk,
        dv,
        &hq32,
        &hkv32,
        &hd32,
        &scale
    )
}

// ---------------------------------------------------------------- Gated DeltaNet

/// Backward of [`ops::causal_conv`] (depthwise conv + SiLU) over the packed sequences `cu`
/// (`B+1` offsets) through the conv state: `state` is the pool the forward started from
/// (`[slots, c, k−1]` fp32, read at `slots[b]`; `None` = zero history), `dstate` receives the
/// gradient w.r.t. it (same layout). Writes `dx [t, c]`, accumulates `dw [c, k]` (fp32).
pub fn causal_conv_backward<A: Act>(
    gpu: &Gpu,
    x: &DeviceBuffer<A>,
    state: Option<&F32>,
    w: &DeviceBuffer<A>,
    dy: &DeviceBuffer<A>,
    dx: &mut DeviceBuffer<A>,
    dstate: Option<&mut F32>,
    dw: &mut F32,
    cu: &[usize],
    slots: &[usize],
    c: usize,
    k: usize,
) -> Result<()> {
    let b = cu.len().saturating_sub(1);
    let t = cu.last().copied().unwrap_or(0);
    let pool_slots = slots.iter().max().map_or(0, |s| s + 1);
    let pool_ok = |p: Option<&F32>| p.is_none_or(|p| p.len() >= pool_slots * c * (k - 1));
    need(
        "causal_conv_backward",
        (2..=8).contains(&k)
            && cu.first() == Some(&0)
            && cu.windows(2).all(|w| w[0] <= w[1])
            && slots.len() == b
            && x.len() >= t * c
            && dy.len() >= t * c
            && dx.len() >= t * c
            && w.len() >= c * k
            && dw.len() >= c * k
            && pool_ok(state)
            && pool_ok(dstate.as_deref())
            && t <= i32::MAX as usize,
        || format!("cu={cu:?} slots={slots:?} c={c} k={k}"),
    )?;
    let cu_d = gpu.upload(&cu.iter().map(|&v| v as i32).collect::<Vec<_>>())?;
    let slots_d = gpu.upload(&slots.iter().map(|&v| v as i32).chain([0]).collect::<Vec<_>>())?;
    launch!(
        gpu,
        A::kernel("causal_conv_bwd"),
        cfg((c.div_ceil(128), 1, 1), 128, 0),
        x,
        state,
        w,
        dy,
        dx,
        dstate.as_deref(),
        dw,
        &cu_d,
        &slots_d,
        &(b as i32),
        &(c as i32),
        &(k as i32)
    )
}

/// Backward of [`ops::gdn_gates`] (`β = σ(b)`, `g = −exp(A_log)·softplus(a + dt_bias)` over
/// `[t, hv]`) from the delta rule's `dβ`, `dg` (fp32): writes `db`, `da`, accumulates the
/// per-head `d_alog`, `d_dt` (fp32, tokens summed in order).
pub fn gdn_gates_backward<A: Act>(
    gpu: &Gpu,
    b: &DeviceBuffer<A>,
    a: &DeviceBuffer<A>,
    a_log: &F32,
    dt_bias: &F32,
    dbeta: &F32,
    dg: &F32,
    db: &mut DeviceBuffer<A>,
    da: &mut DeviceBuffer<A>,
    d_alog: &mut F32,
    d_dt: &mut F32,
    t: usize,
    hv: usize,
) -> Result<()> {
    let n = t * hv;
    need(
        "gdn_gates_backward",
        [b.len(), a.len(), db.len(), da.len()].iter().all(|&l| l >= n)
            && dbeta.len() >= n
            && dg.len() >= n
            && [a_log.len(), dt_bias.len(), d_alog.len(), d_dt.len()].iter().all(|&l| l >= hv),
        || format!("t={t} hv={hv}"),
    )?;
    launch!(
        gpu,
        A::kernel("gdn_gates_bwd"),
        cfg((hv.div_ceil(128), 1, 1), 128, 0),
        b,
        a,
        a_log,
        dt_bias,
        dbeta,
        dg,
        db,
        da,
        d_alog,
        d_dt,
        &(t as i32),
        &(hv as i32)
    )
}

// ---------------------------------------------------------------- Gated DeltaNet core

/// Tokens per chunk of [`delta_rule_backward`]'s recomputation (`model::gdn::CHUNK`, the CPU
/// trainer's chunk: the states at the chunk starts are kept, the per-step states of one chunk
/// are recomputed at a time).
pub const DELTA_CHUNK: usize = 64;

/// Largest key and value head dimension of [`delta_rule_backward`] (`DELTA_BWD_MAX` in
/// `gdn_bwd.cu`).
pub const DELTA_MAX_DIM: usize = 256;

/// Backward of the gated delta rule (`ops::gdn_chunked` from ZERO states, one state per
/// (sequence, value head), sequences packed by `cu` = B+1 token offsets) given the gradient of
/// its output `dout [t, hv, dv]` (storage type A, as the forward's `out`). Recomputes the
/// chunk-start states itself (a forward pass over each sequence, fp32 state, saving the state at
/// the start of every chunk of `model::gdn::CHUNK` tokens in a device scratch), then walks each
/// chunk backwards exactly like `train::layers::delta_rule::backward` (recompute the chunk's
/// per-step states from its start state, back-propagate through time).
/// Writes (overwrites) fp32: dq, dk `[t, hk, dk]` (the sum over the value heads that share each
/// key head, in a fixed order: deterministic), dv `[t, hv, dv]`, dbeta, dg `[t, hv]`.
/// Scratch (allocated here): `Σ_b ⌈len_b/64⌉·hv·dk·dv` floats of chunk starts,
/// `B·hv·66·dk·dv` of per-step states and state gradients, `2·t·hv·dk` of per-head dq, dk.
pub fn delta_rule_backward<A: Act>(
    gpu: &Gpu,
    x: &ops::DeltaBufs<'_>,
    cu: &[usize],
    dout: &DeviceBuffer<A>,
    dq: &mut F32,
    dk: &mut F32,
    dv: &mut F32,
    dbeta: &mut F32,
    dg: &mut F32,
) -> Result<()> {
    let (hk, hv, kd, vd) = (x.hk, x.hv, x.dk, x.dv);
    let b = cu.len().saturating_sub(1);
    let t = cu.last().copied().unwrap_or(0);
    let (nk, nv, ng) = (t * hk * kd, t * hv * vd, t * hv);
    need(
        "delta_rule_backward",
        cu.first() == Some(&0)
            && cu.windows(2).all(|w| w[0] <= w[1])
            && hk > 0
            && hv.is_multiple_of(hk)
            && (1..=DELTA_MAX_DIM).contains(&kd)
            && (1..=DELTA_MAX_DIM).contains(&vd)
            && t <= i32::MAX as usize
            && [x.qn.len(), x.kn.len(), dq.len(), dk.len()].iter().all(|&l| l >= nk)
            && [x.v.len(), dout.len(), dv.len()].iter().all(|&l| l >= nv)
            && [x.beta.len(), x.g.len(), dbeta.len(), dg.len()].iter().all(|&l| l >= ng),
        || format!("cu={cu:?} hk={hk} hv={hv} dk={kd} dv={vd} (dk, dv in 1..={DELTA_MAX_DIM}, hv a multiple of hk)"),
    )?;
    if t == 0 {
        return Ok(());
    }
    // First chunk of each sequence in the chunk-start scratch.
    let mut coff = vec![0usize];
    for w in cu.windows(2) {
        coff.push(coff[coff.len() - 1] + (w[1] - w[0]).div_ceil(DELTA_CHUNK));
    }
    let state = kd * vd;
    let mut starts = gpu.zeros::<f32>(coff[b] * hv * state)?;
    let mut work = gpu.zeros::<f32>(b * hv * (DELTA_CHUNK + 2) * state)?;
    let (mut dqh, mut dkh) = (gpu.zeros::<f32>(t * hv * kd)?, gpu.zeros::<f32>(t * hv * kd)?);
    let to_i32 = |v: &[usize]| v.iter().map(|&x| x as i32).collect::<Vec<_>>();
    let (cu_d, coff_d) = (gpu.upload(&to_i32(cu))?, gpu.upload(&to_i32(&coff))?);
    let (hk32, hv32, kd32) = (hk as i32, hv as i32, kd as i32);
    launch!(
        gpu,
        A::kernel("gdn_delta_bwd"),
        cfg((b, hv, 1), vd.div_ceil(32) * 32, 0),
        x.qn,
        x.kn,
        x.v,
        x.beta,
        x.g,
        dout,
        &mut dqh,
        &mut dkh,
        dv,
        dbeta,
        dg,
        &mut starts,
        &mut work,
        &cu_d,
        &coff_d,
        &hk32,
        &hv32,
        &kd32,
        &(vd as i32),
        &(DELTA_CHUNK as i32)
    )?;
    for (per_head, out) in [(&dqh, dq), (&dkh, dk)] {
        launch!(
            gpu,
            <f32 as Act>::kernel("gdn_heads_sum"),
            stride_cfg(nk),
            per_head,
            out,
            &hk32,
            &hv32,
            &kd32,
            &(nk as i64)
        )?;
    }
    Ok(())
}

/// Backward of `ops::gdn_qkv_prep` (q̂ = q/|q|·dk^-½, k̂ = k/|k| per key head, v copied, from
/// the conv output `y [t, 2·hk·dk + hv·dv]`): from fp32 dq̂, dk̂ `[t, hk, dk]` and dv `[t, hv, dv]`
/// writes (overwrites) `dy [t, 2·hk·dk + hv·dv]` in the storage type.
pub fn gdn_qkv_prep_backward<A: Act>(
    gpu: &Gpu,
    y: &DeviceBuffer<A>,
    dqn: &F32,
    dkn: &F32,
    dv: &F32,
    dy: &mut DeviceBuffer<A>,
    t: usize,
    hk: usize,
    hv: usize,
    dk: usize,
    dv_dim: usize,
) -> Result<()> {
    let conv = 2 * hk * dk + hv * dv_dim;
    need(
        "gdn_qkv_prep_backward",
        hk > 0
            && hv.is_multiple_of(hk)
            && y.len() >= t * conv
            && dy.len() >= t * conv
            && dqn.len() >= t * hk * dk
            && dkn.len() >= t * hk * dk
            && dv.len() >= t * hv * dv_dim,
        || format!("t={t} hk={hk} hv={hv} dk={dk} dv={dv_dim}"),
    )?;
    if t == 0 {
        return Ok(());
    }
    launch!(
        gpu,
        A::kernel("gdn_qkv_prep_bwd"),
        cfg((t, hk, 1), 128, 0),
        y,
        dqn,
        dkn,
        dv,
        dy,
        &(hk as i32),
        &(hv as i32),
        &(dk as i32),
        &(dv_dim as i32),
        &ops::GDN_QK_NORM_EPS
    )
}
