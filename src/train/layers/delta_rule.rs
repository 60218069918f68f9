//! The gated delta rule of one value head, for training: the forward runs the model's chunked
//! form chunk by chunk from a zero state and keeps only the state at each chunk start; the
//! backward recomputes the per-step states of one chunk at a time with the recurrent form (the
//! same math: `S̃ = e^g S`, `δ = β(v − S̃ᵀk)`, `S = S̃ + k δᵀ`, `o = Sᵀq`) and back-propagates
//! through time in reverse. Memory: one `[dk, dv]` state per chunk plus one chunk of states.

use crate::model::gdn::{chunked_delta_rule, DeltaInput, CHUNK};

/// Gradients w.r.t. every input of [`DeltaInput`].
pub struct DeltaGrads {
    pub dq: Vec<f32>,
    pub dk: Vec<f32>,
    pub dv: Vec<f32>,
    pub dbeta: Vec<f32>,
    pub dg: Vec<f32>,
}

/// Forward from a zero state: `(out [T, dv], state at the start of every chunk)`.
pub fn forward(x: &DeltaInput<'_>) -> (Vec<f32>, Vec<Vec<f32>>) {
    let (dk, dv, steps) = (x.dk, x.dv, x.beta.len());
    let mut state = vec![0.0f32; dk * dv];
    let mut out = Vec::with_capacity(steps * dv);
    let mut starts = Vec::new();
    let mut c0 = 0;
    while c0 < steps {
        let l = CHUNK.min(steps - c0);
        starts.push(state.clone());
        let part = DeltaInput {
            q: &x.q[c0 * dk..(c0 + l) * dk],
            k: &x.k[c0 * dk..(c0 + l) * dk],
            v: &x.v[c0 * dv..(c0 + l) * dv],
            beta: &x.beta[c0..c0 + l],
            g: &x.g[c0..c0 + l],
            dk,
            dv,
        };
        out.extend(chunked_delta_rule(&part, &mut state, CHUNK));
        c0 += l;
    }
    (out, starts)
}

/// Backward given the chunk-start states of [`forward`] and `dout [T, dv]`.
pub fn backward(x: &DeltaInput<'_>, starts: &[Vec<f32>], dout: &[f32]) -> DeltaGrads {
    let (dk, dv, steps) = (x.dk, x.dv, x.beta.len());
    let mut gr = DeltaGrads {
        dq: vec![0.0; steps * dk],
        dk: vec![0.0; steps * dk],
        dv: vec![0.0; steps * dv],
        dbeta: vec![0.0; steps],
        dg: vec![0.0; steps],
    };
    let mut ds = vec![0.0f32; dk * dv];
    let mut dst = vec![0.0f32; dk * dv];
    for (ci, s0) in starts.iter().enumerate().rev() {
        let c0 = ci * CHUNK;
        let l = CHUNK.min(steps - c0);
        // Recompute S_t (after step t) and δ_t, m_t for the chunk.
        let mut states = Vec::with_capacity((l + 1) * dk * dv);
        states.extend_from_slice(s0);
        let mut deltas = vec![0.0f32; l * dv];
        let mut ms = vec![0.0f32; l * dv];
        for i in 0..l {
            let t = c0 + i;
            let kt = &x.k[t * dk..(t + 1) * dk];
            let decay = x.g[t].exp();
            let prev = states[i * dk * dv..(i + 1) * dk * dv].to_vec();
            let mut s: Vec<f32> = prev.iter().map(|v| v * decay).collect();
            let m = &mut ms[i * dv..(i + 1) * dv];
            for a in 0..dk {
                for d in 0..dv {
                    m[d] += s[a * dv + d] * kt[a];
                }
            }
            for d in 0..dv {
                deltas[i * dv + d] = x.beta[t] * (x.v[t * dv + d] - m[d]);
            }
            for a in 0..dk {
                for d in 0..dv {
                    s[a * dv + d] += kt[a] * deltas[i * dv + d];
                }
            }
            states.extend_from_slice(&s);
        }
        for i in (0..l).rev() {
            let t = c0 + i;
            let (qt, kt, vt) = (&x.q[t * dk..(t + 1) * dk], &x.k[t * dk..(t + 1) * dk], &x.v[t * dv..(t + 1) * dv]);
            let s_t = &states[(i + 1) * dk * dv..(i + 2) * dk * dv];
            let s_prev = &states[i * dk * dv..(i + 1) * dk * dv];
            let dot_ = &dout[t * dv..(t + 1) * dv];
            let delta = &deltas[i * dv..(i + 1) * dv];
            let m = &ms[i * dv..(i + 1) * dv];
            // o = Sᵀq
            for a in 0..dk {
                let mut acc = 0.0;
                for d in 0..dv {
                    acc += s_t[a * dv + d] * dot_[d];
                    ds[a * dv + d] += qt[a] * dot_[d];
                }
                gr.dq[t * dk + a] = acc;
            }
            // S = S̃ + k δᵀ
            let mut ddelta = vec![0.0f32; dv];
            for a in 0..dk {
                let mut acc = 0.0;
                for d in 0..dv {
                    acc += ds[a * dv + d] * delta[d];
                    ddelta[d] += ds[a * dv + d] * kt[a];
                }
                gr.dk[t * dk + a] = acc;
            }
            // δ = β(v − m)
            let beta = x.beta[t];
            let mut dbeta = 0.0;
            let mut dm = vec![0.0f32; dv];
            for d in 0..dv {
                gr.dv[t * dv + d] = beta * ddelta[d];
                dbeta += ddelta[d] * (vt[d] - m[d]);
                dm[d] = -beta * ddelta[d];
            }
            gr.dbeta[t] = dbeta;
            // m = S̃ᵀk ; S̃ = e^g S_prev
            let decay = x.g[t].exp();
            let mut dgt = 0.0;
            for a in 0..dk {
                let mut acc = 0.0;
                for d in 0..dv {
                    let st = decay * s_prev[a * dv + d];
                    acc += st * dm[d];
                    let dstil = ds[a * dv + d] + kt[a] * dm[d];
                    dgt += dstil * st;
                    dst[a * dv + d] = decay * dstil;
                }
                gr.dk[t * dk + a] += acc;
            }
            gr.dg[t] = dgt;
            std::mem::swap(&mut ds, &mut dst);
        }
    }
    gr
}
