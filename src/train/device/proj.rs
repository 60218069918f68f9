//! The backward of a block's input projections: several linear layers read the same normed rows
//! `u`, so the input gradient is the sum of each `dY·W` (one GEMM writing, the rest adding) and
//! each weight gradient `dW += dYᵀ·u` (fp32).

use crate::tensor::cuda::backward::linear_backward;
use crate::tensor::cuda::{Act, DeviceBuffer, Gpu};
use crate::tensor::device::Result;

/// One projection `y = u·Wᵀ` (`W` `[n, hidden]`): its output gradient `dy [t, n]`, its weight,
/// `n`, and where its weight gradient accumulates.
pub(super) type Proj<'a, A> = (&'a DeviceBuffer<A>, &'a DeviceBuffer<A>, usize, &'a mut DeviceBuffer<f32>);

/// `dx (+)= Σ dy·W` over `projs` of the rows `u [t, h]` (the first overwrites `dx` unless
/// `accumulate`), accumulating every weight gradient.
pub(super) fn backward<'a, A: Act>(
    gpu: &Gpu,
    u: &DeviceBuffer<A>,
    t: usize,
    h: usize,
    dx: &mut DeviceBuffer<A>,
    accumulate: bool,
    projs: impl IntoIterator<Item = Proj<'a, A>>,
) -> Result<()> {
    for (i, (dy, w, n, dw)) in projs.into_iter().enumerate() {
        linear_backward(gpu, dy, u, t, h, w, n, dx, accumulate || i > 0, dw)?;
    }
    Ok(())
}
