//! The linear layer `out[m, n] = x[m, k] · w[n, k]ᵀ` for weights in their storage format (f32 or
//! bf16, [`Weight`]), and batches of independent products run in one parallel region.
//!
//! * Few rows (decode, `m ≤ SMALL_M`): dot-product kernels read every weight row once for all
//!   rows of `x` (decode is weight-bandwidth bound; bf16 weights are read as bf16, half the
//!   bytes). The columns of every product of a batch are cut into blocks and all blocks of all
//!   products run as one rayon region ([`linear_batch`]), so e.g. the active experts of a MoE
//!   layer or the projections of a mixer share both cores without one fork-join per product.
//! * Many rows (prefill, training): f32 weights go to the packed GEMM ([`cpu::matmul_t`]); bf16
//!   weights go to the active ISA path's kernel ([`cpu_path::kernels`]): with bf16 activations
//!   ([`cpu_path::Bf16Activations`]), on [`CpuPath::Amx`] the tile GEMM ([`super::gemm_amx`])
//!   and on [`CpuPath::Avx512Bf16`] the `vdpbf16ps` GEMM ([`super::gemm_bf16`]), both rounding
//!   the activations to bf16 with f32 accumulation; otherwise, and on the other paths, they are widened block by block into a
//!   reused f32 scratch and run through that path's f32 GEMM ([`matmul_bf16_widened`]).
//!
//! Every product accumulates in f32. A bf16 value widens to f32 exactly, so the widening paths
//! differ from f32 weights only by summation order; the AMX and avx512bf16 many-row kernels
//! additionally round the activations to bf16 (the rounding contract of [`super::gemm_bf16`], PyTorch's).

use super::cpu::{self, SMALL_M};
use super::cpu_bf16;
use super::cpu_path::{self, CpuPath};
use super::storage::{Tensor, Weight};
use rayon::prelude::*;
use std::cell::RefCell;

/// Below this many multiply-adds in total a few-row batch stays on one thread: waking the pool
/// costs more than it saves (measured with benches/model_cpu.rs on 2 threads).
pub(crate) const PARALLEL_MIN_MACS: usize = 1 << 20;

/// Output columns per work item of the few-row kernels.
const BLOCK: usize = 128;

/// Weight values widened per block of a many-row bf16 product (16 MiB of f32 scratch).
const WIDEN_BLOCK: usize = 1 << 22;

thread_local! {
    /// Reused f32 scratch for widened bf16 weight blocks (no page faults per call).
    static WIDE: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// One product of a [`linear_batch`]: `out[m, n] = x[m, k] · w[n, k]ᵀ`.
pub struct LinearJob<'a> {
    pub x: &'a [f32],
    pub m: usize,
    pub k: usize,
    pub w: Weight<'a>,
    pub n: usize,
    pub out: &'a mut [f32],
}

impl<'a> LinearJob<'a> {
    /// The product of rows `x [m, k]` with the 2-D weight tensor `w [n, k]`.
    pub fn of(x: &'a [f32], m: usize, w: &'a Tensor, out: &'a mut [f32]) -> Self {
        let (n, k) = (w.rows(), w.shape().get(1).copied().unwrap_or(1));
        LinearJob { x, m, k, w: w.weight(), n, out }
    }

    fn check(&self) {
        assert_eq!(self.x.len(), self.m * self.k, "linear: x");
        assert_eq!(self.w.len(), self.n * self.k, "linear: w");
        assert_eq!(self.out.len(), self.m * self.n, "linear: out");
    }
}

/// `out[m, n] = x[m, k] · w[n, k]ᵀ`, overwriting `out`; `parallel` = false keeps the call on the
/// current thread (used inside outer parallel loops).
pub fn linear(x: &[f32], m: usize, k: usize, w: Weight<'_>, n: usize, out: &mut [f32], parallel: bool) {
    linear_batch(&mut [LinearJob { x, m, k, w, n, out }], parallel);
}

/// Run independent products. When every product has at most `SMALL_M` rows they run together as
/// one parallel region of column blocks; otherwise one after the other, each parallel inside.
pub fn linear_batch(jobs: &mut [LinearJob<'_>], parallel: bool) {
    for j in jobs.iter() {
        j.check();
    }
    if jobs.iter().all(|j| j.m <= SMALL_M) {
        return few_rows(jobs, parallel);
    }
    for j in jobs.iter_mut() {
        match j.w {
            Weight::F32(w) => cpu::matmul_t(j.x, j.m, j.k, w, j.n, j.out, parallel),
            Weight::Bf16(_) if j.m <= SMALL_M => few_rows(std::slice::from_mut(j), parallel),
            Weight::Bf16(w) => {
                let threads = if parallel { rayon::current_num_threads() } else { 1 };
                let kernel = cpu_path::kernels().matmul_bf16_for(cpu_path::bf16_activations());
                kernel(j.x, j.m, j.k, w, j.n, j.out, threads)
            }
        }
    }
}

/// f32 few-row product (the `m ≤ SMALL_M` case of [`cpu::matmul_t`]).
pub(crate) fn few_rows_f32(x: &[f32], m: usize, k: usize, w: &[f32], n: usize, out: &mut [f32], parallel: bool) {
    few_rows(&mut [LinearJob { x, m, k, w: Weight::F32(w), n, out }], parallel);
}

/// Raw output pointer shared by work items that write disjoint column ranges.
#[derive(Clone, Copy)]
struct OutPtr(*mut f32);
// SAFETY: every work item of `few_rows` writes only its own columns of its product's `out`.
unsafe impl Send for OutPtr {}
unsafe impl Sync for OutPtr {}

impl OutPtr {
    /// The pointer (a method, so closures capture the `Send` wrapper, not the raw field).
    fn get(self) -> *mut f32 {
        self.0
    }
}

/// All column blocks of all (few-row, size-checked) products, in one rayon region when the
/// batch is large enough to pay for waking the pool.
fn few_rows(jobs: &mut [LinearJob<'_>], parallel: bool) {
    let outs: Vec<OutPtr> = jobs.iter_mut().map(|j| OutPtr(j.out.as_mut_ptr())).collect();
    let specs: Vec<(&[f32], usize, usize, Weight<'_>, usize)> =
        jobs.iter().map(|j| (j.x, j.m, j.k, j.w, j.n)).collect();
    let items: Vec<(usize, usize)> = specs
        .iter()
        .enumerate()
        .filter(|(_, s)| s.1 > 0)
        .flat_map(|(i, s)| (0..s.4).step_by(BLOCK).map(move |j0| (i, j0)))
        .collect();
    let macs: usize = specs.iter().map(|s| s.1 * s.2 * s.4).sum();
    let run = |&(i, j0): &(usize, usize)| {
        let (x, m, k, w, n) = specs[i];
        let j1 = (j0 + BLOCK).min(n);
        // SAFETY: sizes were checked (`LinearJob::check`); this item writes columns j0..j1 of
        // rows 0..m of product i's `out` (row stride n) and nothing else.
        unsafe {
            let dst = outs[i].get().add(j0);
            match w {
                Weight::F32(w) => cpu::rows_block(x, m, k, &w[j0 * k..j1 * k], j1 - j0, dst, n),
                Weight::Bf16(w) => cpu_bf16::rows_block(x, m, k, &w[j0 * k..j1 * k], j1 - j0, dst, n),
            }
        }
    };
    if parallel && items.len() > 1 && macs >= PARALLEL_MIN_MACS {
        items.par_iter().for_each(run);
    } else {
        items.iter().for_each(run);
    }
}

/// Many-row product with bf16 weights on the widening paths: widen blocks of weight rows into
/// the thread's f32 scratch and run the f32 GEMM of `path` ([`cpu::matmul_t_on`]) on each block.
/// Sizes are checked by the caller.
#[allow(clippy::too_many_arguments)]
pub(crate) fn matmul_bf16_widened(
    path: CpuPath,
    x: &[f32],
    m: usize,
    k: usize,
    w: &[half::bf16],
    n: usize,
    out: &mut [f32],
    threads: usize,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        out.fill(0.0);
        return;
    }
    let parallel = threads > 1;
    let block = (WIDEN_BLOCK / k).clamp(1, n.max(1));
    WIDE.with(|wide| {
        let mut wide = wide.borrow_mut();
        if wide.len() < block * k {
            wide.resize(block * k, 0.0);
        }
        let mut part = if block < n { vec![0.0f32; m * block] } else { Vec::new() };
        for j0 in (0..n).step_by(block) {
            let nb = block.min(n - j0);
            let (src, dst) = (&w[j0 * k..(j0 + nb) * k], &mut wide[..nb * k]);
            if parallel {
                dst.par_chunks_mut(1 << 16)
                    .zip(src.par_chunks(1 << 16))
                    .for_each(|(d, s)| cpu_bf16::widen(s, d));
            } else {
                cpu_bf16::widen(src, dst);
            }
            if nb == n {
                cpu::matmul_t_on(path, x, m, k, dst, n, out, threads);
            } else {
                let part = &mut part[..m * nb];
                cpu::matmul_t_on(path, x, m, k, dst, nb, part, threads);
                for (o, p) in out.chunks_exact_mut(n).zip(part.chunks_exact(nb)) {
                    o[j0..j0 + nb].copy_from_slice(p);
                }
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::cpu::tests::naive;

    fn inputs(m: usize, k: usize, n: usize) -> (Vec<f32>, Vec<half::bf16>, Vec<f32>) {
        let x: Vec<f32> = (0..m * k).map(|i| ((i * 7 % 13) as f32 - 6.0) * 0.1).collect();
        let wb: Vec<half::bf16> = (0..n * k)
            .map(|i| half::bf16::from_f32(((i * 5 % 11) as f32 - 5.0) * 0.0371))
            .collect();
        let wf = wb.iter().map(|v| v.to_f32()).collect();
        (x, wb, wf)
    }

    fn assert_close(got: &[f32], want: &[f32], k: usize, what: &str) {
        let tol = 1e-5 * (k as f32).sqrt().max(1.0);
        for (a, b) in got.iter().zip(want) {
            assert!((a - b).abs() <= tol * (1.0 + b.abs()), "{what}: {a} vs {b}");
        }
    }

    /// bf16 weights equal the f64 product of the widened weights, for the few-row kernel (every
    /// tile shape), the many-row path (one widened block) and several blocks.
    #[test]
    fn bf16_matches_widened_reference() {
        let shapes: &[(usize, usize, usize)] = &[
            (1, 37, 70),
            (2, 64, 129),
            (3, 16, 5),
            (8, 130, 131),
            (9, 33, 65),
            (40, 256, 300),
            (9, 1 << 19, 9), // k·n > WIDEN_BLOCK: blocks of 8 and 1 weight rows
        ];
        for &(m, k, n) in shapes {
            let (x, wb, wf) = inputs(m, k, n);
            let want = naive(&x, m, k, &wf, n);
            // The avx512bf16 many-row kernel rounds the activations to bf16 (its contract).
            let native = cpu_path::bf16_activations() == cpu_path::Bf16Activations::Bf16;
            let want_bf16 = if m > SMALL_M && native && cpu_path::active().rounds_activations() {
                naive(&round_bf16(&x), m, k, &wf, n)
            } else {
                want.clone()
            };
            for par in [false, true] {
                let mut out = vec![f32::NAN; m * n];
                linear(&x, m, k, Weight::Bf16(&wb), n, &mut out, par);
                assert_close(&out, &want_bf16, k, &format!("{m}x{k}x{n} bf16"));
                linear(&x, m, k, Weight::F32(&wf), n, &mut out, par);
                assert_close(&out, &want, k, &format!("{m}x{k}x{n} f32"));
            }
        }
    }

    fn round_bf16(x: &[f32]) -> Vec<f32> {
        x.iter().map(|v| half::bf16::from_f32(*v).to_f32()).collect()
    }

    /// Every ISA path the CPU supports, forced through its kernel table, matches an f64
    /// reference of its rounding contract on shapes that are no multiple of any tile (paths the
    /// CPU lacks are skipped with a printed reason).
    #[test]
    fn every_path_matches_f64_reference() {
        let shapes: &[(usize, usize, usize)] =
            &[(9, 1, 3), (15, 33, 31), (33, 257, 65), (47, 515, 130), (61, 1100, 33), (200, 70, 300)];
        for path in CpuPath::ALL {
            let Some(kern) = cpu_path::kernels_for(path) else {
                println!("skipped path {}: this CPU does not support it", path.name());
                continue;
            };
            for &(m, k, n) in shapes {
                let (x, wb, _) = inputs(m, k, n);
                let xr = if path.rounds_activations() { round_bf16(&x) } else { x.clone() };
                for (threads, exact) in [(1, false), (2, false), (2, true)] {
                    let mut out = vec![f32::NAN; m * n];
                    let xr = if exact { &x } else { &xr };
                    let a = if exact { cpu_path::Bf16Activations::F32 } else { cpu_path::Bf16Activations::Bf16 };
                    kern.matmul_bf16_for(a)(&x, m, k, &wb, n, &mut out, threads);
                    for i in 0..m {
                        for j in 0..n {
                            let r: f64 = (0..k).map(|p| xr[i * k + p] as f64 * wb[j * k + p].to_f64()).sum();
                            let g = out[i * n + j] as f64;
                            let tol = 1e-5 * (k as f64).sqrt() * (1.0 + r.abs());
                            assert!(
                                (g - r).abs() <= tol,
                                "{} {m}x{k}x{n} t{threads} exact={exact} [{i},{j}]: {g} vs {r}",
                                path.name()
                            );
                        }
                    }
                }
            }
        }
    }

    /// A batch of products with different shapes and formats equals each product alone.
    #[test]
    fn batch_equals_separate_products() {
        let shapes = [(1, 64, 300), (3, 100, 7), (8, 256, 129), (0, 16, 4), (2, 16, 0)];
        let data: Vec<_> = shapes.iter().map(|&(m, k, n)| inputs(m, k, n)).collect();
        for mixed in [false, true] {
            let mut outs: Vec<Vec<f32>> = shapes.iter().map(|&(m, _, n)| vec![f32::NAN; m * n]).collect();
            let mut jobs: Vec<LinearJob<'_>> = shapes
                .iter()
                .zip(&data)
                .zip(outs.iter_mut())
                .enumerate()
                .map(|(i, ((&(m, k, n), (x, wb, wf)), out))| LinearJob {
                    x,
                    m,
                    k,
                    w: if mixed && i % 2 == 0 { Weight::F32(wf) } else { Weight::Bf16(wb) },
                    n,
                    out,
                })
                .collect();
            linear_batch(&mut jobs, true);
            for ((&(m, k, n), (x, _, wf)), out) in shapes.iter().zip(&data).zip(&outs) {
                assert_close(out, &naive(x, m, k, wf, n), k, &format!("batch {m}x{k}x{n}"));
            }
        }
    }
}
