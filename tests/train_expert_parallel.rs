//! Expert parallelism of the MoE layer, forward and backward, with ranks as threads
//! (`ThreadExchange`), each with its own emulated device running its experts' grouped GEMMs
//! (the expert backward runs on the CPU per rank). For 2 and 4 ranks, with the tokens split
//! unevenly over the ranks (a rank may hold none) and uneven routing (one expert takes every
//! token, experts and a whole rank receive no rows), the outputs, the input gradient, every
//! expert's weight gradient (on its owner; zero elsewhere) and the router / shared-expert
//! gradients (summed over ranks, as a data-parallel all-reduce would) equal the 1-rank result.
//! The 1-rank run itself equals the CPU trainer's `MoeW` (its device GEMMs sum in another order).
//!
//! Tolerances: a rank's router logits and shared expert are CPU GEMMs over its own tokens only,
//! so their rows may be summed in another order than over all tokens, and the replicated
//! parameters' gradients are a sum of per-rank partial sums: 1e-6 of each tensor's largest
//! magnitude. The printed worst differences show which results came out bit-identical.

use execcritic::tensor::cuda::Gpu;
use execcritic::tensor::expert_parallel::{EpError, Exchange, Placement};
use execcritic::tensor::thread_exchange::ThreadExchange;
use execcritic::tensor::Tensor;
use execcritic::train::layers::expert_gemm::DeviceExperts;
use execcritic::train::layers::ffn::Ffn;
use execcritic::train::layers::moe::MoeW;
use execcritic::train::layers::moe_ep::EpExperts;
use execcritic::train::{Grads, ParamStore, Pid};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const HS: usize = 16;
const NE: usize = 8;
const K: usize = 2;
const T: usize = 24;

fn rnd(rng: &mut ChaCha8Rng, n: usize, a: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-a..a)).collect()
}

/// A random MoE layer: 8 experts (inter 8), shared expert (inter 12), top-2.
fn layer(rng: &mut ChaCha8Rng) -> (ParamStore, MoeW) {
    let mut ps = ParamStore::default();
    let s = 1.0 / (HS as f32).sqrt() * 1.7;
    let mut add = |ps: &mut ParamStore, name: String, shape: [usize; 2], a: f32| {
        let data = rnd(rng, shape[0] * shape[1], a);
        ps.push(name, &Tensor::new(shape.to_vec(), data))
    };
    let mut ffn = |ps: &mut ParamStore, tag: String, i: usize| Ffn {
        gate: add(ps, format!("{tag}.gate"), [i, HS], s),
        up: add(ps, format!("{tag}.up"), [i, HS], s),
        down: add(ps, format!("{tag}.down"), [HS, i], 0.5),
        hidden: HS,
        inter: i,
    };
    let experts: Vec<Ffn> = (0..NE).map(|e| ffn(&mut ps, format!("e{e}"), 8)).collect();
    let shared = ffn(&mut ps, "shared".into(), 12);
    let mut add = |ps: &mut ParamStore, name: &str, shape: [usize; 2], a: f32| {
        let data = rnd(rng, shape[0] * shape[1], a);
        ps.push(name.into(), &Tensor::new(shape.to_vec(), data))
    };
    let router = add(&mut ps, "router", [NE, HS], 1.0);
    let shared_gate = add(&mut ps, "shared_gate", [1, HS], s);
    (ps, MoeW { router, experts, shared, shared_gate, top_k: K, hidden: HS })
}

/// One rank's results.
struct RankOut {
    out: Vec<f32>,
    dx: Vec<f32>,
    gr: Grads,
}

/// One rank: its own emulated device, its experts on it, forward and backward of its tokens.
fn rank<X: Exchange>(
    ps: &ParamStore,
    w: &MoeW,
    place: Placement,
    ex: &mut X,
    held: std::ops::Range<usize>,
    (x, n, forced, dy): (&[f32], usize, Option<&[u32]>, &[f32]),
) -> Result<RankOut, EpError> {
    let gpu = Gpu::emulator()?;
    let experts = DeviceExperts::upload(&gpu, w, ps, held)?;
    let mut routed = EpExperts { place, exchange: ex, experts: &experts };
    let (out, saved) = w.forward_with(ps, x.to_vec(), n, forced, &mut routed)?;
    let mut gr = ps.zero_grads();
    let dx = w.backward_with(ps, &saved, dy, &mut gr, &mut routed)?;
    Ok(RankOut { out, dx, gr })
}

/// Run `cuts.len() - 1` thread ranks, rank `r` holding tokens `cuts[r]..cuts[r+1]`.
fn run(ps: &ParamStore, w: &MoeW, cuts: &[usize], x: &[f32], forced: Option<&[u32]>, dy: &[f32]) -> Vec<RankOut> {
    let ranks = cuts.len() - 1;
    let place = Placement::new(NE, ranks).unwrap();
    std::thread::scope(|s| {
        let hs: Vec<_> = ThreadExchange::group(ranks)
            .into_iter()
            .enumerate()
            .map(|(r, mut ex)| {
                let (a, b) = (cuts[r], cuts[r + 1]);
                let mine = (&x[a * HS..b * HS], b - a, forced.map(|f| &f[a * K..b * K]), &dy[a * HS..b * HS]);
                s.spawn(move || rank(ps, w, place, &mut ex, place.experts_of(r), mine))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap().unwrap()).collect()
    })
}

/// Worst |got − want| relative to want's largest magnitude; asserts it is within `rel`.
fn close(what: &str, got: &[f32], want: &[f32], rel: f32) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let worst = got.iter().zip(want).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(worst <= rel * scale.max(f32::MIN_POSITIVE), "{what}: worst {worst:e} of scale {scale:e}");
    worst / scale.max(f32::MIN_POSITIVE)
}

fn expert_pids(w: &MoeW, e: usize) -> [Pid; 3] {
    [w.experts[e].gate, w.experts[e].up, w.experts[e].down]
}

/// The whole check for one routing (`forced`: replayed experts, or the router's top-k).
fn check(seed: u64, forced: Option<&[u32]>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (ps, w) = layer(&mut rng);
    let x = rnd(&mut rng, T * HS, 1.5);
    let dy = rnd(&mut rng, T * HS, 1.0);
    // The 1-rank run against the CPU trainer's layer (same math, GEMMs summed differently).
    let one = run(&ps, &w, &[0, T], &x, forced, &dy).pop().unwrap();
    let (cpu_out, saved) = w.forward(&ps, x.clone(), T, forced);
    let mut cpu_gr = ps.zero_grads();
    let cpu_dx = w.backward(&ps, &saved, &dy, &mut cpu_gr);
    close("1 rank vs CPU: out", &one.out, &cpu_out, 1e-5);
    close("1 rank vs CPU: dx", &one.dx, &cpu_dx, 1e-5);
    for (p, (a, b)) in one.gr.0.iter().zip(&cpu_gr.0).enumerate() {
        close(&format!("1 rank vs CPU: grad {}", ps.params[p].name), a, b, 1e-5);
    }
    let rows: Vec<usize> = (0..NE).map(|e| saved.chosen.iter().filter(|&&c| c as usize == e).count()).collect();
    eprintln!("rows per expert: {rows:?}");
    for cuts in [vec![0, 7, T], vec![0, 3, 11, 11, T]] {
        let ranks = cuts.len() - 1;
        let place = Placement::new(NE, ranks).unwrap();
        let outs = run(&ps, &w, &cuts, &x, forced, &dy);
        // worst relative difference per kind: output, dX, experts' dW, replicated parameters' dW
        let mut worst = [0.0f32; 4];
        let out: Vec<f32> = outs.iter().flat_map(|o| o.out.clone()).collect();
        let dx: Vec<f32> = outs.iter().flat_map(|o| o.dx.clone()).collect();
        worst[0] = close(&format!("{ranks} ranks: out"), &out, &one.out, 1e-6);
        worst[1] = close(&format!("{ranks} ranks: dx"), &dx, &one.dx, 1e-6);
        for e in 0..NE {
            let owner = place.owner(e);
            for p in expert_pids(&w, e) {
                let name = &ps.params[p.0].name;
                let d = close(&format!("{ranks} ranks: {name}"), outs[owner].gr.get(p), one.gr.get(p), 1e-6);
                worst[2] = worst[2].max(d);
                if rows[e] > 0 {
                    assert!(one.gr.get(p).iter().any(|g| *g != 0.0), "{name}: an expert with rows has a gradient");
                }
                for (r, o) in outs.iter().enumerate() {
                    if r != owner {
                        assert!(o.gr.get(p).iter().all(|g| *g == 0.0), "{name}: gradient on rank {r}, not its owner");
                    }
                }
            }
        }
        let replicated = [w.router, w.shared_gate, w.shared.gate, w.shared.up, w.shared.down];
        for p in replicated {
            let mut sum = vec![0.0f32; ps.get(p).len()];
            for o in &outs {
                sum.iter_mut().zip(o.gr.get(p)).for_each(|(a, b)| *a += b);
            }
            let d = close(&format!("{ranks} ranks: Σ ranks {}", ps.params[p.0].name), &sum, one.gr.get(p), 1e-6);
            worst[3] = worst[3].max(d);
        }
        eprintln!("{ranks} ranks (tokens cut at {cuts:?}): worst relative difference to 1 rank: out {:e}, dx {:e}, experts' dW {:e}, replicated dW {:e}", worst[0], worst[1], worst[2], worst[3]);
    }
}

#[test]
fn uneven_replayed_routing_gives_the_one_rank_gradients() {
    // Slot 0: expert 1 for every token; slot 1 cycles over 0, 2, 3, 7: experts 4, 5, 6 get no
    // rows, and with 4 ranks rank 2 (experts 4, 5) receives nothing and holds no tokens.
    let forced: Vec<u32> = (0..T).flat_map(|t| [1, [0, 2, 3, 7][t % 4]]).collect();
    check(21, Some(&forced));
}

#[test]
fn router_top_k_routing_gives_the_one_rank_gradients() {
    check(22, None);
}

#[test]
fn a_failing_rank_does_not_hang_the_others() {
    let mut rng = ChaCha8Rng::seed_from_u64(23);
    let (ps, w) = layer(&mut rng);
    let x = rnd(&mut rng, 4 * HS, 1.0);
    let place = Placement::new(NE, 2).unwrap();
    let res: Vec<Result<RankOut, EpError>> = std::thread::scope(|s| {
        let hs: Vec<_> = ThreadExchange::group(2)
            .into_iter()
            .map(|mut ex| {
                let (ps, w, x) = (&ps, &w, &x);
                // rank 1 was handed rank 0's experts: it refuses before any exchange
                s.spawn(move || rank(ps, w, place, &mut ex, place.experts_of(0), (&x[..], 4, None, &x[..])))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(matches!(res[1], Err(EpError::Shape { rank: 1, .. })), "rank 1: {:?}", res[1].as_ref().err());
    assert!(matches!(res[0], Err(EpError::PeerGone { rank: 0 })), "rank 0: {:?}", res[0].as_ref().err());
}
