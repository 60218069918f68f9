//! Sparse MoE block (`Qwen3_5MoeSparseMoeBlock`): softmax router, top-k with renormalisation
//! (or forced experts for routing replay), SwiGLU experts (fused `gate_up_proj`/`down_proj` or
//! per-expert tensors), and the sigmoid-gated shared expert.

use super::backend::schema::{FfnParams, MoeParams};
use super::source::WeightSource;
use super::config::ModelConfig;
use super::error::{ModelError, Result};
use crate::tensor::cpu::{axpy, dot, sigmoid, softmax, swiglu, SMALL_M};
use crate::tensor::linear::{linear, linear_batch, LinearJob};
use crate::tensor::profile::scope;
use crate::tensor::Tensor;
use rayon::prelude::*;

/// One SwiGLU feed-forward: `down(SiLU(x·gateᵀ) ⊙ x·upᵀ)`.
pub struct Ffn {
    /// `[gate; up]` as one `[2·inter, hidden]` view when the checkpoint stores them fused
    /// (one product instead of two; `gate`/`up` are views of the same memory).
    gate_up: Option<Tensor>,
    gate: Tensor,
    up: Tensor,
    down: Tensor,
}

impl Ffn {
    /// Separate gate, up and down matrices.
    fn load(ck: &mut dyn WeightSource, n: &FfnParams) -> Result<Self> {
        Ok(Ffn {
            gate_up: None,
            gate: ck.get_param_weight(&n.gate)?,
            up: ck.get_param_weight(&n.up)?,
            down: ck.get_param_weight(&n.down)?,
        })
    }

    /// Rows `x [m, hidden]` → `[m, hidden]`.
    fn forward(&self, x: &[f32], m: usize, parallel: bool) -> Vec<f32> {
        Self::forward_batch(&[(self, x, m)], parallel).pop().expect("one output per FFN")
    }

    /// Several FFNs on their own rows (`(ffn, x [m, hidden], m)`), each → `[m, hidden]`: all
    /// gate/up products as one [`linear_batch`], SwiGLU, then all down products as another (for
    /// few rows, one parallel region per stage over every FFN's column blocks).
    fn forward_batch(ffns: &[(&Ffn, &[f32], usize)], parallel: bool) -> Vec<Vec<f32>> {
        let width = |f: &Ffn| (f.gate.rows(), f.down.rows());
        // Stage 1: [gate | up] per FFN, `[m, 2·inter]` (fused) or gate and up separately.
        let mut gu: Vec<Vec<f32>> = ffns.iter().map(|(f, _, m)| vec![0.0; m * 2 * width(f).0]).collect();
        let mut up: Vec<Vec<f32>> = ffns
            .iter()
            .map(|(f, _, m)| if f.gate_up.is_some() { Vec::new() } else { vec![0.0; m * width(f).0] })
            .collect();
        let mut jobs = Vec::new();
        for ((&(f, x, m), g), u) in ffns.iter().zip(gu.iter_mut()).zip(up.iter_mut()) {
            let (inter, hidden) = width(f);
            match &f.gate_up {
                Some(both) => jobs.push(LinearJob { x, m, k: hidden, w: both.weight(), n: 2 * inter, out: g }),
                None => {
                    let g = &mut g[..m * inter];
                    jobs.push(LinearJob { x, m, k: hidden, w: f.gate.weight(), n: inter, out: g });
                    jobs.push(LinearJob { x, m, k: hidden, w: f.up.weight(), n: inter, out: u });
                }
            }
        }
        linear_batch(&mut jobs, parallel);
        drop(jobs);
        // SwiGLU into the first m·inter values of each buffer.
        for ((&(f, _, m), g), u) in ffns.iter().zip(gu.iter_mut()).zip(&up) {
            let inter = width(f).0;
            if f.gate_up.is_some() {
                // Row r's [gate | up] → SiLU(gate)⊙up, compacted to row r of `[m, inter]`
                // (the destination never overlaps a later row's source).
                for r in 0..m {
                    let (gate, upv) = g[r * 2 * inter..(r + 1) * 2 * inter].split_at_mut(inter);
                    swiglu(gate, upv);
                    g.copy_within(r * 2 * inter..r * 2 * inter + inter, r * inter);
                }
            } else {
                swiglu(&mut g[..m * inter], u);
            }
        }
        // Stage 2: down products.
        let mut ys: Vec<Vec<f32>> = ffns.iter().map(|(f, _, m)| vec![0.0; m * width(f).1]).collect();
        let mut jobs: Vec<LinearJob<'_>> = ffns
            .iter()
            .zip(&gu)
            .zip(ys.iter_mut())
            .map(|((&(f, _, m), g), y)| {
                let (inter, hidden) = width(f);
                LinearJob { x: &g[..m * inter], m, k: inter, w: f.down.weight(), n: hidden, out: y }
            })
            .collect();
        linear_batch(&mut jobs, parallel);
        drop(jobs);
        ys
    }
}

pub struct Moe {
    router: Tensor,
    experts: Vec<Ffn>,
    shared: Ffn,
    shared_gate: Tensor,
    top_k: usize,
}

/// Router outputs for the batch.
pub struct RouteRecord {
    /// `[N, E]`
    pub logits: Vec<f32>,
    /// `[N, k]`
    pub experts: Vec<u32>,
}

/// One token's routing: softmax of its router logits `p` (in place, leaving the probabilities),
/// then its experts — the `forced` ones (routing replay; a row starting with `u32::MAX` keeps the
/// router's choice) or the top-k by probability (descending, ties to the lower index) — into
/// `chosen`, and their probabilities renormalised over the chosen into `weights`.
pub fn route(p: &mut [f32], forced: Option<&[u32]>, chosen: &mut [u32], weights: &mut [f32]) {
    softmax(p);
    let idx: Vec<u32> = match forced {
        Some(f) if f[0] != u32::MAX => f.to_vec(),
        _ => {
            let mut order: Vec<u32> = (0..p.len() as u32).collect();
            order.sort_by(|&a, &b| p[b as usize].total_cmp(&p[a as usize]).then(a.cmp(&b)));
            order.truncate(chosen.len());
            order
        }
    };
    let sum: f32 = idx.iter().map(|&e| p[e as usize]).sum();
    for (j, &e) in idx.iter().enumerate() {
        chosen[j] = e;
        weights[j] = p[e as usize] / sum;
    }
}

impl Moe {
    pub fn load(ck: &mut dyn WeightSource, p: &str, c: &ModelConfig) -> Result<Self> {
        let (e, i) = (c.num_experts, c.moe_intermediate_size);
        let n = MoeParams::new(p, c);
        let experts = if ck.contains(&n.fused_gate_up.name) {
            let gu = ck.get_param_weight(&n.fused_gate_up)?;
            let down = ck.get_param_weight(&n.fused_down)?;
            (0..e)
                .map(|x| {
                    let g = gu.index0(x);
                    Ffn {
                        gate_up: Some(g.clone()),
                        gate: g.narrow0(0, i),
                        up: g.narrow0(i, i),
                        down: down.index0(x),
                    }
                })
                .collect()
        } else {
            (0..e)
                .map(|x| Ffn::load(ck, &n.expert(x)))
                .collect::<Result<Vec<_>>>()
                .map_err(|err| match err {
                    ModelError::MissingTensor(m) if !ck.contains(&n.expert(0).gate.name) => {
                        ModelError::MissingTensor(format!(
                            "{} (fused) or {m} (per expert)",
                            ck.full_name(&n.fused_gate_up.name)
                        ))
                    }
                    other => other,
                })?
        };
        Ok(Moe {
            router: ck.get_param_weight(&n.router)?,
            experts,
            shared: Ffn::load(ck, &n.shared)?,
            shared_gate: ck.get_param(&n.shared_gate)?,
            top_k: c.num_experts_per_tok,
        })
    }

    /// `x [N, hidden]` → (`[N, hidden]`, router record). `forced[t·k..]` replaces the top-k
    /// choice of token `t` when given (validated by the caller); a row starting with
    /// `u32::MAX` keeps the router's choice.
    pub fn forward(&self, x: &[f32], n: usize, forced: Option<&[u32]>) -> (Vec<f32>, RouteRecord) {
        let hidden = self.router.shape()[1];
        let ne = self.experts.len();
        let k = self.top_k;
        let p = scope("moe.router");
        let mut logits = vec![0.0; n * ne];
        linear(x, n, hidden, self.router.weight(), ne, &mut logits, true);

        // Routing: softmax, top-k (descending, ties to the lower index), renormalise.
        let mut chosen = vec![0u32; n * k];
        let mut weights = vec![0.0f32; n * k];
        for t in 0..n {
            let mut p = logits[t * ne..(t + 1) * ne].to_vec();
            let f = forced.map(|f| &f[t * k..(t + 1) * k]);
            route(&mut p, f, &mut chosen[t * k..(t + 1) * k], &mut weights[t * k..(t + 1) * k]);
        }

        drop(p);
        let p = scope("moe.experts+shared");
        // Group tokens by expert and run each active expert on its rows.
        let mut rows_of: Vec<Vec<(usize, f32)>> = vec![Vec::new(); ne];
        for t in 0..n {
            for j in 0..k {
                rows_of[chosen[t * k + j] as usize].push((t, weights[t * k + j]));
            }
        }
        let active: Vec<usize> = (0..ne).filter(|&e| !rows_of[e].is_empty()).collect();
        let gathered: Vec<Vec<f32>> = active
            .iter()
            .map(|&e| {
                let mut xs = vec![0.0; rows_of[e].len() * hidden];
                for (dst, &(t, _)) in xs.chunks_exact_mut(hidden).zip(&rows_of[e]) {
                    dst.copy_from_slice(&x[t * hidden..(t + 1) * hidden]);
                }
                xs
            })
            .collect();
        // The shared expert first (on every row), then each active expert on its rows.
        let ffns: Vec<(&Ffn, &[f32], usize)> = std::iter::once((&self.shared, x, n))
            .chain(active.iter().zip(&gathered).map(|(&e, xs)| (&self.experts[e], &xs[..], rows_of[e].len())))
            .collect();
        let mut results: Vec<Vec<f32>> = if n <= SMALL_M {
            // Decode: every product has few rows; all FFNs' column blocks share both cores.
            Ffn::forward_batch(&ffns, true)
        } else {
            // Prefill: one task per FFN so both cores stay busy on whole GEMMs (the shared
            // expert, the largest, first); a GEMM splits over threads only when there are
            // fewer tasks than threads.
            let inner_parallel = ffns.len() < rayon::current_num_threads();
            ffns.par_iter().map(|&(f, xs, m)| f.forward(xs, m, inner_parallel)).collect()
        };
        let routed = results.split_off(1);
        let mut out = results.pop().expect("the shared expert's task");
        drop(p);
        let _p = scope("moe.combine");
        let sg = self.shared_gate.data();
        for (t, row) in out.chunks_exact_mut(hidden).enumerate() {
            let gate = sigmoid(dot(&x[t * hidden..(t + 1) * hidden], sg));
            for v in row.iter_mut() {
                *v *= gate;
            }
        }
        for (&e, y) in active.iter().zip(&routed) {
            for (r, &(t, w)) in rows_of[e].iter().enumerate() {
                axpy(
                    w,
                    &y[r * hidden..(r + 1) * hidden],
                    &mut out[t * hidden..(t + 1) * hidden],
                );
            }
        }
        (
            out,
            RouteRecord {
                logits,
                experts: chosen,
            },
        )
    }
}
