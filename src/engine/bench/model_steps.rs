//! The model-step benchmark: the CUDA forward driven step by step as the engine drives it —
//! logits left on the device and the next tokens sampled there ([`DeviceSampler`]: only token
//! ids come back, never a logits row), decode steps captured once per batch size and replayed
//! as CUDA graphs — without the scheduler, so it isolates the model's own speed. Phases, each
//! against its roofline limit (`model::backend::cuda::perf`): the host cost of empty launches,
//! one long prefill, decode at each batch size (with the captured step replayed alone: its
//! device time, so a step's host share shows), and the MoE layer alone.

use super::record::{DeviceProbe, PhaseLog, PhaseResult};
use crate::engine::device_sampling::DeviceSampler;
use crate::model::backend::cuda::perf::{self, Roofline, Step};
use crate::model::backend::cuda::{CacheConfig, CudaModel, CudaState};
use crate::tensor::cuda::ops::SampleRow;
use crate::tensor::cuda::{Act, Gpu};
use crate::tensor::device::{DeviceError, KernelArg, LaunchDims};
use serde::Serialize;
use serde_json::{json, Value};
use std::time::Instant;

/// The sizes of the model-step benchmark.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepPlan {
    /// Prompt tokens of the prefill phase (one sequence, one step).
    pub prefill_tokens: usize,
    /// Sequences decoding at once, one phase each.
    pub batches: Vec<usize>,
    /// Tokens each decoding sequence holds before its timed steps.
    pub decode_prompt: usize,
    /// Timed decode steps per batch size.
    pub decode_steps: usize,
    /// Replays of the captured decode step timed alone.
    pub replays: usize,
    /// Tokens of the MoE-layer phase, and its timed repetitions.
    pub moe_tokens: usize,
    pub moe_reps: usize,
    /// Empty kernel launches timed from the host.
    pub empty_launches: usize,
    /// Bytes per stored weight/activation (2 = bf16, 4 = f32), for the roofline.
    pub act_bytes: usize,
}

impl StepPlan {
    /// The H200 run at the Qwen3.5-35B-A3B shape.
    pub fn full() -> Self {
        StepPlan {
            prefill_tokens: 4096,
            batches: vec![1, 64, 256],
            decode_prompt: 128,
            decode_steps: 32,
            replays: 32,
            moe_tokens: 4096,
            moe_reps: 5,
            empty_launches: 1000,
            act_bytes: 2,
        }
    }

    /// Every phase at a few tokens (the emulator in CI).
    pub fn tiny() -> Self {
        StepPlan {
            prefill_tokens: 24,
            batches: vec![1, 3],
            decode_prompt: 6,
            decode_steps: 3,
            replays: 2,
            moe_tokens: 16,
            moe_reps: 1,
            empty_launches: 1000,
            act_bytes: 4,
        }
    }

    fn max_batch(&self) -> usize {
        self.batches.iter().copied().max().unwrap_or(1)
    }

    /// Most tokens one step forwards.
    fn step_tokens(&self) -> usize {
        self.prefill_tokens
            .max(self.moe_tokens)
            .max(self.max_batch())
    }

    /// Tokens a decoding sequence reaches (its prompt, the captured step, the timed steps).
    fn decode_len(&self) -> usize {
        self.decode_prompt + self.decode_steps + 2
    }

    /// Caches for the largest phase: a slot per decoding sequence, KV blocks for the prefill
    /// or for every decoding sequence, whichever is more.
    pub fn cache(&self) -> CacheConfig {
        let block = CacheConfig::BLOCK_SIZE;
        CacheConfig {
            slots: self.max_batch(),
            max_len: (self.prefill_tokens + 1).max(self.decode_len()),
            kv_tokens: (self.prefill_tokens + 2 * block)
                .max(self.max_batch() * (self.decode_len() + 2 * block)),
            block_size: block,
        }
    }
}

/// A greedy draw (the kernel's argmax).
const GREEDY: SampleRow = SampleRow {
    temperature: 0.0,
    top_k: 0,
    top_p: 1.0,
    u: 0.0,
};

/// Roofline seconds of one forward step.
fn limit_s(c: &crate::model::config::ModelConfig, s: Step, a: usize, hw: &Roofline) -> f64 {
    perf::totals(&perf::step(c, s, a), hw).limit_s
}

/// Run every phase of `plan` on `model` into `log`; a failed phase is recorded and the next
/// one runs (a phase that needs the caches is skipped when they could not be allocated).
pub fn model_steps<A: Act>(
    probe: &DeviceProbe,
    model: &CudaModel<A>,
    plan: &StepPlan,
    hw: &Roofline,
    log: &mut PhaseLog,
) {
    let gpu = probe.gpu();
    log.set("plan", plan);
    log.set("roofline_device", hw.name);
    log.phase("empty_launches", probe, || {
        launch_overhead(gpu, plan.empty_launches)
    });
    let mut caches = None;
    log.phase("allocate_caches", probe, || {
        let cache = plan.cache();
        let st = CudaState::<A>::with_cache(gpu, &model.cfg, cache, plan.step_tokens())?;
        let sampler = DeviceSampler::new(gpu, cache.slots)?;
        caches = Some((st, sampler));
        Ok(
            json!({"slots": cache.slots, "max_len": cache.max_len, "kv_tokens": cache.kv_tokens,
                  "max_tokens": plan.step_tokens()}),
        )
    });
    let Some((mut st, mut sampler)) = caches else {
        for name in phase_names(plan) {
            log.skip(&name, "the caches could not be allocated");
        }
        return;
    };
    st.use_graphs(true);
    let mut m = Steps {
        gpu,
        model,
        st: &mut st,
        sampler: &mut sampler,
        plan,
        hw,
    };
    let names = phase_names(plan);
    log.phase(&names[0], probe, || m.prefill());
    for (name, &b) in names[1..].iter().zip(&plan.batches) {
        log.phase(name, probe, || m.decode(b));
    }
    log.phase(&names[names.len() - 1], probe, || m.moe_layer());
    let summary: serde_json::Map<String, Value> = names
        .iter()
        .filter_map(|n| {
            let r = log.result(n)?;
            let keys = ["unit", "measured", "limit", "fraction_of_limit"];
            Some((
                n.clone(),
                keys.iter().map(|k| (k.to_string(), r[k].clone())).collect(),
            ))
        })
        .collect();
    log.set("summary", summary);
}

/// The measured phases of a plan after the set-up ones, in the order run.
pub fn phase_names(plan: &StepPlan) -> Vec<String> {
    let mut v = vec![format!("prefill_{}", plan.prefill_tokens)];
    v.extend(plan.batches.iter().map(|b| format!("decode_{b}")));
    v.push(format!("moe_layer_{}", plan.moe_tokens));
    v
}

struct Steps<'a, A: Act> {
    gpu: &'a Gpu,
    model: &'a CudaModel<A>,
    st: &'a mut CudaState<A>,
    sampler: &'a mut DeviceSampler,
    plan: &'a StepPlan,
    hw: &'a Roofline,
}

impl<A: Act> Steps<'_, A> {
    /// Prompt ids spread over the vocabulary.
    fn prompt(&self, seed: usize, len: usize) -> Vec<u32> {
        let span = self.model.cfg.vocab_size.min(990).max(1);
        (0..len)
            .map(|i| ((i * 7919 + seed * 104_729 + 1) % span) as u32)
            .collect()
    }

    /// One step as the engine runs it: the forward, greedy sampling on the device, the token
    /// ids (and nothing else) back to the host.
    fn step(&mut self, seqs: &[(usize, &[u32])]) -> PhaseResult<Vec<u32>> {
        let rows = self.model.forward_last_on_device(self.gpu, self.st, seqs)?;
        let v = self.model.cfg.vocab_size;
        let sampled =
            self.sampler
                .sample(self.gpu, self.st.logits(), v, &vec![Some(GREEDY); rows])?;
        sampled
            .into_iter()
            .map(|s| {
                s.map(|s| s.token)
                    .ok_or_else(|| "a greedy row was not drawn on the device".into())
            })
            .collect()
    }

    /// Feed each slot `0..prompts.len()` its prompt, at most a step's tokens per call; the
    /// next token of each.
    fn prime(&mut self, prompts: &[Vec<u32>]) -> PhaseResult<Vec<u32>> {
        let cap = self.plan.step_tokens();
        let mut next = Vec::with_capacity(prompts.len());
        let mut i = 0;
        while i < prompts.len() {
            let mut batch: Vec<(usize, &[u32])> = vec![];
            let mut tokens = 0;
            while i < prompts.len() && (batch.is_empty() || tokens + prompts[i].len() <= cap) {
                tokens += prompts[i].len();
                batch.push((i, &prompts[i]));
                i += 1;
            }
            next.extend(self.step(&batch)?);
        }
        Ok(next)
    }

    fn reset(&mut self, slots: usize) -> PhaseResult<()> {
        for s in 0..slots {
            self.st.reset_slot(self.gpu, s)?;
        }
        Ok(())
    }

    /// One prompt of `prefill_tokens` read in one step (after a short warm-up prefill and
    /// decode step: module loads, GEMM algorithm choices), timed to its first token.
    fn prefill(&mut self) -> PhaseResult<Value> {
        let n = self.plan.prefill_tokens;
        let warm = self.prime(&[self.prompt(0, n.min(256))])?;
        self.step(&[(0, &warm)])?;
        self.reset(1)?;
        let ids = self.prompt(7, n);
        let t = Instant::now();
        self.step(&[(0, &ids)])?;
        let seconds = t.elapsed().as_secs_f64();
        self.reset(1)?;
        let limit = n as f64
            / limit_s(
                &self.model.cfg,
                Step::Prefill { tokens: n },
                self.plan.act_bytes,
                self.hw,
            );
        let tok_s = n as f64 / seconds;
        Ok(
            json!({"unit": "prefill tok/s", "tokens": n, "seconds": seconds, "measured": tok_s,
                  "limit": limit, "fraction_of_limit": tok_s / limit}),
        )
    }

    /// `b` sequences decoding: primed with `decode_prompt` tokens each, one step captured as a
    /// graph (its launches counted), `decode_steps` timed steps (a step whose block table
    /// grows is captured again, so the median step is the figure), then the captured step
    /// replayed alone `replays` times.
    fn decode(&mut self, b: usize) -> PhaseResult<Value> {
        let p = self.plan;
        let prompts: Vec<Vec<u32>> = (0..b)
            .map(|i| self.prompt(i + 1, p.decode_prompt))
            .collect();
        let mut next = self.prime(&prompts)?;
        // the first decode step of this batch size is captured (and then launched) as a graph
        let before = self.gpu.op_counts();
        let t = Instant::now();
        next = self.decode_step(&next)?;
        let first_step_s = t.elapsed().as_secs_f64();
        let step_ops = self.gpu.op_counts().since(before);
        let before = (self.gpu.op_counts(), self.gpu.graph_launches());
        let mut times = Vec::with_capacity(p.decode_steps);
        for _ in 0..p.decode_steps {
            let t = Instant::now();
            next = self.decode_step(&next)?;
            times.push(t.elapsed().as_secs_f64());
        }
        let ops = self.gpu.op_counts().since(before.0);
        let graph_launches = self.gpu.graph_launches() - before.1;
        let graph = self.st.decode_graph(b);
        let replay_s = match graph.filter(|_| p.replays > 0) {
            Some(id) => {
                self.gpu.sync()?;
                let t = Instant::now();
                for _ in 0..p.replays {
                    self.gpu.launch_graph(id)?;
                }
                self.gpu.sync()?;
                Some(t.elapsed().as_secs_f64() / p.replays as f64)
            }
            None => None,
        };
        self.reset(b)?;
        let steps = times.len().max(1) as f64;
        let seconds: f64 = times.iter().sum();
        times.sort_by(f64::total_cmp);
        let step_s = times.get(times.len() / 2).copied().unwrap_or(first_step_s);
        let context = p.decode_prompt + 1 + p.decode_steps / 2;
        let step_limit = limit_s(
            &self.model.cfg,
            Step::Decode { batch: b, context },
            p.act_bytes,
            self.hw,
        );
        let tok_s = b as f64 / step_s;
        let per = |x: u64| x as f64 / steps;
        Ok(json!({
            "unit": "output tok/s", "batch": b, "context": context, "timed_steps": times.len(),
            "seconds": seconds, "step_ms_median": step_s * 1e3, "step_ms_mean": seconds / steps * 1e3,
            "measured": tok_s, "limit": b as f64 / step_limit, "fraction_of_limit": step_limit / step_s,
            "step_limit_ms": step_limit * 1e3,
            "graph_captured": graph.is_some(),
            "first_step_s": first_step_s,
            "launches_per_step": {"kernels": step_ops.launches, "gemms": step_ops.gemms,
                                  "memsets": step_ops.memsets, "total": step_ops.total()},
            "enqueued_per_timed_step": {"kernels": per(ops.launches), "gemms": per(ops.gemms),
                                        "memsets": per(ops.memsets), "graph_launches": per(graph_launches)},
            "replay_ms": replay_s.map(|s| s * 1e3),
            "replay_fraction_of_limit": replay_s.map(|s| step_limit / s),
            // the share of a step the device is not busy with the step's own work
            "host_share": replay_s.map(|r| (1.0 - r / step_s).max(0.0)),
        }))
    }

    /// One decode step of slots `0..next.len()`, each fed its token in `next`.
    fn decode_step(&mut self, next: &[u32]) -> PhaseResult<Vec<u32>> {
        let toks: Vec<[u32; 1]> = next.iter().map(|&t| [t]).collect();
        let seqs: Vec<(usize, &[u32])> =
            toks.iter().enumerate().map(|(s, t)| (s, &t[..])).collect();
        self.step(&seqs)
    }

    fn moe_layer(&mut self) -> PhaseResult<Value> {
        let p = self.plan;
        moe_layer(
            self.gpu,
            self.model,
            self.st,
            p.moe_tokens,
            p.moe_reps,
            p.act_bytes,
            self.hw,
        )
    }
}

/// The MoE layer of layer 0 alone on `tokens` rows of `st`'s scratch (after one warm-up run),
/// `reps` times: its seconds against the roofline (`act_bytes` per stored element).
pub fn moe_layer<A: Act>(
    gpu: &Gpu,
    model: &CudaModel<A>,
    st: &mut CudaState<A>,
    tokens: usize,
    reps: usize,
    act_bytes: usize,
    hw: &Roofline,
) -> PhaseResult<Value> {
    let reps = reps.max(1);
    model.moe_layer_only(gpu, st, 0, tokens)?;
    gpu.sync()?;
    let t0 = Instant::now();
    for _ in 0..reps {
        model.moe_layer_only(gpu, st, 0, tokens)?;
    }
    gpu.sync()?;
    let seconds = t0.elapsed().as_secs_f64() / reps as f64;
    let tot = perf::totals(&perf::moe_layer(&model.cfg, tokens, act_bytes), hw);
    Ok(json!({
        "unit": "seconds", "tokens": tokens, "measured": seconds, "limit": tot.limit_s,
        "fraction_of_limit": tot.limit_s / seconds, "ms": seconds * 1e3,
        "tflop_s": tot.flops / seconds / 1e12, "peak_fraction": tot.flops / seconds / hw.flops_s,
        "gb_s": tot.bytes / seconds / 1e9,
    }))
}

/// The host cost of `n` empty launches (a one-warp kernel with nothing to do): enqueueing them,
/// and with the device's completion; then the same launches captured as one graph and
/// replayed (their cost without the host), where the device has graphs.
pub fn launch_overhead(gpu: &Gpu, n: usize) -> PhaseResult<Value> {
    let n = n.max(1);
    let buf = gpu.zeros::<f32>(1)?;
    let kernel = <f32 as Act>::kernel("fill_f32");
    let dims = LaunchDims {
        grid: (1, 1, 1),
        block: (32, 1, 1),
        shared_bytes: 0,
    };
    let args = [
        KernelArg::Ptr(buf.ptr()),
        KernelArg::I64(0),
        KernelArg::F32(0.0),
    ];
    let launch = || gpu.launch(&kernel, dims, &args);
    launch()?;
    gpu.sync()?;
    let t = Instant::now();
    for _ in 0..n {
        launch()?;
    }
    let enqueue_s = t.elapsed().as_secs_f64();
    gpu.sync()?;
    let total_s = t.elapsed().as_secs_f64();
    let graph_s = match gpu.begin_capture() {
        Err(DeviceError::Unsupported(_)) => None,
        Err(e) => return Err(e.into()),
        Ok(()) => {
            let recorded = (0..n).try_for_each(|_| launch());
            let id = gpu.end_capture();
            let id = match (recorded, id) {
                (Ok(()), Ok(id)) => id,
                (recorded, id) => {
                    if let Ok(id) = id {
                        gpu.drop_graph(id);
                    }
                    recorded?;
                    return Err("capturing the empty launches produced no graph".into());
                }
            };
            let timed = (|| -> PhaseResult<f64> {
                gpu.launch_graph(id)?;
                gpu.sync()?;
                let t = Instant::now();
                gpu.launch_graph(id)?;
                gpu.sync()?;
                Ok(t.elapsed().as_secs_f64())
            })();
            gpu.drop_graph(id);
            Some(timed?)
        }
    };
    Ok(json!({
        "launches": n, "kernel": kernel,
        "host_enqueue_s": enqueue_s, "host_us_per_launch": enqueue_s / n as f64 * 1e6,
        "with_sync_s": total_s, "us_per_launch_with_sync": total_s / n as f64 * 1e6,
        "graph_replay_s": graph_s, "graph_us_per_launch": graph_s.map(|s| s / n as f64 * 1e6),
    }))
}
