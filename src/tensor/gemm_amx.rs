//! AMX bf16 GEMM for bf16 weight matrices, `out[m, n] = x[m, k] · w[n, k]ᵀ` (prefill and training
//! products on the [`CpuPath::Amx`](super::cpu_path::CpuPath) path), built on the tile matrix
//! multiply `tdpbf16ps`: one instruction multiplies a 16 × 32 bf16 tile by a 32 × 16 bf16 tile
//! into a 16 × 16 f32 tile (16,384 flops; nominally one every 16 cycles, 1,024 flops per cycle and
//! core, eight times the `vdpbf16ps` kernel of [`super::gemm_bf16`]).
//!
//! **Rounding contract**: the one of [`super::gemm_bf16`] (PyTorch's native bf16 matmul on CPU):
//! the weights are used as stored; every activation is rounded once to bf16, round-to-nearest-even
//! (`vcvtne2ps2bf16`, the same rounding code); bf16 × bf16 products are exact in f32 and summed
//! in f32 (`tdpbf16ps` treats subnormal inputs as zero, flushes subnormal results and rounds to
//! nearest even), in order along `k`; the output is f32.
//!
//! **Enabling the tiles.** Linux keeps the 8 KiB tile state off until a process asks for it
//! (`arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)`); [`available`] asks once, and the path
//! is used only if the CPU has `amx_bf16` and `amx_tile` (`cpuid` leaf 7) and the kernel grants
//! the request. Each rayon task loads its tile configuration (`ldtilecfg`) and releases the tiles
//! (`tilerelease`) before it returns, so no other code on that thread ever sees tile state.
//!
//! Layout: tiles are 1 KiB blocks of 16 rows × 16 pair words (a pair word holds the bf16 values
//! at `k = 2q` and `2q + 1`). `x` is rounded and packed once per call into row-major A tiles
//! (row group of 16 rows × 16 pair words); each rayon task owns a panel of at most [`NC`] columns
//! and packs its weights into B tiles in the pair-interleaved ("VNNI") layout the instruction
//! wants, `tile[r][c] = word(w[j0 + c], q0 + r)`: a 16 × 16 transpose of 32-bit words
//! ([`super::cpu_avx512::transpose16`]). The micro-kernel keeps a 32 × 32 block of `out` in four
//! accumulator tiles (`tmm0..3`) over the whole of `k`; per 32 values of `k` it loads two A and two
//! B tiles (`tmm4..7`) and issues four `tdpbf16ps`. Everything is zero-padded to whole tiles, so
//! any `m, n, k` works.

#[cfg(target_arch = "x86_64")]
use super::gemm_bf16::{column_panels, round_row, SharedPtr};
use half::bf16;
#[cfg(target_arch = "x86_64")]
use rayon::prelude::*;
use std::sync::OnceLock;

/// Rows (and 32-bit columns) of a tile.
const T: usize = 16;
/// 32-bit words in one tile (1 KiB).
const TILE_WORDS: usize = T * T;
/// Most columns per rayon task (packed weights for `k` = 4096: 128 × 2048 words × 4 B = 1 MiB, in L2).
const NC: usize = 128;

/// True when this process may run the kernel: the CPU has `amx_bf16`, `amx_tile` and the
/// `avx512bf16` rounding instructions, and Linux granted the tile state (asked once).
pub fn available() -> bool {
    static OK: OnceLock<bool> = OnceLock::new();
    *OK.get_or_init(detect)
}

#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
fn detect() -> bool {
    use std::arch::x86_64::__cpuid_count;
    /// `arch_prctl` code that asks for an extended state component.
    const ARCH_REQ_XCOMP_PERM: libc::c_ulong = 0x1023;
    /// The state component of the tile data (XFEATURE_XTILEDATA).
    const XFEATURE_XTILEDATA: libc::c_ulong = 18;
    if !super::gemm_bf16::available() || __cpuid_count(0, 0).eax < 7 {
        return false;
    }
    let edx = __cpuid_count(7, 0).edx;
    let (amx_bf16, amx_tile) = (edx >> 22 & 1 == 1, edx >> 24 & 1 == 1);
    // SAFETY: arch_prctl with an integer request and argument touches no memory of ours.
    amx_bf16 && amx_tile && unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) } == 0
}

#[cfg(not(all(target_arch = "x86_64", target_os = "linux")))]
fn detect() -> bool {
    false
}

/// `out[m, n] = x[m, k] · w[n, k]ᵀ`, overwriting `out`, on up to `threads` rayon workers, with the
/// rounding contract of the module doc.
///
/// Panics if the slice lengths do not match the dimensions or [`available`] is false (callers
/// check it).
pub fn matmul_t(x: &[f32], m: usize, k: usize, w: &[bf16], n: usize, out: &mut [f32], threads: usize) {
    if !super::gemm_bf16::prologue("matmul_t_amx", (x, m, k, w, n, out), available()) {
        return;
    }
    #[cfg(target_arch = "x86_64")]
    {
        let kt = k.div_ceil(2 * T);
        // Row groups of 16, an even number (the micro-kernel takes two at a time).
        let groups = m.div_ceil(T).next_multiple_of(2);
        let mut apack = vec![0u32; groups * kt * TILE_WORDS];
        let ap = SharedPtr(apack.as_mut_ptr());
        let pack = |g: usize| {
            // SAFETY: available() checked above; task `g` writes only row group `g` of `apack`.
            unsafe { pack_x(x, m, k, g, kt, ap.get().add(g * kt * TILE_WORDS)) }
        };
        let real_groups = m.div_ceil(T);
        if threads > 1 && real_groups > 1 {
            (0..real_groups).into_par_iter().for_each(pack);
        } else {
            (0..real_groups).for_each(pack);
        }
        let dst = SharedPtr(out.as_mut_ptr());
        let apack = &apack;
        column_panels(n, threads, 2 * T, NC, |j0, j1| {
            // SAFETY: available() checked above; the task writes only columns j0..j1 of `out`
            // (m·n elements, checked above).
            unsafe { panel(apack, m, k, kt, &w[j0 * k..j1 * k], j1 - j0, dst, n, j0) }
        });
    }
}

/// Round rows `g·16 .. g·16 + 16` of `x` to bf16 and store them as the `kt` A tiles of row group
/// `g`: `dst[t·256 + i·16 + c] = pair word (16t + c) of row 16g + i`, zero past `m` and `k`.
///
/// # Safety
/// avx512bf16 present; `dst` valid for `kt · 256` writes.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn pack_x(x: &[f32], m: usize, k: usize, g: usize, kt: usize, dst: *mut u32) {
    let mut row = vec![0u32; kt * T];
    for i in 0..T {
        let r = g * T + i;
        if r >= m {
            for t in 0..kt {
                std::ptr::write_bytes(dst.add(t * TILE_WORDS + i * T), 0, T);
            }
            continue;
        }
        round_row(&x[r * k..(r + 1) * k], &mut row);
        for t in 0..kt {
            std::ptr::copy_nonoverlapping(row.as_ptr().add(t * T), dst.add(t * TILE_WORDS + i * T), T);
        }
    }
}

/// Pack the `nw` weight rows into B tiles: group `c` of 16 columns, tile `t` of 16 pair words at
/// `dst[(c·kt + t)·256 + r·16 + j] = w[16c + j, 32t + 2r] | w[16c + j, 32t + 2r + 1] << 16`, zero
/// past `nw` and `k`. Whole 16 × 16 blocks (even `k`) are transposed in registers, the rest word
/// by word.
///
/// # Safety
/// avx512f present; `dst` valid for `groups · kt · 256` writes with `groups ≥ nw.div_ceil(16)`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn pack_w(w: &[bf16], k: usize, nw: usize, kt: usize, groups: usize, dst: *mut u32) {
    let word = |j: usize, q: usize| -> u32 {
        let p = 2 * q;
        if j >= nw || p >= k {
            return 0;
        }
        let lo = w[j * k + p].to_bits() as u32;
        let hi = if p + 1 < k { w[j * k + p + 1].to_bits() as u32 } else { 0 };
        lo | hi << 16
    };
    for c in 0..groups {
        for t in 0..kt {
            let tile = dst.add((c * kt + t) * TILE_WORDS);
            let whole = k % 2 == 0 && (c + 1) * T <= nw && (t + 1) * 2 * T <= k;
            if whole {
                // 32-bit words moved as f32 bit patterns (shuffles only, bit-exact).
                let src = w.as_ptr().add(c * T * k + t * 2 * T) as *const f32;
                super::cpu_avx512::transpose16(src, k / 2, tile as *mut f32, T);
            } else {
                for r in 0..T {
                    for j in 0..T {
                        *tile.add(r * T + j) = word(c * T + j, t * T + r);
                    }
                }
            }
        }
    }
}

/// The tile configuration: palette 1, tiles 0..7 all 16 rows of 64 bytes.
#[cfg(target_arch = "x86_64")]
#[repr(C, align(64))]
struct TileConfig([u8; 64]);

#[cfg(target_arch = "x86_64")]
impl TileConfig {
    fn all_full() -> TileConfig {
        let mut c = [0u8; 64];
        c[0] = 1; // palette
        for tile in 0..8 {
            c[16 + 2 * tile] = (T * 4) as u8; // bytes per row (u16, little endian)
            c[48 + tile] = T as u8; // rows
        }
        TileConfig(c)
    }
}

/// Compute columns `j0 .. j0 + nw` of `out` (row stride `ldo`) from the packed `x` (`kt` tiles
/// per row group) and the weight rows `w` (`[nw, k]`).
///
/// # Safety
/// [`available`] is true; `apack` holds the even number of row groups [`matmul_t`] packs; `out`
/// is valid for `m · ldo` elements and no other task writes its columns `j0 .. j0 + nw`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn panel(apack: &[u32], m: usize, k: usize, kt: usize, w: &[bf16], nw: usize, out: SharedPtr<f32>, ldo: usize, j0: usize) {
    use std::arch::asm;
    let groups = nw.div_ceil(T).next_multiple_of(2);
    let blen = groups * kt * TILE_WORDS;
    // Packed weights start on a cache line, so no tile row splits two lines.
    let mut bbuf = vec![0u32; blen + 16];
    let off = bbuf.as_ptr().align_offset(64);
    let bpack = bbuf.as_mut_ptr().add(off);
    pack_w(w, k, nw, kt, groups, bpack);
    let cfg = TileConfig::all_full();
    let mut scratch = [0.0f32; 4 * TILE_WORDS];
    const ROW: usize = T * 4; // bytes per tile row
    const STEP: usize = TILE_WORDS * 4; // bytes per tile
    asm!("ldtilecfg [{}]", in(reg) cfg.0.as_ptr(), options(nostack, readonly));
    for ig in (0..m.div_ceil(T)).step_by(2) {
        let a0 = apack.as_ptr().add(ig * kt * TILE_WORDS) as *const u8;
        let a1 = a0.add(kt * STEP);
        let rows = (m - ig * T).min(2 * T);
        for jg in (0..nw.div_ceil(T)).step_by(2) {
            let b0 = bpack.add(jg * kt * TILE_WORDS) as *const u8;
            let b1 = b0.add(kt * STEP);
            asm!("tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3", options(nostack, nomem));
            for t in 0..kt {
                let o = t * STEP;
                asm!(
                    "tileloadd tmm4, [{a0} + {s}*1]",
                    "tileloadd tmm5, [{a1} + {s}*1]",
                    "tileloadd tmm6, [{b0} + {s}*1]",
                    "tileloadd tmm7, [{b1} + {s}*1]",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    a0 = in(reg) a0.add(o),
                    a1 = in(reg) a1.add(o),
                    b0 = in(reg) b0.add(o),
                    b1 = in(reg) b1.add(o),
                    s = in(reg) ROW,
                    options(nostack, readonly),
                );
            }
            let cols = (nw - jg * T).min(2 * T);
            let c = out.get().add(ig * T * ldo + j0 + jg * T);
            // Whole 32 × 32 blocks go straight to `out`; edge blocks through a scratch block.
            let (dst, ld) = if rows == 2 * T && cols == 2 * T { (c, ldo) } else { (scratch.as_mut_ptr(), 2 * T) };
            asm!(
                "tilestored [{c0} + {s}*1], tmm0",
                "tilestored [{c1} + {s}*1], tmm1",
                "tilestored [{c2} + {s}*1], tmm2",
                "tilestored [{c3} + {s}*1], tmm3",
                c0 = in(reg) dst,
                c1 = in(reg) dst.add(T),
                c2 = in(reg) dst.add(T * ld),
                c3 = in(reg) dst.add(T * ld + T),
                s = in(reg) ld * 4,
                options(nostack),
            );
            if dst != c {
                for i in 0..rows {
                    std::ptr::copy_nonoverlapping(scratch.as_ptr().add(i * 2 * T), c.add(i * ldo), cols);
                }
            }
        }
    }
    asm!("tilerelease", options(nostack, nomem));
}

#[cfg(test)]
mod tests {
    use super::super::gemm_bf16::tests::{check_contract, fill};
    use super::*;

    /// Odd shapes (no dimension a multiple of a tile, odd `k`, whole and edge blocks, several
    /// column panels) against the f64 reference of the rounding contract, 1 and 2 threads; a NaN
    /// weight poisons exactly its own column (padding never mixes into real outputs).
    #[test]
    fn matches_contract_reference_on_odd_shapes() {
        if !available() {
            println!("skipped: this CPU or kernel has no AMX bf16 tiles");
            return;
        }
        let shapes = [(1, 1, 1), (13, 7, 5), (17, 33, 33), (32, 64, 32), (31, 1031, 97), (200, 96, 70), (37, 64, 600)];
        check_contract(matmul_t, &shapes);
        let (m, k, n) = (20, 40, 20);
        let x = fill(m * k, 3);
        let mut w: Vec<bf16> = fill(n * k, 4).into_iter().map(bf16::from_f32).collect();
        w[7 * k + 5] = bf16::NAN;
        let mut out = vec![0.0f32; m * n];
        matmul_t(&x, m, k, &w, n, &mut out, 2);
        for (idx, v) in out.iter().enumerate() {
            assert_eq!(v.is_nan(), idx % n == 7, "NaN weight of column 7, output [{idx}] = {v}");
        }
    }
}
