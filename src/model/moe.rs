//! Sparse MoE block (`Qwen3_5MoeSparseMoeBlock`): softmax router, top-k with renormalisation
//! (or forced experts for routing replay), SwiGLU experts (fused `gate_up_proj`/`down_proj` or
//! per-expert tensors), and the sigmoid-gated shared expert.

use super::source::WeightSource;
use super::config::ModelConfig;
use super::error::{ModelError, Result};
use crate::tensor::cpu::{axpy, dot, matmul_t, sigmoid, silu, softmax};
use crate::tensor::Tensor;
use rayon::prelude::*;

/// One SwiGLU feed-forward: `down(SiLU(x·gateᵀ) ⊙ x·upᵀ)`.
pub struct Ffn {
    gate: Tensor,
    up: Tensor,
    down: Tensor,
}

impl Ffn {
    /// Rows `x [m, hidden]` → `[m, hidden]`.
    fn forward(&self, x: &[f32], m: usize, parallel: bool) -> Vec<f32> {
        let (inter, hidden) = (self.gate.rows(), self.down.rows());
        let mut g = vec![0.0; m * inter];
        let mut u = vec![0.0; m * inter];
        matmul_t(x, m, hidden, self.gate.data(), inter, &mut g, parallel);
        matmul_t(x, m, hidden, self.up.data(), inter, &mut u, parallel);
        for (gg, uu) in g.iter_mut().zip(&u) {
            *gg = silu(*gg) * uu;
        }
        let mut y = vec![0.0; m * hidden];
        matmul_t(&g, m, inter, self.down.data(), hidden, &mut y, parallel);
        y
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

impl Moe {
    pub fn load(ck: &mut dyn WeightSource, p: &str, c: &ModelConfig) -> Result<Self> {
        let (h, e, i, is) = (
            c.hidden_size,
            c.num_experts,
            c.moe_intermediate_size,
            c.shared_expert_intermediate_size,
        );
        let fused = format!("{p}experts.gate_up_proj");
        let experts = if ck.contains(&fused) {
            let gu = ck.get(&fused, &[e, 2 * i, h])?;
            let down = ck.get(&format!("{p}experts.down_proj"), &[e, h, i])?;
            (0..e)
                .map(|x| {
                    let g = gu.index0(x);
                    Ffn {
                        gate: g.narrow0(0, i),
                        up: g.narrow0(i, i),
                        down: down.index0(x),
                    }
                })
                .collect()
        } else {
            (0..e)
                .map(|x| {
                    Ok(Ffn {
                        gate: ck.get(&format!("{p}experts.{x}.gate_proj.weight"), &[i, h])?,
                        up: ck.get(&format!("{p}experts.{x}.up_proj.weight"), &[i, h])?,
                        down: ck.get(&format!("{p}experts.{x}.down_proj.weight"), &[h, i])?,
                    })
                })
                .collect::<Result<Vec<_>>>()
                .map_err(|err| match err {
                    ModelError::MissingTensor(n) if !ck.contains(&format!("{p}experts.0.gate_proj.weight")) => {
                        ModelError::MissingTensor(format!("{} (fused) or {n} (per expert)", ck.full_name(&fused)))
                    }
                    other => other,
                })?
        };
        Ok(Moe {
            router: ck.get(&format!("{p}gate.weight"), &[e, h])?,
            experts,
            shared: Ffn {
                gate: ck.get(&format!("{p}shared_expert.gate_proj.weight"), &[is, h])?,
                up: ck.get(&format!("{p}shared_expert.up_proj.weight"), &[is, h])?,
                down: ck.get(&format!("{p}shared_expert.down_proj.weight"), &[h, is])?,
            },
            shared_gate: ck.get(&format!("{p}shared_expert_gate.weight"), &[1, h])?,
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
        let mut logits = vec![0.0; n * ne];
        matmul_t(x, n, hidden, self.router.data(), ne, &mut logits, true);

        // Routing: softmax, top-k (descending, ties to the lower index), renormalise.
        let mut chosen = vec![0u32; n * k];
        let mut weights = vec![0.0f32; n * k];
        for t in 0..n {
            let mut p = logits[t * ne..(t + 1) * ne].to_vec();
            softmax(&mut p);
            let idx: Vec<u32> = match forced.map(|f| &f[t * k..(t + 1) * k]) {
                Some(f) if f[0] != u32::MAX => f.to_vec(),
                _ => {
                    let mut order: Vec<u32> = (0..ne as u32).collect();
                    order.sort_by(|&a, &b| p[b as usize].total_cmp(&p[a as usize]).then(a.cmp(&b)));
                    order.truncate(k);
                    order
                }
            };
            let sum: f32 = idx.iter().map(|&e| p[e as usize]).sum();
            for (j, &e) in idx.iter().enumerate() {
                chosen[t * k + j] = e;
                weights[t * k + j] = p[e as usize] / sum;
            }
        }

        // Group tokens by expert and run each active expert on its rows.
        let mut rows_of: Vec<Vec<(usize, f32)>> = vec![Vec::new(); ne];
        for t in 0..n {
            for j in 0..k {
                rows_of[chosen[t * k + j] as usize].push((t, weights[t * k + j]));
            }
        }
        let active: Vec<usize> = (0..ne).filter(|&e| !rows_of[e].is_empty()).collect();
        let inner_parallel = active.len() < rayon::current_num_threads();
        let results: Vec<Vec<f32>> = active
            .par_iter()
            .map(|&e| {
                let rows = &rows_of[e];
                let xs: Vec<f32> = rows
                    .iter()
                    .flat_map(|&(t, _)| x[t * hidden..(t + 1) * hidden].iter().copied())
                    .collect();
                self.experts[e].forward(&xs, rows.len(), inner_parallel)
            })
            .collect();
        let mut out = self.shared.forward(x, n, true);
        let sg = self.shared_gate.data();
        for (t, row) in out.chunks_exact_mut(hidden).enumerate() {
            let gate = sigmoid(dot(&x[t * hidden..(t + 1) * hidden], sg));
            for v in row.iter_mut() {
                *v *= gate;
            }
        }
        for (&e, y) in active.iter().zip(&results) {
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
