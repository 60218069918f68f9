//! Parity of the backward kernels (`kernels/*_bwd.cu`, `kernels/loss.cu`, wrappers in
//! `tensor::cuda::backward`) with the CPU trainer's backward of the same op (`train::ops`,
//! `train::layers`, `train::loss`, `train::grpo`), on the real GPU when present and on the
//! emulated device otherwise. Every op runs in both storage builds on the same bf16-representable
//! inputs: the f32 build must match the CPU trainer to 1e-4 relative to the largest reference
//! value, the bf16 build to 2e-2 (bf16 activation gradients; weight gradients are fp32).
//! Shapes are tiny: the emulator runs each CUDA thread as a fiber on the CPU.

use execcritic::model::rope::Rope;
use execcritic::tensor::cpu::{sigmoid, silu};
use execcritic::tensor::cuda::backward::{self as bw, EmbeddingGroups, LossRows, TokenObjective};
use execcritic::tensor::cuda::{from_bf16_bits, gemm, ops, to_bf16_bits, Act, ActType, DeviceBuffer, Gpu};
use execcritic::tensor::Tensor;
use execcritic::train::grpo::{grpo_loss, GrpoConfig, GrpoSample};
use execcritic::train::layers::ffn::Ffn;
use execcritic::train::loss::sft_loss;
use execcritic::train::ops as cpu;
use execcritic::train::{ParamStore, Pid};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The real GPU when present, else the emulated device.
fn gpu() -> Gpu {
    Gpu::auto().expect("no device: neither a GPU nor the emulator")
}

/// Random values rounded to bf16 (both builds and the CPU see the same inputs).
fn rnd(rng: &mut ChaCha8Rng, n: usize, s: f32) -> Vec<f32> {
    from_bf16_bits(&to_bf16_bits(&(0..n).map(|_| rng.random_range(-s..s)).collect::<Vec<_>>()))
}

fn up<A: Act>(g: &Gpu, x: &[f32]) -> DeviceBuffer<A> {
    g.upload(&A::from_f32(x)).expect("upload")
}

fn down<A: Act>(g: &Gpu, x: &DeviceBuffer<A>) -> Vec<f32> {
    A::to_f32(&g.download(x).expect("download"))
}

/// Relative tolerance of the storage build `A` (see the module comment).
fn tol<A: Act>() -> f32 {
    if A::TYPE == ActType::F32 {
        1e-4
    } else {
        2e-2
    }
}

fn close(name: &str, got: &[f32], want: &[f32], rel: f32) {
    assert_eq!(got.len(), want.len(), "{name}: length");
    let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-6);
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= rel * scale, "{name}[{i}]: device {a} vs cpu {b} (scale {scale}, rel {rel})");
    }
}

/// Runs one parity check of a storage build on the device.
fn on_device(f: fn(&Gpu, u64), seed: u64) {
    f(&gpu(), seed);
}

// ---------------------------------------------------------------- norms

fn norms<A: Act>(g: &Gpu, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (rows, d, eps) = (6, 40, 1e-6);
    let (x, w, dy) = (rnd(&mut rng, rows * d, 2.0), rnd(&mut rng, d, 0.5), rnd(&mut rng, rows * d, 1.0));
    let dw0 = rnd(&mut rng, d, 0.3); // weight gradients accumulate
    let mut want_dw = dw0.clone();
    let want_dx = cpu::rms_norm_1p_backward(&x, &w, eps, &dy, &mut want_dw);
    let mut dx = g.zeros::<A>(rows * d).unwrap();
    let mut dw = g.upload(&dw0).unwrap();
    bw::rms_norm_1p_backward(g, &up::<A>(g, &x), &up::<A>(g, &w), &up::<A>(g, &dy), &mut dx, &mut dw, rows, d, eps)
        .unwrap();
    close("rms_norm_1p dx", &down(g, &dx), &want_dx, tol::<A>());
    close("rms_norm_1p dw", &g.download(&dw).unwrap(), &want_dw, tol::<A>());

    let z = rnd(&mut rng, rows * d, 3.0);
    let mut want_dw = dw0.clone();
    let (want_dx, want_dz) = cpu::rms_norm_gated_backward(&x, &z, &w, eps, &dy, &mut want_dw);
    let (mut dx, mut dz) = (g.zeros::<A>(rows * d).unwrap(), g.zeros::<A>(rows * d).unwrap());
    let mut dw = g.upload(&dw0).unwrap();
    bw::gated_rms_norm_backward(
        g,
        &up::<A>(g, &x),
        &up::<A>(g, &z),
        &up::<A>(g, &w),
        &up::<A>(g, &dy),
        &mut dx,
        &mut dz,
        &mut dw,
        rows,
        d,
        eps,
    )
    .unwrap();
    close("gated dx", &down(g, &dx), &want_dx, tol::<A>());
    close("gated dz", &down(g, &dz), &want_dz, tol::<A>());
    close("gated dw", &g.download(&dw).unwrap(), &want_dw, tol::<A>());
    // A short buffer is a shape error, not a launch.
    let short = g.zeros::<A>(d).unwrap();
    let r = bw::rms_norm_1p_backward(g, &short, &up::<A>(g, &w), &up::<A>(g, &dy), &mut dx, &mut dw, rows, d, eps);
    assert!(r.is_err(), "short input accepted");
}

#[test]
fn rms_norm_backwards_match_the_cpu_trainer() {
    on_device(norms::<f32>, 1);
    on_device(norms::<u16>, 1);
}

// ---------------------------------------------------------------- RoPE, gate

fn rope<A: Act>(g: &Gpu, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (t, heads, hd, rot, theta) = (5, 3, 16, 8, 10000.0f32);
    let pos = [0, 1, 2, 7, 3];
    let dy = rnd(&mut rng, t * heads * hd, 1.0);
    // The CPU trainer's RoPE backward: the rotation with the sine negated (AttentionW::rope_all).
    let r = Rope::new(rot, theta as f64);
    let mut want = dy.clone();
    for (ti, &p) in pos.iter().enumerate() {
        let (cos, mut sin) = r.cos_sin(p as usize);
        sin.iter_mut().for_each(|s| *s = -*s);
        for h in 0..heads {
            Rope::apply(&mut want[(ti * heads + h) * hd..(ti * heads + h + 1) * hd], &cos, &sin);
        }
    }
    let dpos = g.upload(&pos).unwrap();
    let mut dx = up::<A>(g, &dy);
    bw::rope_partial_backward(g, &mut dx, &dpos, t, heads, hd, rot, theta, false).unwrap();
    close("rope dx", &down(g, &dx), &want, tol::<A>());
    // Backward after forward is the identity (the rotation is orthogonal).
    ops::rope_partial(g, &mut dx, &dpos, t, heads, hd, rot, theta, false).unwrap();
    close("rope round trip", &down(g, &dx), &dy, tol::<A>());
}

#[test]
fn rope_backward_is_the_cpu_trainers_inverse_rotation() {
    on_device(rope::<f32>, 2);
    on_device(rope::<u16>, 2);
}

fn gate<A: Act>(g: &Gpu, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let n = 300;
    let (o, gt, dy) = (rnd(&mut rng, n, 2.0), rnd(&mut rng, n, 4.0), rnd(&mut rng, n, 1.0));
    // AttentionW::backward: d_o = dy·σ(gate), dgate = dy·o·σ(1 − σ).
    let sg: Vec<f32> = gt.iter().map(|&v| sigmoid(v)).collect();
    let want_do: Vec<f32> = (0..n).map(|i| dy[i] * sg[i]).collect();
    let want_dg: Vec<f32> = (0..n).map(|i| dy[i] * o[i] * sg[i] * (1.0 - sg[i])).collect();
    let (mut d_o, mut dgate) = (g.zeros::<A>(n).unwrap(), g.zeros::<A>(n).unwrap());
    bw::sigmoid_gate_mul_backward(g, &up::<A>(g, &o), &up::<A>(g, &gt), &up::<A>(g, &dy), &mut d_o, &mut dgate, n)
        .unwrap();
    close("gate d_o", &down(g, &d_o), &want_do, tol::<A>());
    close("gate dgate", &down(g, &dgate), &want_dg, tol::<A>());
}

#[test]
fn sigmoid_gate_backward_matches_the_cpu_trainer() {
    on_device(gate::<f32>, 3);
    on_device(gate::<u16>, 3);
}

// ---------------------------------------------------------------- SwiGLU FFN, linear

fn store_param(ps: &mut ParamStore, name: &str, shape: [usize; 2], data: &[f32]) -> Pid {
    ps.push(name.into(), &Tensor::new(shape.to_vec(), data.to_vec()))
}

/// A whole SwiGLU FFN backward on the device (three linear backwards and the SwiGLU backward)
/// against `train::layers::ffn::Ffn::backward`.
fn ffn<A: Act>(g: &Gpu, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (m, hd, it) = (6, 16, 24);
    let (wg, wu, wd) = (rnd(&mut rng, it * hd, 0.4), rnd(&mut rng, it * hd, 0.4), rnd(&mut rng, hd * it, 0.4));
    let (x, dy) = (rnd(&mut rng, m * hd, 1.0), rnd(&mut rng, m * hd, 1.0));
    let mut ps = ParamStore::default();
    let f = Ffn {
        gate: store_param(&mut ps, "gate", [it, hd], &wg),
        up: store_param(&mut ps, "up", [it, hd], &wu),
        down: store_param(&mut ps, "down", [hd, it], &wd),
        hidden: hd,
        inter: it,
    };
    let (_, saved) = f.forward(&ps, x.clone(), m);
    let mut gr = ps.zero_grads();
    let want_dx = f.backward(&ps, &saved, &dy, &mut gr);

    let (dx_in, dwg, dwu, dwd) = (up::<A>(g, &x), up::<A>(g, &wg), up::<A>(g, &wu), up::<A>(g, &wd));
    let (mut gg, mut uu, mut h) = (g.zeros::<A>(m * it).unwrap(), g.zeros::<A>(m * it).unwrap(), g.zeros::<A>(m * it).unwrap());
    gemm::linear(g, &dx_in, m, hd, &dwg, it, &mut gg).unwrap();
    gemm::linear(g, &dx_in, m, hd, &dwu, it, &mut uu).unwrap();
    ops::silu_mul(g, &gg, &uu, &mut h, m * it).unwrap();
    let mut grads: Vec<DeviceBuffer<f32>> = (0..3).map(|_| g.zeros::<f32>(it * hd).unwrap()).collect();
    let ddy = up::<A>(g, &dy);
    let mut dh = g.zeros::<A>(m * it).unwrap();
    bw::linear_backward(g, &ddy, &h, m, it, &dwd, hd, &mut dh, false, &mut grads[2]).unwrap();
    let (mut dgg, mut duu) = (g.zeros::<A>(m * it).unwrap(), g.zeros::<A>(m * it).unwrap());
    bw::silu_mul_backward(g, &gg, &uu, &dh, &mut dgg, &mut duu, m * it).unwrap();
    let mut dx = g.zeros::<A>(m * hd).unwrap();
    bw::linear_backward(g, &dgg, &dx_in, m, hd, &dwg, it, &mut dx, false, &mut grads[0]).unwrap();
    bw::linear_backward(g, &duu, &dx_in, m, hd, &dwu, it, &mut dx, true, &mut grads[1]).unwrap();
    close("ffn dx", &down(g, &dx), &want_dx, tol::<A>());
    for (i, (name, p)) in [("gate", f.gate), ("up", f.up), ("down", f.down)].into_iter().enumerate() {
        close(&format!("ffn d{name}"), &g.download(&grads[i]).unwrap(), gr.get(p), tol::<A>());
    }

    // The fused gate|up layout gives the same gradients, bit for bit.
    let (gv, uv) = (down(g, &gg), down(g, &uu));
    let gu: Vec<f32> = (0..m).flat_map(|r| gv[r * it..(r + 1) * it].iter().chain(&uv[r * it..(r + 1) * it]).copied()).collect();
    let mut dgu = g.zeros::<A>(m * 2 * it).unwrap();
    bw::swiglu_backward(g, &up::<A>(g, &gu), &dh, &mut dgu, it, m).unwrap();
    let (dgv, duv, dguv) = (down(g, &dgg), down(g, &duu), down(g, &dgu));
    for r in 0..m {
        assert_eq!(&dguv[r * 2 * it..r * 2 * it + it], &dgv[r * it..(r + 1) * it], "fused dgate row {r}");
        assert_eq!(&dguv[r * 2 * it + it..(r + 1) * 2 * it], &duv[r * it..(r + 1) * it], "fused dup row {r}");
    }
    // And the elementwise SwiGLU backward alone is the trainer's formula (Ffn::backward).
    let dhv = down(g, &dh);
    let want_dg: Vec<f32> = (0..m * it).map(|i| dhv[i] * uv[i] * cpu::silu_grad(gv[i])).collect();
    let want_du: Vec<f32> = (0..m * it).map(|i| dhv[i] * silu(gv[i])).collect();
    close("swiglu dg", &dgv, &want_dg, tol::<A>());
    close("swiglu du", &duv, &want_du, tol::<A>());
}

#[test]
fn swiglu_ffn_backward_matches_the_cpu_trainer() {
    on_device(ffn::<f32>, 4);
    on_device(ffn::<u16>, 4);
}

/// The LM head backward (`dX = dY·W`, `dW += dYᵀ·X`) through the device GEMM.
fn head<A: Act>(g: &Gpu, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (m, k, n) = (5, 24, 37);
    let (x, w, dy, dw0) = (rnd(&mut rng, m * k, 1.0), rnd(&mut rng, n * k, 0.3), rnd(&mut rng, m * n, 1.0), rnd(&mut rng, n * k, 0.5));
    let mut want_dw = dw0.clone();
    let want_dx = cpu::linear_backward(&dy, &x, m, k, &w, n, &mut want_dw);
    let mut dx = up::<A>(g, &vec![7.0; m * k]); // overwritten (not accumulated)
    let mut dw = g.upload(&dw0).unwrap();
    bw::linear_backward(g, &up::<A>(g, &dy), &up::<A>(g, &x), m, k, &up::<A>(g, &w), n, &mut dx, false, &mut dw).unwrap();
    close("head dx", &down(g, &dx), &want_dx, tol::<A>());
    close("head dw", &g.download(&dw).unwrap(), &want_dw, tol::<A>());
}

#[test]
fn linear_backward_matches_the_cpu_trainer() {
    on_device(head::<f32>, 5);
    on_device(head::<u16>, 5);
}

// ---------------------------------------------------------------- embedding

fn embedding<A: Act>(g: &Gpu, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (vocab, hidden) = (8, 20);
    let ids = [3u32, 1, 3, 0, 3, 5, 1];
    let dy = rnd(&mut rng, ids.len() * hidden, 1.0);
    let d0 = rnd(&mut rng, vocab * hidden, 0.5);
    // TrainNetwork::embed_backward: scatter-add of each token's gradient row.
    let mut want = d0.clone();
    for (row, &id) in dy.chunks_exact(hidden).zip(&ids) {
        for (d, v) in want[id as usize * hidden..(id as usize + 1) * hidden].iter_mut().zip(row) {
            *d += v;
        }
    }
    let groups = EmbeddingGroups::new(g, &ids, vocab).unwrap();
    let ddy = up::<A>(g, &dy);
    let mut runs = vec![];
    for _ in 0..2 {
        let mut dt = g.upload(&d0).unwrap();
        bw::embedding_backward(g, &ddy, &groups, &mut dt, vocab, hidden).unwrap();
        runs.push(g.download(&dt).unwrap());
    }
    close("embedding dW", &runs[0], &want, tol::<A>());
    assert_eq!(runs[0], runs[1], "embedding backward is deterministic");
    assert!(EmbeddingGroups::new(g, &[1, 8], vocab).is_err(), "an id outside the vocabulary is refused");
}

#[test]
fn embedding_backward_matches_the_cpu_trainer() {
    on_device(embedding::<f32>, 6);
    on_device(embedding::<u16>, 6);
}

// ---------------------------------------------------------------- losses

fn losses<A: Act>(g: &Gpu, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (t, v) = (7, 50);
    let logits: Vec<f32> = (0..t * v).map(|_| rng.random_range(-3.0f32..3.0)).collect();
    let ids: Vec<u32> = (0..t).map(|_| rng.random_range(0..v as u32)).collect();
    let mask = [false, false, true, true, false, true, true];
    let dlog = g.upload(&logits).unwrap();
    let (mut loss, mut logp, mut dl) = (g.zeros::<f32>(t).unwrap(), g.zeros::<f32>(t).unwrap(), g.zeros::<A>(t * v).unwrap());

    // SFT cross-entropy over the masked tokens, token-level denominator of a larger batch.
    let denom = 9.0;
    let want = sft_loss(&logits, v, &ids, &mask, denom).unwrap();
    let rows = LossRows::sft(g, &ids, &mask, v).unwrap();
    bw::token_loss(g, &dlog, v, &rows, TokenObjective::Sft, denom, &mut loss, &mut logp, &mut dl).unwrap();
    let got: f64 = g.download(&loss).unwrap().iter().map(|&x| x as f64).sum();
    assert!((got - want.loss).abs() <= 1e-5 * want.loss.abs().max(1.0), "sft loss {got} vs {}", want.loss);
    close("sft dlogits", &down(g, &dl), &want.dlogits, tol::<A>());

    // GRPO: rollout log-probabilities around the current ones so ratios fall inside and outside
    // [1 − ε_low, 1 + ε_high], both advantage signs, the k3 KL term on.
    let lp: Vec<f32> = (0..t)
        .map(|i| if i == 0 { 0.0 } else { execcritic::train::loss::log_softmax_row(&logits[(i - 1) * v..i * v])[ids[i] as usize] })
        .collect();
    let shifts = [0.0, 0.5, -0.5, 0.1, -0.1, 0.3, -0.3];
    let old: Vec<f32> = lp.iter().zip(shifts).map(|(l, s)| l + s).collect();
    let reference: Vec<f32> = lp.iter().zip(shifts).map(|(l, s)| l - 0.5 * s).collect();
    for (adv, kl) in [(1.5f32, 0.0f32), (-0.7, 0.05)] {
        let cfg = GrpoConfig { clip_low: 0.2, clip_high: 0.28, kl_coef: kl, mask_zero_advantage: true };
        let s = GrpoSample { ids: &ids, train_mask: &mask, old_logprobs: &old, ref_logprobs: Some(&reference), advantage: adv, routing: None };
        let want = grpo_loss(&cfg, &logits, v, &s, denom).unwrap();
        let rows = LossRows::grpo(g, &ids, &mask, &old, Some(&reference), adv, v).unwrap();
        let obj = TokenObjective::Grpo { clip_low: cfg.clip_low, clip_high: cfg.clip_high, kl_coef: cfg.kl_coef };
        bw::token_loss(g, &dlog, v, &rows, obj, denom, &mut loss, &mut logp, &mut dl).unwrap();
        let got: f64 = g.download(&loss).unwrap().iter().map(|&x| x as f64).sum();
        assert!((got - want.loss).abs() <= 1e-5 * want.loss.abs().max(1.0), "grpo loss {got} vs {} (adv {adv})", want.loss);
        close(&format!("grpo dlogits (adv {adv})"), &down(g, &dl), &want.dlogits, tol::<A>());
        let got_lp = g.download(&logp).unwrap();
        for i in 0..t - 1 {
            if mask[i + 1] {
                assert!((got_lp[i] - lp[i + 1]).abs() < 1e-4, "logp row {i}");
            }
        }
    }
    assert!(LossRows::sft(g, &[1, v as u32], &[true, true], v).is_err(), "bad id refused");
    let no_ref = LossRows::grpo(g, &ids, &mask, &old, None, 1.0, v).unwrap();
    let obj = TokenObjective::Grpo { clip_low: 0.2, clip_high: 0.28, kl_coef: 0.1 };
    assert!(bw::token_loss(g, &dlog, v, &no_ref, obj, denom, &mut loss, &mut logp, &mut dl).is_err(), "KL without reference refused");
}

#[test]
fn device_losses_match_the_cpu_trainer() {
    on_device(losses::<f32>, 7);
    on_device(losses::<u16>, 7);
}

// ---------------------------------------------------------------- MoE

/// A whole MoE block on the device with the experts replayed: forward (router, stable grouping,
/// grouped gate|up GEMM, SwiGLU, grouped down GEMM, gated shared expert), then every backward
/// kernel — against `train::layers::moe::MoeW::backward` with the same forced routing.
fn moe<A: Act>(g: &Gpu, seed: u64) {
    use execcritic::train::layers::moe::MoeW;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (t, h, e, k, it, is) = (6, 16, 5, 2, 12, 20);
    let pairs = t * k;
    let mut ps = ParamStore::default();
    let router_w = rnd(&mut rng, e * h, 0.5);
    let router = store_param(&mut ps, "router", [e, h], &router_w);
    let mut experts = vec![];
    let (mut w_gu, mut w_down) = (vec![], vec![]);
    for x in 0..e {
        let (wg, wu, wd) = (rnd(&mut rng, it * h, 0.4), rnd(&mut rng, it * h, 0.4), rnd(&mut rng, h * it, 0.4));
        w_gu.extend(wg.iter().chain(&wu));
        w_down.extend(&wd);
        experts.push(Ffn {
            gate: store_param(&mut ps, &format!("e{x}.gate"), [it, h], &wg),
            up: store_param(&mut ps, &format!("e{x}.up"), [it, h], &wu),
            down: store_param(&mut ps, &format!("e{x}.down"), [h, it], &wd),
            hidden: h,
            inter: it,
        });
    }
    let (sgw, suw, sdw) = (rnd(&mut rng, is * h, 0.4), rnd(&mut rng, is * h, 0.4), rnd(&mut rng, h * is, 0.4));
    let shared = Ffn {
        gate: store_param(&mut ps, "s.gate", [is, h], &sgw),
        up: store_param(&mut ps, "s.up", [is, h], &suw),
        down: store_param(&mut ps, "s.down", [h, is], &sdw),
        hidden: h,
        inter: is,
    };
    let gate_w = rnd(&mut rng, h, 0.5);
    let shared_gate = store_param(&mut ps, "s.gate_w", [1, h], &gate_w);
    let m = MoeW { router, experts, shared, shared_gate, top_k: k, hidden: h };
    let (x, dy) = (rnd(&mut rng, t * h, 1.0), rnd(&mut rng, t * h, 1.0));
    // Replayed experts: distinct per token, expert 4 never chosen (its gradient must stay 0).
    let forced: Vec<u32> = (0..t).flat_map(|i| [(i % 4) as u32, ((i + 1 + i / 4) % 4) as u32]).collect();
    assert!((0..t).all(|i| forced[i * k] != forced[i * k + 1]));
    let (_, saved) = m.forward(&ps, x.clone(), t, Some(&forced));
    let mut gr = ps.zero_grads();
    let want_dx = m.backward(&ps, &saved, &dy, &mut gr);

    // Device forward.
    let dx_in = up::<A>(g, &x);
    let (d_router, d_gu, d_down) = (up::<A>(g, &router_w), up::<A>(g, &w_gu), up::<A>(g, &w_down));
    let mut logits = g.zeros::<f32>(t * e).unwrap();
    gemm::linear(g, &dx_in, t, h, &d_router, e, &mut logits).unwrap();
    let (mut idx, mut wts) = (g.zeros::<i32>(pairs).unwrap(), g.zeros::<f32>(pairs).unwrap());
    let forced_d = g.upload(&forced.iter().map(|&v| v as i32).collect::<Vec<_>>()).unwrap();
    ops::router_topk::<A>(g, &logits, &mut idx, &mut wts, Some(&forced_d), t, e, k).unwrap();
    let mut groups = ops::MoeGroups::new(g, pairs, e).unwrap();
    bw::moe_group_stable(g, &idx, pairs, e, &mut groups).unwrap();
    let perm = g.download(&groups.perm).unwrap();
    let offs = g.download(&groups.offsets).unwrap();
    for x in 0..e {
        let grp = &perm[offs[x] as usize..offs[x + 1] as usize];
        assert!(grp.windows(2).all(|w| w[0] < w[1]), "expert {x}: pairs in ascending order");
    }
    let (mut gu, mut hh, mut y) = (g.zeros::<A>(pairs * 2 * it).unwrap(), g.zeros::<A>(pairs * it).unwrap(), g.zeros::<A>(pairs * h).unwrap());
    ops::grouped_gemm(g, &dx_in, &d_gu, &mut gu, &groups, true, k, e, 2 * it, h, pairs).unwrap();
    ops::swiglu(g, &gu, &mut hh, pairs, it).unwrap();
    ops::grouped_gemm(g, &hh, &d_down, &mut y, &groups, false, k, e, h, it, pairs).unwrap();
    let (ds_g, ds_u, ds_d, d_gate) = (up::<A>(g, &sgw), up::<A>(g, &suw), up::<A>(g, &sdw), up::<A>(g, &gate_w));
    let (mut s_g, mut s_u, mut s_h) = (g.zeros::<A>(t * is).unwrap(), g.zeros::<A>(t * is).unwrap(), g.zeros::<A>(t * is).unwrap());
    gemm::linear(g, &dx_in, t, h, &ds_g, is, &mut s_g).unwrap();
    gemm::linear(g, &dx_in, t, h, &ds_u, is, &mut s_u).unwrap();
    ops::silu_mul(g, &s_g, &s_u, &mut s_h, t * is).unwrap();
    let (mut s_out, mut sg) = (g.zeros::<A>(t * h).unwrap(), g.zeros::<A>(t).unwrap());
    gemm::linear(g, &s_h, t, is, &ds_d, h, &mut s_out).unwrap();
    gemm::linear(g, &dx_in, t, h, &d_gate, 1, &mut sg).unwrap();

    // Device backward.
    let ddy = up::<A>(g, &dy);
    let (mut dwts, mut dye) = (g.zeros::<f32>(pairs).unwrap(), g.zeros::<A>(pairs * h).unwrap());
    let (mut ds_out, mut dsg) = (g.zeros::<A>(t * h).unwrap(), g.zeros::<A>(t).unwrap());
    let sh = bw::SharedGrad { out: &s_out, sg: &sg, dout: &mut ds_out, dsg: &mut dsg };
    bw::moe_combine_backward(g, &ddy, &y, &groups, &wts, Some(sh), &mut dwts, &mut dye, t, h, k).unwrap();
    let mut dlog = g.zeros::<A>(t * e).unwrap();
    bw::router_backward(g, &logits, &idx, &wts, &dwts, &mut dlog, t, e, k).unwrap();
    let grad = |n: usize| g.zeros::<f32>(n).unwrap();
    let (mut g_router, mut g_gu, mut g_down) = (grad(e * h), grad(e * 2 * it * h), grad(e * h * it));
    let (mut g_sg, mut g_su, mut g_sd, mut g_gate) = (grad(is * h), grad(is * h), grad(h * is), grad(h));
    let mut dx = g.zeros::<A>(t * h).unwrap();
    bw::linear_backward(g, &dlog, &dx_in, t, h, &d_router, e, &mut dx, false, &mut g_router).unwrap();
    let mut dh = g.zeros::<A>(pairs * it).unwrap();
    bw::grouped_gemm_dx(g, &dye, &d_down, &mut dh, &groups, e, h, it, pairs, pairs, false).unwrap();
    bw::grouped_gemm_dw(g, &dye, &hh, &mut g_down, &groups, false, k, e, h, it, pairs).unwrap();
    let mut dgu = g.zeros::<A>(pairs * 2 * it).unwrap();
    bw::swiglu_backward(g, &gu, &dh, &mut dgu, it, pairs).unwrap();
    let mut dxr = g.zeros::<A>(pairs * h).unwrap();
    bw::grouped_gemm_dx(g, &dgu, &d_gu, &mut dxr, &groups, e, 2 * it, h, pairs, pairs, false).unwrap();
    bw::grouped_gemm_dw(g, &dgu, &dx_in, &mut g_gu, &groups, true, k, e, 2 * it, h, pairs).unwrap();
    bw::moe_gather_add(g, &dxr, &groups, &mut dx, t, h, k, true).unwrap();
    let mut dsh_h = g.zeros::<A>(t * is).unwrap();
    bw::linear_backward(g, &ds_out, &s_h, t, is, &ds_d, h, &mut dsh_h, false, &mut g_sd).unwrap();
    let (mut dsgt, mut dsut) = (g.zeros::<A>(t * is).unwrap(), g.zeros::<A>(t * is).unwrap());
    bw::silu_mul_backward(g, &s_g, &s_u, &dsh_h, &mut dsgt, &mut dsut, t * is).unwrap();
    bw::linear_backward(g, &dsgt, &dx_in, t, h, &ds_g, is, &mut dx, true, &mut g_sg).unwrap();
    bw::linear_backward(g, &dsut, &dx_in, t, h, &ds_u, is, &mut dx, true, &mut g_su).unwrap();
    bw::linear_backward(g, &dsg, &dx_in, t, h, &d_gate, 1, &mut dx, true, &mut g_gate).unwrap();

    let tl = tol::<A>();
    close("moe dx", &down(g, &dx), &want_dx, tl);
    close("moe d router", &g.download(&g_router).unwrap(), gr.get(router), tl);
    let (ggu, gdn) = (g.download(&g_gu).unwrap(), g.download(&g_down).unwrap());
    for (x, f) in m.experts.iter().enumerate() {
        let base = x * 2 * it * h;
        close(&format!("expert {x} d gate"), &ggu[base..base + it * h], gr.get(f.gate), tl);
        close(&format!("expert {x} d up"), &ggu[base + it * h..base + 2 * it * h], gr.get(f.up), tl);
        close(&format!("expert {x} d down"), &gdn[x * h * it..(x + 1) * h * it], gr.get(f.down), tl);
    }
    assert!(gdn[4 * h * it..].iter().all(|&v| v == 0.0), "an expert no token chose has no gradient");
    close("shared d gate", &g.download(&g_sg).unwrap(), gr.get(m.shared.gate), tl);
    close("shared d up", &g.download(&g_su).unwrap(), gr.get(m.shared.up), tl);
    close("shared d down", &g.download(&g_sd).unwrap(), gr.get(m.shared.down), tl);
    close("shared gate weight", &g.download(&g_gate).unwrap(), gr.get(shared_gate), tl);
}

#[test]
fn moe_backward_with_replayed_experts_matches_the_cpu_trainer() {
    on_device(moe::<f32>, 8);
    on_device(moe::<u16>, 8);
}

// ---------------------------------------------------------------- gated attention

/// A whole gated-attention layer on the device over two packed sequences (forward with the
/// inference kernels, backward with the backward kernels: output projection, sigmoid gate,
/// flash-style GQA attention backward, RoPE, q/k norms, q/gate merge, projections) against
/// `train::layers::attention::AttentionW::backward` run on each sequence.
fn attention<A: Act>(g: &Gpu, seed: u64) {
    use execcritic::train::layers::attention::AttentionW;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (hs, hq, hkv, hd, rot, theta, eps) = (24, 4, 2, 16, 8, 10000.0f32, 1e-6f32);
    let lens = [4usize, 3];
    let t: usize = lens.iter().sum();
    let mut ps = ParamStore::default();
    let wq = rnd(&mut rng, 2 * hq * hd * hs, 0.3);
    let (wk, wv) = (rnd(&mut rng, hkv * hd * hs, 0.3), rnd(&mut rng, hkv * hd * hs, 0.3));
    let wo = rnd(&mut rng, hs * hq * hd, 0.3);
    let (wqn, wkn) = (rnd(&mut rng, hd, 0.5), rnd(&mut rng, hd, 0.5));
    let a = AttentionW {
        q_proj: store_param(&mut ps, "q", [2 * hq * hd, hs], &wq),
        k_proj: store_param(&mut ps, "k", [hkv * hd, hs], &wk),
        v_proj: store_param(&mut ps, "v", [hkv * hd, hs], &wv),
        o_proj: store_param(&mut ps, "o", [hs, hq * hd], &wo),
        q_norm: store_param(&mut ps, "qn", [1, hd], &wqn),
        k_norm: store_param(&mut ps, "kn", [1, hd], &wkn),
        hidden: hs,
        heads: hq,
        kv_heads: hkv,
        head_dim: hd,
        eps,
    };
    let rope = Rope::new(rot, theta as f64);
    let (x, dy) = (rnd(&mut rng, t * hs, 1.0), rnd(&mut rng, t * hs, 1.0));
    let mut gr = ps.zero_grads();
    let mut want_dx = vec![];
    let mut t0 = 0;
    for &n in &lens {
        let (_, saved) = a.forward(&ps, x[t0 * hs..(t0 + n) * hs].to_vec(), n, &rope);
        want_dx.extend(a.backward(&ps, &rope, &saved, &dy[t0 * hs..(t0 + n) * hs], &mut gr));
        t0 += n;
    }

    // Device forward (inference kernels), keeping what the backward reads.
    let (nq, nk) = (t * hq * hd, t * hkv * hd);
    let dx_in = up::<A>(g, &x);
    let (dwq, dwk, dwv, dwo) = (up::<A>(g, &wq), up::<A>(g, &wk), up::<A>(g, &wv), up::<A>(g, &wo));
    let (dwqn, dwkn) = (up::<A>(g, &wqn), up::<A>(g, &wkn));
    let pos: Vec<i32> = lens.iter().flat_map(|&n| 0..n as i32).collect();
    let slot: Vec<i32> = lens.iter().enumerate().flat_map(|(s, &n)| std::iter::repeat_n(s as i32, n)).collect();
    let (dpos, dslot) = (g.upload(&pos).unwrap(), g.upload(&slot).unwrap());
    let mut qg = g.zeros::<A>(2 * nq).unwrap();
    gemm::linear(g, &dx_in, t, hs, &dwq, 2 * hq * hd, &mut qg).unwrap();
    let (mut q, mut gate) = (g.zeros::<A>(nq).unwrap(), g.zeros::<A>(nq).unwrap());
    ops::split_q_gate(g, &qg, &mut q, &mut gate, t, hq, hd).unwrap();
    let q_raw = g.duplicate(&q).unwrap();
    ops::head_rms_norm_1p(g, &mut q, &dwqn, t, hq, hd, hq * hd, eps).unwrap();
    ops::rope_partial(g, &mut q, &dpos, t, hq, hd, rot, theta, false).unwrap();
    let (mut k_raw, mut v) = (g.zeros::<A>(nk).unwrap(), g.zeros::<A>(nk).unwrap());
    gemm::linear(g, &dx_in, t, hs, &dwk, hkv * hd, &mut k_raw).unwrap();
    gemm::linear(g, &dx_in, t, hs, &dwv, hkv * hd, &mut v).unwrap();
    let mut k = g.duplicate(&k_raw).unwrap();
    ops::head_rms_norm_1p(g, &mut k, &dwkn, t, hkv, hd, hkv * hd, eps).unwrap();
    ops::rope_partial(g, &mut k, &dpos, t, hkv, hd, rot, theta, false).unwrap();
    // The paged cache with one block per sequence (block table row s = [s]).
    let mut pool = ops::KvPool::<A>::new(g, lens.len(), *lens.iter().max().unwrap(), hkv, hd).unwrap();
    let table = g.upload(&(0..lens.len() as i32).collect::<Vec<_>>()).unwrap();
    let idx = ops::KvIndex { cache_pos: &dpos, seq_of_tok: &dslot, blocks: ops::BlockTable { table: &table, stride: 1 } };
    ops::kv_append(g, &k, &v, &mut pool, &idx, t).unwrap();
    let mut o = g.zeros::<A>(nq).unwrap();
    ops::attn_prefill(g, &q, &pool, &idx, &mut o, t, hq).unwrap();
    let mut og = g.duplicate(&o).unwrap();
    ops::sigmoid_gate_mul(g, &mut og, &gate, nq).unwrap();

    // Device backward.
    let grad = |n: usize| g.zeros::<f32>(n).unwrap();
    let (mut g_q, mut g_k, mut g_v, mut g_o) = (grad(wq.len()), grad(wk.len()), grad(wv.len()), grad(wo.len()));
    let (mut g_qn, mut g_kn) = (grad(hd), grad(hd));
    let mut dog = g.zeros::<A>(nq).unwrap();
    bw::linear_backward(g, &up::<A>(g, &dy), &og, t, hq * hd, &dwo, hs, &mut dog, false, &mut g_o).unwrap();
    let (mut d_o, mut dgate) = (g.zeros::<A>(nq).unwrap(), g.zeros::<A>(nq).unwrap());
    bw::sigmoid_gate_mul_backward(g, &o, &gate, &dog, &mut d_o, &mut dgate, nq).unwrap();
    let spans = bw::SeqSpans::new(g, &[0, lens[0], t]).unwrap();
    let (mut dq, mut dk, mut dv) = (g.zeros::<A>(nq).unwrap(), g.zeros::<A>(nk).unwrap(), g.zeros::<A>(nk).unwrap());
    bw::attention_backward(g, &q, &k, &v, &o, &d_o, &spans, &mut dq, &mut dk, &mut dv, hq, hkv, hd).unwrap();
    bw::rope_partial_backward(g, &mut dq, &dpos, t, hq, hd, rot, theta, false).unwrap();
    bw::rope_partial_backward(g, &mut dk, &dpos, t, hkv, hd, rot, theta, false).unwrap();
    let (mut dq_raw, mut dk_raw) = (g.zeros::<A>(nq).unwrap(), g.zeros::<A>(nk).unwrap());
    bw::rms_norm_1p_backward(g, &q_raw, &dwqn, &dq, &mut dq_raw, &mut g_qn, t * hq, hd, eps).unwrap();
    bw::rms_norm_1p_backward(g, &k_raw, &dwkn, &dk, &mut dk_raw, &mut g_kn, t * hkv, hd, eps).unwrap();
    let mut dqg = g.zeros::<A>(2 * nq).unwrap();
    bw::merge_q_gate(g, &dq_raw, &dgate, &mut dqg, t, hq, hd).unwrap();
    let mut dx = g.zeros::<A>(t * hs).unwrap();
    bw::linear_backward(g, &dqg, &dx_in, t, hs, &dwq, 2 * hq * hd, &mut dx, false, &mut g_q).unwrap();
    bw::linear_backward(g, &dk_raw, &dx_in, t, hs, &dwk, hkv * hd, &mut dx, true, &mut g_k).unwrap();
    bw::linear_backward(g, &dv, &dx_in, t, hs, &dwv, hkv * hd, &mut dx, true, &mut g_v).unwrap();

    let tl = tol::<A>();
    close("attention dx", &down(g, &dx), &want_dx, tl);
    for (name, buf, p) in [
        ("q_proj", &g_q, a.q_proj),
        ("k_proj", &g_k, a.k_proj),
        ("v_proj", &g_v, a.v_proj),
        ("o_proj", &g_o, a.o_proj),
        ("q_norm", &g_qn, a.q_norm),
        ("k_norm", &g_kn, a.k_norm),
    ] {
        close(&format!("attention d {name}"), &g.download(buf).unwrap(), gr.get(p), tl);
    }
}

#[test]
fn gated_attention_backward_matches_the_cpu_trainer() {
    on_device(attention::<f32>, 9);
    on_device(attention::<u16>, 9);
}

// ---------------------------------------------------------------- causal conv

/// Conv backward over two packed sequences, one from zero history and one from a conv state,
/// against `train::layers::gdn::causal_conv_backward` (the state as K−1 extra leading inputs
/// whose own outputs get no gradient).
fn conv<A: Act>(g: &Gpu, seed: u64) {
    use execcritic::train::layers::gdn::{causal_conv_backward, causal_conv_forward};
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (c, k) = (20, 4);
    let lens = [5usize, 3];
    let t: usize = lens.iter().sum();
    let (x, w, dy) = (rnd(&mut rng, t * c, 1.0), rnd(&mut rng, c * k, 0.6), rnd(&mut rng, t * c, 1.0));
    // Conv states [slot, c, k−1], oldest first: slot 1 (sequence 0) zero history, slot 0
    // (sequence 1) random.
    let mut pool = vec![0.0f32; 2 * c * (k - 1)];
    pool[..c * (k - 1)].copy_from_slice(&rnd(&mut rng, c * (k - 1), 1.0));
    let (cu, slots) = ([0, lens[0], t], [1usize, 0]);
    let dw0 = rnd(&mut rng, c * k, 0.2);
    let mut want_dw = dw0.clone();
    let (mut want_dx, mut want_dstate) = (vec![], vec![0.0f32; pool.len()]);
    for (b, &slot) in slots.iter().enumerate() {
        let (s0, n) = (cu[b], cu[b + 1] - cu[b]);
        let st = &pool[slot * c * (k - 1)..(slot + 1) * c * (k - 1)];
        // The CPU trainer's conv from zero history over [state rows; x rows] ([k−1 + n, c]); the
        // state rows' own outputs get no gradient.
        let rows = k - 1 + n;
        let mut xe: Vec<f32> = (0..(k - 1) * c).map(|i| st[(i % c) * (k - 1) + i / c]).collect();
        xe.extend(&x[s0 * c..(s0 + n) * c]);
        let pre = causal_conv_forward(&xe, &w, rows, c, k);
        let dpre: Vec<f32> = (0..rows * c)
            .map(|i| if i < (k - 1) * c { 0.0 } else { dy[s0 * c + i - (k - 1) * c] * cpu::silu_grad(pre[i]) })
            .collect();
        let dxe = causal_conv_backward(&dpre, &xe, &w, rows, c, k, &mut want_dw);
        want_dx.extend(&dxe[(k - 1) * c..]);
        for ch in 0..c {
            for i in 0..k - 1 {
                want_dstate[(slot * c + ch) * (k - 1) + i] = dxe[i * c + ch];
            }
        }
    }
    let state = g.upload(&pool).unwrap();
    let mut dstate = g.zeros::<f32>(pool.len()).unwrap();
    let mut dx = g.zeros::<A>(t * c).unwrap();
    let mut dw = g.upload(&dw0).unwrap();
    let (dxin, dwin, ddy) = (up::<A>(g, &x), up::<A>(g, &w), up::<A>(g, &dy));
    bw::causal_conv_backward(g, &dxin, Some(&state), &dwin, &ddy, &mut dx, Some(&mut dstate), &mut dw, &cu, &slots, c, k)
        .unwrap();
    close("conv dx", &down(g, &dx), &want_dx, tol::<A>());
    close("conv dw", &g.download(&dw).unwrap(), &want_dw, tol::<A>());
    close("conv dstate", &g.download(&dstate).unwrap(), &want_dstate, tol::<A>());
    // Without a state (zero history) sequence 0 is the same.
    let mut dx2 = g.zeros::<A>(t * c).unwrap();
    let mut dw2 = g.zeros::<f32>(c * k).unwrap();
    bw::causal_conv_backward(g, &dxin, None, &dwin, &ddy, &mut dx2, None, &mut dw2, &cu, &slots, c, k).unwrap();
    assert_eq!(down(g, &dx2)[..lens[0] * c], down(g, &dx)[..lens[0] * c], "zero history = a zero state");
    let bad = bw::causal_conv_backward(g, &dxin, None, &dwin, &ddy, &mut dx, None, &mut dw, &[0, t + 1], &[0], c, k);
    assert!(bad.is_err(), "offsets past the buffers are refused");
}

#[test]
fn causal_conv_backward_through_the_state_matches_the_cpu_trainer() {
    on_device(conv::<f32>, 10);
    on_device(conv::<u16>, 10);
}

/// GDN gates backward against `train::layers::gdn::gates_backward`.
fn gates<A: Act>(g: &Gpu, seed: u64) {
    use execcritic::tensor::cpu::softplus;
    use execcritic::train::layers::gdn::{gates_backward, GateSaved};
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (t, hv) = (5, 6);
    let (b, mut a) = (rnd(&mut rng, t * hv, 3.0), rnd(&mut rng, t * hv, 3.0));
    a[3] = 24.0; // above softplus's threshold (identity there)
    let (al, dt) = (rnd(&mut rng, hv, 1.0), rnd(&mut rng, hv, 1.0));
    let (dbeta, dg) = (rnd(&mut rng, t * hv, 1.0), rnd(&mut rng, t * hv, 1.0));
    let beta: Vec<f32> = b.iter().map(|&v| sigmoid(v)).collect();
    let gv: Vec<f32> = (0..t * hv).map(|i| -al[i % hv].exp() * softplus(a[i] + dt[i % hv])).collect();
    let (d0a, d0d) = (rnd(&mut rng, hv, 0.3), rnd(&mut rng, hv, 0.3));
    let (mut want_al, mut want_dt) = (d0a.clone(), d0d.clone());
    let s = GateSaved { beta: &beta, g: &gv, a: &a, a_log: &al, dt_bias: &dt };
    let (want_db, want_da) = gates_backward(&s, &dbeta, &dg, &mut want_al, &mut want_dt);
    let (mut db, mut da) = (g.zeros::<A>(t * hv).unwrap(), g.zeros::<A>(t * hv).unwrap());
    let (mut d_al, mut d_dt) = (g.upload(&d0a).unwrap(), g.upload(&d0d).unwrap());
    bw::gdn_gates_backward(
        g,
        &up::<A>(g, &b),
        &up::<A>(g, &a),
        &g.upload(&al).unwrap(),
        &g.upload(&dt).unwrap(),
        &g.upload(&dbeta).unwrap(),
        &g.upload(&dg).unwrap(),
        &mut db,
        &mut da,
        &mut d_al,
        &mut d_dt,
        t,
        hv,
    )
    .unwrap();
    close("gates db", &down(g, &db), &want_db, tol::<A>());
    close("gates da", &down(g, &da), &want_da, tol::<A>());
    close("gates d A_log", &g.download(&d_al).unwrap(), &want_al, tol::<A>());
    close("gates d dt_bias", &g.download(&d_dt).unwrap(), &want_dt, tol::<A>());
}

#[test]
fn gdn_gates_backward_matches_the_cpu_trainer() {
    on_device(gates::<f32>, 11);
    on_device(gates::<u16>, 11);
}

// ---------------------------------------------------------------- GDN core: delta rule, q/k prep

/// The delta-rule backward over two packed sequences (70 tokens: more than one chunk; 9 tokens)
/// with GQA (2 key heads, 4 value heads) against `train::layers::delta_rule` per (sequence,
/// value head), dq/dk summed over the value heads of each key head.
fn delta_rule<A: Act>(g: &Gpu, seed: u64) {
    use execcritic::model::gdn::{DeltaInput, CHUNK};
    use execcritic::tensor::cpu::l2_normalize;
    use execcritic::train::layers::delta_rule as dr;
    assert_eq!(bw::DELTA_CHUNK, CHUNK, "the device recomputes chunks of the CPU trainer's size");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (hk, hv, dk, dv) = (2, 4, 8, 6);
    let cu = [0usize, 70, 79];
    let t = cu[2];
    // q̂, k̂ as the forward makes them: unit rows, q scaled by dk^-½.
    let (mut q, mut k) = (rnd(&mut rng, t * hk * dk, 1.0), rnd(&mut rng, t * hk * dk, 1.0));
    for r in 0..t * hk {
        l2_normalize(&mut q[r * dk..(r + 1) * dk], 1e-6, 1.0 / (dk as f32).sqrt());
        l2_normalize(&mut k[r * dk..(r + 1) * dk], 1e-6, 1.0);
    }
    let v = rnd(&mut rng, t * hv * dv, 1.0);
    let beta: Vec<f32> = (0..t * hv).map(|_| rng.random_range(0.05..0.95)).collect();
    let gl: Vec<f32> = (0..t * hv).map(|_| -rng.random_range(0.01..0.6)).collect();
    let dout = rnd(&mut rng, t * hv * dv, 1.0);
    let (mut want_dq, mut want_dk) = (vec![0.0f32; t * hk * dk], vec![0.0f32; t * hk * dk]);
    let (mut want_dv, mut want_db, mut want_dg) = (vec![0.0f32; t * hv * dv], vec![0.0f32; t * hv], vec![0.0f32; t * hv]);
    for w in cu.windows(2) {
        let rows = w[0]..w[1];
        for h in 0..hv {
            let kh = h / (hv / hk);
            let head = |x: &[f32], heads: usize, hh: usize, d: usize| -> Vec<f32> {
                rows.clone().flat_map(|r| x[(r * heads + hh) * d..(r * heads + hh + 1) * d].to_vec()).collect()
            };
            let (qh, kh_, vh) = (head(&q, hk, kh, dk), head(&k, hk, kh, dk), head(&v, hv, h, dv));
            let (bh, gh, doh) = (head(&beta, hv, h, 1), head(&gl, hv, h, 1), head(&dout, hv, h, dv));
            let inp = DeltaInput { q: &qh, k: &kh_, v: &vh, beta: &bh, g: &gh, dk, dv };
            let (_, starts) = dr::forward(&inp);
            let gr = dr::backward(&inp, &starts, &doh);
            for (i, r) in rows.clone().enumerate() {
                for a in 0..dk {
                    want_dq[(r * hk + kh) * dk + a] += gr.dq[i * dk + a];
                    want_dk[(r * hk + kh) * dk + a] += gr.dk[i * dk + a];
                }
                want_dv[(r * hv + h) * dv..(r * hv + h + 1) * dv].copy_from_slice(&gr.dv[i * dv..(i + 1) * dv]);
                want_db[r * hv + h] = gr.dbeta[i];
                want_dg[r * hv + h] = gr.dg[i];
            }
        }
    }
    let (qd, kd, vd, bd, gd) = (
        g.upload(&q).unwrap(),
        g.upload(&k).unwrap(),
        g.upload(&v).unwrap(),
        g.upload(&beta).unwrap(),
        g.upload(&gl).unwrap(),
    );
    let x = ops::DeltaBufs { qn: &qd, kn: &kd, v: &vd, beta: &bd, g: &gd, hk, hv, dk, dv };
    let ddout = up::<A>(g, &dout);
    // Outputs are overwritten: start them non-zero.
    let junk = |n: usize| g.upload(&vec![7.0f32; n]).unwrap();
    let (mut dq, mut dk_, mut dv_) = (junk(t * hk * dk), junk(t * hk * dk), junk(t * hv * dv));
    let (mut db, mut dg) = (junk(t * hv), junk(t * hv));
    bw::delta_rule_backward(g, &x, &cu, &ddout, &mut dq, &mut dk_, &mut dv_, &mut db, &mut dg).unwrap();
    let dq_got = g.download(&dq).unwrap();
    close("delta dq", &dq_got, &want_dq, tol::<A>());
    close("delta dk", &g.download(&dk_).unwrap(), &want_dk, tol::<A>());
    close("delta dv", &g.download(&dv_).unwrap(), &want_dv, tol::<A>());
    close("delta dbeta", &g.download(&db).unwrap(), &want_db, tol::<A>());
    close("delta dg", &g.download(&dg).unwrap(), &want_dg, tol::<A>());
    // Deterministic: a second run gives the same bits.
    bw::delta_rule_backward(g, &x, &cu, &ddout, &mut dq, &mut dk_, &mut dv_, &mut db, &mut dg).unwrap();
    assert_eq!(g.download(&dq).unwrap(), dq_got, "same bits on every run");
    // No tokens is a no-op; bad shapes are refused.
    let mut none = junk(1);
    let (mut n2, mut n3, mut n4, mut n5) = (junk(1), junk(1), junk(1), junk(1));
    bw::delta_rule_backward(g, &x, &[0], &ddout, &mut none, &mut n2, &mut n3, &mut n4, &mut n5).unwrap();
    assert_eq!(g.download(&none).unwrap(), vec![7.0], "t = 0 writes nothing");
    let bad = |x: &ops::DeltaBufs<'_>, cu: &[usize], dq: &mut DeviceBuffer<f32>| {
        let (mut a, mut b, mut c, mut d) = (junk(t * hk * dk), junk(t * hv * dv), junk(t * hv), junk(t * hv));
        bw::delta_rule_backward(g, x, cu, &ddout, dq, &mut a, &mut b, &mut c, &mut d).is_err()
    };
    assert!(bad(&x, &[0, t + 1], &mut dq), "offsets past the buffers are refused");
    assert!(bad(&x, &[0, 9, 5], &mut dq), "descending offsets are refused");
    assert!(bad(&x, &cu, &mut junk(t * hk * dk - 1)), "a short dq is refused");
    assert!(bad(&ops::DeltaBufs { hk: 3, ..x }, &cu, &mut dq), "hv not a multiple of hk is refused");
    assert!(bad(&ops::DeltaBufs { dk: 300, ..x }, &cu, &mut dq), "dk above 256 is refused");
}

#[test]
fn delta_rule_backward_matches_the_cpu_trainer() {
    on_device(delta_rule::<f32>, 12);
    on_device(delta_rule::<u16>, 12);
}

/// The q/k L2-norm prep backward against `train::ops::l2_normalize_backward` (q with the dk^-½
/// scale, k without), v passed through.
fn qkv_prep<A: Act>(g: &Gpu, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (t, hk, hv, dk, dv) = (5, 2, 4, 12, 5);
    let conv = 2 * hk * dk + hv * dv;
    let y = rnd(&mut rng, t * conv, 2.0);
    let (dqn, dkn, dvv) = (rnd(&mut rng, t * hk * dk, 1.0), rnd(&mut rng, t * hk * dk, 1.0), rnd(&mut rng, t * hv * dv, 1.0));
    let mut want = vec![0.0f32; t * conv];
    for r in 0..t {
        for h in 0..hk {
            let head = |x: &[f32]| x[(r * hk + h) * dk..(r * hk + h + 1) * dk].to_vec();
            for (off, dh, scale) in [(h * dk, head(&dqn), 1.0 / (dk as f32).sqrt()), ((hk + h) * dk, head(&dkn), 1.0)] {
                let raw = &y[r * conv + off..r * conv + off + dk];
                let d = cpu::l2_normalize_backward(raw, ops::GDN_QK_NORM_EPS, scale, &dh);
                want[r * conv + off..r * conv + off + dk].copy_from_slice(&d);
            }
        }
        want[r * conv + 2 * hk * dk..(r + 1) * conv].copy_from_slice(&dvv[r * hv * dv..(r + 1) * hv * dv]);
    }
    let mut dy = up::<A>(g, &vec![7.0f32; t * conv]);
    let (yd, dq, dk_, dv_) = (up::<A>(g, &y), g.upload(&dqn).unwrap(), g.upload(&dkn).unwrap(), g.upload(&dvv).unwrap());
    bw::gdn_qkv_prep_backward(g, &yd, &dq, &dk_, &dv_, &mut dy, t, hk, hv, dk, dv).unwrap();
    close("qkv prep dy", &down(g, &dy), &want, tol::<A>());
    let r = bw::gdn_qkv_prep_backward(g, &yd, &dq, &dk_, &dv_, &mut dy, t + 1, hk, hv, dk, dv);
    assert!(r.is_err(), "more tokens than the buffers hold are refused");
    let r = bw::gdn_qkv_prep_backward(g, &yd, &dq, &dk_, &dv_, &mut dy, t, 3, hv, dk, dv);
    assert!(r.is_err(), "hv not a multiple of hk is refused");
}

#[test]
fn gdn_qkv_prep_backward_matches_the_cpu_trainer() {
    on_device(qkv_prep::<f32>, 13);
    on_device(qkv_prep::<u16>, 13);
}
