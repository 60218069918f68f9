//! Finite-difference checks of the Gated DeltaNet layer (conv, gates, A_log, dt_bias, delta rule
//! across a chunk boundary, gated norm) and of the MoE block (router through softmax and
//! renormalised top-k, experts, shared expert and its gate) on their own, with random weights.
//! Central differences of `L = Σ y ⊙ r` (fixed random `r`) against the analytic backward.

use execcritic::tensor::Tensor;
use execcritic::train::layers::ffn::Ffn;
use execcritic::train::layers::gdn::GdnW;
use execcritic::train::layers::moe::MoeW;
use execcritic::train::{Grads, ParamStore, Pid};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn rnd(rng: &mut ChaCha8Rng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}

fn add(ps: &mut ParamStore, name: &str, shape: &[usize], data: Vec<f32>) -> Pid {
    ps.push(name.into(), &Tensor::new(shape.to_vec(), data))
}

fn dot64(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(x, y)| *x as f64 * *y as f64).sum()
}

/// Check `an` (analytic gradient of `loss` w.r.t. parameter `p`) at `k` random coordinates.
fn check_param(
    name: &str,
    ps: &mut ParamStore,
    p: Pid,
    an: &[f32],
    loss: &dyn Fn(&ParamStore) -> f64,
    rng: &mut ChaCha8Rng,
) -> f64 {
    let h = 1e-2f32;
    let scale = an.iter().fold(0.0f32, |m, g| m.max(g.abs())) as f64;
    assert!(scale > 1e-3, "{name}: gradient is ~0 everywhere, the check would be vacuous");
    let mut worst = 0.0f64;
    for _ in 0..6 {
        let i = rng.random_range(0..an.len());
        let orig = ps.get(p)[i];
        ps.get_mut(p)[i] = orig + h;
        let lp = loss(ps);
        ps.get_mut(p)[i] = orig - h;
        let lm = loss(ps);
        ps.get_mut(p)[i] = orig;
        let fd = (lp - lm) / (2.0 * h as f64);
        let err = (fd - an[i] as f64).abs() / (scale + an[i].abs() as f64);
        assert!(err < 5e-3, "{name}[{i}]: finite difference {fd:.6} vs backward {:.6} (scale {scale:.3})", an[i]);
        worst = worst.max(err);
    }
    worst
}

#[test]
fn gated_deltanet_backward_matches_finite_differences() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let (hs, kh, vh, dk, dv, kk, n) = (16, 2, 4, 8, 6, 4, 70);
    let cd = 2 * kh * dk + vh * dv;
    let mut ps = ParamStore::default();
    let s = |x: usize| 1.0 / (x as f32).sqrt();
    let w = GdnW {
        in_proj_qkv: add(&mut ps, "qkv", &[cd, hs], rnd(&mut rng, cd * hs, -s(hs) * 1.7, s(hs) * 1.7)),
        in_proj_z: add(&mut ps, "z", &[vh * dv, hs], rnd(&mut rng, vh * dv * hs, -s(hs) * 1.7, s(hs) * 1.7)),
        in_proj_b: add(&mut ps, "b", &[vh, hs], rnd(&mut rng, vh * hs, -s(hs) * 1.7, s(hs) * 1.7)),
        in_proj_a: add(&mut ps, "a", &[vh, hs], rnd(&mut rng, vh * hs, -s(hs) * 1.7, s(hs) * 1.7)),
        conv: add(&mut ps, "conv", &[cd, 1, kk], rnd(&mut rng, cd * kk, -0.8, 0.8)),
        dt_bias: add(&mut ps, "dt_bias", &[vh], rnd(&mut rng, vh, -1.0, 1.0)),
        a_log: add(&mut ps, "A_log", &[vh], rnd(&mut rng, vh, -1.0, 0.7)),
        norm: add(&mut ps, "norm", &[dv], rnd(&mut rng, dv, 0.8, 1.2)),
        out_proj: add(&mut ps, "out", &[hs, vh * dv], rnd(&mut rng, hs * vh * dv, -s(vh * dv) * 1.7, s(vh * dv) * 1.7)),
        hidden: hs,
        kh,
        vh,
        dk,
        dv,
        kernel: kk,
        eps: 1e-6,
    };
    let x = rnd(&mut rng, n * hs, -1.5, 1.5);
    let r = rnd(&mut rng, n * hs, -1.0, 1.0);
    let loss = |ps: &ParamStore| dot64(&w.forward(ps, x.clone(), n).0, &r);
    let (_, saved) = w.forward(&ps, x.clone(), n);
    let mut gr: Grads = ps.zero_grads();
    let dx = w.backward(&ps, &saved, &r, &mut gr);
    let mut worst = 0.0f64;
    for (name, p) in [
        ("in_proj_qkv", w.in_proj_qkv),
        ("in_proj_z", w.in_proj_z),
        ("in_proj_b", w.in_proj_b),
        ("in_proj_a", w.in_proj_a),
        ("conv1d", w.conv),
        ("dt_bias", w.dt_bias),
        ("A_log", w.a_log),
        ("norm", w.norm),
        ("out_proj", w.out_proj),
    ] {
        let an = gr.get(p).to_vec();
        worst = worst.max(check_param(name, &mut ps, p, &an, &loss, &mut rng));
    }
    // Input gradient, at rows on both sides of the 64-step chunk boundary.
    for &i in &[3usize, 63 * hs + 5, 64 * hs + 1, 69 * hs + 15] {
        let h = 1e-2;
        let (mut xp, mut xm) = (x.clone(), x.clone());
        xp[i] += h;
        xm[i] -= h;
        let fd = (dot64(&w.forward(&ps, xp, n).0, &r) - dot64(&w.forward(&ps, xm, n).0, &r)) / (2.0 * h as f64);
        assert!((fd - dx[i] as f64).abs() < 2e-2 * (1.0 + fd.abs()), "dx[{i}]: {fd} vs {}", dx[i]);
    }
    eprintln!("GDN: worst normalised finite-difference error {worst:.2e}");
}

#[test]
fn moe_backward_matches_finite_differences() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let (hs, ne, k, inter, is, n) = (12, 6, 2, 10, 14, 9);
    let s = 1.0 / (hs as f32).sqrt() * 1.7;
    let mut ps = ParamStore::default();
    let ffn = |ps: &mut ParamStore, rng: &mut ChaCha8Rng, tag: &str, i: usize| Ffn {
        gate: add(ps, &format!("{tag}.gate"), &[i, hs], rnd(rng, i * hs, -s, s)),
        up: add(ps, &format!("{tag}.up"), &[i, hs], rnd(rng, i * hs, -s, s)),
        down: add(ps, &format!("{tag}.down"), &[hs, i], rnd(rng, hs * i, -0.5, 0.5)),
        hidden: hs,
        inter: i,
    };
    let experts: Vec<Ffn> = (0..ne).map(|e| ffn(&mut ps, &mut rng, &format!("e{e}"), inter)).collect();
    let shared = ffn(&mut ps, &mut rng, "shared", is);
    let w = MoeW {
        router: add(&mut ps, "router", &[ne, hs], rnd(&mut rng, ne * hs, -1.0, 1.0)),
        experts,
        shared,
        shared_gate: add(&mut ps, "shared_gate", &[1, hs], rnd(&mut rng, hs, -s, s)),
        top_k: k,
        hidden: hs,
    };
    let x = rnd(&mut rng, n * hs, -1.5, 1.5);
    let r = rnd(&mut rng, n * hs, -1.0, 1.0);
    let (_, saved) = w.forward(&ps, x.clone(), n, None);
    // Top-k is piecewise constant: differentiate with the unperturbed choice held fixed.
    let chosen = saved.chosen.clone();
    let loss = |ps: &ParamStore| dot64(&w.forward(ps, x.clone(), n, Some(&chosen)).0, &r);
    let mut gr = ps.zero_grads();
    let dx = w.backward(&ps, &saved, &r, &mut gr);
    let mut worst = 0.0f64;
    let mut pids: Vec<(String, Pid)> = vec![("router".into(), w.router), ("shared_gate".into(), w.shared_gate)];
    for (tag, f) in
        w.experts.iter().enumerate().map(|(e, f)| (format!("expert{e}"), f)).chain([("shared".to_string(), &w.shared)])
    {
        if gr.get(f.gate).iter().all(|&g| g == 0.0) {
            continue; // an expert no token chose has no gradient
        }
        pids.extend([(format!("{tag}.gate"), f.gate), (format!("{tag}.up"), f.up), (format!("{tag}.down"), f.down)]);
    }
    assert!(pids.len() >= 2 + 3 * 3, "at least two routed experts and the shared one are checked");
    for (name, p) in pids {
        let an = gr.get(p).to_vec();
        worst = worst.max(check_param(&name, &mut ps, p, &an, &loss, &mut rng));
    }
    for i in 0..n * hs {
        let h = 1e-2;
        let (mut xp, mut xm) = (x.clone(), x.clone());
        xp[i] += h;
        xm[i] -= h;
        let f = |xx: Vec<f32>| dot64(&w.forward(&ps, xx, n, Some(&chosen)).0, &r);
        let fd = (f(xp) - f(xm)) / (2.0 * h as f64);
        assert!((fd - dx[i] as f64).abs() < 2e-2 * (1.0 + fd.abs()), "dx[{i}]: {fd} vs {}", dx[i]);
    }
    eprintln!("MoE: worst normalised finite-difference error {worst:.2e}");
}
