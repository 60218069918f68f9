//! Expert parallelism across ranks (GPUs of one node): the routing plan of one rank and the
//! collective all-to-all it is written against. Experts are placed in contiguous blocks
//! (`E / ranks` per rank); every rank holds its own tokens (data parallel for attention/GDN),
//! routes them, **dispatches** each (token, slot) row to the rank owning the chosen expert
//! ([`Dispatch`]), groups what it received by local expert ([`Arrivals`]), runs its experts, and
//! **combines**: results travel back along the same route to the (token, slot) they came from.
//! The backward uses the same two routes transposed (gradient rows to the owners, input
//! gradients back); the layer over them is `train::layers::moe_ep`.
//!
//! [`Exchange`] is a per-rank collective, the shape NCCL has: each rank holds only its own send
//! buffers and every rank of the group calls `all_to_all` in the same order. Implementations:
//! `tensor::thread_exchange::ThreadExchange` (ranks as threads, CI) and, with the `cuda`
//! feature, `tensor::cuda::nccl::NcclExchange` (grouped `ncclSend`/`ncclRecv`).

use crate::tensor::cuda::Elem;
use crate::tensor::device::DeviceError;

/// Placement of `experts` experts on `ranks` ranks, contiguous blocks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub experts: usize,
    pub ranks: usize,
}

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum EpError {
    #[error("{experts} experts cannot be split evenly over {ranks} ranks")]
    Uneven { experts: usize, ranks: usize },
    #[error("expert index {0} out of range")]
    BadExpert(usize),
    #[error("rank {rank}: {msg}")]
    Shape { rank: usize, msg: String },
    #[error("rank {rank}: a peer left the group before the all-to-all completed")]
    PeerGone { rank: usize },
    #[error("all-to-all: {0}")]
    Exchange(String),
    #[error(transparent)]
    Device(#[from] DeviceError),
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
    /// The experts rank `rank` holds.
    pub fn experts_of(&self, rank: usize) -> std::ops::Range<usize> {
        rank * self.per_rank()..(rank + 1) * self.per_rank()
    }
}

/// One rank's side of a collective all-to-all among `size()` ranks.
pub trait Exchange {
    /// This rank's index in the group.
    fn rank(&self) -> usize;
    /// Number of ranks in the group.
    fn size(&self) -> usize;
    /// `send[dst]` (any length, `size()` entries) goes to rank `dst`; returns `recv[src]`, what
    /// rank `src` sent here. Every rank of the group must make the same sequence of calls.
    fn all_to_all<T: Elem>(&mut self, send: Vec<Vec<T>>) -> Result<Vec<Vec<T>>, EpError>;
}

/// One rank's dispatch: the (token, slot) pairs (`pair = token·k + slot`) it sends to each rank,
/// ascending, so every owner receives its rows in (source rank, token, slot) order.
#[derive(Clone, Debug)]
pub struct Dispatch {
    /// `to[dst]`: the pairs routed to experts of rank `dst`.
    pub to: Vec<Vec<usize>>,
    /// Each pair's expert index local to its owner.
    local: Vec<i32>,
    pairs: usize,
    rank: usize,
}

impl Dispatch {
    /// Plan the dispatch of this rank's routing `chosen [t·k]` (any `k`).
    pub fn plan(place: Placement, rank: usize, chosen: &[u32]) -> Result<Dispatch, EpError> {
        let mut to = vec![Vec::new(); place.ranks];
        let mut local = Vec::with_capacity(chosen.len());
        for (p, &e) in chosen.iter().enumerate() {
            let e = e as usize;
            if e >= place.experts {
                return Err(EpError::BadExpert(e));
            }
            to[place.owner(e)].push(p);
            local.push((e % place.per_rank()) as i32);
        }
        Ok(Dispatch { to, local, pairs: chosen.len(), rank })
    }

    /// The rows to send: for each destination, `row(pair)` (`width` values) of its pairs in order.
    pub fn gather<'a>(&self, width: usize, row: impl Fn(usize) -> &'a [f32]) -> Vec<Vec<f32>> {
        self.to
            .iter()
            .map(|ps| {
                let mut v = Vec::with_capacity(ps.len() * width);
                ps.iter().for_each(|&p| v.extend_from_slice(&row(p)[..width]));
                v
            })
            .collect()
    }

    /// The local expert index of each row sent, per destination (the owner groups by it).
    pub fn local_experts(&self) -> Vec<Vec<i32>> {
        self.to.iter().map(|ps| ps.iter().map(|&p| self.local[p]).collect()).collect()
    }

    /// Rows returned along the route (`back[dst]` in the order sent) into `[pairs, width]`.
    pub fn scatter(&self, back: &[Vec<f32>], width: usize) -> Result<Vec<f32>, EpError> {
        if back.len() != self.to.len() {
            return Err(EpError::Shape { rank: self.rank, msg: format!("{} return buffers for {} ranks", back.len(), self.to.len()) });
        }
        let mut out = vec![0.0f32; self.pairs * width];
        for (dst, (ps, rows)) in self.to.iter().zip(back).enumerate() {
            if rows.len() != ps.len() * width {
                return Err(EpError::Shape {
                    rank: self.rank,
                    msg: format!("{} values back from rank {dst} for {} rows of {width}", rows.len(), ps.len()),
                });
            }
            for (i, &p) in ps.iter().enumerate() {
                out[p * width..(p + 1) * width].copy_from_slice(&rows[i * width..(i + 1) * width]);
            }
        }
        Ok(out)
    }
}

/// The rows one rank received in a dispatch, grouped by local expert. The grouping is stable:
/// each expert's rows keep arrival order, (source rank, token, slot), which is the order a single
/// rank holding every expert sees them in when tokens are split over ranks in order.
#[derive(Clone, Debug)]
pub struct Arrivals {
    /// Rows received from each source rank.
    counts: Vec<usize>,
    /// Grouped position → arrival index (arrivals concatenated over sources).
    order: Vec<usize>,
    /// `offsets[j]..offsets[j+1]`: the grouped rows of local expert `j`.
    pub offsets: Vec<usize>,
    rank: usize,
}

impl Arrivals {
    /// Group the received local expert indices `ids[src]` (from [`Dispatch::local_experts`]).
    pub fn group(place: Placement, rank: usize, ids: &[Vec<i32>]) -> Result<Arrivals, EpError> {
        let per = place.per_rank();
        let flat: Vec<i32> = ids.concat();
        if let Some(&bad) = flat.iter().find(|&&j| j < 0 || j as usize >= per) {
            return Err(EpError::Shape { rank, msg: format!("received local expert {bad} of {per}") });
        }
        let mut order: Vec<usize> = (0..flat.len()).collect();
        order.sort_by_key(|&i| flat[i]);
        let mut offsets = vec![0usize; per + 1];
        flat.iter().for_each(|&j| offsets[j as usize + 1] += 1);
        for j in 0..per {
            offsets[j + 1] += offsets[j];
        }
        Ok(Arrivals { counts: ids.iter().map(Vec::len).collect(), order, offsets, rank })
    }

    /// Number of rows received.
    pub fn rows(&self) -> usize {
        self.order.len()
    }

    /// Received rows (`recv[src]`, `width` values each) in grouped order.
    pub fn grouped(&self, recv: &[Vec<f32>], width: usize) -> Result<Vec<f32>, EpError> {
        let ok = recv.len() == self.counts.len() && recv.iter().zip(&self.counts).all(|(r, c)| r.len() == c * width);
        if !ok {
            return Err(EpError::Shape { rank: self.rank, msg: format!("received rows do not match the dispatch (width {width})") });
        }
        let flat = recv.concat();
        let mut out = Vec::with_capacity(flat.len());
        self.order.iter().for_each(|&i| out.extend_from_slice(&flat[i * width..(i + 1) * width]));
        Ok(out)
    }

    /// Grouped rows back into arrival order, split per source rank (what the return trip sends).
    pub fn ungroup(&self, grouped: &[f32], width: usize) -> Result<Vec<Vec<f32>>, EpError> {
        if grouped.len() != self.rows() * width {
            return Err(EpError::Shape { rank: self.rank, msg: format!("{} grouped values for {} rows", grouped.len(), self.rows()) });
        }
        let mut flat = vec![0.0f32; grouped.len()];
        for (g, &i) in self.order.iter().enumerate() {
            flat[i * width..(i + 1) * width].copy_from_slice(&grouped[g * width..(g + 1) * width]);
        }
        let mut out = Vec::with_capacity(self.counts.len());
        let mut at = 0;
        for &c in &self.counts {
            out.push(flat[at..at + c * width].to_vec());
            at += c * width;
        }
        Ok(out)
    }
}

/// Bytes each rank sends in the dispatch all-to-all (bf16 rows) for a uniform routing: the
/// planning number of docs/cuda.md (`t` tokens per rank, hidden `h`, top-`k`, `r` ranks).
pub fn dispatch_bytes_per_rank(t: usize, h: usize, k: usize, r: usize) -> usize {
    t * k * h * 2 * (r - 1) / r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dispatch_and_grouping_round_trip() {
        // 3 ranks, 6 experts (2 each); this rank (1) routes 4 tokens with k = 2.
        let place = Placement::new(6, 3).unwrap();
        let chosen = [5u32, 0, 2, 3, 0, 1, 4, 5];
        let d = Dispatch::plan(place, 1, &chosen).unwrap();
        assert_eq!(d.to, vec![vec![1, 4, 5], vec![2, 3], vec![0, 6, 7]]);
        assert_eq!(d.local_experts(), vec![vec![0, 0, 1], vec![0, 1], vec![1, 0, 1]]);
        let x: Vec<f32> = (0..8).map(|p| p as f32).collect();
        let sent = d.gather(1, |p| &x[p..p + 1]);
        assert_eq!(sent, vec![vec![1.0, 4.0, 5.0], vec![2.0, 3.0], vec![0.0, 6.0, 7.0]]);
        assert_eq!(d.scatter(&sent, 1).unwrap(), x);
        // The owner of experts 4, 5 receives [1, 0] from rank 0 and [1, 0, 1] from rank 1.
        let a = Arrivals::group(place, 2, &[vec![1, 0], vec![], vec![1, 0, 1]]).unwrap();
        assert_eq!(a.offsets, vec![0, 2, 5]);
        let recv = vec![vec![10.0, 11.0], vec![], vec![20.0, 21.0, 22.0]];
        let g = a.grouped(&recv, 1).unwrap();
        assert_eq!(g, vec![11.0, 21.0, 10.0, 20.0, 22.0]);
        assert_eq!(a.ungroup(&g, 1).unwrap(), recv);
    }

    #[test]
    fn rejects_bad_plans() {
        assert_eq!(Placement::new(10, 4), Err(EpError::Uneven { experts: 10, ranks: 4 }));
        let p = Placement::new(4, 2).unwrap();
        assert_eq!(Dispatch::plan(p, 0, &[0, 9]).unwrap_err(), EpError::BadExpert(9));
        assert!(matches!(Arrivals::group(p, 0, &[vec![2], vec![]]), Err(EpError::Shape { .. })));
        let a = Arrivals::group(p, 0, &[vec![0], vec![1]]).unwrap();
        assert!(matches!(a.grouped(&[vec![1.0], vec![]], 1), Err(EpError::Shape { .. })));
        let d = Dispatch::plan(p, 0, &[0, 3]).unwrap();
        assert!(matches!(d.scatter(&[vec![1.0], vec![]], 1), Err(EpError::Shape { .. })));
        assert_eq!(dispatch_bytes_per_rank(256, 2048, 8, 8), 256 * 8 * 2048 * 2 * 7 / 8);
    }
}
