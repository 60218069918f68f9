//! The backward of a block's input projections: several linear layers read the same normed rows
//! `u`, so the input gradient is the sum of each `dY·W` (one GEMM writing, the rest adding) and
//! each weight gradient `dW += dYᵀ·u` (fp32), or with LoRA the adapters' gradients.

use super::lora::{linear_backward, DeviceLora};
use crate::tensor::cuda::{Act, DeviceBuffer, Gpu};
use crate::train::error::Result;

/// One projection `y = u·Wᵀ` (`W` `[n, hidden]`): its output gradient `dy [t, n]`, its weight,
/// `n`, where its dense weight gradient accumulates (without LoRA), and its name in the loading
/// order (with LoRA: the adapter it feeds, if any).
pub(super) type Proj<'a, A> = (&'a DeviceBuffer<A>, &'a DeviceBuffer<A>, usize, &'a mut DeviceBuffer<f32>, &'a str);

/// `dx (+)= Σ dy·W` over `projs` of the rows `u [t, h]` (the first overwrites `dx` unless
/// `accumulate`), accumulating every weight gradient (with `lora`: the adapters' only).
#[allow(clippy::too_many_arguments)]
pub(super) fn backward<'a, A: Act>(
    gpu: &Gpu,
    mut lora: Option<&mut DeviceLora<A>>,
    u: &DeviceBuffer<A>,
    t: usize,
    h: usize,
    dx: &mut DeviceBuffer<A>,
    accumulate: bool,
    projs: impl IntoIterator<Item = Proj<'a, A>>,
) -> Result<()> {
    for (i, (dy, w, n, dw, name)) in projs.into_iter().enumerate() {
        linear_backward(gpu, lora.as_deref_mut(), name, dy, u, (t, h, n), w, dx, accumulate || i > 0, dw)?;
    }
    Ok(())
}
