//! Engine benchmarks: the sampler on a Qwen3.5-sized logits row (248,320 ids) for the settings
//! the agents use, and end-to-end decode throughput of the engine on the tiny fixture model
//! (batch 1 vs 8 — engine overhead and batching, not model speed).
//!
//! `cargo bench --bench engine`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use execcritic::engine::sampler::argmax;
use execcritic::engine::{EngineConfig, EngineCore, Request, Sampler, SamplingParams};
use execcritic::model::tokenizer::Tokenizer;
use execcritic::model::{ForwardOptions, Model, SeqInput, SeqState};
use rand::{Rng, SeedableRng};
use std::path::Path;
use std::sync::Arc;

const QWEN35_VOCAB: usize = 248_320;

fn sampler(c: &mut Criterion) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
    // Roughly LM-shaped logits: a few large values over a broad low tail.
    let logits: Vec<f32> = (0..QWEN35_VOCAB)
        .map(|_| {
            let x: f32 = rng.random_range(-1.0..1.0);
            8.0 * x.powi(9) + rng.random_range(-2.0..2.0)
        })
        .collect();
    let mut g = c.benchmark_group("sampler_248k");
    g.throughput(Throughput::Elements(1));
    let settings = [
        ("greedy", SamplingParams::greedy(1)),
        (
            "t1_full",
            SamplingParams {
                temperature: 1.0,
                ..Default::default()
            },
        ),
        (
            "t1_top_p0.95",
            SamplingParams {
                temperature: 1.0,
                top_p: 0.95,
                ..Default::default()
            },
        ),
        (
            "t1_top_k20_top_p0.95",
            SamplingParams {
                temperature: 1.0,
                top_k: 20,
                top_p: 0.95,
                ..Default::default()
            },
        ),
    ];
    for (name, p) in settings {
        let mut s = Sampler::new(SamplingParams { seed: Some(1), ..p });
        g.bench_function(name, |b| b.iter(|| s.sample(&logits)));
    }
    g.finish();
}

fn engine_decode(c: &mut Criterion) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    let model =
        Arc::new(Model::load(&root.join("tiny-qwen35")).expect("models/tiny-qwen35 fixture"));
    let tok = Arc::new(Tokenizer::from_dir(&root.join("tokenizer")).unwrap());
    let prompt = tok
        .encode("Run the tests and report the failures.")
        .unwrap();
    let tokens = 32;
    let mut g = c.benchmark_group("engine_tiny_decode");
    g.sample_size(10);
    for batch in [1usize, 8] {
        g.throughput(Throughput::Elements((batch * tokens) as u64));
        g.bench_with_input(BenchmarkId::from_parameter(batch), &batch, |b, &batch| {
            b.iter(|| {
                let mut core =
                    EngineCore::new(model.clone(), tok.clone(), EngineConfig::default()).unwrap();
                for i in 0..batch {
                    let sampling = SamplingParams {
                        temperature: 1.0,
                        seed: Some(i as u64),
                        max_tokens: tokens,
                        ..Default::default()
                    };
                    core.add(Request {
                        ignore_eos: true,
                        ..Request::new(prompt.clone(), sampling)
                    })
                    .unwrap();
                }
                core.run_to_completion()
            })
        });
        // The same work as bare Model::forward calls with argmax: the engine's overhead is the gap.
        g.bench_with_input(
            BenchmarkId::new("bare_forward", batch),
            &batch,
            |b, &batch| {
                b.iter(|| {
                    let mut states: Vec<SeqState> = (0..batch).map(|_| model.new_state()).collect();
                    let mut next: Vec<Vec<u32>> = vec![prompt.clone(); batch];
                    let opts = ForwardOptions::default();
                    for _ in 0..tokens {
                        let mut inputs: Vec<SeqInput<'_>> = next
                            .iter()
                            .zip(states.iter_mut())
                            .map(|(t, s)| SeqInput::new(t, s))
                            .collect();
                        let outs = model.forward(&mut inputs, &opts).unwrap();
                        next = outs
                            .iter()
                            .map(|o| vec![argmax(o.logits.data()) as u32])
                            .collect();
                    }
                    next
                })
            },
        );
    }
    g.finish();
}

criterion_group!(benches, sampler, engine_decode);
criterion_main!(benches);
