//! Sampler properties: greedy is argmax, seeded draws reproduce, top-k/top-p restrict the
//! support, temperature sampling follows softmax(logits/T), and the returned log-probabilities
//! are the log-softmax entries of the raw logits.

use execcritic::engine::sampler::{argmax, log_softmax, Sampler, SamplingParams};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn random_logits(seed: u64, n: usize) -> Vec<f32> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n).map(|_| rng.random_range(-4.0f32..4.0)).collect()
}

fn params(temperature: f32, top_k: usize, top_p: f32, seed: u64) -> SamplingParams {
    SamplingParams {
        temperature,
        top_k,
        top_p,
        seed: Some(seed),
        ..Default::default()
    }
}

#[test]
fn greedy_is_argmax_with_policy_logprob() {
    let mut s = Sampler::new(params(0.0, 0, 1.0, 1));
    for seed in 0..50 {
        let logits = random_logits(seed, 300);
        let got = s.sample(&logits);
        let best = logits.iter().cloned().fold(f32::MIN, f32::max);
        assert_eq!(logits[got.token as usize], best);
        assert_eq!(got.token as usize, argmax(&logits));
        assert_eq!(got.logprob, log_softmax(&logits)[got.token as usize]);
        assert_eq!(got.sampling_logprob, 0.0);
    }
    // Ties go to the lowest id.
    assert_eq!(
        Sampler::new(params(0.0, 0, 1.0, 1))
            .sample(&[1.0, 3.0, 3.0])
            .token,
        1
    );
}

#[test]
fn seeded_sampling_reproduces_and_seeds_differ() {
    let rows: Vec<Vec<f32>> = (0..64).map(|i| random_logits(i, 50)).collect();
    let run = |seed| {
        let mut s = Sampler::new(params(1.0, 0, 1.0, seed));
        rows.iter().map(|r| s.sample(r).token).collect::<Vec<_>>()
    };
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
}

#[test]
fn logprobs_are_log_softmax_entries() {
    let mut s = Sampler::new(params(0.7, 20, 0.9, 3));
    for seed in 0..100 {
        let logits = random_logits(seed, 200);
        let ls = log_softmax(&logits);
        let total: f64 = ls.iter().map(|&l| (l as f64).exp()).sum();
        assert!((total - 1.0).abs() < 1e-5);
        let got = s.sample(&logits);
        assert!(got.logprob <= 0.0 && got.sampling_logprob <= 0.0);
        assert_eq!(got.logprob, ls[got.token as usize]);
        // The sampling log-probability is the drawn token's renormalised truncated probability.
        let support = s.support(&logits);
        let p = support
            .iter()
            .find(|(t, _)| *t == got.token as usize)
            .unwrap()
            .1;
        assert!((got.sampling_logprob - p.ln() as f32).abs() < 1e-6);
    }
}

#[test]
fn top_k_restricts_support() {
    let logits = random_logits(11, 100);
    let mut order: Vec<usize> = (0..100).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    let top5: Vec<usize> = order[..5].to_vec();
    let mut s = Sampler::new(params(5.0, 5, 1.0, 9));
    let support: Vec<usize> = s.support(&logits).iter().map(|(t, _)| *t).collect();
    assert_eq!(support, top5);
    for _ in 0..2000 {
        assert!(top5.contains(&(s.sample(&logits).token as usize)));
    }
}

#[test]
fn top_p_keeps_the_smallest_nucleus() {
    // probabilities at T=1: 0.5, 0.25, 0.125, 0.125
    let logits = [0.5f32.ln(), 0.25f32.ln(), 0.125f32.ln(), 0.125f32.ln()];
    let support = |p: f32| {
        Sampler::new(params(1.0, 0, p, 1))
            .support(&logits)
            .iter()
            .map(|(t, q)| (*t, (q * 1e6).round() / 1e6))
            .collect::<Vec<_>>()
    };
    assert_eq!(support(0.5), vec![(0, 1.0)]);
    assert_eq!(support(0.6), vec![(0, 0.666667), (1, 0.333333)]);
    assert_eq!(support(0.75), vec![(0, 0.666667), (1, 0.333333)]);
    assert_eq!(support(0.8).len(), 3);
    assert_eq!(support(1.0).len(), 4);
    let mut s = Sampler::new(params(1.0, 0, 0.6, 5));
    for _ in 0..1000 {
        assert!(s.sample(&logits).token < 2);
    }
}

#[test]
fn temperature_sampling_follows_softmax() {
    let logits = [1.0f32, 0.0, -1.0, 0.5];
    for t in [0.5f32, 1.0, 2.0] {
        let scaled: Vec<f32> = logits.iter().map(|l| l / t).collect();
        let expected: Vec<f64> = log_softmax(&scaled)
            .iter()
            .map(|&l| (l as f64).exp())
            .collect();
        let mut s = Sampler::new(params(t, 0, 1.0, 42));
        let n = 40_000;
        let mut counts = [0usize; 4];
        for _ in 0..n {
            counts[s.sample(&logits).token as usize] += 1;
        }
        for (c, p) in counts.iter().zip(&expected) {
            let freq = *c as f64 / n as f64;
            // 5 standard errors.
            let tol = 5.0 * (p * (1.0 - p) / n as f64).sqrt();
            assert!((freq - p).abs() < tol, "T={t}: freq {freq} vs p {p}");
        }
    }
}

#[test]
fn invalid_settings_are_rejected() {
    for bad in [
        params(-1.0, 0, 1.0, 0),
        params(f32::NAN, 0, 1.0, 0),
        params(1.0, 0, 0.0, 0),
        params(1.0, 0, 1.5, 0),
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
    assert!(SamplingParams {
        max_tokens: 0,
        ..Default::default()
    }
    .validate()
    .is_err());
    assert!(SamplingParams {
        stop: vec![String::new()],
        ..Default::default()
    }
    .validate()
    .is_err());
    assert!(params(0.0, 3, 0.5, 0).validate().is_ok());
}

/// The nucleus found by the sampler (which sorts only a growing head) equals the one of a full
/// sort, also when it holds more than the first head of candidates.
#[test]
fn nucleus_matches_a_full_sort() {
    for (seed, top_k, top_p, t) in [
        (1, 0, 0.1, 1.0),
        (2, 0, 0.9, 3.0),
        (3, 0, 0.999, 5.0),
        (4, 1000, 0.95, 4.0),
        (5, 3, 0.2, 1.0),
    ] {
        let logits = random_logits(seed, 3000);
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
        if top_k > 0 {
            order.truncate(top_k);
        }
        let scaled: Vec<f32> = order.iter().map(|&i| logits[i] / t).collect();
        let probs: Vec<f64> = log_softmax(&scaled)
            .iter()
            .map(|&l| (l as f64).exp())
            .collect();
        let mut cum = 0.0;
        let n = probs
            .iter()
            .position(|p| {
                cum += p;
                cum >= top_p as f64
            })
            .map_or(probs.len(), |i| i + 1);
        let got = Sampler::new(params(t, top_k, top_p, 0)).support(&logits);
        assert_eq!(
            got.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
            order[..n],
            "seed {seed}"
        );
        let mass: f64 = probs[..n].iter().sum();
        for ((_, p), q) in got.iter().zip(&probs) {
            assert!((p - q / mass).abs() < 1e-9);
        }
    }
}
