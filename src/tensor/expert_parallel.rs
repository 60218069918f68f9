//! Expert parallelism across ranks (GPUs of one node): the routing plan and the two all-to-all
//! exchanges of an MoE layer. Experts are placed in contiguous blocks (`E / ranks` per rank);
//! every rank holds its own tokens (data parallel for attention/GDN), routes them, **dispatches**
//! each (token, slot) row to the rank owning the chosen expert, runs its local experts on what
//! it received (grouped by expert), and **combines**: results travel back along the same route
//! and are summed in slot order with the router weights, so the result is bitwise the one a
//! single rank holding all experts computes.
//!
//! The exchanges are written against [`Exchange`]: on GPUs an NCCL all-to-all (grouped
//! `ncclSend`/`ncclRecv`, see docs/cuda.md); here [`LocalExchange`] moves buffers in memory so
//! the plan runs on CPU with any number of simulated ranks.

/// Placement of `experts` experts on `ranks` ranks, contiguous blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub experts: usize,
    pub ranks: usize,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum EpError {
    #[error("{experts} experts cannot be split evenly over {ranks} ranks")]
    Uneven { experts: usize, ranks: usize },
    #[error("expert index {0} out of range")]
    BadExpert(usize),
    #[error("rank {rank}: {msg}")]
    Shape { rank: usize, msg: String },
}

impl Placement {
    pub fn new(experts: usize, ranks: usize) -> Result<Self, EpError> {
        if ranks == 0 || experts % ranks != 0 {
            return Err(EpError::Uneven { experts, ranks });
        }
        Ok(Placement { experts, ranks })
    }
    pub fn per_rank(&self) -> usize {
        self.experts / self.ranks
    }
    pub fn owner(&self, expert: usize) -> usize {
        expert / self.per_rank()
    }
}

/// One rank's routed tokens: hidden rows `x [t, h]`, top-k experts `idx [t, k]`, weights `w [t, k]`.
pub struct RankTokens<'a> {
    pub x: &'a [f32],
    pub idx: &'a [usize],
    pub w: &'a [f32],
}

/// A routed row in flight: where it came from (rank, token, slot) and its expert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowTag {
    pub src_rank: usize,
    pub token: usize,
    pub slot: usize,
    pub expert: usize,
}

/// An all-to-all among `ranks`: `send[src][dst]` → `recv[dst][src]`.
pub trait Exchange {
    fn all_to_all<T: Clone>(&mut self, send: Vec<Vec<Vec<T>>>) -> Vec<Vec<Vec<T>>>;
}

/// In-memory exchange (the CPU simulation of NCCL's all-to-all).
pub struct LocalExchange;

impl Exchange for LocalExchange {
    fn all_to_all<T: Clone>(&mut self, send: Vec<Vec<Vec<T>>>) -> Vec<Vec<Vec<T>>> {
        let n = send.len();
        let mut recv: Vec<Vec<Vec<T>>> = (0..n)
            .map(|_| (0..n).map(|_| Vec::new()).collect())
            .collect();
        for (src, row) in send.into_iter().enumerate() {
            for (dst, buf) in row.into_iter().enumerate() {
                recv[dst][src] = buf;
            }
        }
        recv
    }
}

/// Run one MoE layer's routed part with expert parallelism. `expert(e, rows, n)` computes expert
/// `e` on `n` rows (`[n, h]` → `[n, h]`) and is called on the owning rank only. Returns each
/// rank's `[t, h]` routed output `Σ_k w·expert(x)`.
pub fn moe_expert_parallel<F, X>(
    place: Placement,
    h: usize,
    k: usize,
    ranks: &[RankTokens<'_>],
    exchange: &mut X,
    expert: F,
) -> Result<Vec<Vec<f32>>, EpError>
where
    F: Fn(usize, &[f32], usize) -> Vec<f32>,
    X: Exchange,
{
    let r = place.ranks;
    if ranks.len() != r {
        return Err(EpError::Shape {
            rank: ranks.len(),
            msg: format!("expected {r} ranks"),
        });
    }
    // 1. dispatch: each source rank sorts its (token, slot) rows by destination rank.
    let mut send_rows: Vec<Vec<Vec<f32>>> = vec![vec![vec![]; r]; r];
    let mut send_tags: Vec<Vec<Vec<RowTag>>> = vec![vec![vec![]; r]; r];
    for (src, rt) in ranks.iter().enumerate() {
        let t = rt.x.len() / h;
        if rt.x.len() != t * h || rt.idx.len() != t * k || rt.w.len() != t * k {
            return Err(EpError::Shape {
                rank: src,
                msg: "x/idx/w sizes disagree".into(),
            });
        }
        for tok in 0..t {
            for slot in 0..k {
                let e = rt.idx[tok * k + slot];
                if e >= place.experts {
                    return Err(EpError::BadExpert(e));
                }
                let dst = place.owner(e);
                send_rows[src][dst].extend_from_slice(&rt.x[tok * h..(tok + 1) * h]);
                send_tags[src][dst].push(RowTag {
                    src_rank: src,
                    token: tok,
                    slot,
                    expert: e,
                });
            }
        }
    }
    let recv_rows = exchange.all_to_all(send_rows);
    let recv_tags = exchange.all_to_all(send_tags);
    // 2. local experts: group received rows by expert, compute, scatter back into arrival order.
    let mut back: Vec<Vec<Vec<f32>>> = vec![vec![vec![]; r]; r];
    for dst in 0..r {
        let tags: Vec<(usize, usize, RowTag)> = recv_tags[dst]
            .iter()
            .enumerate()
            .flat_map(|(src, v)| v.iter().enumerate().map(move |(i, t)| (src, i, *t)))
            .collect();
        let mut out: Vec<Vec<f32>> = recv_tags[dst]
            .iter()
            .map(|v| vec![0.0; v.len() * h])
            .collect();
        for e in dst * place.per_rank()..(dst + 1) * place.per_rank() {
            let mine: Vec<&(usize, usize, RowTag)> =
                tags.iter().filter(|(_, _, t)| t.expert == e).collect();
            if mine.is_empty() {
                continue;
            }
            let rows: Vec<f32> = mine
                .iter()
                .flat_map(|(src, i, _)| recv_rows[dst][*src][i * h..(i + 1) * h].iter().copied())
                .collect();
            let y = expert(e, &rows, mine.len());
            for (j, (src, i, _)) in mine.iter().enumerate() {
                out[*src][i * h..(i + 1) * h].copy_from_slice(&y[j * h..(j + 1) * h]);
            }
        }
        back[dst] = out;
    }
    // 3. combine: results return to their source rank; weighted sum in slot order.
    let returned = exchange.all_to_all(back);
    let mut outs = vec![];
    for (src, rt) in ranks.iter().enumerate() {
        let t = rt.x.len() / h;
        let mut y_of = vec![vec![0.0f32; h]; t * k];
        for (dst, buf) in returned[src].iter().enumerate() {
            for (i, tag) in send_tags_of(&recv_tags, dst, src).iter().enumerate() {
                y_of[tag.token * k + tag.slot].copy_from_slice(&buf[i * h..(i + 1) * h]);
            }
        }
        let mut o = vec![0.0f32; t * h];
        for tok in 0..t {
            for slot in 0..k {
                let w = rt.w[tok * k + slot];
                for (a, b) in o[tok * h..(tok + 1) * h]
                    .iter_mut()
                    .zip(&y_of[tok * k + slot])
                {
                    *a += w * b;
                }
            }
        }
        outs.push(o);
    }
    Ok(outs)
}

/// The tags `src` sent to `dst` (as `dst` received them), in order.
fn send_tags_of(recv_tags: &[Vec<Vec<RowTag>>], dst: usize, src: usize) -> &[RowTag] {
    &recv_tags[dst][src]
}

/// Bytes each rank sends in the dispatch all-to-all (bf16 rows) for a uniform routing: the
/// planning number of docs/cuda.md (`t` tokens per rank, hidden `h`, top-`k`, `r` ranks).
pub fn dispatch_bytes_per_rank(t: usize, h: usize, k: usize, r: usize) -> usize {
    t * k * h * 2 * (r - 1) / r
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    /// Small SwiGLU experts: gate/up `[i, h]`, down `[h, i]` each.
    struct Experts {
        gate: Vec<Vec<f32>>,
        up: Vec<Vec<f32>>,
        down: Vec<Vec<f32>>,
        h: usize,
        i: usize,
    }

    impl Experts {
        fn run(&self, e: usize, rows: &[f32], n: usize) -> Vec<f32> {
            use crate::tensor::cpu::{matmul_t, silu};
            let (h, i) = (self.h, self.i);
            let (mut g, mut u, mut y) = (vec![0.0; n * i], vec![0.0; n * i], vec![0.0; n * h]);
            matmul_t(rows, n, h, &self.gate[e], i, &mut g, false);
            matmul_t(rows, n, h, &self.up[e], i, &mut u, false);
            let act: Vec<f32> = g.iter().zip(&u).map(|(a, b)| silu(*a) * b).collect();
            matmul_t(&act, n, i, &self.down[e], h, &mut y, false);
            y
        }
    }

    #[test]
    fn dispatch_combine_equals_single_rank() {
        let (e, k, h, i) = (8, 3, 16, 8);
        let mut rng = ChaCha8Rng::seed_from_u64(7);
        let mut mat = |n: usize| {
            (0..n)
                .map(|_| rng.random_range(-0.5f32..0.5))
                .collect::<Vec<f32>>()
        };
        let ex = Experts {
            gate: (0..e).map(|_| mat(i * h)).collect(),
            up: (0..e).map(|_| mat(i * h)).collect(),
            down: (0..e).map(|_| mat(h * i)).collect(),
            h,
            i,
        };
        let t_total = 24;
        let x = mat(t_total * h);
        let mut idx = vec![];
        let mut w = vec![];
        let mut rng2 = ChaCha8Rng::seed_from_u64(9);
        for _ in 0..t_total {
            let mut chosen: Vec<usize> = vec![];
            while chosen.len() < k {
                let c = rng2.random_range(0..e);
                if !chosen.contains(&c) {
                    chosen.push(c);
                }
            }
            let raw: Vec<f32> = (0..k).map(|_| rng2.random_range(0.1f32..1.0)).collect();
            let s: f32 = raw.iter().sum();
            idx.extend(chosen);
            w.extend(raw.iter().map(|v| v / s));
        }
        // single rank: all experts local
        let one = moe_expert_parallel(
            Placement::new(e, 1).unwrap(),
            h,
            k,
            &[RankTokens {
                x: &x,
                idx: &idx,
                w: &w,
            }],
            &mut LocalExchange,
            |e, r, n| ex.run(e, r, n),
        )
        .unwrap();
        // direct reference, no exchange at all
        let mut direct = vec![0.0f32; t_total * h];
        for tok in 0..t_total {
            for s in 0..k {
                let y = ex.run(idx[tok * k + s], &x[tok * h..(tok + 1) * h], 1);
                for (a, b) in direct[tok * h..(tok + 1) * h].iter_mut().zip(&y) {
                    *a += w[tok * k + s] * b;
                }
            }
        }
        for (a, b) in one[0].iter().zip(&direct) {
            assert!(
                (a - b).abs() <= 1e-6 * (1.0 + b.abs()),
                "single rank vs direct: {a} vs {b}"
            );
        }
        for ranks in [2, 4] {
            // tokens split unevenly over ranks (data parallel), experts in blocks
            let cuts: Vec<usize> = (0..=ranks)
                .map(|r| (r * t_total / ranks + r % 2).min(t_total))
                .collect();
            let mut cuts = cuts;
            cuts[0] = 0;
            cuts[ranks] = t_total;
            let parts: Vec<RankTokens> = (0..ranks)
                .map(|r| RankTokens {
                    x: &x[cuts[r] * h..cuts[r + 1] * h],
                    idx: &idx[cuts[r] * k..cuts[r + 1] * k],
                    w: &w[cuts[r] * k..cuts[r + 1] * k],
                })
                .collect();
            let calls = std::cell::RefCell::new(vec![0usize; e]);
            let outs = moe_expert_parallel(
                Placement::new(e, ranks).unwrap(),
                h,
                k,
                &parts,
                &mut LocalExchange,
                |e, r, n| {
                    calls.borrow_mut()[e] += n;
                    ex.run(e, r, n)
                },
            )
            .unwrap();
            let joined: Vec<f32> = outs.concat();
            assert_eq!(joined.len(), one[0].len());
            for (a, b) in joined.iter().zip(&one[0]) {
                assert!(
                    (a - b).abs() <= 1e-6 * (1.0 + b.abs()),
                    "{ranks} ranks: {a} vs {b}"
                );
            }
            // every routed row was computed exactly once, on its owner
            let routed: usize = calls.borrow().iter().sum();
            assert_eq!(routed, t_total * k);
        }
    }

    #[test]
    fn rejects_bad_plans() {
        assert_eq!(
            Placement::new(10, 4),
            Err(EpError::Uneven {
                experts: 10,
                ranks: 4
            })
        );
        let p = Placement::new(4, 2).unwrap();
        let x = [0.0f32; 4];
        let r = moe_expert_parallel(
            p,
            2,
            1,
            &[
                RankTokens {
                    x: &x,
                    idx: &[0, 9],
                    w: &[1.0, 1.0],
                },
                RankTokens {
                    x: &[],
                    idx: &[],
                    w: &[],
                },
            ],
            &mut LocalExchange,
            |_, r, _| r.to_vec(),
        );
        assert_eq!(r.unwrap_err(), EpError::BadExpert(9));
        assert_eq!(
            dispatch_bytes_per_rank(256, 2048, 8, 8),
            256 * 8 * 2048 * 2 * 7 / 8
        );
    }
}
