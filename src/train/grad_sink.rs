//! `GradSink`: where the backward puts weight gradients. Every layer's backward hands each
//! projection's `(dY, X)` to [`GradSink::linear`] and each vector-sized parameter's gradient to
//! [`GradSink::vector`]; the sink decides what to form. [`Grads`] forms every dense gradient
//! (full-parameter training, `execcritic grads`); `lora::AdapterGrads` forms only the LoRA
//! adapters' gradients, straight from `X` and `dY`, and never a dense `[out, in]` one.

use super::ops::{linear_backward, linear_input_grad};
use super::params::{Grads, Pid};

pub trait GradSink {
    /// Backward of the projection `y[m, n] = x[m, k] · wᵀ` whose weight is parameter `p` (values
    /// `w [n, k]`): returns `dx [m, k] = dy · w` and accumulates what the sink keeps of the
    /// weight's gradient `dyᵀ · x`.
    #[allow(clippy::too_many_arguments)] // the GEMM's operands and sizes
    fn linear(&mut self, p: Pid, dy: &[f32], x: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f32>;

    /// The gradient buffer of a vector-sized parameter (norm weights, conv, gates, the shared
    /// expert's gate), accumulated element-wise by the caller. A sink that does not train `p`
    /// hands out a scratch buffer it throws away.
    fn vector(&mut self, p: Pid) -> &mut [f32];

    /// The gradient of an embedding table, or `None` when the sink does not train it (the
    /// caller then skips the scatter).
    fn table(&mut self, p: Pid) -> Option<&mut [f32]>;
}

/// Dense gradients of every parameter.
impl GradSink for Grads {
    #[allow(clippy::too_many_arguments)]
    fn linear(&mut self, p: Pid, dy: &[f32], x: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f32> {
        linear_backward(dy, x, m, k, w, n, self.get_mut(p))
    }

    fn vector(&mut self, p: Pid) -> &mut [f32] {
        self.get_mut(p)
    }

    fn table(&mut self, p: Pid) -> Option<&mut [f32]> {
        Some(self.get_mut(p))
    }
}

/// The input gradient of a projection whose weight is frozen (no weight gradient at all).
pub fn frozen_linear(dy: &[f32], m: usize, k: usize, w: &[f32], n: usize) -> Vec<f32> {
    linear_input_grad(dy, m, k, w, n)
}
