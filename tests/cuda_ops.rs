//! Parity of the CUDA ops (bf16 build; the paged attention in both builds) against the CPU reference (`tensor::cpu`, `model::gdn`,
//! `model::rope`), on the real GPU when one is present and on the emulated device otherwise
//! (`EXECCRITIC_REQUIRE_GPU=1`, set by scripts/gpu-check.sh, makes a missing GPU a failure).
//! Inputs are bf16-representable, so tolerances only cover fp32 accumulation order and bf16
//! output rounding (documented in docs/cuda.md: 1e-2 relative on bf16 outputs, 1e-4 on fp32
//! states). The f32 build is checked end to end against the CPU engine by tests/cuda_model.rs.

use execcritic::engine::{Sampler, SamplingParams};
use execcritic::model::gdn::{chunked_delta_rule, recurrent_delta_rule, DeltaInput};
use execcritic::model::rope::Rope;
use execcritic::tensor::cpu;
use execcritic::tensor::cuda::ops::{
    self, BlockTable, DeltaBufs, ExpertGemm, GdnPool, KvIndex, KvPool, MoeGroups, SampleParams,
    SampleRow,
};
use execcritic::tensor::cuda::{from_bf16_bits, gemm, to_bf16_bits, Act, Gpu};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The real GPU when present, else the emulated device.
fn gpu() -> Gpu {
    Gpu::auto().expect("no device: neither a GPU nor the emulator")
}

/// Random values rounded to bf16 (so host and device see the same inputs).
fn rnd(rng: &mut ChaCha8Rng, n: usize, s: f32) -> Vec<f32> {
    from_bf16_bits(&to_bf16_bits(
        &(0..n).map(|_| rng.random_range(-s..s)).collect::<Vec<_>>(),
    ))
}

fn close(name: &str, got: &[f32], want: &[f32], rel: f32) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-6);
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!(
            (a - b).abs() <= rel * scale,
            "{name}[{i}]: gpu {a} vs cpu {b} (scale {scale})"
        );
    }
}

#[test]
fn linear_and_rms_norm_match_cpu() {
    let g = gpu();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let (m, k, n) = (5, 96, 130);
    let (x, w) = (rnd(&mut rng, m * k, 1.0), rnd(&mut rng, n * k, 0.2));
    let mut want = vec![0.0; m * n];
    cpu::matmul_t(&x, m, k, &w, n, &mut want, false);
    let (dx, dw) = (
        g.upload(&to_bf16_bits(&x)).unwrap(),
        g.upload(&to_bf16_bits(&w)).unwrap(),
    );
    let mut out = g.zeros::<f32>(m * n).unwrap();
    gemm::linear(&g, &dx, m, k, &dw, n, &mut out).unwrap();
    close("linear", &g.download(&out).unwrap(), &want, 1e-3);

    let nw = rnd(&mut rng, k, 0.5);
    let mut want = x.clone();
    cpu::rms_norm_1p(&mut want, &nw, 1e-6);
    let mut resid = g.upload(&to_bf16_bits(&x)).unwrap();
    let mut o = g.zeros::<u16>(m * k).unwrap();
    ops::add_rms_norm_1p(
        &g,
        &mut resid,
        None,
        &g.upload(&to_bf16_bits(&nw)).unwrap(),
        &mut o,
        m,
        k,
        1e-6,
    )
    .unwrap();
    close(
        "rms_norm_1p",
        &from_bf16_bits(&g.download(&o).unwrap()),
        &want,
        1e-2,
    );
}

#[test]
fn rope_matches_cpu() {
    let g = gpu();
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let (t, heads, hd, rot) = (7, 3, 32, 8);
    let x = rnd(&mut rng, t * heads * hd, 1.0);
    let rope = Rope::new(rot, 10000.0);
    let mut want = x.clone();
    for ti in 0..t {
        let (c, s) = rope.cos_sin(ti + 5);
        for h in 0..heads {
            Rope::apply(
                &mut want[(ti * heads + h) * hd..(ti * heads + h + 1) * hd],
                &c,
                &s,
            );
        }
    }
    let mut dx = g.upload(&to_bf16_bits(&x)).unwrap();
    let pos = g
        .upload(&(0..t as i32).map(|p| p + 5).collect::<Vec<_>>())
        .unwrap();
    ops::rope_partial(&g, &mut dx, &pos, t, heads, hd, rot, 10000.0, false).unwrap();
    close(
        "rope",
        &from_bf16_bits(&g.download(&dx).unwrap()),
        &want,
        1e-2,
    );
}

/// Causal GQA softmax attention of one query row over keys/values `[n, hkv, hd]` (rows 0..n).
fn attention_ref(qv: &[f32], k: &[f32], v: &[f32], n: usize, kh: usize, hkv: usize, hd: usize) -> Vec<f32> {
    let row = |j: usize| (j * hkv + kh) * hd..(j * hkv + kh + 1) * hd;
    let mut s: Vec<f32> = (0..n)
        .map(|j| cpu::dot(qv, &k[row(j)]) / (hd as f32).sqrt())
        .collect();
    cpu::softmax(&mut s);
    let mut out = vec![0.0f32; hd];
    for (j, p) in s.iter().enumerate() {
        cpu::axpy(*p, &v[row(j)], &mut out);
    }
    out
}

/// A block table over a pool of `nblocks` blocks handed out in shuffled order (non-contiguous):
/// row b lists `per_seq[b]` blocks in token order. Returns the table and its row stride.
fn shuffled_block_table(rng: &mut ChaCha8Rng, per_seq: &[usize], nblocks: usize) -> (Vec<i32>, usize) {
    let mut ids: Vec<i32> = (0..nblocks as i32).collect();
    for i in (1..ids.len()).rev() {
        ids.swap(i, rng.random_range(0..=i));
    }
    let stride = per_seq.iter().copied().max().unwrap_or(1);
    let mut table = vec![0i32; per_seq.len() * stride];
    let mut next = ids.into_iter();
    for (b, &n) in per_seq.iter().enumerate() {
        for i in 0..n {
            table[b * stride + i] = next.next().unwrap();
        }
    }
    (table, stride)
}

/// Paged KV cache in storage type `A`: three sequences whose blocks are scattered over a pool in
/// shuffled order (block size 5, which divides no length), filled by two appends (the second
/// starts inside partial blocks), prefill attention after each, then one split-KV decode step;
/// everything against the CPU softmax reference over the sequences' own keys.
fn paged_attention_matches_cpu<A: Act>(tol: f32) {
    let g = gpu();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let (hq, hkv, hd, bs, nblocks) = (4, 2, 32, 5, 24);
    let lens = [23usize, 7, 34]; // after the two prefill chunks
    let chunk1 = [13usize, 3, 20];
    let round = |x: Vec<f32>| A::to_f32(&A::from_f32(&x));
    // per sequence: keys/values of its prefill tokens and one decode token, queries likewise
    let kv: Vec<(Vec<f32>, Vec<f32>)> = lens
        .iter()
        .map(|&n| {
            (
                round(rnd(&mut rng, (n + 1) * hkv * hd, 1.0)),
                round(rnd(&mut rng, (n + 1) * hkv * hd, 1.0)),
            )
        })
        .collect();
    let qs: Vec<Vec<f32>> = lens
        .iter()
        .map(|&n| round(rnd(&mut rng, (n + 1) * hq * hd, 1.0)))
        .collect();
    let per_seq: Vec<usize> = lens.iter().map(|n| (n + 1).div_ceil(bs)).collect();
    let (table, stride) = shuffled_block_table(&mut rng, &per_seq, nblocks);
    let dtable = g.upload(&table).unwrap();
    let blocks = || BlockTable {
        table: &dtable,
        stride,
    };
    let mut pool = KvPool::<A>::new(&g, nblocks, bs, hkv, hd).unwrap();
    // Append packed (sequence, position) tokens' k, v rows to the pool; their queries, positions,
    // block-table rows (on the device) and the CPU reference output.
    let append = |pool: &mut KvPool<A>, toks: &[(usize, usize)]| {
        let (mut q, mut k, mut v, mut pos, mut seq, mut want) =
            (vec![], vec![], vec![], vec![], vec![], vec![]);
        for &(b, p) in toks {
            q.extend_from_slice(&qs[b][p * hq * hd..(p + 1) * hq * hd]);
            k.extend_from_slice(&kv[b].0[p * hkv * hd..(p + 1) * hkv * hd]);
            v.extend_from_slice(&kv[b].1[p * hkv * hd..(p + 1) * hkv * hd]);
            pos.push(p as i32);
            seq.push(b as i32);
            for h in 0..hq {
                let qv = &qs[b][(p * hq + h) * hd..(p * hq + h + 1) * hd];
                want.extend(attention_ref(qv, &kv[b].0, &kv[b].1, p + 1, h / (hq / hkv), hkv, hd));
            }
        }
        let (dpos, dseq) = (g.upload(&pos).unwrap(), g.upload(&seq).unwrap());
        let idx = KvIndex {
            cache_pos: &dpos,
            seq_of_tok: &dseq,
            blocks: blocks(),
        };
        let (dk, dv) = (g.upload(&A::from_f32(&k)).unwrap(), g.upload(&A::from_f32(&v)).unwrap());
        ops::kv_append(&g, &dk, &dv, pool, &idx, toks.len()).unwrap();
        (g.upload(&A::from_f32(&q)).unwrap(), dpos, dseq, want)
    };
    // two prefill chunks: tokens [from[b], to[b]) of every sequence, packed
    let zero = [0usize; 3];
    for (from, to) in [(&zero, &chunk1), (&chunk1, &lens)] {
        let toks: Vec<(usize, usize)> =
            (0..lens.len()).flat_map(|b| (from[b]..to[b]).map(move |p| (b, p))).collect();
        let (dq, dpos, dseq, want) = append(&mut pool, &toks);
        let t = toks.len();
        let idx = KvIndex {
            cache_pos: &dpos,
            seq_of_tok: &dseq,
            blocks: blocks(),
        };
        let mut out = g.zeros::<A>(t * hq * hd).unwrap();
        ops::attn_prefill(&g, &dq, &pool, &idx, &mut out, t, hq).unwrap();
        close("paged attn_prefill", &A::to_f32(&g.download(&out).unwrap()), &want, tol);
    }
    // one decode token per sequence at position lens[b], split-KV over the paged cache
    let b = lens.len();
    let toks: Vec<(usize, usize)> = lens.iter().copied().enumerate().collect();
    let (dq, _, _, want) = append(&mut pool, &toks);
    let mut sc = ops::DecodeScratch::new(&g, b, hq, hd, 4).unwrap();
    let lens_after: Vec<i32> = lens.iter().map(|&n| n as i32 + 1).collect();
    let dlens = g.upload(&lens_after).unwrap();
    let mut dec = g.zeros::<A>(b * hq * hd).unwrap();
    let longest = *lens.iter().max().unwrap() + 1;
    ops::attn_decode(&g, &dq, &pool, &dlens, &blocks(), b, hq, longest, &mut sc, &mut dec).unwrap();
    close("paged attn_decode", &A::to_f32(&g.download(&dec).unwrap()), &want, tol);
    // a decode longer than the block table can hold is refused on the host
    let short = BlockTable { table: &dtable, stride: 1 };
    assert!(ops::attn_decode(&g, &dq, &pool, &dlens, &short, b, hq, longest, &mut sc, &mut dec).is_err());
}

#[test]
fn paged_attention_matches_cpu_bf16() {
    paged_attention_matches_cpu::<u16>(2e-2);
}

#[test]
fn paged_attention_matches_cpu_f32() {
    paged_attention_matches_cpu::<f32>(1e-4);
}

/// Split-KV decode whose split count follows the context: contexts of 601 and 90 keys (GQA group
/// of 6 query heads per KV head, block size 16, shuffled blocks) take `ceil(601 / 256)` = 3
/// splits, so the short sequence has a partial split and an empty one (m = -inf in the combine);
/// each split stages several 32-key tiles. Against the CPU softmax reference.
fn split_kv_decode_follows_the_context<A: Act>(tol: f32) {
    let g = gpu();
    let mut rng = ChaCha8Rng::seed_from_u64(15);
    let (hq, hkv, hd, bs) = (6, 1, 32, 16);
    let lens = [601usize, 90];
    let round = |x: Vec<f32>| A::to_f32(&A::from_f32(&x));
    let per_seq: Vec<usize> = lens.iter().map(|n| n.div_ceil(bs)).collect();
    let nblocks: usize = per_seq.iter().sum();
    let (table, stride) = shuffled_block_table(&mut rng, &per_seq, nblocks);
    let dtable = g.upload(&table).unwrap();
    let blocks = BlockTable { table: &dtable, stride };
    let mut pool = KvPool::<A>::new(&g, nblocks, bs, hkv, hd).unwrap();
    let (mut k, mut v, mut pos, mut seq, mut q, mut want) = (vec![], vec![], vec![], vec![], vec![], vec![]);
    for (b, &n) in lens.iter().enumerate() {
        let (kb, vb) = (round(rnd(&mut rng, n * hkv * hd, 1.0)), round(rnd(&mut rng, n * hkv * hd, 1.0)));
        let qb = round(rnd(&mut rng, hq * hd, 1.0));
        for h in 0..hq {
            want.extend(attention_ref(&qb[h * hd..(h + 1) * hd], &kb, &vb, n, h / (hq / hkv), hkv, hd));
        }
        k.extend_from_slice(&kb);
        v.extend_from_slice(&vb);
        q.extend_from_slice(&qb);
        pos.extend(0..n as i32);
        seq.extend(std::iter::repeat_n(b as i32, n));
    }
    let (dpos, dseq) = (g.upload(&pos).unwrap(), g.upload(&seq).unwrap());
    let idx = KvIndex { cache_pos: &dpos, seq_of_tok: &dseq, blocks: BlockTable { table: &dtable, stride } };
    let (dk, dv) = (g.upload(&A::from_f32(&k)).unwrap(), g.upload(&A::from_f32(&v)).unwrap());
    ops::kv_append(&g, &dk, &dv, &mut pool, &idx, pos.len()).unwrap();
    let b = lens.len();
    let mut sc = ops::DecodeScratch::new(&g, b, hq, hd, 4).unwrap();
    assert_eq!(ops::decode_splits(601, sc.splits_for(b, hq, hd)), 3);
    assert_eq!(ops::decode_splits(90, sc.splits_for(b, hq, hd)), 1);
    let dlens = g.upload(&lens.iter().map(|&n| n as i32).collect::<Vec<_>>()).unwrap();
    let dq = g.upload(&A::from_f32(&q)).unwrap();
    let mut dec = g.zeros::<A>(b * hq * hd).unwrap();
    ops::attn_decode(&g, &dq, &pool, &dlens, &blocks, b, hq, lens[0], &mut sc, &mut dec).unwrap();
    close("split-KV decode", &A::to_f32(&g.download(&dec).unwrap()), &want, tol);
}

#[test]
fn split_kv_decode_follows_the_context_bf16() {
    split_kv_decode_follows_the_context::<u16>(2e-2);
}

#[test]
fn split_kv_decode_follows_the_context_f32() {
    split_kv_decode_follows_the_context::<f32>(1e-4);
}

#[test]
fn gdn_chunked_and_recurrent_match_cpu() {
    let g = gpu();
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    let (t, hk, hv, dk, dv) = (70, 1, 2, 16, 8);
    let mut unit = |n: usize, d: usize, s: f32| {
        let mut v = rnd(&mut rng, n * d, 1.0);
        for r in v.chunks_mut(d) {
            cpu::l2_normalize(r, 1e-6, s);
        }
        v
    };
    let (qn, kn) = (
        unit(t * hk, dk, 1.0 / (dk as f32).sqrt()),
        unit(t * hk, dk, 1.0),
    );
    let v = rnd(&mut rng, t * hv * dv, 1.0);
    let beta: Vec<f32> = (0..t * hv).map(|_| rng.random_range(0.1f32..0.9)).collect();
    let gg: Vec<f32> = (0..t * hv)
        .map(|_| rng.random_range(-0.5f32..-0.01))
        .collect();
    // CPU per value head
    let mut want = vec![0.0f32; t * hv * dv];
    for h in 0..hv {
        let pick = |x: &[f32], heads: usize, d: usize, hh: usize| {
            (0..t)
                .flat_map(|i| x[(i * heads + hh) * d..(i * heads + hh + 1) * d].to_vec())
                .collect::<Vec<f32>>()
        };
        let (qh, kh, vh) = (
            pick(&qn, hk, dk, h / (hv / hk)),
            pick(&kn, hk, dk, h / (hv / hk)),
            pick(&v, hv, dv, h),
        );
        let (bh, gh) = (pick(&beta, hv, 1, h), pick(&gg, hv, 1, h));
        let mut s = vec![0.0f32; dk * dv];
        let o = recurrent_delta_rule(
            &DeltaInput {
                q: &qh,
                k: &kh,
                v: &vh,
                beta: &bh,
                g: &gh,
                dk,
                dv,
            },
            &mut s,
        );
        let mut s2 = vec![0.0f32; dk * dv];
        let o2 = chunked_delta_rule(
            &DeltaInput {
                q: &qh,
                k: &kh,
                v: &vh,
                beta: &bh,
                g: &gh,
                dk,
                dv,
            },
            &mut s2,
            64,
        );
        close("cpu chunked vs recurrent", &o2, &o, 1e-4);
        for i in 0..t {
            want[(i * hv + h) * dv..(i * hv + h + 1) * dv]
                .copy_from_slice(&o[i * dv..(i + 1) * dv]);
        }
    }
    let up = |x: &[f32]| g.upload(x).unwrap();
    let (dq, dk_, dv_, db, dg) = (up(&qn), up(&kn), up(&v), up(&beta), up(&gg));
    let bufs = DeltaBufs {
        qn: &dq,
        kn: &dk_,
        v: &dv_,
        beta: &db,
        g: &dg,
        hk,
        hv,
        dk,
        dv,
    };
    let mut pool = GdnPool::new(&g, 1, 4, 4, hv, dk, dv).unwrap();
    let mut scratch = g.zeros::<f32>(hv * 64 * (dk + dv)).unwrap();
    let cu = g.upload(&[0i32, t as i32]).unwrap();
    let slots = g.upload(&[0i32]).unwrap();
    let mut out = g.zeros::<u16>(t * hv * dv).unwrap();
    ops::gdn_chunked(
        &g,
        &bufs,
        &mut pool,
        &mut scratch,
        &cu,
        &slots,
        1,
        t,
        &mut out,
    )
    .unwrap();
    close(
        "gdn_chunked",
        &from_bf16_bits(&g.download(&out).unwrap()),
        &want,
        2e-2,
    );
    // the chunk-parallel form (gdn_chunk_prep over every chunk, then gdn_chunk_state) on two
    // packed copies of the sequence in swapped slots (chunks numbered across sequences, one idle
    // block): the same outputs as the CPU and the same states as the one-kernel form
    let dup = |x: &[f32]| {
        let mut y = x.to_vec();
        y.extend_from_slice(x);
        g.upload(&y).unwrap()
    };
    let (q2, k2, v2, b2, g2) = (dup(&qn), dup(&kn), dup(&v), dup(&beta), dup(&gg));
    let bufs2 = DeltaBufs {
        qn: &q2,
        kn: &k2,
        v: &v2,
        beta: &b2,
        g: &g2,
        hk,
        hv,
        dk,
        dv,
    };
    let mut pool3 = GdnPool::new(&g, 2, 4, 4, hv, dk, dv).unwrap();
    let mut scratch2 = g
        .zeros::<f32>(ops::gdn_chunked_scratch_parallel(2, 2 * t, hv, dk, dv))
        .unwrap();
    let cu2 = g.upload(&[0i32, t as i32, 2 * t as i32]).unwrap();
    let slots2 = g.upload(&[1i32, 0]).unwrap();
    let mut out2 = g.zeros::<u16>(2 * t * hv * dv).unwrap();
    let before = g.op_counts();
    ops::gdn_chunked(&g, &bufs2, &mut pool3, &mut scratch2, &cu2, &slots2, 2, 2 * t, &mut out2)
        .unwrap();
    assert_eq!(g.op_counts().since(before).launches, 2, "the chunk-parallel form");
    let got2 = from_bf16_bits(&g.download(&out2).unwrap());
    let n = t * hv * dv;
    close("gdn chunk-parallel, sequence 0", &got2[..n], &want, 2e-2);
    close("gdn chunk-parallel, sequence 1", &got2[n..], &want, 2e-2);
    let (st2, st1) = (g.download(&pool3.rec).unwrap(), g.download(&pool.rec).unwrap());
    let ns = hv * dk * dv;
    close("gdn chunk-parallel state, slot 0", &st2[..ns], &st1[..ns], 1e-4);
    close("gdn chunk-parallel state, slot 1", &st2[ns..], &st1[..ns], 1e-4);
    // recurrent decode, token by token from a fresh state, equals the chunked prefill
    let mut pool2 = GdnPool::new(&g, 1, 4, 4, hv, dk, dv).unwrap();
    let mut got = vec![];
    for i in 0..t {
        let up1 = |x: &[f32], d: usize| g.upload(&x[i * d..(i + 1) * d]).unwrap();
        let (q1, k1, v1, b1, g1) = (
            up1(&qn, hk * dk),
            up1(&kn, hk * dk),
            up1(&v, hv * dv),
            up1(&beta, hv),
            up1(&gg, hv),
        );
        let b = DeltaBufs {
            qn: &q1,
            kn: &k1,
            v: &v1,
            beta: &b1,
            g: &g1,
            hk,
            hv,
            dk,
            dv,
        };
        let mut o = g.zeros::<u16>(hv * dv).unwrap();
        ops::gdn_recurrent(&g, &b, &mut pool2, &slots, 1, &mut o).unwrap();
        got.extend(from_bf16_bits(&g.download(&o).unwrap()));
    }
    close("gdn_recurrent", &got, &want, 2e-2);
    close(
        "gdn state",
        &g.download(&pool2.rec).unwrap(),
        &g.download(&pool.rec).unwrap(),
        1e-4,
    );
}

/// One MoE case in storage type `A`: route (or replay `forced`) and group on the device, the
/// grouped expert GEMMs by `path` with SwiGLU between, the weighted combine; compared with a CPU
/// MoE over the device's expert choices and weights (the unforced top-k is checked against a
/// CPU softmax top-k as well). Returns the tile height the grouping chose.
fn moe_case<A: Act>(
    g: &Gpu,
    (t, e, k, h, i): (usize, usize, usize, usize, usize),
    forced: Option<Vec<i32>>,
    path: ExpertGemm,
    rel: f32,
) -> usize {
    let mut rng = ChaCha8Rng::seed_from_u64((t * 1000 + e * 10 + k) as u64);
    let logits: Vec<f32> = (0..t * e).map(|_| rng.random_range(-3.0f32..3.0)).collect();
    let x = rnd(&mut rng, t * h, 1.0);
    let gu = rnd(&mut rng, e * 2 * i * h, 0.3);
    let down = rnd(&mut rng, e * h * i, 0.3);
    let dl = g.upload(&logits).unwrap();
    let (mut idx, mut wts) = (
        g.zeros::<i32>(t * k).unwrap(),
        g.zeros::<f32>(t * k).unwrap(),
    );
    let df = forced.as_ref().map(|f| g.upload(f).unwrap());
    let mut groups = MoeGroups::new(g, t * k, e).unwrap();
    ops::route_and_group::<A>(g, &dl, &mut idx, &mut wts, df.as_ref(), t, e, k, &mut groups)
        .unwrap();
    let (hidx, hw) = (g.download(&idx).unwrap(), g.download(&wts).unwrap());
    let dx = g.upload(&A::from_f32(&x)).unwrap();
    let mut h1 = g.zeros::<A>(t * k * 2 * i).unwrap();
    let (dgu, ddown) = (
        g.upload(&A::from_f32(&gu)).unwrap(),
        g.upload(&A::from_f32(&down)).unwrap(),
    );
    ops::grouped_gemm_with(g, path, &dx, &dgu, &mut h1, &groups, true, k, e, 2 * i, h, t * k)
        .unwrap();
    let mut act = g.zeros::<A>(t * k * i).unwrap();
    ops::swiglu(g, &h1, &mut act, t * k, i).unwrap();
    if path != ExpertGemm::Fma && A::TYPE == execcritic::tensor::cuda::ActType::Bf16 {
        // SwiGLU in the GEMM's epilogue: the same act as GEMM + swiglu (same roundings; fp32
        // sums in the same order)
        let mut fused = g.zeros::<A>(t * k * i).unwrap();
        ops::grouped_gemm_swiglu(g, path, &dx, &dgu, &mut fused, &groups, k, e, i, h, t * k)
            .unwrap();
        assert_eq!(
            A::to_f32(&g.download(&fused).unwrap()),
            A::to_f32(&g.download(&act).unwrap()),
            "fused SwiGLU ({path:?})"
        );
    }
    let mut y = g.zeros::<A>(t * k * h).unwrap();
    ops::grouped_gemm_with(g, path, &act, &ddown, &mut y, &groups, false, k, e, h, i, t * k)
        .unwrap();
    let mut out = g.zeros::<A>(t * h).unwrap();
    ops::moe_combine(g, &y, &groups, &wts, None, &mut out, t, h, k).unwrap();
    let got = A::to_f32(&g.download(&out).unwrap());
    // the grouping itself: offsets are the scan of the expert histogram
    let mut hist = vec![0i32; e + 1];
    for &ex in &hidx {
        hist[ex as usize + 1] += 1;
    }
    for j in 0..e {
        hist[j + 1] += hist[j];
    }
    assert_eq!(g.download(&groups.offsets).unwrap(), hist, "offsets");
    assert_eq!(g.download(&groups.counts).unwrap(), vec![0; e], "counts left zero");
    let mut want = vec![0.0f32; t * h];
    for ti in 0..t {
        let mut p = logits[ti * e..(ti + 1) * e].to_vec();
        cpu::softmax(&mut p);
        let chosen: Vec<usize> = match &forced {
            Some(f) => f[ti * k..(ti + 1) * k].iter().map(|&v| v as usize).collect(),
            None => {
                let mut order: Vec<usize> = (0..e).collect();
                order.sort_by(|a, b| p[*b].partial_cmp(&p[*a]).unwrap().then(a.cmp(b)));
                order[..k].to_vec()
            }
        };
        assert_eq!(
            &hidx[ti * k..(ti + 1) * k],
            &chosen.iter().map(|v| *v as i32).collect::<Vec<_>>()[..],
            "experts of token {ti}"
        );
        let s: f32 = chosen.iter().map(|j| p[*j]).sum();
        for (slot, &ex) in chosen.iter().enumerate() {
            assert!((hw[ti * k + slot] - p[ex] / s).abs() < 1e-2, "weight");
            let mut guv = vec![0.0; 2 * i];
            cpu::matmul_t(
                &x[ti * h..(ti + 1) * h],
                1,
                h,
                &gu[ex * 2 * i * h..(ex + 1) * 2 * i * h],
                2 * i,
                &mut guv,
                false,
            );
            let a: Vec<f32> = (0..i).map(|c| cpu::silu(guv[c]) * guv[i + c]).collect();
            let mut yy = vec![0.0; h];
            cpu::matmul_t(
                &a,
                1,
                i,
                &down[ex * h * i..(ex + 1) * h * i],
                h,
                &mut yy,
                false,
            );
            cpu::axpy(hw[ti * k + slot], &yy, &mut want[ti * h..(ti + 1) * h]);
        }
    }
    close(&format!("moe {path:?} t={t} e={e} k={k}"), &got, &want, rel);
    groups.tile_m
}

#[test]
fn moe_routing_grouping_and_combine_match_cpu() {
    let g = gpu();
    let all_to = |t: usize, k: usize, ex: i32| Some(vec![ex; t * k]);
    // bf16: 132 rows over 16 experts -> 64-row tiles, staged tensor cores
    assert_eq!(moe_case::<u16>(&g, (33, 16, 4, 32, 24), None, ExpertGemm::Auto, 3e-2), 64);
    // decode-sized: 20 rows over 16 experts, most experts with 0 rows -> 16-row tiles, the
    // weight-streaming kernel; the staged kernel over the same tile list
    assert_eq!(moe_case::<u16>(&g, (5, 16, 4, 32, 24), None, ExpertGemm::Auto, 3e-2), 16);
    moe_case::<u16>(&g, (5, 16, 4, 32, 24), None, ExpertGemm::Mma, 3e-2);
    // one expert takes every row: 80 rows in 5 streaming tiles; 140 rows in 3 staged tiles
    assert_eq!(moe_case::<u16>(&g, (40, 16, 2, 32, 24), all_to(40, 2, 3), ExpertGemm::Stream, 3e-2), 16);
    assert_eq!(moe_case::<u16>(&g, (70, 16, 2, 32, 24), all_to(70, 2, 15), ExpertGemm::Auto, 3e-2), 64);
    moe_case::<u16>(&g, (33, 16, 4, 32, 24), None, ExpertGemm::Fma, 3e-2);
    // staged tensor cores over several double-buffered k steps: hidden 72 (cp.async, three k
    // steps, the last zero-filled past 72) and intermediate 36 (not a multiple of 8: the
    // converting plain-store staging, two k steps)
    moe_case::<u16>(&g, (33, 16, 4, 72, 36), None, ExpertGemm::Mma, 3e-2);
    // f32 storage: the FMA kernel, exact up to summation order
    moe_case::<f32>(&g, (33, 16, 4, 32, 24), None, ExpertGemm::Auto, 1e-4);
    moe_case::<f32>(&g, (5, 16, 4, 32, 24), None, ExpertGemm::Auto, 1e-4);
    moe_case::<f32>(&g, (40, 16, 2, 32, 24), all_to(40, 2, 0), ExpertGemm::Auto, 1e-4);
}

/// The PTX ISA's m16n8k16 fragment tables (bf16 A/B, f32 C/D), written out independently of
/// the emulator: element (row, col) of each per-lane register half.
fn a_elem(lane: usize, reg: usize, half: usize) -> (usize, usize) {
    let (g, t) = (lane / 4, lane % 4);
    (g + 8 * (reg % 2), 2 * t + half + 8 * (reg / 2))
}
fn b_elem(lane: usize, reg: usize, half: usize) -> (usize, usize) {
    (2 * (lane % 4) + half + 8 * reg, lane / 4)
}
fn d_elem(lane: usize, i: usize) -> (usize, usize) {
    (lane / 4 + 8 * (i / 2), 2 * (lane % 4) + i % 2)
}

#[test]
fn mma_fragments_follow_the_ptx_isa() {
    // One mma.sync m16n8k16 (GPU: the tensor core; emulator: its model) on registers filled by
    // the ISA tables: D read back by the same tables must be A·B + C.
    let g = gpu();
    let mut rng = ChaCha8Rng::seed_from_u64(16);
    let am = rnd(&mut rng, 16 * 16, 1.0);
    let bm = rnd(&mut rng, 16 * 8, 1.0);
    let cm: Vec<f32> = (0..16 * 8).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let bits = |v: f32| to_bf16_bits(&[v])[0] as u32;
    let (mut a, mut b, mut c) = (vec![0i32; 128], vec![0i32; 64], vec![0f32; 128]);
    for lane in 0..32 {
        for reg in 0..4 {
            let w: Vec<u32> = (0..2)
                .map(|hf| {
                    let (r, col) = a_elem(lane, reg, hf);
                    bits(am[r * 16 + col])
                })
                .collect();
            a[lane * 4 + reg] = (w[0] | (w[1] << 16)) as i32;
        }
        for reg in 0..2 {
            let w: Vec<u32> = (0..2)
                .map(|hf| {
                    let (r, col) = b_elem(lane, reg, hf);
                    bits(bm[r * 8 + col])
                })
                .collect();
            b[lane * 2 + reg] = (w[0] | (w[1] << 16)) as i32;
        }
        for i in 0..4 {
            let (r, col) = d_elem(lane, i);
            c[lane * 4 + i] = cm[r * 8 + col];
        }
    }
    let mut d = g.zeros::<f32>(128).unwrap();
    ops::mma_probe(
        &g,
        &g.upload(&a).unwrap(),
        &g.upload(&b).unwrap(),
        &g.upload(&c).unwrap(),
        &mut d,
    )
    .unwrap();
    let d = g.download(&d).unwrap();
    for lane in 0..32 {
        for i in 0..4 {
            let (r, col) = d_elem(lane, i);
            let want: f64 = cm[r * 8 + col] as f64
                + (0..16)
                    .map(|kk| am[r * 16 + kk] as f64 * bm[kk * 8 + col] as f64)
                    .sum::<f64>();
            assert!(
                (d[lane * 4 + i] as f64 - want).abs() < 1e-4,
                "lane {lane} d{i} = D[{r}][{col}]: {} vs {want}",
                d[lane * 4 + i]
            );
        }
    }
}

/// The CPU sampler's draw for uniform `u` (what `Sampler::sample` does with its own stream).
fn cpu_draw(row: &[f32], r: &SampleRow) -> (u32, f32, f32) {
    let params = SamplingParams {
        temperature: r.temperature,
        top_k: r.top_k,
        top_p: r.top_p,
        seed: Some(0),
        ..Default::default()
    };
    let s = Sampler::new(params).sample_with(row, r.u);
    (s.token, s.logprob, s.sampling_logprob)
}

#[test]
fn sampling_has_the_cpu_samplers_semantics() {
    let g = gpu();
    let v = 3000;
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    let settings = [
        (0.0, 0, 1.0),  // greedy
        (0.8, 0, 1.0),  // whole vocabulary, id order
        (1.0, 5, 1.0),  // top-k
        (0.7, 0, 0.6),  // nucleus
        (1.3, 40, 0.9), // top-p over the renormalised top-k
    ];
    let mut rows = vec![];
    let mut logits = vec![];
    for &(temperature, top_k, top_p) in &settings {
        for _ in 0..6 {
            // peaked rows so that the truncations keep few tokens
            let row: Vec<f32> = (0..v)
                .map(|_| rng.random_range(-4.0f32..4.0).powi(3) / 8.0)
                .collect();
            logits.extend(row);
            let u = rng.random_range(0.0f64..1.0);
            rows.push(SampleRow {
                temperature,
                top_k,
                top_p,
                u,
            });
        }
    }
    let mut tie = logits[..v].to_vec();
    let m = tie.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
    tie[7] = m + 1.0;
    tie[2000] = m + 1.0; // greedy tie: the lower id wins
    logits[..v].copy_from_slice(&tie);
    let b = rows.len();
    let p = SampleParams::new(&g, &rows).unwrap();
    let (mut tok, mut lp, mut slp) = (
        g.zeros::<i32>(b).unwrap(),
        g.zeros::<f32>(b).unwrap(),
        g.zeros::<f32>(b).unwrap(),
    );
    ops::sample_tokens(
        &g,
        &g.upload(&logits).unwrap(),
        b,
        v,
        &p,
        &mut tok,
        &mut lp,
        &mut slp,
    )
    .unwrap();
    let (tok, lp, slp) = (
        g.download(&tok).unwrap(),
        g.download(&lp).unwrap(),
        g.download(&slp).unwrap(),
    );
    assert_eq!(tok[0], 7);
    for (i, r) in rows.iter().enumerate() {
        let (t, l, s) = cpu_draw(&logits[i * v..(i + 1) * v], r);
        assert_eq!(tok[i] as u32, t, "row {i} {r:?}");
        assert!(
            (lp[i] - l).abs() < 1e-4,
            "row {i}: policy logprob {} vs {l}",
            lp[i]
        );
        assert!(
            (slp[i] - s).abs() < 1e-4,
            "row {i}: sampling logprob {} vs {s}",
            slp[i]
        );
    }
    // settings the kernel cannot honour are refused on the host
    let bad = SampleRow {
        temperature: 1.0,
        top_k: 5000,
        top_p: 1.0,
        u: 0.5,
    };
    assert!(SampleParams::new(&g, &[bad]).is_err());
    assert!(SampleParams::new(&g, &[SampleRow { u: 1.0, ..bad }]).is_err());
}

/// A nucleus (top-p without top-k) that needs more candidates than the kernel keeps is left to
/// the host (token -1); a small one in the same launch is drawn as on the CPU. The persistent
/// parameter buffers refuse more rows than they hold.
#[test]
fn a_nucleus_beyond_the_kept_candidates_is_left_to_the_host() {
    let g = gpu();
    let v = ops::SAMPLE_MAX_KEEP + 100;
    // nearly flat: a 0.99 nucleus needs almost every token, a 0.01 nucleus a few dozen
    let row: Vec<f32> = (0..v).map(|i| (i * 7 % 13) as f32 * 1e-2).collect();
    let logits = g.upload(&[row.clone(), row.clone()].concat()).unwrap();
    let rows = [
        SampleRow { temperature: 1.0, top_k: 0, top_p: 0.99, u: 0.3 },
        SampleRow { temperature: 1.0, top_k: 0, top_p: 0.01, u: 0.3 },
    ];
    let mut p = SampleParams::with_capacity(&g, 2).unwrap();
    p.write(&g, &rows).unwrap();
    assert!(p.write(&g, &[rows[0]; 3]).is_err());
    let (mut tok, mut lp, mut slp) = (
        g.zeros::<i32>(2).unwrap(),
        g.zeros::<f32>(2).unwrap(),
        g.zeros::<f32>(2).unwrap(),
    );
    ops::sample_tokens(&g, &logits, 2, v, &p, &mut tok, &mut lp, &mut slp).unwrap();
    let (tok, lp) = (g.download(&tok).unwrap(), g.download(&lp).unwrap());
    assert_eq!(tok[0], -1, "the host samples the wide nucleus");
    let (t, l, _) = cpu_draw(&row, &rows[1]);
    assert_eq!(tok[1] as u32, t);
    assert!((lp[1] - l).abs() < 1e-4);
}
