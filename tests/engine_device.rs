//! The decode step on the device: the engine driving the CUDA backend on the emulated device
//! (f32 storage, tiny Qwen3.5-MoE fixture) samples every token on the device with the request's
//! own random stream, and gives the CPU engine's results — seeded sampling at temperature 1 with
//! and without top-k/top-p picks the same tokens with the same log-probabilities, continuous
//! batching with sequences joining and leaving mid-decode gives the same completions, routing
//! records and top log-probabilities — while a plain decode copies no logits to the host
//! (`EngineStats::logits_bytes_to_host`), and a steady-state decode step allocates nothing on
//! the device (its index arrays go into persistent buffers), and decode steps replayed as CUDA
//! graphs give the direct steps' results bit for bit. The run-time switches `graphs` and
//! `device-sampling` (`tensor::cuda::switches`) give the same completions.

use execcritic::engine::cuda_backend::CudaDecoder;
use execcritic::engine::{
    Completion, DecoderModel, EngineConfig, EngineCore, EngineStats, Request, SamplingParams,
    SchedulerConfig,
};
use execcritic::model::backend::cuda::CudaModel;
use execcritic::model::tokenizer::Tokenizer;
use execcritic::model::Model;
use execcritic::tensor::cuda::{Gpu, Switches};
use std::path::Path;
use std::sync::Arc;

#[path = "common/tiny_model.rs"]
mod tiny_model;
use tiny_model::tiny_model_dir;

const VOCAB: usize = 1024;

fn config(max_running: usize, max_batch_tokens: usize, prefill_chunk: usize) -> EngineConfig {
    EngineConfig {
        scheduler: SchedulerConfig {
            max_running,
            max_batch_tokens,
            prefill_chunk,
        },
        max_conversations: 0,
    }
}

/// Run `requests` to completion on `core`: the completions in submission order and the stats.
fn run<M: DecoderModel>(
    core: &mut EngineCore<M>,
    requests: &[Request],
) -> (Vec<Completion>, EngineStats) {
    let ids: Vec<u64> = requests
        .iter()
        .map(|r| core.add(r.clone()).unwrap())
        .collect();
    let mut done = core.run_to_completion();
    done.sort_by_key(|(id, _)| ids.iter().position(|i| i == id));
    let out = done.into_iter().map(|(_, c)| c.unwrap()).collect();
    (out, core.stats())
}

/// The same requests on the CPU engine and on the emulated device.
fn both(
    dir: &Path,
    cfg: EngineConfig,
    requests: &[Request],
) -> [(Vec<Completion>, EngineStats); 2] {
    let tok = Arc::new(Tokenizer::from_dir(dir).unwrap());
    let mut cpu = EngineCore::new(Arc::new(Model::load(dir).unwrap()), tok, cfg).unwrap();
    [run(&mut cpu, requests), on_emulator(dir, cfg, requests, Switches::default())]
}

/// The requests on the emulated device with `switches`.
fn on_emulator(dir: &Path, cfg: EngineConfig, requests: &[Request], switches: Switches) -> (Vec<Completion>, EngineStats) {
    let tok = Arc::new(Tokenizer::from_dir(dir).unwrap());
    let gpu = Gpu::emulator().unwrap().with_switches(switches);
    let model = CudaModel::<f32>::load(&gpu, dir).unwrap();
    let slots = cfg.scheduler.max_running;
    let decoder = CudaDecoder::new(gpu, model, slots, 256, cfg.scheduler.max_batch_tokens).unwrap();
    run(&mut EngineCore::new(Arc::new(decoder), tok, cfg).unwrap(), requests)
}

fn close(what: &str, a: &[f32], b: &[f32], tol: f32) {
    assert_eq!(a.len(), b.len(), "{what}: lengths");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!((x - y).abs() <= tol, "{what}[{i}]: cpu {x} vs device {y}");
    }
}

/// Same tokens, routing and top-alternative ids; log-probabilities and logits within 1e-3.
fn same_completions(cpu: &[Completion], dev: &[Completion]) {
    assert_eq!(cpu.len(), dev.len());
    for (i, (c, d)) in cpu.iter().zip(dev).enumerate() {
        assert_eq!(c.token_ids, d.token_ids, "request {i}: tokens");
        assert_eq!(c.finish, d.finish, "request {i}");
        assert_eq!(c.routing, d.routing, "request {i}: routing");
        close(
            &format!("request {i} logprobs"),
            &c.logprobs,
            &d.logprobs,
            1e-3,
        );
        close(
            &format!("request {i} sampling logprobs"),
            &c.sampling_logprobs,
            &d.sampling_logprobs,
            1e-3,
        );
        assert_eq!(c.top_logprobs.len(), d.top_logprobs.len(), "request {i}");
        for (a, b) in c.top_logprobs.iter().zip(&d.top_logprobs) {
            let ids = |x: &[(u32, f32)]| x.iter().map(|p| p.0).collect::<Vec<_>>();
            let lps = |x: &[(u32, f32)]| x.iter().map(|p| p.1).collect::<Vec<_>>();
            assert_eq!(ids(a), ids(b), "request {i}: top alternatives");
            close(&format!("request {i} top logprobs"), &lps(a), &lps(b), 1e-3);
        }
        assert_eq!(c.logits.len(), d.logits.len(), "request {i}: logits rows");
        for (a, b) in c.logits.iter().zip(&d.logits) {
            close(&format!("request {i} logits"), a, b, 1e-4);
        }
    }
}

fn prompt(seed: u32, len: usize) -> Vec<u32> {
    (0..len as u32)
        .map(|i| (i * 37 + seed * 101 + 11) % 990)
        .collect()
}

fn request(seed: u32, len: usize, sampling: SamplingParams) -> Request {
    Request {
        ignore_eos: true,
        ..Request::new(prompt(seed, len), sampling)
    }
}

fn sampled(
    temperature: f32,
    top_k: usize,
    top_p: f32,
    seed: u64,
    max_tokens: usize,
) -> SamplingParams {
    SamplingParams {
        temperature,
        top_k,
        top_p,
        seed: Some(seed),
        max_tokens,
        ..Default::default()
    }
}

#[test]
fn seeded_sampling_on_the_device_picks_the_cpu_tokens() {
    let dir = tiny_model_dir();
    let requests = [
        request(1, 9, sampled(1.0, 0, 1.0, 3, 24)), // whole vocabulary
        request(2, 9, sampled(1.0, 20, 1.0, 4, 24)), // top-k
        request(3, 9, sampled(1.0, 0, 0.5, 5, 6)),  // nucleus (hundreds of candidates here)
        request(4, 9, sampled(1.0, 40, 0.8, 6, 24)), // top-p over the top-k
        request(5, 9, sampled(0.7, 0, 1.0, 7, 24)), // another temperature
        request(6, 9, SamplingParams::greedy(24)),
    ];
    let [(cpu, cpu_stats), (dev, dev_stats)] = both(dir.path(), config(8, 128, 64), &requests);
    same_completions(&cpu, &dev);
    // the draws are not all greedy: the sampled tokens differ from the argmax somewhere
    assert!(dev[0].sampling_logprobs.iter().any(|&l| l < -1.0));
    // a plain decode copies no logits to the host; the CPU model hands over its rows
    assert_eq!(
        dev_stats.steps, 24,
        "one prefill step, then one decode step per token"
    );
    assert_eq!(dev_stats.logits_bytes_to_host, 0, "{dev_stats:?}");
    assert!(cpu_stats.logits_bytes_to_host > 0);
    assert_eq!(
        (cpu_stats.prefilled_tokens, cpu_stats.decoded_tokens),
        (dev_stats.prefilled_tokens, dev_stats.decoded_tokens)
    );
    // `EXECCRITIC_CUDA_DISABLE=device-sampling`: every row drawn on the host from its logits,
    // with the same draws: the same completions
    let no_sampling = Switches { device_sampling: false, ..Switches::default() };
    let (host, host_stats) = on_emulator(dir.path(), config(8, 128, 64), &requests, no_sampling);
    same_completions(&cpu, &host);
    let tokens: usize = host.iter().map(|c| c.token_ids.len()).sum();
    assert_eq!(host_stats.logits_bytes_to_host, (tokens * VOCAB * 4) as u64, "one row per token: {host_stats:?}");
}

#[test]
fn continuous_batching_on_the_device_equals_the_cpu_engine() {
    let dir = tiny_model_dir();
    // Two running at a time, long prompts read in chunks of 16 while the others decode: the
    // later requests join as the earlier ones leave mid-decode.
    let routed = |r: Request| r.with_routing();
    let top = |mut r: Request| {
        r.top_logprobs = 3;
        r
    };
    let requests = [
        routed(request(1, 30, sampled(1.0, 0, 1.0, 11, 10))),
        request(2, 5, SamplingParams::greedy(4)),
        top(routed(request(3, 50, sampled(1.0, 30, 0.9, 12, 12)))),
        request(4, 12, sampled(0.8, 0, 1.0, 13, 7)).with_logits(),
        routed(request(5, 3, SamplingParams::greedy(9))),
    ];
    let [(cpu, _), (dev, dev_stats)] = both(dir.path(), config(2, 40, 16), &requests);
    same_completions(&cpu, &dev);
    assert_eq!(dev[2].top_logprobs.len(), 12);
    let r = dev[0].routing.as_ref().unwrap();
    assert_eq!((r.start, r.experts.len()), (0, 4));
    assert!(r.experts.iter().all(|l| l.len() == (30 + 10 - 1) * r.top_k));
    // only the rows asked for were copied: one per sampled token of requests 2 and 3
    let rows = (dev[2].token_ids.len() + dev[3].token_ids.len()) as u64;
    assert_eq!(dev_stats.logits_bytes_to_host, rows * VOCAB as u64 * 4);
}

#[test]
fn steady_state_decode_steps_allocate_nothing_on_the_device() {
    let dir = tiny_model_dir();
    let tok = Arc::new(Tokenizer::from_dir(dir.path()).unwrap());
    let gpu = Gpu::emulator().unwrap();
    let model = CudaModel::<f32>::load(&gpu, dir.path()).unwrap();
    let decoder = CudaDecoder::new(gpu.clone(), model, 2, 256, 64).unwrap();
    let mut core = EngineCore::new(Arc::new(decoder), tok, config(2, 64, 32)).unwrap();
    core.add(request(1, 12, SamplingParams::greedy(12))).unwrap();
    core.add(request(2, 7, sampled(1.0, 20, 0.9, 5, 12))).unwrap();
    // one step reads both prompts, the next ones decode
    core.step();
    let (allocs, ops) = (gpu.allocations(), gpu.op_counts());
    for _ in 0..6 {
        assert!(core.step().is_empty(), "nothing finishes yet");
    }
    let work = gpu.op_counts().since(ops);
    assert!(work.launches > 0 && work.gemms > 0, "{work:?}");
    assert_eq!(
        gpu.allocations(),
        allocs,
        "decode steps allocated device memory"
    );
    let done = core.run_to_completion();
    assert_eq!(done.len(), 2);
    assert!(done.iter().all(|(_, c)| c.as_ref().unwrap().token_ids.len() == 12));
}

#[test]
fn decode_steps_replayed_as_cuda_graphs_equal_direct_steps_and_the_cpu_engine() {
    let dir = tiny_model_dir();
    // four at a time, ending at different lengths (a fifth joins): decode batches of 4, 3, 2, 1
    let requests = [
        request(1, 9, sampled(1.0, 20, 0.9, 3, 6)),
        request(2, 5, SamplingParams::greedy(10)),
        request(3, 7, sampled(1.0, 0, 1.0, 4, 14)),
        request(4, 11, sampled(0.7, 0, 1.0, 5, 20)),
        request(5, 4, SamplingParams::greedy(24)),
    ];
    let cfg = config(4, 64, 32);
    let tok = Arc::new(Tokenizer::from_dir(dir.path()).unwrap());
    let cpu_model = Arc::new(Model::load(dir.path()).unwrap());
    let (cpu, _) = run(
        &mut EngineCore::new(cpu_model, tok.clone(), cfg).unwrap(),
        &requests,
    );
    // graphs off by the run-time switch (`EXECCRITIC_CUDA_DISABLE=graphs`): the decoder asks
    // for graphs either way
    let on_device = |graphs: bool| {
        let gpu = Gpu::emulator().unwrap().with_switches(Switches { graphs, ..Switches::default() });
        let model = CudaModel::<f32>::load(&gpu, dir.path()).unwrap();
        let decoder = Arc::new(CudaDecoder::new(gpu.clone(), model, 4, 256, 64).unwrap());
        decoder.use_graphs(true).unwrap();
        let mut core = EngineCore::new(decoder.clone(), tok.clone(), cfg).unwrap();
        let (out, _) = run(&mut core, &requests);
        (out, gpu.graph_launches(), decoder.decode_graphs().unwrap())
    };
    let (direct, direct_launches, direct_graphs) = on_device(false);
    assert_eq!((direct_launches, direct_graphs), (0, 0));
    let (graphed, launches, kept) = on_device(true);
    same_completions(&cpu, &graphed);
    for (d, g) in direct.iter().zip(&graphed) {
        assert_eq!(d.token_ids, g.token_ids);
        assert_eq!(d.logprobs, g.logprobs, "the same kernels on the same data");
    }
    // one graph kept per batch size (4, 3, 2, 1), each replayed after its capture
    assert_eq!(kept, 4, "graphs kept");
    assert!(launches > 2 * kept as u64, "{launches} graph launches");
}
