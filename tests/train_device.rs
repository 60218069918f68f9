//! Training on the device, on the emulated device (a GPU when present). The device AdamW
//! (`kernels/optim.cu` through `train::device_optim::DeviceAdamW`) against the CPU `AdamW` on
//! random tensors: several steps —
//! clipped, not clipped, a zero gradient, clipping off — give the CPU's master weights and moments
//! (relative 1e-6), the same global norm, clip decision and lr, and the serving copy equals the
//! master rounded to the storage type (bf16: round to nearest even; f32: the master itself).
//! The device LoRA adapter gradients (`train::device_lora`) equal the projection of the dense
//! gradient, accumulated over two calls (two experts' row sets).

use execcritic::tensor::cuda::{Act, DeviceBuffer, Gpu};
use execcritic::tensor::Tensor;
use execcritic::tensor::cuda::gemm::View;
use execcritic::train::device_lora::{accumulate_adapter_grads, AdapterBufs, AdapterShape};
use execcritic::train::device_optim::DeviceAdamW;
use execcritic::train::optim::{AdamW, AdamWConfig, Schedule};
use execcritic::train::{Grads, ParamStore};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const SIZES: [usize; 3] = [1000, 37, 300];

/// Uniform in ±s (all zeros for s = 0).
fn rnd(rng: &mut ChaCha8Rng, n: usize, s: f32) -> Vec<f32> {
    (0..n).map(|_| if s > 0.0 { rng.random_range(-s..s) } else { 0.0 }).collect()
}

fn close(what: &str, got: &[f32], want: &[f32], rel: f32) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-30);
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= rel * scale, "{what}[{i}]: device {a} vs cpu {b} (scale {scale})");
    }
}

/// Gradient scale per step: large (clipped at 1.0), small (norm < 1: not clipped), zero, large.
const STEP_SCALES: [f32; 4] = [3.0, 0.01, 0.0, 0.5];

/// Runs CPU and device AdamW side by side with storage type `A`; checks every step.
fn side_by_side<A: Act + PartialEq + std::fmt::Debug>(cfg: AdamWConfig, schedule: Schedule, expect_clip: [bool; 4]) {
    let gpu = Gpu::auto().expect("no device: neither a GPU nor the emulator");
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let mut store = ParamStore::default();
    for (i, &n) in SIZES.iter().enumerate() {
        store.push(format!("w{i}"), &Tensor::new(vec![n], rnd(&mut rng, n, 1.0)));
    }
    let masters: Vec<&[f32]> = store.params.iter().map(|p| &p.data[..]).collect();
    let mut dev = DeviceAdamW::new(&gpu, cfg, &masters).unwrap();
    let mut serving: Vec<DeviceBuffer<A>> =
        store.params.iter().map(|p| gpu.upload(&A::from_f32(&p.data)).unwrap()).collect();
    let mut cpu = AdamW::new(cfg, &store);
    for (step, (&s, &want_clip)) in STEP_SCALES.iter().zip(&expect_clip).enumerate() {
        let host: Vec<Vec<f32>> = SIZES.iter().map(|&n| rnd(&mut rng, n, s)).collect();
        let dg: Vec<DeviceBuffer<f32>> = host.iter().map(|g| gpu.upload(g).unwrap()).collect();
        let mut serve: Vec<Option<&mut DeviceBuffer<A>>> = serving.iter_mut().map(Some).collect();
        let got = dev.step(&gpu, &dg.iter().collect::<Vec<_>>(), &mut serve, &schedule).unwrap();
        let want = cpu.step(&mut store, &mut Grads(host.clone()), &schedule);
        assert_eq!(got.lr, want.lr, "step {step}: lr");
        assert_eq!((got.clipped, want.clipped), (want_clip, want_clip), "step {step}: clip decision");
        assert!(
            (got.grad_norm - want.grad_norm).abs() <= 1e-9 * want.grad_norm.max(1e-30),
            "step {step}: norm {} vs {}",
            got.grad_norm,
            want.grad_norm
        );
        if s == 0.0 {
            assert_eq!(got.grad_norm, 0.0, "zero gradient: norm 0, no NaN");
        }
        assert_eq!(gpu.download(&dg[0]).unwrap(), host[0], "the gradients are read, not modified");
        for (i, p) in store.params.iter().enumerate() {
            let master = dev.master(&gpu, i).unwrap();
            close(&format!("step {step} master {i}"), &master, &p.data, 1e-6);
            let (m, v) = dev.moments(&gpu, i).unwrap();
            close(&format!("step {step} m {i}"), &m, &cpu.m[i], 1e-6);
            close(&format!("step {step} v {i}"), &v, &cpu.v[i], 1e-6);
            assert_eq!(gpu.download(&serving[i]).unwrap(), A::from_f32(&master), "step {step}: serving copy {i}");
        }
    }
    assert_eq!(dev.step, 4);
}

fn cfg(max_grad_norm: Option<f32>) -> AdamWConfig {
    AdamWConfig { lr: 1e-2, weight_decay: 0.1, max_grad_norm, ..Default::default() }
}

#[test]
fn device_adamw_bf16_serving_equals_cpu_adamw_with_clipping() {
    // Step norms ≈ 3·√(1337/3) ≈ 63 (clipped), 0.2 (not), 0 (zero grads), 10.5 (clipped).
    let cosine = Schedule::Cosine { total_steps: 6, warmup_steps: 2, min_ratio: 0.1 };
    side_by_side::<u16>(cfg(Some(1.0)), cosine, [true, false, false, true]);
}

#[test]
fn device_adamw_f32_serving_equals_cpu_adamw_without_clipping() {
    side_by_side::<f32>(cfg(None), Schedule::Constant, [false; 4]);
}

#[test]
fn device_adamw_refuses_mismatched_buffers() {
    let gpu = Gpu::auto().unwrap();
    let mut dev = DeviceAdamW::new(&gpu, cfg(Some(1.0)), &[&[1.0, 2.0][..]]).unwrap();
    let short = gpu.upload(&[0.5f32]).unwrap();
    let mut none: Vec<Option<&mut DeviceBuffer<f32>>> = vec![None];
    assert!(dev.step(&gpu, &[&short], &mut none, &Schedule::Constant).is_err(), "gradient length");
    assert!(dev.step(&gpu, &[], &mut none, &Schedule::Constant).is_err(), "gradient count");
    assert_eq!(dev.step, 0, "a refused step changes nothing");
    let ok = gpu.upload(&[0.5f32, 0.0]).unwrap();
    dev.step(&gpu, &[&ok], &mut none, &Schedule::Constant).unwrap();
    assert!(dev.master(&gpu, 1).is_err());
}

#[test]
fn device_lora_gradients_equal_the_projection_of_the_dense_gradient() {
    let gpu = Gpu::auto().unwrap();
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let sh = AdapterShape { inp: 24, out: 20, rank: 3, scale: 2.5 };
    let (a, b) = (rnd(&mut rng, sh.rank * sh.inp, 1.0), rnd(&mut rng, sh.out * sh.rank, 1.0));
    let (da, db) = (gpu.upload(&a).unwrap(), gpu.upload(&b).unwrap());
    let (mut ga, mut gb) = (gpu.zeros::<f32>(a.len()).unwrap(), gpu.zeros::<f32>(b.len()).unwrap());
    let mut scratch = gpu.zeros::<f32>(7 * sh.rank).unwrap();
    // Dense dW = Σ over calls of dYᵀ·X, in f64.
    let mut dw = vec![0.0f64; sh.out * sh.inp];
    for m in [5usize, 7] {
        let (x, dy) = (rnd(&mut rng, m * sh.inp, 1.0), rnd(&mut rng, m * sh.out, 1.0));
        for t in 0..m {
            for o in 0..sh.out {
                for i in 0..sh.inp {
                    dw[o * sh.inp + i] += dy[t * sh.out + o] as f64 * x[t * sh.inp + i] as f64;
                }
            }
        }
        // The second call reads views inside wider buffers (an offset and a row stride), as a
        // routed expert's block of grouped rows and its half of the fused gate|up rows.
        let (pad, ld_x, ld_dy) = if m == 7 { (3, sh.inp + 5, 2 * sh.out) } else { (0, sh.inp, sh.out) };
        let embed = |v: &[f32], w: usize, ld: usize| {
            let mut out = vec![f32::NAN; pad + m * ld];
            (0..m).for_each(|t| out[pad + t * ld..pad + t * ld + w].copy_from_slice(&v[t * w..(t + 1) * w]));
            out
        };
        let (dx, ddy) = (gpu.upload(&embed(&x, sh.inp, ld_x)).unwrap(), gpu.upload(&embed(&dy, sh.out, ld_dy)).unwrap());
        let bufs = AdapterBufs { a: &da, b: &db, ga: &mut ga, gb: &mut gb };
        let (vx, vdy) = (View { buf: &dx, at: pad, ld: ld_x }, View { buf: &ddy, at: pad, ld: ld_dy });
        accumulate_adapter_grads(&gpu, sh, vx, vdy, m, bufs, &mut scratch).unwrap();
    }
    let s = sh.scale as f64;
    // dA = s·Bᵀ·dW [r, in]; dB = s·dW·Aᵀ [out, r].
    let want_a: Vec<f32> = (0..sh.rank * sh.inp)
        .map(|j| (0..sh.out).map(|o| s * b[o * sh.rank + j / sh.inp] as f64 * dw[o * sh.inp + j % sh.inp]).sum::<f64>() as f32)
        .collect();
    let want_b: Vec<f32> = (0..sh.out * sh.rank)
        .map(|j| (0..sh.inp).map(|i| s * dw[(j / sh.rank) * sh.inp + i] * a[(j % sh.rank) * sh.inp + i] as f64).sum::<f64>() as f32)
        .collect();
    close("dA", &gpu.download(&ga).unwrap(), &want_a, 1e-5);
    close("dB", &gpu.download(&gb).unwrap(), &want_b, 1e-5);
    let small = AdapterBufs { a: &da, b: &db, ga: &mut ga, gb: &mut gb };
    let x = gpu.upload(&[0.0f32; 24]).unwrap();
    let vx = View::dense(&x, sh.inp);
    assert!(accumulate_adapter_grads(&gpu, sh, vx, vx, 5, small, &mut scratch).is_err(), "x too short for 5 rows");
}
