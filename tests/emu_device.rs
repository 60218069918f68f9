//! The emulated CUDA device (`tensor::emu`) on its own: the real `kernels/*.cu` of each family
//! (norms, a warp reduction, atomics, shared-memory tiling, dynamic shared memory) against plain
//! CPU references; warp shuffles and votes against CUDA's documented lane rules; the sm_90 launch
//! limits, argument checking, memory checking; the CPU GEMM against cuBLAS column-major
//! semantics; and the deliberately broken kernels of `tests/fixtures/emu` (a skipped barrier, a
//! divergent barrier, a half-warp shuffle) reported with the kernel's name instead of hanging.
//! CUDA graphs: captured work is recorded, not run, and replayed on each launch.
//!
//! The `sanitize_*` tests are ignored: `scripts/emu-sanitize.sh` runs them in the AddressSanitizer
//! and ThreadSanitizer builds and expects the sanitizer to report the broken kernel.

use execcritic::tensor::device::{
    DevPtr, Device, DeviceError, Gemm, GemmType, KernelArg, LaunchDims,
};
use execcritic::tensor::emu::EmuDevice;
use execcritic::tensor::kernels;
use half::bf16;
use KernelArg::{Ptr, F32, I32, I64};

fn dims(grid: (u32, u32, u32), block: u32, shared: u32) -> LaunchDims {
    LaunchDims {
        grid,
        block: (block, 1, 1),
        shared_bytes: shared,
    }
}

fn bytes_of<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: plain-old-data element types (f32, i32, u32, bf16).
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

fn up<T: Copy>(d: &EmuDevice, v: &[T]) -> DevPtr {
    let p = d.alloc_zeroed(std::mem::size_of_val(v)).unwrap();
    d.copy_htod(p, bytes_of(v)).unwrap();
    p
}

fn down<T: Copy + Default>(d: &EmuDevice, p: DevPtr, n: usize) -> Vec<T> {
    let mut v = vec![T::default(); n];
    // SAFETY: as `bytes_of`, mutable.
    let b = unsafe {
        std::slice::from_raw_parts_mut(v.as_mut_ptr() as *mut u8, std::mem::size_of_val(&v[..]))
    };
    d.copy_dtoh(p, b).unwrap();
    v
}

fn bf(v: &[f32]) -> Vec<bf16> {
    v.iter().map(|&x| bf16::from_f32(x)).collect()
}

/// Deterministic pseudo-random values in [-1, 1).
fn vals(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e3779b97f4a7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn max_abs(a: &[f32]) -> f32 {
    a.iter().fold(0.0f32, |m, x| m.max(x.abs()))
}

fn launch_err(r: Result<(), DeviceError>) -> (String, String) {
    match r {
        Err(DeviceError::Launch { kernel, msg }) => (kernel, msg),
        other => panic!("expected a launch error, got {other:?}"),
    }
}

#[test]
fn every_kernel_entry_point_is_registered() {
    let names = EmuDevice::kernel_names();
    for (file, src) in kernels::FILES {
        for act in kernels::ActType::ALL {
            for k in kernels::entry_points_for(src, act) {
                assert!(
                    names.contains(&k),
                    "{file}.cu: {k} is not in the emulator's launch table"
                );
            }
        }
    }
    assert!(names.iter().any(|n| n == "broken_skipped_barrier"));
}

/// The kernels in use are those the run asked for: the linked build, or the shared build named
/// by `EXECCRITIC_EMU_LIBRARY` (scripts/emu-sanitize.sh), compiled with the sanitizer it says
/// (`EXECCRITIC_EMU_EXPECT_SANITIZER`) — a library that failed to load, or a build without it,
/// would make the sanitizer pass vacuous.
#[test]
fn the_kernels_in_use_are_the_ones_asked_for() {
    let lib = EmuDevice::library().unwrap();
    assert_eq!(lib, std::env::var_os("EXECCRITIC_EMU_LIBRARY").map(std::path::PathBuf::from));
    let want = std::env::var("EXECCRITIC_EMU_EXPECT_SANITIZER").ok();
    assert_eq!(EmuDevice::sanitizer(), want.as_deref());
    let engine = if want.is_some() { "os-threads" } else { EmuDevice::engine() };
    assert_eq!(EmuDevice::engine(), engine);
    assert!(["fibers", "os-threads"].contains(&engine), "{engine}");
}

#[test]
fn add_rms_norm_1p_matches_cpu_reference() {
    let d = EmuDevice::new();
    let (rows, dim, eps) = (5usize, 320usize, 1e-6f32);
    let resid = bf(&vals(rows * dim, 1));
    let delta = bf(&vals(rows * dim, 2));
    let w = bf(&vals(dim, 3));
    let (pr, pd, pw) = (up(&d, &resid), up(&d, &delta), up(&d, &w));
    let po = d.alloc_zeroed(rows * dim * 2).unwrap();
    d.launch(
        "add_rms_norm_1p_bf16",
        dims((rows as u32, 1, 1), 256, 0),
        &[
            Ptr(pr),
            Ptr(pd),
            Ptr(pw),
            Ptr(po),
            I32(dim as i32),
            F32(eps),
        ],
    )
    .unwrap();
    let got_resid: Vec<bf16> = down(&d, pr, rows * dim);
    let got: Vec<f32> = down::<bf16>(&d, po, rows * dim)
        .iter()
        .map(|x| x.to_f32())
        .collect();
    let mut want = vec![0.0f32; rows * dim];
    for r in 0..rows {
        let x: Vec<f32> = (0..dim)
            .map(|i| {
                bf16::from_f32(resid[r * dim + i].to_f32() + delta[r * dim + i].to_f32()).to_f32()
            })
            .collect();
        for i in 0..dim {
            assert_eq!(
                got_resid[r * dim + i].to_f32(),
                x[i],
                "residual row {r} col {i}"
            );
        }
        let ss: f64 = x.iter().map(|&v| (v as f64) * (v as f64)).sum();
        let inv = 1.0 / (ss / dim as f64 + eps as f64).sqrt();
        for i in 0..dim {
            want[r * dim + i] = (x[i] as f64 * inv * (1.0 + w[i].to_f32() as f64)) as f32;
        }
    }
    let err = max_abs_diff(&got, &want);
    assert!(err <= 1e-2 * max_abs(&want), "max |diff| {err}");
}

#[test]
fn sample_tokens_greedy_is_argmax_with_log_softmax() {
    // Block reductions (warp shuffles + shared scratch + barriers) and atomicMin on shared memory.
    let d = EmuDevice::new();
    let (b, v) = (3usize, 3000usize);
    let mut logits = vals(b * v, 7);
    for x in logits.iter_mut() {
        *x *= 5.0;
    }
    logits[2 * v + 100] = 9.0; // a tie: the lower index wins
    logits[2 * v + 2500] = 9.0;
    let temp = vec![0.0f32; b];
    let (pl, pt) = (up(&d, &logits), up(&d, &temp));
    let (pk, pp) = (up(&d, &vec![0i32; b]), up(&d, &vec![1.0f32; b]));
    let pu = up(&d, &vec![0.5f64; b]);
    let (ptok, plp, pslp) = (
        d.alloc_zeroed(4 * b).unwrap(),
        d.alloc_zeroed(4 * b).unwrap(),
        d.alloc_zeroed(4 * b).unwrap(),
    );
    d.launch(
        "sample_tokens_bf16",
        dims((b as u32, 1, 1), 1024, 0),
        &[
            Ptr(pl),
            I32(v as i32),
            Ptr(pt),
            Ptr(pk),
            Ptr(pp),
            Ptr(pu),
            Ptr(ptok),
            Ptr(plp),
            Ptr(pslp),
        ],
    )
    .unwrap();
    let tok: Vec<i32> = down(&d, ptok, b);
    let lp: Vec<f32> = down(&d, plp, b);
    for r in 0..b {
        let row = &logits[r * v..(r + 1) * v];
        let mx = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
        let am = row.iter().position(|&x| x == mx).unwrap();
        let lse = row
            .iter()
            .map(|&x| ((x - mx) as f64).exp())
            .sum::<f64>()
            .ln();
        assert_eq!(tok[r] as usize, am, "row {r}");
        assert!(
            (lp[r] as f64 - (-lse)).abs() < 1e-4,
            "row {r}: logprob {} vs {}",
            lp[r],
            -lse
        );
    }
    assert_eq!(tok[2], 100);
}

#[test]
fn router_topk_matches_cpu_softmax_topk() {
    // One warp per token: warp_max / warp_sum and the shuffle argmax.
    let d = EmuDevice::new();
    let (t, e, k) = (6usize, 40usize, 4usize);
    let logits = vals(t * e, 11);
    let pl = up(&d, &logits);
    let (pi, pw, pc) = (
        d.alloc_zeroed(4 * t * k).unwrap(),
        d.alloc_zeroed(4 * t * k).unwrap(),
        d.alloc_zeroed(4 * e).unwrap(),
    );
    d.launch(
        "router_topk_bf16",
        dims((2, 1, 1), 128, 0),
        &[
            Ptr(pl),
            Ptr(pi),
            Ptr(pw),
            Ptr(0),
            Ptr(pc),
            I32(t as i32),
            I32(e as i32),
            I32(k as i32),
        ],
    )
    .unwrap();
    let idx: Vec<i32> = down(&d, pi, t * k);
    let w: Vec<f32> = down(&d, pw, t * k);
    // route and count in one launch: the atomics' histogram of the chosen experts
    let mut want_counts = vec![0i32; e];
    for &i in &idx {
        want_counts[i as usize] += 1;
    }
    assert_eq!(down::<i32>(&d, pc, e), want_counts);
    for r in 0..t {
        let row = &logits[r * e..(r + 1) * e];
        let mut order: Vec<usize> = (0..e).collect();
        order.sort_by(|&a, &b| row[b].partial_cmp(&row[a]).unwrap().then(a.cmp(&b)));
        let top = &order[..k];
        let p: Vec<f64> = top.iter().map(|&i| (row[i] as f64).exp()).collect();
        let tot: f64 = p.iter().sum();
        for j in 0..k {
            assert_eq!(idx[r * k + j] as usize, top[j], "token {r} slot {j}");
            assert!(
                (w[r * k + j] as f64 - p[j] / tot).abs() < 1e-2,
                "token {r} slot {j}"
            );
        }
    }
}

#[test]
fn moe_count_atomics_make_a_histogram() {
    let d = EmuDevice::new();
    let (n, e) = (10_000usize, 37usize);
    let idx: Vec<i32> = vals(n, 5)
        .iter()
        .map(|x| (((x + 1.0) * 0.5 * e as f32) as i32).min(e as i32 - 1))
        .collect();
    let (pi, pc) = (up(&d, &idx), d.alloc_zeroed(4 * e).unwrap());
    d.launch(
        "moe_count_bf16",
        dims((4, 1, 1), 256, 0),
        &[Ptr(pi), Ptr(pc), I64(n as i64)],
    )
    .unwrap();
    let got: Vec<i32> = down(&d, pc, e);
    let mut want = vec![0i32; e];
    for &i in &idx {
        want[i as usize] += 1;
    }
    assert_eq!(got, want);
}

/// Launch one grouped-GEMM kernel over groups `offsets` (3 experts) with a host-built tile list
/// of `tile_m`-row tiles (a few extra grid rows past the list, which must exit) and compare with
/// the CPU product.
fn grouped_gemm_case(
    kernel: &str,
    block: u32,
    tile_m: usize,
    offsets: &[i32; 4],
    extra: &[KernelArg],
    tol: f32,
) {
    let d = EmuDevice::new();
    let (n, kd) = (72usize, 40usize);
    let rows = offsets[3] as usize;
    let x = bf(&vals(rows * kd, 21));
    let w = bf(&vals(3 * n * kd, 22));
    let mut tiles = vec![];
    for ex in 0..3 {
        let mut r = offsets[ex];
        while r < offsets[ex + 1] {
            tiles.extend([ex as i32, r]);
            r += tile_m as i32;
        }
    }
    let nt = tiles.len() / 2;
    tiles.extend([0, 0]);
    let (px, pw, po) = (
        up(&d, &x),
        up(&d, &w),
        d.alloc_zeroed(rows * n * 2).unwrap(),
    );
    let mut args = vec![
        Ptr(px),
        Ptr(pw),
        Ptr(po),
        Ptr(up(&d, offsets)),
        Ptr(0),
        Ptr(up(&d, &tiles)),
        Ptr(up(&d, &[nt as i32])),
        I32(0),
        I32(1),
        I32(n as i32),
        I32(kd as i32),
        I32(tile_m as i32),
    ];
    args.extend_from_slice(extra);
    d.launch(
        kernel,
        dims((n.div_ceil(64) as u32, nt as u32 + 2, 1), block, 0),
        &args,
    )
    .unwrap();
    let got: Vec<f32> = down::<bf16>(&d, po, rows * n)
        .iter()
        .map(|v| v.to_f32())
        .collect();
    let mut want = vec![0.0f32; rows * n];
    for ex in 0..3 {
        for r in offsets[ex] as usize..offsets[ex + 1] as usize {
            for c in 0..n {
                let s: f64 = (0..kd)
                    .map(|q| {
                        x[r * kd + q].to_f32() as f64 * w[(ex * n + c) * kd + q].to_f32() as f64
                    })
                    .sum();
                want[r * n + c] = s as f32;
            }
        }
    }
    let err = max_abs_diff(&got, &want);
    assert!(err <= tol * max_abs(&want), "{kernel}: max |diff| {err}");
}

#[test]
fn grouped_gemm_shared_memory_tiles_match_cpu() {
    // fp32 FMA: 64x64 output tiles staged through shared memory with two barriers per k step;
    // groups of 70, 0 and 65 rows and N, K that are not multiples of the tile.
    grouped_gemm_case("grouped_gemm_bf16", 256, 64, &[0, 70, 70, 135], &[], 1e-2);
}

#[test]
fn grouped_gemm_tensor_core_kernels_match_cpu() {
    // mma.sync through the emulator's fragment exchange: staged 64-row tiles (2 x 2 warps, the
    // lower warps idle on a 5-row tile; K = 40: two cp.async double-buffered k steps, the second
    // zero-filled past K), and the weight-streaming 16-row kernel (a warp past N leaves early)
    // (without the SwiGLU epilogue; with it: tests/cuda_ops.rs)
    grouped_gemm_case("grouped_gemm_mma_bf16", 128, 64, &[0, 37, 37, 42], &[I32(0)], 1e-2);
    grouped_gemm_case("grouped_gemm_stream_bf16", 128, 16, &[0, 20, 20, 23], &[I32(0)], 1e-2);
}

#[test]
fn moe_scan_scatter_groups_rows_and_builds_the_tile_list() {
    // one block: warp-shuffle scan of the counts, the tile list, the shared-memory scatter;
    // expert 1 has no rows, expert 3 more than two tiles
    let d = EmuDevice::new();
    let e = 5usize;
    let idx: Vec<i32> = [0, 3, 3, 2, 3, 4, 3, 3, 0, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3]
        .to_vec();
    let n = idx.len();
    let mut counts = vec![0i32; e];
    for &i in &idx {
        counts[i as usize] += 1;
    }
    let tile_m = 8usize;
    let pc = up(&d, &counts);
    let (poff, pperm, prow, ptiles, pnt) = (
        d.alloc_zeroed(4 * (e + 1)).unwrap(),
        d.alloc_zeroed(4 * n).unwrap(),
        d.alloc_zeroed(4 * n).unwrap(),
        d.alloc_zeroed(4 * 2 * (e + n / tile_m)).unwrap(),
        d.alloc_zeroed(4).unwrap(),
    );
    d.launch(
        "moe_scan_scatter_f32",
        dims((1, 1, 1), 64, 0),
        &[
            Ptr(up(&d, &idx)),
            Ptr(pc),
            Ptr(poff),
            Ptr(pperm),
            Ptr(prow),
            Ptr(ptiles),
            Ptr(pnt),
            I64(n as i64),
            I32(e as i32),
            I32(tile_m as i32),
        ],
    )
    .unwrap();
    let offsets: Vec<i32> = down(&d, poff, e + 1);
    assert_eq!(offsets, vec![0, 2, 2, 3, 22, 23]);
    assert_eq!(down::<i32>(&d, pc, e), vec![0; e], "counts zeroed for the next routing");
    let nt: Vec<i32> = down(&d, pnt, 1);
    let tiles: Vec<i32> = down(&d, ptiles, 2 * nt[0] as usize);
    assert_eq!(tiles, vec![0, 0, 2, 2, 3, 3, 3, 11, 3, 19, 4, 22]);
    let (perm, rop): (Vec<i32>, Vec<i32>) = (down(&d, pperm, n), down(&d, prow, n));
    let mut seen = vec![false; n];
    for (row, &pair) in perm.iter().enumerate() {
        let ex = idx[pair as usize] as usize;
        assert!(offsets[ex] as usize <= row && row < offsets[ex + 1] as usize);
        assert_eq!(rop[pair as usize] as usize, row);
        assert!(!std::mem::replace(&mut seen[pair as usize], true));
    }
}

#[test]
fn gdn_recurrent_dynamic_shared_memory_matches_cpu() {
    let d = EmuDevice::new();
    let (b, hk, hv, dk, dv) = (2usize, 1usize, 2usize, 40usize, 24usize);
    let (q, k, v) = (
        vals(b * hk * dk, 31),
        vals(b * hk * dk, 32),
        vals(b * hv * dv, 33),
    );
    let beta: Vec<f32> = vals(b * hv, 34).iter().map(|x| 0.5 + 0.4 * x).collect();
    let g: Vec<f32> = vals(b * hv, 35).iter().map(|x| -0.5 + 0.3 * x).collect();
    let slots = [1i32, 0];
    let state0 = vals(2 * hv * dk * dv, 36);
    let ps = up(&d, &state0);
    let po = d.alloc_zeroed(b * hv * dv * 2).unwrap();
    let args = [
        Ptr(up(&d, &q)),
        Ptr(up(&d, &k)),
        Ptr(up(&d, &v)),
        Ptr(up(&d, &beta)),
        Ptr(up(&d, &g)),
    ];
    let mut all = args.to_vec();
    all.extend([
        Ptr(ps),
        Ptr(po),
        Ptr(up(&d, &slots)),
        I32(hk as i32),
        I32(hv as i32),
        I32(dk as i32),
        I32(dv as i32),
    ]);
    // dk = 40 rows: two parts of 32 / 8 rows per column, summed in shared memory; the 24
    // columns in blocks of 10 (grid.z = 3, the last block's 6 threads past dv only join the
    // barrier)
    let (parts, cols) = (dk.div_ceil(32), 10);
    d.launch(
        "gdn_recurrent_bf16",
        dims(
            (b as u32, hv as u32, dv.div_ceil(cols) as u32),
            (cols * parts) as u32,
            ((2 * dk + 2 * parts * cols + parts) * 4) as u32,
        ),
        &all,
    )
    .unwrap();
    let state: Vec<f32> = down(&d, ps, state0.len());
    let out: Vec<f32> = down::<bf16>(&d, po, b * hv * dv)
        .iter()
        .map(|x| x.to_f32())
        .collect();
    let mut want_state = state0.clone();
    let mut want_out = vec![0.0f32; b * hv * dv];
    for bi in 0..b {
        for h in 0..hv {
            let s = &mut want_state[(slots[bi] as usize * hv + h) * dk * dv..][..dk * dv];
            let (qv, kv) = (&q[bi * dk..][..dk], &k[bi * dk..][..dk]);
            let decay = g[bi * hv + h].exp();
            for x in s.iter_mut() {
                *x *= decay;
            }
            for j in 0..dv {
                let m: f32 = (0..dk).map(|i| s[i * dv + j] * kv[i]).sum();
                let dl = beta[bi * hv + h] * (v[(bi * hv + h) * dv + j] - m);
                for i in 0..dk {
                    s[i * dv + j] += kv[i] * dl;
                }
                want_out[(bi * hv + h) * dv + j] = (0..dk).map(|i| s[i * dv + j] * qv[i]).sum();
            }
        }
    }
    assert!(max_abs_diff(&state, &want_state) < 1e-4);
    assert!(max_abs_diff(&out, &want_out) <= 1e-2 * max_abs(&want_out));
}

/// CUDA's documented source lane of `__shfl*_sync(…, b, width)` for `lane` (programming guide).
fn shfl_src(mode: i32, lane: usize, b: usize, width: usize) -> usize {
    let base = lane / width * width;
    match mode {
        0 => base + b % width,
        1 => {
            if lane % width >= b {
                lane - b
            } else {
                lane
            }
        }
        2 => {
            if lane % width + b < width {
                lane + b
            } else {
                lane
            }
        }
        _ => {
            let j = lane ^ b;
            if j >= base + width {
                lane
            } else {
                j
            }
        }
    }
}

#[test]
fn warp_shuffles_follow_cuda_lane_rules() {
    let d = EmuDevice::new();
    let input: Vec<i32> = (0..64).map(|i| 1000 + 7 * i).collect();
    let pin = up(&d, &input);
    let pout = d.alloc_zeroed(64 * 4).unwrap();
    for mode in 0..4 {
        for width in [32usize, 16, 8, 4, 2, 1] {
            for b in [0usize, 1, 3, 5, 16, 31] {
                d.launch(
                    "probe_shfl",
                    dims((1, 1, 1), 64, 0),
                    &[
                        Ptr(pin),
                        Ptr(pout),
                        I32(mode),
                        I32(b as i32),
                        I32(width as i32),
                    ],
                )
                .unwrap();
                let out: Vec<i32> = down(&d, pout, 64);
                for (t, &got) in out.iter().enumerate() {
                    let (w, lane) = (t / 32, t % 32);
                    let want = input[w * 32 + shfl_src(mode, lane, b, width)];
                    assert_eq!(got, want, "mode {mode} width {width} b {b} thread {t}");
                }
            }
        }
    }
    let bad = d.launch(
        "probe_shfl",
        dims((1, 1, 1), 64, 0),
        &[Ptr(pin), Ptr(pout), I32(3), I32(1), I32(12)],
    );
    assert!(launch_err(bad).1.contains("width 12"));
}

#[test]
fn votes_see_the_whole_warp() {
    let d = EmuDevice::new();
    let mut input = vec![0i32; 64];
    for (t, x) in input.iter_mut().enumerate() {
        *x = (t % 3 == 0) as i32;
    }
    input[32..64].iter_mut().for_each(|x| *x = 1); // warp 1: all true
    let pin = up(&d, &input);
    let (pb, pa, py) = (
        d.alloc_zeroed(256).unwrap(),
        d.alloc_zeroed(256).unwrap(),
        d.alloc_zeroed(256).unwrap(),
    );
    d.launch(
        "probe_vote",
        dims((1, 1, 1), 64, 0),
        &[Ptr(pin), Ptr(pb), Ptr(pa), Ptr(py)],
    )
    .unwrap();
    let (ballot, all, any): (Vec<u32>, Vec<i32>, Vec<i32>) =
        (down(&d, pb, 64), down(&d, pa, 64), down(&d, py, 64));
    let want0: u32 = (0..32).filter(|l| l % 3 == 0).map(|l| 1u32 << l).sum();
    for t in 0..32 {
        assert_eq!((ballot[t], all[t], any[t]), (want0, 0, 1), "thread {t}");
        assert_eq!(
            (ballot[32 + t], all[32 + t], any[32 + t]),
            (u32::MAX, 1, 1),
            "thread {}",
            32 + t
        );
    }
}

#[test]
fn atomics_are_atomic_across_blocks_and_threads() {
    let d = EmuDevice::new();
    let n = 20_000usize;
    let v: Vec<i32> = vals(n, 41)
        .iter()
        .map(|x| ((x + 1.0) * 50.0) as i32)
        .collect();
    let pv = up(&d, &v);
    let (ph, pf) = (d.alloc_zeroed(4 * 101).unwrap(), d.alloc_zeroed(4).unwrap());
    let (pmn, pmx) = (up(&d, &[i32::MAX]), up(&d, &[i32::MIN]));
    let (ptk, pnext) = (d.alloc_zeroed(4 * n).unwrap(), d.alloc_zeroed(4).unwrap());
    d.launch(
        "probe_atomics",
        dims((7, 1, 1), 96, 0),
        &[
            Ptr(pv),
            I64(n as i64),
            Ptr(ph),
            Ptr(pf),
            Ptr(pmn),
            Ptr(pmx),
            Ptr(ptk),
            Ptr(pnext),
        ],
    )
    .unwrap();
    let hist: Vec<i32> = down(&d, ph, 101);
    let mut want = vec![0i32; 101];
    v.iter().for_each(|&x| want[x as usize] += 1);
    assert_eq!(hist, want);
    assert_eq!(down::<f32>(&d, pf, 1)[0], n as f32);
    assert_eq!(down::<i32>(&d, pmn, 1)[0], *v.iter().min().unwrap());
    assert_eq!(down::<i32>(&d, pmx, 1)[0], *v.iter().max().unwrap());
    let mut tickets: Vec<i32> = down(&d, ptk, n);
    tickets.sort();
    assert!(tickets.iter().enumerate().all(|(i, &t)| t == i as i32));
}

#[test]
fn a_barrier_skipped_by_some_threads_is_reported_with_the_kernel_name() {
    let d = EmuDevice::new();
    let p = d.alloc_zeroed(4 * 128).unwrap();
    let (kernel, msg) =
        launch_err(d.launch("broken_skipped_barrier", dims((2, 1, 1), 128, 0), &[Ptr(p)]));
    assert_eq!(kernel, "broken_skipped_barrier");
    assert!(
        msg.contains("skipped") && msg.contains("broken.cu"),
        "{msg}"
    );
    let (kernel, msg) = launch_err(d.launch(
        "broken_divergent_barrier",
        dims((1, 1, 1), 64, 0),
        &[Ptr(p)],
    ));
    assert_eq!(kernel, "broken_divergent_barrier");
    assert!(msg.contains("divergent __syncthreads"), "{msg}");
    let (kernel, msg) =
        launch_err(d.launch("broken_partial_shuffle", dims((1, 1, 1), 32, 0), &[Ptr(p)]));
    assert_eq!(kernel, "broken_partial_shuffle");
    assert!(msg.contains("deadlock"), "{msg}");
    // The device stays usable after a failed launch.
    let x = up(&d, &[1.0f32; 64]);
    d.launch(
        "fixed_shared_sum",
        dims((1, 1, 1), 64, 0),
        &[Ptr(x), Ptr(p)],
    )
    .unwrap();
    assert_eq!(down::<f32>(&d, p, 1)[0], 64.0);
}

#[test]
fn sm90_launch_limits_and_argument_checks() {
    let d = EmuDevice::new();
    let p = d.alloc_zeroed(4 * 1024).unwrap();
    let fill = |dm: LaunchDims, args: &[KernelArg]| d.launch("fill_f32_bf16", dm, args);
    fill(dims((1, 1, 1), 1024, 0), &[Ptr(p), I64(1024), F32(3.0)]).unwrap();
    assert_eq!(down::<f32>(&d, p, 1024), vec![3.0; 1024]);
    assert!(
        launch_err(fill(dims((1, 1, 1), 1025, 0), &[Ptr(p), I64(4), F32(1.0)]))
            .1
            .contains("1025 threads")
    );
    let odd = LaunchDims {
        grid: (1, 1, 1),
        block: (1, 1, 65),
        shared_bytes: 0,
    };
    assert!(launch_err(fill(odd, &[Ptr(p), I64(4), F32(1.0)]))
        .1
        .contains("block dimensions"));
    let big_grid = LaunchDims {
        grid: (1, 65536, 1),
        block: (1, 1, 1),
        shared_bytes: 0,
    };
    assert!(launch_err(fill(big_grid, &[Ptr(p), I64(4), F32(1.0)]))
        .1
        .contains("grid"));
    assert!(launch_err(fill(
        dims((1, 1, 1), 32, 48 * 1024 + 1),
        &[Ptr(p), I64(4), F32(1.0)]
    ))
    .1
    .contains("shared"));
    let (_, msg) = launch_err(fill(dims((1, 1, 1), 32, 0), &[Ptr(p), I32(4), F32(1.0)]));
    assert!(
        msg.contains("argument 1") && msg.contains("long long"),
        "{msg}"
    );
    assert!(launch_err(fill(dims((1, 1, 1), 32, 0), &[Ptr(p), I64(4)]))
        .1
        .contains("takes 3"));
    assert!(launch_err(fill(
        dims((1, 1, 1), 32, 0),
        &[Ptr(0xdead_0000), I64(4), F32(1.0)]
    ))
    .1
    .contains("not in any live allocation"));
    assert_eq!(
        d.launch("no_such_kernel", dims((1, 1, 1), 32, 0), &[]),
        Err(DeviceError::MissingKernel("no_such_kernel".into()))
    );
}

#[test]
fn device_memory_is_checked() {
    let d = EmuDevice::new();
    let p = d.alloc_zeroed(16).unwrap();
    assert_eq!(down::<u8>(&d, p, 16), vec![0u8; 16]);
    assert!(d.copy_htod(p + 8, &[0u8; 9]).is_err());
    assert!(d.copy_dtoh(p + 16, &mut [0u8; 1]).is_err());
    assert!(d.memset_zero(0x1000, 4).is_err());
    let q = d.alloc_zeroed(16).unwrap();
    d.copy_htod(p, &[7u8; 16]).unwrap();
    d.copy_dtod(q, p, 16).unwrap();
    assert_eq!(down::<u8>(&d, q, 16), vec![7u8; 16]);
    d.free(q);
    assert_eq!(d.live_allocations(), 1);
    d.synchronize().unwrap();
    d.free(q); // double free: reported by the next synchronize
    assert!(
        matches!(d.synchronize(), Err(DeviceError::Driver(m)) if m.contains("not a live allocation"))
    );
    d.synchronize().unwrap();
}

/// Reference `cublasGemmEx` on f64: column-major, op by the transpose flags.
fn gemm_ref(g: &Gemm, a: &[f32], b: &[f32], c0: &[f32]) -> Vec<f64> {
    let mut c = vec![0.0f64; g.ldc * g.n];
    for j in 0..g.n {
        for i in 0..g.m {
            let s: f64 = (0..g.k)
                .map(|l| {
                    let av = if g.trans_a {
                        a[i * g.lda + l]
                    } else {
                        a[l * g.lda + i]
                    };
                    let bv = if g.trans_b {
                        b[l * g.ldb + j]
                    } else {
                        b[j * g.ldb + l]
                    };
                    av as f64 * bv as f64
                })
                .sum();
            c[j * g.ldc + i] = g.alpha as f64 * s + g.beta as f64 * c0[j * g.ldc + i] as f64;
        }
    }
    c
}

#[test]
fn gemm_has_cublas_column_major_semantics_and_types() {
    let d = EmuDevice::new();
    let (m, n, k) = (5usize, 7usize, 9usize);
    for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
        // Small integers: every product and sum is exact in f32, so the comparison is exact.
        let (lda, ldb, ldc) = (
            if ta { k } else { m } + 2,
            if tb { n } else { k } + 1,
            m + 3,
        );
        let a: Vec<f32> = (0..lda * if ta { m } else { k })
            .map(|i| ((i * 7) % 11) as f32 - 5.0)
            .collect();
        let b: Vec<f32> = (0..ldb * if tb { k } else { n })
            .map(|i| ((i * 5) % 13) as f32 - 6.0)
            .collect();
        let c0: Vec<f32> = (0..ldc * n).map(|i| (i % 4) as f32).collect();
        let (pa, pb) = (up(&d, &bf(&a)), up(&d, &b));
        let pc = up(&d, &c0);
        let g = Gemm {
            trans_a: ta,
            trans_b: tb,
            m,
            n,
            k,
            alpha: 2.0,
            a: pa,
            a_type: GemmType::Bf16,
            lda,
            b: pb,
            b_type: GemmType::F32,
            ldb,
            beta: 0.5,
            c: pc,
            c_type: GemmType::F32,
            ldc,
        };
        d.gemm(&g).unwrap();
        let got: Vec<f32> = down(&d, pc, ldc * n);
        let want = gemm_ref(&g, &a, &b, &c0);
        for j in 0..n {
            for i in 0..ldc {
                let w = if i < m {
                    want[j * ldc + i] as f32
                } else {
                    c0[j * ldc + i]
                };
                assert_eq!(got[j * ldc + i], w, "trans ({ta}, {tb}) C({i}, {j})");
            }
        }
    }
    // bf16 output rounds to nearest even: 1 + 2^-8 (a tie) -> 1, 1 + 3·2^-8 -> 1 + 2^-6.
    let pa = up(&d, &bf(&[1.0, 1.0]));
    let pb = up(&d, &[1.0f32, 1.0 / 256.0, 1.0, 3.0 / 256.0]);
    let pc = up(&d, &[bf16::from_f32(f32::NAN); 2]);
    let g = Gemm {
        trans_a: false,
        trans_b: false,
        m: 1,
        n: 2,
        k: 2,
        alpha: 1.0,
        a: pa,
        a_type: GemmType::Bf16,
        lda: 1,
        b: pb,
        b_type: GemmType::F32,
        ldb: 2,
        beta: 0.0,
        c: pc,
        c_type: GemmType::Bf16,
        ldc: 1,
    };
    d.gemm(&g).unwrap();
    let c: Vec<bf16> = down(&d, pc, 2);
    assert_eq!((c[0].to_f32(), c[1].to_f32()), (1.0, 1.0 + 1.0 / 64.0));
    let short = Gemm { ldb: 1, ..g };
    assert!(matches!(d.gemm(&short), Err(DeviceError::Shape { .. })));
    let past_end = Gemm { n: 3, ..g };
    assert!(d.gemm(&past_end).is_err());
}

/// Softmax attention of query `qv` over keys/values rows `0..n` of `[n, hd]` (one KV head).
fn attention_cpu(qv: &[f32], k: &[f32], v: &[f32], n: usize, hd: usize) -> Vec<f32> {
    let s: Vec<f32> = (0..n)
        .map(|j| (0..hd).map(|d| qv[d] * k[j * hd + d]).sum::<f32>() / (hd as f32).sqrt())
        .collect();
    let m = s.iter().fold(f32::NEG_INFINITY, |a, &b| a.max(b));
    let e: Vec<f32> = s.iter().map(|x| (x - m).exp()).collect();
    let l: f32 = e.iter().sum();
    (0..hd)
        .map(|d| (0..n).map(|j| e[j] * v[j * hd + d]).sum::<f32>() / l)
        .collect()
}

/// The tiled attention kernels (dynamic shared K/V tiles, lanes over keys, warp reductions) on
/// tiny shapes, so the sanitizer builds cover them: a prefill query tile that spans two
/// sequences (a segment each) and sees up to 9 staged key tiles, and a two-split decode in which
/// the short sequence's second split is empty. Against a CPU softmax.
#[test]
fn tiled_paged_attention_matches_cpu() {
    use execcritic::tensor::cuda::ops::{self, BlockTable, KvIndex, KvPool};
    use execcritic::tensor::cuda::Gpu;
    let g = Gpu::from_device(std::sync::Arc::new(EmuDevice::new()));
    let (hq, hd, bs) = (2usize, 8usize, 4usize);
    let lens = [260usize, 5];
    let stride = lens[0].div_ceil(bs);
    // sequence 0 on blocks 0.., sequence 1 on the blocks after them, in reverse order
    let mut table = vec![0i32; 2 * stride];
    for i in 0..stride {
        table[i] = i as i32;
    }
    let n1 = lens[1].div_ceil(bs);
    for i in 0..n1 {
        table[stride + i] = (stride + n1 - 1 - i) as i32;
    }
    let dtable = g.upload(&table).unwrap();
    let blocks = || BlockTable { table: &dtable, stride };
    let mut pool = KvPool::<u16>::new(&g, stride + n1, bs, 1, hd).unwrap();
    let r = |x: Vec<f32>| bf(&x).iter().map(|y| y.to_f32()).collect::<Vec<f32>>();
    let kv: Vec<(Vec<f32>, Vec<f32>)> = (0..2)
        .map(|b| (r(vals(lens[b] * hd, 40 + b as u64)), r(vals(lens[b] * hd, 50 + b as u64))))
        .collect();
    let bits = |x: &[f32]| bf(x).iter().map(|y| y.to_bits()).collect::<Vec<u16>>();
    // append every key of both sequences
    let toks: Vec<(usize, usize)> = (0..2).flat_map(|b| (0..lens[b]).map(move |p| (b, p))).collect();
    let col = |f: &dyn Fn(usize, usize) -> i32| g.upload(&toks.iter().map(|&(b, p)| f(b, p)).collect::<Vec<i32>>()).unwrap();
    let (pos, seq) = (col(&|_, p| p as i32), col(&|b, _| b as i32));
    let flat = |i: usize| toks.iter().flat_map(|&(b, p)| [&kv[b].0, &kv[b].1][i][p * hd..(p + 1) * hd].to_vec()).collect::<Vec<f32>>();
    let idx = KvIndex { cache_pos: &pos, seq_of_tok: &seq, blocks: blocks() };
    let (dk, dv) = (g.upload(&bits(&flat(0))).unwrap(), g.upload(&bits(&flat(1))).unwrap());
    ops::kv_append(&g, &dk, &dv, &mut pool, &idx, toks.len()).unwrap();
    // prefill queries: positions 255..260 of sequence 0 and 0..5 of sequence 1, one 10-row tile
    let qt: Vec<(usize, usize)> = (255..260).map(|p| (0, p)).chain((0..5).map(|p| (1, p))).collect();
    let q = r(vals(qt.len() * hq * hd, 60));
    let mut want = vec![];
    for (i, &(b, p)) in qt.iter().enumerate() {
        for h in 0..hq {
            want.extend(attention_cpu(&q[(i * hq + h) * hd..][..hd], &kv[b].0, &kv[b].1, p + 1, hd));
        }
    }
    let qpos = g.upload(&qt.iter().map(|&(_, p)| p as i32).collect::<Vec<_>>()).unwrap();
    let qseq = g.upload(&qt.iter().map(|&(b, _)| b as i32).collect::<Vec<_>>()).unwrap();
    let qidx = KvIndex { cache_pos: &qpos, seq_of_tok: &qseq, blocks: blocks() };
    let dq = g.upload(&bits(&q)).unwrap();
    let mut out = g.zeros::<u16>(q.len()).unwrap();
    ops::attn_prefill(&g, &dq, &pool, &qidx, &mut out, qt.len(), hq).unwrap();
    let got: Vec<f32> = g.download(&out).unwrap().iter().map(|&x| bf16::from_bits(x).to_f32()).collect();
    assert!(max_abs_diff(&got, &want) <= 2e-2 * max_abs(&want), "prefill");
    // decode: one query per sequence over all its keys, 2 splits (260 keys)
    let qd = r(vals(2 * hq * hd, 70));
    let mut want = vec![];
    for b in 0..2 {
        for h in 0..hq {
            want.extend(attention_cpu(&qd[(b * hq + h) * hd..][..hd], &kv[b].0, &kv[b].1, lens[b], hd));
        }
    }
    let mut sc = ops::DecodeScratch::new(&g, 2, hq, hd, 2).unwrap();
    assert_eq!(ops::decode_splits(lens[0], sc.splits_for(2, hq, hd)), 2);
    let dlens = g.upload(&lens.iter().map(|&n| n as i32).collect::<Vec<_>>()).unwrap();
    let dqd = g.upload(&bits(&qd)).unwrap();
    let mut dec = g.zeros::<u16>(qd.len()).unwrap();
    ops::attn_decode(&g, &dqd, &pool, &dlens, &blocks(), 2, hq, lens[0], &mut sc, &mut dec).unwrap();
    let got: Vec<f32> = g.download(&dec).unwrap().iter().map(|&x| bf16::from_bits(x).to_f32()).collect();
    assert!(max_abs_diff(&got, &want) <= 2e-2 * max_abs(&want), "decode");
}

/// The chunk-parallel delta rule (`gdn_chunk_prep` over every chunk of the batch, then
/// `gdn_chunk_state`) against the one-kernel form (`gdn_chunked`, checked against the CPU by
/// tests/cuda_ops.rs) on tiny shapes, so the sanitizer builds cover both: sequences of 70 and 5
/// tokens (3 chunks, one idle block), states starting non-zero.
#[test]
fn gdn_chunk_parallel_form_equals_the_one_kernel_form() {
    use execcritic::tensor::cuda::ops::{self, DeltaBufs, GdnPool};
    use execcritic::tensor::cuda::Gpu;
    let g = Gpu::from_device(std::sync::Arc::new(EmuDevice::new()));
    let (hk, hv, dk, dv, lens) = (1usize, 1usize, 4usize, 4usize, [70usize, 5]);
    let (b, t) = (lens.len(), lens.iter().sum::<usize>());
    let unit = |seed: u64, s: f32| {
        let mut x = vals(t * hk * dk, seed);
        for r in x.chunks_mut(dk) {
            let n = r.iter().map(|y| y * y).sum::<f32>().sqrt().max(1e-6);
            r.iter_mut().for_each(|y| *y *= s / n);
        }
        g.upload(&x).unwrap()
    };
    let (qn, kn) = (unit(81, 0.5), unit(82, 1.0));
    let v = g.upload(&vals(t * hv * dv, 83)).unwrap();
    let beta = g.upload(&vals(t * hv, 84).iter().map(|x| 0.5 + 0.4 * x).collect::<Vec<_>>()).unwrap();
    let gg = g.upload(&vals(t * hv, 85).iter().map(|x| -0.3 + 0.2 * x).collect::<Vec<_>>()).unwrap();
    let x = DeltaBufs { qn: &qn, kn: &kn, v: &v, beta: &beta, g: &gg, hk, hv, dk, dv };
    let cu = g.upload(&[0i32, lens[0] as i32, t as i32]).unwrap();
    let slots = g.upload(&[1i32, 0]).unwrap();
    let state0 = vals(b * hv * dk * dv, 86);
    let run = |scratch_len: usize| {
        let mut pool = GdnPool::new(&g, b, 4, 4, hv, dk, dv).unwrap();
        g.write(&mut pool.rec, &state0).unwrap();
        let mut scratch = g.zeros::<f32>(scratch_len).unwrap();
        let mut out = g.zeros::<u16>(t * hv * dv).unwrap();
        ops::gdn_chunked(&g, &x, &mut pool, &mut scratch, &cu, &slots, b, t, &mut out).unwrap();
        let o: Vec<f32> = g.download(&out).unwrap().iter().map(|&y| bf16::from_bits(y).to_f32()).collect();
        (o, g.download(&pool.rec).unwrap())
    };
    let (o1, s1) = run(ops::gdn_chunked_scratch_min(b, hv, dk, dv));
    let (o2, s2) = run(ops::gdn_chunked_scratch_parallel(b, t, hv, dk, dv));
    assert!(max_abs_diff(&s1, &s2) < 1e-5, "states");
    assert!(max_abs_diff(&o1, &o2) <= 1e-2 * max_abs(&o1), "outputs");
    assert!(max_abs_diff(&s1, &state0) > 1e-3, "the states moved");
}

/// The cp.async model: a copy lands in the issuing thread's wait_group, so the correct pattern
/// (wait, then __syncthreads) reads the neighbour's data, and a kernel that reads before its wait
/// gets the old shared contents, as the GPU may. The missing-__syncthreads variant is a
/// race: `sanitize_cp_async_missing_sync` (ThreadSanitizer).
#[test]
fn cp_async_copies_land_at_the_wait() {
    let d = EmuDevice::new();
    let n = 32usize;
    let x: Vec<f32> = (0..4 * n).map(|i| i as f32 + 1.0).collect();
    let neg: Vec<f32> = x.iter().map(|v| -v).collect();
    let (px, pneg) = (up(&d, &x), up(&d, &neg));
    let run = |src: DevPtr, mode: i32| {
        let po = d.alloc_zeroed(16 * n).unwrap();
        d.launch("broken_cp_async", dims((1, 1, 1), n as u32, 0), &[Ptr(src), Ptr(po), I32(mode)])
            .unwrap();
        down::<f32>(&d, po, 4 * n)
    };
    let rotated: Vec<f32> = (0..4 * n).map(|i| x[(i + 4) % (4 * n)]).collect();
    assert_eq!(run(px, 0), rotated);
    // without the wait: the shared memory's old contents (zeros or the previous launch's
    // positive values), never the negated values being copied
    assert!(run(pneg, 1).iter().zip(&neg).all(|(o, v)| o != v));
    // a misaligned copy is an error naming the kernel
    let r = d.launch(
        "broken_cp_async",
        dims((1, 1, 1), n as u32, 0),
        &[Ptr(px + 4), Ptr(d.alloc_zeroed(16 * n + 16).unwrap()), I32(0)],
    );
    let (kernel, msg) = launch_err(r);
    assert!(kernel.contains("broken_cp_async") && msg.contains("misaligned"), "{kernel}: {msg}");
}

// ---- run by scripts/emu-sanitize.sh in the sanitizer builds (ignored otherwise) ----

/// AddressSanitizer build: the off-by-one write one element past a device allocation aborts the
/// process with a heap-buffer-overflow report (the script expects that report).
#[test]
#[ignore = "run by scripts/emu-sanitize.sh under AddressSanitizer"]
fn sanitize_off_by_one() {
    let d = EmuDevice::new();
    let n = 100usize;
    let x = up(&d, &vec![1.0f32; n]);
    let y = d.alloc_zeroed(4 * n).unwrap();
    d.launch(
        "broken_off_by_one",
        dims((1, 1, 1), 128, 0),
        &[Ptr(x), Ptr(y), I32(n as i32)],
    )
    .unwrap();
}

/// ThreadSanitizer build: the block sum without its barrier is a data race on shared memory.
#[test]
#[ignore = "run by scripts/emu-sanitize.sh under ThreadSanitizer"]
fn sanitize_missing_sync() {
    let d = EmuDevice::new();
    let x = up(&d, &vec![1.0f32; 64]);
    let out = d.alloc_zeroed(4).unwrap();
    d.launch(
        "broken_missing_sync",
        dims((1, 1, 1), 64, 0),
        &[Ptr(x), Ptr(out)],
    )
    .unwrap();
}

/// CUDA graphs on the emulator: work enqueued during a capture is recorded, not run; a launch
/// of the graph runs it again each time; host copies cannot be captured.
#[test]
fn a_captured_graph_runs_only_when_launched_and_replays_its_work() {
    use execcritic::tensor::cuda::{ops, Gpu};
    let gpu = Gpu::emulator().unwrap();
    let mut o = gpu.upload(&[2.0f32; 8]).unwrap();
    let gate = gpu.upload(&[0.0f32; 8]).unwrap(); // sigmoid(0) = 0.5
    gpu.begin_capture().unwrap();
    assert!(gpu.begin_capture().is_err(), "no nested capture");
    ops::sigmoid_gate_mul(&gpu, &mut o, &gate, 8).unwrap();
    assert!(gpu.download(&o).is_err(), "a host copy is not capturable");
    let id = gpu.end_capture().unwrap();
    assert_eq!(gpu.download(&o).unwrap(), vec![2.0; 8], "capturing ran nothing");
    gpu.launch_graph(id).unwrap();
    assert_eq!(gpu.download(&o).unwrap(), vec![1.0; 8]);
    gpu.launch_graph(id).unwrap();
    assert_eq!(gpu.download(&o).unwrap(), vec![0.5; 8]);
    assert_eq!(gpu.graph_launches(), 2);
    gpu.drop_graph(id);
    assert!(gpu.launch_graph(id).is_err(), "a dropped graph is gone");
}

/// ThreadSanitizer build: cp.async copies then reads of another thread's chunk without the
/// __syncthreads after the wait: a data race between the copy (performed in the issuing
/// thread's wait) and the read.
#[test]
#[ignore = "run by scripts/emu-sanitize.sh under ThreadSanitizer"]
fn sanitize_cp_async_missing_sync() {
    let d = EmuDevice::new();
    let n = 32usize;
    let x = up(&d, &vec![1.0f32; 4 * n]);
    let out = d.alloc_zeroed(16 * n).unwrap();
    d.launch("broken_cp_async", dims((1, 1, 1), n as u32, 0), &[Ptr(x), Ptr(out), I32(2)])
        .unwrap();
}
