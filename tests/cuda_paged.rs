//! The paged KV cache of the CUDA backend under the engine, in f32 mode against the CPU engine
//! (tiny Qwen3.5-MoE fixture), on the GPU when one is present (`scripts/gpu-check.sh`) and on the
//! emulated device otherwise: continuous batching with sequences joining
//! and leaving mid-decode through a pool smaller than the tokens served over the run (blocks of
//! ended sequences are reused, all of them are free at the end), snapshots sharing their
//! source's blocks (only a partially filled last block is copied, when written), more
//! concurrent requests than the pool holds served by preempting the youngest (recompute
//! preemption: same tokens, log-probabilities and routing records as the CPU engine), and a
//! request that cannot fit alone reported as a typed error that the engine survives.

use execcritic::engine::cuda_backend::CudaDecoder;
use execcritic::engine::{
    Completion, DecoderModel, EngineConfig, EngineCore, EngineError, Request, SamplingParams,
    SchedulerConfig, StepInput, StepOutput,
};
use execcritic::model::backend::cuda::{CacheConfig, CudaModel};
use execcritic::model::tokenizer::Tokenizer;
use execcritic::model::Model;
use execcritic::tensor::cuda::Gpu;
use std::path::Path;
use std::sync::Arc;

#[path = "common/tiny_model.rs"]
mod tiny_model;
use tiny_model::tiny_model_dir as model_dir;

const BLOCK: usize = 8;

fn on_device(dir: &Path, slots: usize, kv_tokens: usize, block_size: usize) -> CudaDecoder<f32> {
    let gpu = Gpu::auto().expect("no device: neither a GPU nor the emulator");
    let model = CudaModel::<f32>::load(&gpu, dir).unwrap();
    let cache = CacheConfig {
        slots,
        max_len: 256,
        kv_tokens,
        block_size,
    };
    CudaDecoder::with_cache(gpu, model, cache, 64).unwrap()
}

fn config() -> EngineConfig {
    EngineConfig {
        scheduler: SchedulerConfig {
            max_running: 3,
            max_batch_tokens: 40,
            prefill_chunk: 16,
        },
        max_conversations: 1,
    }
}

fn prompt(seed: u32, len: usize) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (i * 37 + seed * 101 + 11) % 900)
        .collect()
}

/// Seeded sampling at temperature 1 over the top 50.
fn seeded(seed: u64, max_tokens: usize) -> SamplingParams {
    SamplingParams {
        temperature: 1.0,
        top_k: 50,
        seed: Some(seed),
        max_tokens,
        ..Default::default()
    }
}

/// Five requests (greedy and seeded sampling) of 9 to 33 prompt tokens.
fn requests() -> Vec<Request> {
    vec![
        Request::new(prompt(1, 20), SamplingParams::greedy(12)),
        Request::new(prompt(2, 9), seeded(7, 16)),
        Request::new(prompt(3, 33), SamplingParams::greedy(10)),
        Request::new(prompt(4, 17), seeded(9, 14)),
        Request::new(prompt(5, 25), SamplingParams::greedy(8)),
    ]
}

/// Requests 0 and 1 start; 2, 3 and 4 join while they decode (4 waits for a free place, as
/// `max_running` = 3). Calls `after_step` after every step; completions in request order.
fn serve<M: DecoderModel>(model: Arc<M>, mut after_step: impl FnMut(&M)) -> Vec<Completion> {
    let tok = Tokenizer::from_dir(&tiny_model::models_dir().join("tokenizer"))
        .unwrap();
    let mut core = EngineCore::new(model.clone(), Arc::new(tok), config()).unwrap();
    let reqs = requests();
    let mut done = vec![];
    core.add(reqs[0].clone()).unwrap();
    core.add(reqs[1].clone()).unwrap();
    for _ in 0..4 {
        done.extend(core.step());
        after_step(&model);
    }
    for r in &reqs[2..] {
        core.add(r.clone()).unwrap();
    }
    while core.has_work() {
        done.extend(core.step());
        after_step(&model);
    }
    done.sort_by_key(|(id, _)| *id);
    done.into_iter().map(|(_, c)| c.unwrap()).collect()
}

#[test]
fn continuous_batching_through_a_small_paged_pool_equals_the_cpu_engine() {
    let dir = model_dir();
    let cpu = serve(Arc::new(Model::load(dir.path()).unwrap()), |_| {});
    // 14 blocks of 8 tokens: 112 tokens, fewer than the run serves in all (148)
    let pool = 14;
    let dev = Arc::new(on_device(dir.path(), 8, pool * BLOCK, BLOCK));
    let mut peak = 0;
    let got = serve(dev.clone(), |m| {
        let (free, total) = m.kv_blocks().unwrap();
        assert_eq!(total, pool);
        peak = peak.max(total - free);
    });
    let served: usize = got
        .iter()
        .map(|c| c.prompt_tokens + c.token_ids.len() - 1)
        .sum();
    eprintln!("served {served} tokens; at most {peak} of {pool} blocks in use");
    assert!(
        served > pool * BLOCK,
        "{served} tokens served vs a pool of {}",
        pool * BLOCK
    );
    assert!(peak > 0 && peak <= pool);
    assert_eq!(
        dev.kv_blocks().unwrap(),
        (pool, pool),
        "every block back once all ended"
    );
    assert_eq!(cpu.len(), got.len());
    for (i, (c, e)) in cpu.iter().zip(&got).enumerate() {
        assert_eq!(c.token_ids, e.token_ids, "request {i}: tokens");
        assert_eq!(c.finish, e.finish, "request {i}");
        for (a, b) in c.logprobs.iter().zip(&e.logprobs) {
            assert!((a - b).abs() < 1e-3, "request {i}: logprob {a} vs {b}");
        }
    }
}

/// Run `reqs` (all submitted at once) to completion: completions in request order, and stats.
fn run_all<M: DecoderModel>(
    model: Arc<M>,
    cfg: EngineConfig,
    reqs: &[Request],
) -> (Vec<Completion>, execcritic::engine::EngineStats) {
    let tok = Tokenizer::from_dir(&tiny_model::models_dir().join("tokenizer"))
        .unwrap();
    let mut core = EngineCore::new(model, Arc::new(tok), cfg).unwrap();
    for r in reqs {
        core.add(r.clone()).unwrap();
    }
    let mut done = core.run_to_completion();
    done.sort_by_key(|(id, _)| *id);
    let out = done.into_iter().map(|(_, c)| c.unwrap()).collect();
    (out, core.stats())
}

#[test]
fn more_requests_than_the_pool_holds_are_preempted_and_give_the_cpu_tokens() {
    let dir = model_dir();
    let quiet = |r: Request| Request {
        ignore_eos: true,
        ..r
    };
    // four at once, each up to 36 tokens (5 blocks of 8): 20 blocks wanted, 10 in the pool
    let reqs = vec![
        quiet(Request::new(prompt(11, 20), seeded(3, 16))).with_routing(),
        quiet(Request::new(prompt(12, 14), SamplingParams::greedy(16))),
        quiet(Request::new(prompt(13, 18), seeded(4, 16))).with_routing(),
        quiet(Request::new(prompt(14, 12), seeded(5, 16))),
    ];
    let cfg = EngineConfig {
        scheduler: SchedulerConfig {
            max_running: 4,
            max_batch_tokens: 64,
            prefill_chunk: 16,
        },
        max_conversations: 0,
    };
    let (cpu, cpu_stats) = run_all(Arc::new(Model::load(dir.path()).unwrap()), cfg, &reqs);
    let pool = 10;
    let dev = Arc::new(on_device(dir.path(), 8, pool * BLOCK, BLOCK));
    let (got, stats) = run_all(dev.clone(), cfg, &reqs);
    assert_eq!(cpu_stats.preemptions, 0);
    assert!(stats.preemptions > 0, "{stats:?}");
    // the preempted sequences re-read what they had read
    assert!(stats.prefilled_tokens > cpu_stats.prefilled_tokens, "{stats:?}");
    assert_eq!(dev.kv_blocks().unwrap(), (pool, pool), "every block back");
    for (i, (c, e)) in cpu.iter().zip(&got).enumerate() {
        assert_eq!(c.token_ids.len(), 16, "request {i}");
        assert_eq!(c.token_ids, e.token_ids, "request {i}: tokens");
        for (a, b) in c.logprobs.iter().zip(&e.logprobs) {
            assert!((a - b).abs() < 1e-3, "request {i}: logprob {a} vs {b}");
        }
        // each position recorded once, preempted or not
        assert_eq!(c.routing, e.routing, "request {i}: routing");
    }
    let r = got[0].routing.as_ref().unwrap();
    assert!(r.experts.iter().all(|l| l.len() == (20 + 16 - 1) * r.top_k));
}

#[test]
fn a_full_pool_fails_the_request_with_an_error_and_frees_its_blocks() {
    let dir = model_dir();
    // 4 blocks of 8 tokens; a 40-token prompt needs 5
    let dev = Arc::new(on_device(dir.path(), 4, 32, BLOCK));
    let tok = Tokenizer::from_dir(&tiny_model::models_dir().join("tokenizer"))
        .unwrap();
    let mut core = EngineCore::new(dev.clone(), Arc::new(tok), config()).unwrap();
    core.add(Request::new(prompt(6, 40), SamplingParams::greedy(4)))
        .unwrap();
    let done = core.run_to_completion();
    assert_eq!(done.len(), 1);
    match &done[0].1 {
        Err(EngineError::CacheFull(m)) => assert!(m.contains("KV cache full"), "{m}"),
        other => panic!("expected a KV-cache-full error, got {other:?}"),
    }
    assert_eq!(dev.kv_blocks().unwrap(), (4, 4));
    // the engine goes on: a request that fits is served
    core.add(Request::new(prompt(7, 12), SamplingParams::greedy(4)))
        .unwrap();
    let done = core.run_to_completion();
    assert_eq!(done[0].1.as_ref().unwrap().token_ids.len(), 4);
}

fn step<M: DecoderModel>(m: &M, state: &mut M::State, tokens: &[u32]) -> StepOutput {
    let mut batch = [StepInput::new(tokens, state)];
    m.step(&mut batch, false).unwrap().remove(0)
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

#[test]
fn snapshots_share_blocks_and_copy_only_a_written_partial_block() {
    let dir = model_dir();
    let cpu = Model::load(dir.path()).unwrap();
    let dev = on_device(dir.path(), 6, 16 * 16, 16);
    let used = || {
        let (free, total) = dev.kv_blocks().unwrap();
        total - free
    };
    let p = prompt(8, 40); // blocks of 16: two full, one holding 8 tokens
    let (mut a, mut ca) = (dev.new_state(), cpu.new_state());
    let mut outs = vec![(step(&dev, &mut a, &p), step(&cpu, &mut ca, &p))];
    assert_eq!(used(), 3);
    let (snap, csnap) = (a.clone(), ca.clone());
    assert_eq!(used(), 3, "a snapshot allocates nothing");
    // the original moves on: it shares the two full blocks, copies the partial one
    outs.push((
        step(&dev, &mut a, &[5, 6, 7]),
        step(&cpu, &mut ca, &[5, 6, 7]),
    ));
    assert_eq!(used(), 4);
    // the snapshot resumes with other tokens (a clone of it is fed: it shares again)
    let (mut b, mut cb) = (snap.clone(), csnap.clone());
    outs.push((step(&dev, &mut b, &[9, 10]), step(&cpu, &mut cb, &[9, 10])));
    assert_eq!(used(), 5);
    // a's third block fills up and a fourth starts
    let fill: Vec<u32> = (0..10).map(|i| 100 + i).collect();
    outs.push((step(&dev, &mut a, &fill), step(&cpu, &mut ca, &fill)));
    assert_eq!(used(), 6);
    drop((snap, csnap));
    // the snapshot's slot is reclaimed (its partial block goes back, the full ones stay with
    // a and b); b, sole owner of its blocks, is written in place
    outs.push((step(&dev, &mut b, &[12]), step(&cpu, &mut cb, &[12])));
    assert_eq!(used(), 5);
    drop((a, ca));
    assert_eq!(
        used(),
        3,
        "a's own blocks (its copied tail, its fourth) went back"
    );
    for (i, (e, c)) in outs.iter().enumerate() {
        let err = max_abs_diff(&e.logits, &c.logits);
        assert!(err <= 1e-4, "step {i}: max |emulator − cpu| = {err}");
    }
    drop((b, cb));
    assert_eq!(used(), 0);
}
