//! The routed experts of an MoE layer under expert parallelism, one rank's side
//! ([`EpExperts`], a [`RoutedExperts`] for `MoeW::forward_with` / `backward_with`):
//!
//! * forward — **dispatch**: each (token, slot) row goes to the rank owning its expert
//!   (`all_to_all` of the rows and of their local expert indices); the owner groups what it
//!   received by expert and runs its experts on its own device ([`DeviceExperts`]: grouped
//!   GEMMs + SwiGLU); **combine**: the outputs return along the route to their (token, slot),
//!   where `MoeW` sums them with the router weights;
//! * backward — the transposes: the combine's transpose sends each pair's `w·dy` row to the
//!   expert's owner, the owner's expert backward accumulates dW of its experts only and gives dX
//!   rows, the dispatch's transpose returns them to the token's rank, which adds them per token.
//!   The router gradient never leaves the token's rank (`dw = dy·y` uses the returned `y`).
//!
//! The expert backward runs on the CPU ([`Ffn::backward`](super::ffn::Ffn::backward) over the
//! activations the device forward returned): device backward kernels are another item of the
//! GPU training path.

use super::expert_gemm::DeviceExperts;
use super::ffn::FfnSaved;
use super::moe::{MoeW, RoutedExperts};
use crate::tensor::expert_parallel::{Arrivals, Dispatch, EpError, Exchange, Placement};
use crate::train::grad_sink::GradSink;
use crate::train::params::ParamStore;

/// One rank: its placement, its end of the exchange, its experts on its device.
pub struct EpExperts<'a, X: Exchange> {
    pub place: Placement,
    pub exchange: &'a mut X,
    pub experts: &'a DeviceExperts,
}

/// The routes of one forward and the activations of the local experts.
pub struct EpSaved {
    dispatch: Dispatch,
    arrivals: Arrivals,
    local: Vec<FfnSaved>,
}

impl<X: Exchange> EpExperts<'_, X> {
    /// Send rows along the dispatch, group them on arrival; the owner's grouped rows.
    fn there(&mut self, a: &Arrivals, rows: Vec<Vec<f32>>, hd: usize) -> Result<Vec<f32>, EpError> {
        let recv = self.exchange.all_to_all(rows)?;
        a.grouped(&recv, hd)
    }

    /// Grouped rows back to the ranks they came from, into `[pairs, hd]` there.
    fn back(&mut self, d: &Dispatch, a: &Arrivals, grouped: &[f32], hd: usize) -> Result<Vec<f32>, EpError> {
        let ret = self.exchange.all_to_all(a.ungroup(grouped, hd)?)?;
        d.scatter(&ret, hd)
    }
}

impl<X: Exchange> RoutedExperts for EpExperts<'_, X> {
    type Saved = EpSaved;
    type Error = EpError;

    fn forward(&mut self, moe: &MoeW, _ps: &ParamStore, x: &[f32], _n: usize, chosen: &[u32]) -> Result<(Vec<f32>, EpSaved), EpError> {
        let (hd, k, rank) = (moe.hidden, moe.top_k, self.exchange.rank());
        if self.exchange.size() != self.place.ranks || self.place.experts != moe.experts.len() {
            return Err(EpError::Shape { rank, msg: format!("placement {:?} for {} ranks, {} experts", self.place, self.exchange.size(), moe.experts.len()) });
        }
        if self.experts.first() != self.place.experts_of(rank).start {
            return Err(EpError::Shape { rank, msg: format!("holds experts from {}, owns {:?}", self.experts.first(), self.place.experts_of(rank)) });
        }
        let dispatch = Dispatch::plan(self.place, rank, chosen)?;
        let ids = self.exchange.all_to_all(dispatch.local_experts())?;
        let arrivals = Arrivals::group(self.place, rank, &ids)?;
        let rows = dispatch.gather(hd, |p| &x[p / k * hd..(p / k + 1) * hd]);
        let xg = self.there(&arrivals, rows, hd)?;
        let (yg, local) = self.experts.forward(&xg, &arrivals.offsets)?;
        let y_pair = self.back(&dispatch, &arrivals, &yg, hd)?;
        Ok((y_pair, EpSaved { dispatch, arrivals, local }))
    }

    fn backward(&mut self, moe: &MoeW, ps: &ParamStore, s: &EpSaved, dy_pair: &[f32], gr: &mut dyn GradSink) -> Result<Vec<f32>, EpError> {
        let hd = moe.hidden;
        let rows = s.dispatch.gather(hd, |p| &dy_pair[p * hd..(p + 1) * hd]);
        let dyg = self.there(&s.arrivals, rows, hd)?;
        let mut dxg = vec![0.0f32; dyg.len()];
        let first = self.experts.first();
        for (j, (saved, w)) in s.local.iter().zip(s.arrivals.offsets.windows(2)).enumerate() {
            if w[0] == w[1] {
                continue; // an expert without rows has no gradient
            }
            let dxe = moe.experts[first + j].backward(ps, saved, &dyg[w[0] * hd..w[1] * hd], gr);
            dxg[w[0] * hd..w[1] * hd].copy_from_slice(&dxe);
        }
        self.back(&s.dispatch, &s.arrivals, &dxg, hd)
    }
}
