//! The emulated device's GEMM: `cublasGemmEx` semantics (column-major, `op(A)`/`op(B)` by the
//! transpose flags, leading dimensions of the stored matrices) with cuBLAS's types — bf16 or f32
//! inputs widened exactly to f32, f32 accumulation, f32 output or bf16 output rounded to nearest
//! even. When `beta == 0`, C is not read (as cuBLAS: it may hold NaNs).

use half::bf16;
use rayon::prelude::*;

use crate::tensor::device::{DevPtr, DeviceError, Gemm, GemmType, Result};

use super::memory::Memory;

fn elem(t: GemmType) -> usize {
    match t {
        GemmType::Bf16 => 2,
        GemmType::F32 => 4,
    }
}

/// Bytes a column-major `rows × cols` matrix with leading dimension `ld` spans.
fn span(rows: usize, cols: usize, ld: usize, t: GemmType) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        ((cols - 1) * ld + rows) * elem(t)
    }
}

fn shape_err(msg: String) -> DeviceError {
    DeviceError::Shape { op: "gemm", msg }
}

/// Reads a stored column-major matrix (`rows × cols`, leading dimension `ld`) and returns
/// `op(X)` as a contiguous column-major f32 matrix (`cols × rows` when `trans`).
fn read_op(ptr: DevPtr, t: GemmType, rows: usize, cols: usize, ld: usize, trans: bool) -> Vec<f32> {
    let at = |i: usize, j: usize| -> f32 {
        let off = j * ld + i;
        // SAFETY: the caller checked that the whole span lies inside one allocation.
        unsafe {
            match t {
                GemmType::Bf16 => (*(ptr as *const bf16).add(off)).to_f32(),
                GemmType::F32 => *(ptr as *const f32).add(off),
            }
        }
    };
    let mut out = Vec::with_capacity(rows * cols);
    if trans {
        // op(X) is cols × rows: element (r, c) = X(c, r).
        for c in 0..rows {
            for r in 0..cols {
                out.push(at(c, r));
            }
        }
    } else {
        for j in 0..cols {
            for i in 0..rows {
                out.push(at(i, j));
            }
        }
    }
    out
}

/// Runs one GEMM on host memory after checking every operand's extent.
pub fn gemm(mem: &Memory, g: &Gemm) -> Result<()> {
    let (m, n, k) = (g.m, g.n, g.k);
    // Stored shapes: A is m × k (k × m when transposed), B is k × n (n × k when transposed).
    let (ar, ac) = if g.trans_a { (k, m) } else { (m, k) };
    let (br, bc) = if g.trans_b { (n, k) } else { (k, n) };
    for (name, rows, ld) in [("A", ar, g.lda), ("B", br, g.ldb), ("C", m, g.ldc)] {
        if ld < rows.max(1) {
            return Err(shape_err(format!(
                "ld{} = {ld} < {rows} rows of {name}",
                name.to_lowercase()
            )));
        }
    }
    if m == 0 || n == 0 {
        return Ok(());
    }
    mem.check(g.a, span(ar, ac, g.lda, g.a_type), "gemm A")?;
    mem.check(g.b, span(br, bc, g.ldb, g.b_type), "gemm B")?;
    mem.check(g.c, span(m, n, g.ldc, g.c_type), "gemm C")?;
    let a = read_op(g.a, g.a_type, ar, ac, g.lda, g.trans_a); // m × k, column-major
    let b = read_op(g.b, g.b_type, br, bc, g.ldb, g.trans_b); // k × n, column-major
    let cols: Vec<Vec<f32>> = (0..n)
        .into_par_iter()
        .map(|j| {
            let mut acc = vec![0.0f32; m];
            for l in 0..k {
                let blj = b[j * k + l];
                let col = &a[l * m..(l + 1) * m];
                for (x, &ail) in acc.iter_mut().zip(col) {
                    *x += ail * blj;
                }
            }
            acc
        })
        .collect();
    let (c, ldc) = (g.c, g.ldc);
    for (j, acc) in cols.iter().enumerate() {
        for (i, &v) in acc.iter().enumerate() {
            let off = j * ldc + i;
            // SAFETY: the C span was checked above.
            unsafe {
                match g.c_type {
                    GemmType::F32 => {
                        let p = (c as *mut f32).add(off);
                        let old = if g.beta == 0.0 { 0.0 } else { g.beta * *p };
                        *p = g.alpha * v + old;
                    }
                    GemmType::Bf16 => {
                        let p = (c as *mut bf16).add(off);
                        let old = if g.beta == 0.0 {
                            0.0
                        } else {
                            g.beta * (*p).to_f32()
                        };
                        *p = bf16::from_f32(g.alpha * v + old);
                    }
                }
            }
        }
    }
    Ok(())
}
