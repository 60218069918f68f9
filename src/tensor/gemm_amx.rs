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
//! **Exact activations** ([`matmul_t_exact`], the default contract of the engine,
//! [`super::cpu_path::Bf16Activations::F32`]): each activation is split into three bf16 parts,
//! `x = h + m + l` (`h` the top 8 significant bits of `x`, by truncation; `m` those of `x − h`; `l`
//! the rest, which fits), and the tiles sum `h·w + m·w + l·w`. Every difference and product is
//! exact in f32, so the result is `x·w` summed in f32, as the widening kernel computes it, in
//! another order; three tile passes cost 3× the rounded kernel's work, at 16× the f32 FMA
//! rate per instruction. The exceptions are those of the tiles: a part below 2⁻¹²⁶ in magnitude
//! (activations below about 2⁻¹¹⁰) is read as zero, and a product below 2⁻¹²⁶ is flushed. A
//! NaN activation gives NaN parts and an infinite one `±∞ + 0 + 0`, as the widening kernel would.
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
use super::gemm_bf16::{column_panels, load_masked, round_row, tasks, SharedPtr};
use half::bf16;
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
    if super::gemm_bf16::prologue("matmul_t_amx", (x, m, k, w, n, out), available()) {
        #[cfg(target_arch = "x86_64")]
        run(x, m, k, w, n, out, threads, Activations::Rounded);
    }
}

/// `out[m, n] = x[m, k] · w[n, k]ᵀ` with the activations kept exact (split into three bf16 parts,
/// module doc), overwriting `out`, on up to `threads` rayon workers.
///
/// Panics if the slice lengths do not match the dimensions or [`available`] is false.
pub fn matmul_t_exact(x: &[f32], m: usize, k: usize, w: &[bf16], n: usize, out: &mut [f32], threads: usize) {
    if super::gemm_bf16::prologue("matmul_t_amx_exact", (x, m, k, w, n, out), available()) {
        #[cfg(target_arch = "x86_64")]
        run(x, m, k, w, n, out, threads, Activations::Split3);
    }
}

/// How the activations enter the tiles.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, PartialEq, Eq)]
enum Activations {
    /// Rounded once to bf16 (one A tile pass).
    Rounded,
    /// Split exactly into three bf16 parts (three A tile passes).
    Split3,
}

#[cfg(target_arch = "x86_64")]
impl Activations {
    fn parts(self) -> usize {
        match self {
            Activations::Rounded => 1,
            Activations::Split3 => 3,
        }
    }
}

/// Pack `x` (every part), then compute the column panels.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::too_many_arguments)]
fn run(x: &[f32], m: usize, k: usize, w: &[bf16], n: usize, out: &mut [f32], threads: usize, a: Activations) {
    let kt = k.div_ceil(2 * T);
    // Row groups of 16, an even number (the micro-kernel takes two at a time).
    let groups = m.div_ceil(T).next_multiple_of(2);
    // Part p of row group g, tile t at `((p · groups + g) · kt + t) · 256`.
    let part_words = groups * kt * TILE_WORDS;
    let mut apack = vec![0u32; a.parts() * part_words];
    let ap = SharedPtr(apack.as_mut_ptr());
    let pack = |g: usize| {
        // SAFETY: available() checked by the caller; task `g` writes only row group `g` of
        // each part of `apack`.
        unsafe { pack_x(x, m, k, g, kt, a, ap.get().add(g * kt * TILE_WORDS), part_words) }
    };
    tasks(m.div_ceil(T), threads, pack);
    let dst = SharedPtr(out.as_mut_ptr());
    let apack = &apack;
    column_panels(n, threads, 2 * T, NC, |j0, j1| {
        // SAFETY: available() checked by the caller; the task writes only columns j0..j1 of
        // `out` (m·n elements, checked by the prologue).
        unsafe { panel(apack, a.parts(), part_words, m, k, kt, &w[j0 * k..j1 * k], j1 - j0, dst, n, j0) }
    });
}

/// Round (or split) rows `g·16 .. g·16 + 16` of `x` to bf16 and store them as the `kt` A tiles of
/// row group `g` of each part `p`: `dst[p·part_words + t·256 + i·16 + c] = pair word (16t + c)`
/// of part `p` of row 16g + i, zero past `m` and `k`.
///
/// # Safety
/// avx512bf16 present; `dst` valid for `kt · 256` writes at each of the parts' offsets.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
#[allow(clippy::too_many_arguments)]
unsafe fn pack_x(x: &[f32], m: usize, k: usize, g: usize, kt: usize, a: Activations, dst: *mut u32, part_words: usize) {
    let parts = a.parts();
    let mut rows = vec![0u32; parts * kt * T];
    for i in 0..T {
        let r = g * T + i;
        if r >= m {
            for p in 0..parts {
                for t in 0..kt {
                    std::ptr::write_bytes(dst.add(p * part_words + t * TILE_WORDS + i * T), 0, T);
                }
            }
            continue;
        }
        let src = &x[r * k..(r + 1) * k];
        match a {
            Activations::Rounded => round_row(src, &mut rows),
            Activations::Split3 => {
                let (h, rest) = rows.split_at_mut(kt * T);
                let (mid, l) = rest.split_at_mut(kt * T);
                split_row(src, [h, mid, l]);
            }
        }
        for p in 0..parts {
            for t in 0..kt {
                std::ptr::copy_nonoverlapping(rows.as_ptr().add((p * kt + t) * T), dst.add(p * part_words + t * TILE_WORDS + i * T), T);
            }
        }
    }
}

/// Split `src` into three rows of bf16 pair words whose sum is `src` exactly (module doc):
/// `parts[0][q]` holds the top 8 significant bits of `src[2q]` and `src[2q + 1]`, `parts[1][q]`
/// those of what is left, `parts[2][q]` the rest; zero past the end of `src`.
///
/// # Safety
/// avx512f and avx512bw present; each part's length ≥ `src.len().div_ceil(32) · 16`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn split_row(src: &[f32], parts: [&mut [u32]; 3]) {
    use std::arch::x86_64::*;
    let k = src.len();
    for part in &parts {
        assert!(part.len() >= k.div_ceil(32) * 16, "split_row: part too short");
    }
    let top = _mm512_set1_epi32(0xFFFF_0000u32 as i32);
    let qnan = _mm512_set1_epi32(0x7FC0_0000);
    // The top 16 bits of each lane of `v` (NaN kept a NaN), and `v` less them (a NaN — from a NaN
    // or an infinite `v` — made 0, so an infinite `v` splits into `±∞ + 0 + 0`).
    let cut = |v: __m512| -> (__m512i, __m512) {
        let bits = _mm512_and_si512(_mm512_castps_si512(v), top);
        let bits = _mm512_mask_mov_epi32(bits, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v), qnan);
        let rest = _mm512_sub_ps(v, _mm512_castsi512_ps(bits));
        (bits, _mm512_maskz_mov_ps(_mm512_cmp_ps_mask::<_CMP_ORD_Q>(rest, rest), rest))
    };
    // Pack the top halves of two vectors of 16 lanes (values p.., p + 16..) into 16 pair words.
    let idx = _mm512_set_epi16(
        63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1,
    );
    let pack = |lo: __m512i, hi: __m512i| -> __m512i { _mm512_permutex2var_epi16(lo, idx, hi) };
    let mut p = 0;
    while p < k {
        let mut lo = load_masked(src.as_ptr(), p, k);
        let mut hi = load_masked(src.as_ptr(), p + 16, k);
        for part in 0..3 {
            let (lo_bits, lo_rest) = cut(lo);
            let (hi_bits, hi_rest) = cut(hi);
            _mm512_storeu_si512(parts[part].as_mut_ptr().add(p / 2) as *mut _, pack(lo_bits, hi_bits));
            (lo, hi) = (lo_rest, hi_rest);
        }
        p += 32;
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

/// Compute columns `j0 .. j0 + nw` of `out` (row stride `ldo`) from the packed `x` (`parts`
/// parts `part_words` apart, `kt` tiles per row group) and the weight rows `w` (`[nw, k]`).
///
/// # Safety
/// [`available`] is true; `apack` holds the parts of the even number of row groups [`run`] packs;
/// `out` is valid for `m · ldo` elements and no other task writes its columns `j0 .. j0 + nw`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn panel(
    apack: &[u32],
    parts: usize,
    part_words: usize,
    m: usize,
    k: usize,
    kt: usize,
    w: &[bf16],
    nw: usize,
    out: SharedPtr<f32>,
    ldo: usize,
    j0: usize,
) {
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
                // The B tiles stay loaded while each part's A tiles pass (tile registers are not
                // touched by compiled code between the blocks).
                asm!(
                    "tileloadd tmm6, [{b0} + {s}*1]",
                    "tileloadd tmm7, [{b1} + {s}*1]",
                    b0 = in(reg) b0.add(o),
                    b1 = in(reg) b1.add(o),
                    s = in(reg) ROW,
                    options(nostack, readonly),
                );
                for p in 0..parts {
                    let po = o + p * part_words * 4;
                    asm!(
                        "tileloadd tmm4, [{a0} + {s}*1]",
                        "tileloadd tmm5, [{a1} + {s}*1]",
                        "tdpbf16ps tmm0, tmm4, tmm6",
                        "tdpbf16ps tmm1, tmm4, tmm7",
                        "tdpbf16ps tmm2, tmm5, tmm6",
                        "tdpbf16ps tmm3, tmm5, tmm7",
                        a0 = in(reg) a0.add(po),
                        a1 = in(reg) a1.add(po),
                        s = in(reg) ROW,
                        options(nostack, readonly),
                    );
                }
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

    /// The split (which needs only AVX-512F/BW, so it runs where AMX is absent): the three parts
    /// sum to each activation exactly, each part is a bf16 value, the pair-word layout is the
    /// rounded kernel's, the tail past `k` is zero; NaN stays NaN and ∞ is `∞ + 0 + 0`.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn split_parts_sum_to_every_activation() {
        if !(std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bw")) {
            println!("skipped: this CPU has no AVX-512F/BW");
            return;
        }
        let mut x = fill(77, 5);
        x.extend([1.0 + f32::EPSILON, f32::MAX, -f32::MAX, 1e-30, f32::MIN_POSITIVE * 3.0, 0.0, -0.0, f32::INFINITY, f32::NAN, 3.4e38]);
        x.extend((0..50).map(|i| f32::from_bits(0x3f80_0001u32.wrapping_mul(i + 1) & 0x7f7f_ffff)));
        let k = x.len();
        let words = k.div_ceil(32) * 16;
        let (mut h, mut m, mut l) = (vec![7u32; words], vec![7u32; words], vec![7u32; words]);
        // SAFETY: AVX-512F/BW detected above; each part has the length split_row asks for.
        unsafe { split_row(&x, [&mut h, &mut m, &mut l]) };
        let value = |part: &[u32], i: usize| bf16::from_bits((part[i / 2] >> (16 * (i % 2))) as u16).to_f32();
        for (i, v) in x.iter().enumerate() {
            let (a, b, c) = (value(&h, i), value(&m, i), value(&l, i));
            if v.is_nan() {
                assert!(a.is_nan() && b == 0.0 && c == 0.0, "NaN split into {a} {b} {c}");
            } else if v.is_infinite() {
                assert!(a == *v && b == 0.0 && c == 0.0, "∞ split into {a} {b} {c}");
            } else {
                assert_eq!(a as f64 + b as f64 + c as f64, *v as f64, "x[{i}] = {v:e} split into {a:e} {b:e} {c:e}");
                assert!(a.abs() >= b.abs() && b.abs() >= c.abs(), "x[{i}] = {v:e}: parts {a:e} {b:e} {c:e}");
            }
        }
        for i in k..2 * words {
            assert!(value(&h, i) == 0.0 && value(&m, i) == 0.0 && value(&l, i) == 0.0, "tail value {i}");
        }
        // A bf16 value is its own first part, in the rounded kernel's layout.
        let exact: Vec<f32> = fill(40, 6).into_iter().map(|v| bf16::from_f32(v).to_f32()).collect();
        let (mut h2, mut m2, mut l2, mut r) = (vec![0u32; 32], vec![0u32; 32], vec![0u32; 32], vec![0u32; 32]);
        // SAFETY: as above; round_row needs avx512bf16, checked here.
        unsafe { split_row(&exact, [&mut h2, &mut m2, &mut l2]) };
        if std::is_x86_feature_detected!("avx512bf16") {
            unsafe { round_row(&exact, &mut r) };
            assert_eq!(h2, r);
        }
        assert!(m2.iter().chain(&l2).all(|w| *w == 0));
    }

    /// The exact kernel: the f64 reference of the *unrounded* activations on odd shapes (the
    /// rounded kernel misses it by the bf16 rounding of `x`), every bit of a 24-bit significand
    /// kept (a 2-part split would lose the last 8), and NaN/∞ activations as the widening kernel
    /// gives them.
    #[test]
    fn exact_kernel_keeps_every_activation_bit() {
        if !available() {
            println!("skipped: this CPU or kernel has no AMX bf16 tiles");
            return;
        }
        let shapes = [(1, 1, 1), (13, 7, 5), (17, 33, 33), (31, 1031, 97), (200, 96, 70), (37, 64, 600)];
        for &(m, k, n) in &shapes {
            let x = fill(m * k, (m * 7 + k) as u64);
            let w: Vec<bf16> = fill(n * k, (n * 5 + k) as u64).into_iter().map(bf16::from_f32).collect();
            for threads in [1, 2] {
                let mut out = vec![f32::NAN; m * n];
                matmul_t_exact(&x, m, k, &w, n, &mut out, threads);
                for i in 0..m {
                    for j in 0..n {
                        let r: f64 = (0..k).map(|p| x[i * k + p] as f64 * w[j * k + p].to_f64()).sum();
                        let g = out[i * n + j] as f64;
                        // f32 summation of k exact products: a few ulps of the partial sums.
                        let scale: f64 = (0..k).map(|p| (x[i * k + p] as f64 * w[j * k + p].to_f64()).abs()).sum();
                        assert!((g - r).abs() <= 4.0 * k as f64 * f32::EPSILON as f64 * scale.max(1e-30), "{m}x{k}x{n} t{threads} [{i},{j}]: {g} vs {r}");
                    }
                }
            }
        }
        // One product per output (k = 1, weight 1 or -0.5): the output is the activation itself,
        // bit for bit, whatever its significand.
        let x: Vec<f32> = [1.0 + f32::EPSILON, -3.000_000_2, 1.234_567_8e-20, 6.543_21e30, f32::MAX, f32::MIN_POSITIVE * 3.0, 0.1]
            .into_iter()
            .chain((0..40).map(|i| f32::from_bits(0x3f80_0001 + i * 0x0001_0203)))
            .collect();
        let w = [bf16::from_f32(1.0), bf16::from_f32(-0.5)];
        let mut out = vec![0.0f32; x.len() * 2];
        matmul_t_exact(&x, x.len(), 1, &w, 2, &mut out, 1);
        for (i, v) in x.iter().enumerate() {
            assert_eq!(out[2 * i].to_bits(), v.to_bits(), "x = {v:e} times 1");
            assert_eq!(out[2 * i + 1], v * -0.5, "x = {v:e} times -0.5");
        }
        // NaN and ∞ activations, k > 1: NaN poisons its row; ∞ gives ±∞ (as x·w in f32 would).
        let (m, k, n) = (3, 40, 3);
        let mut x = fill(m * k, 9);
        x[5] = f32::NAN;
        x[k + 3] = f32::INFINITY;
        let w: Vec<bf16> = (0..n * k).map(|_| bf16::from_f32(0.25)).collect();
        let mut out = vec![0.0f32; m * n];
        matmul_t_exact(&x, m, k, &w, n, &mut out, 2);
        for j in 0..n {
            assert!(out[j].is_nan(), "row 0 (NaN activation) column {j}: {}", out[j]);
            assert_eq!(out[n + j], f32::INFINITY, "row 1 (∞ activation) column {j}");
            assert!(out[2 * n + j].is_finite(), "row 2 column {j}");
        }
    }
}
