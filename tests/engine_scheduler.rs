//! The engine's scheduling, batching, stop rules, routing records and conversation resume,
//! driven by a small deterministic test model whose logits are a pure function of the tokens a
//! sequence has consumed — so any batching or caching mistake changes the tokens or logits — and
//! a variant that samples its tokens itself, as a device backend does, and one with a bounded
//! cache (preemption, conversation eviction, a request too long to fit alone).

use execcritic::engine::scheduler::{plan, Pending};
use execcritic::engine::{
    Completion, DecoderModel, Engine, EngineConfig, EngineCore, EngineError, FinishReason, Request,
    Sampler, SamplingParams, SchedulerConfig, StepInput, StepOutput, Want,
};
use execcritic::model::tokenizer::Tokenizer;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

const VOCAB: usize = 1024;
const LAYERS: usize = 3;
const TOP_K: usize = 2;

/// Logits: pseudo-random noise keyed by the whole history, plus a bonus for `last + 1` (mod 1001),
/// so greedy decoding counts upwards (through `<|im_end|>` = 1000). Experts of a token: a function of (layer, position, token).
#[derive(Default)]
struct CountingModel {
    forwarded: AtomicUsize,
    max_batch: AtomicUsize,
    steps: AtomicUsize,
}

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e3779b97f4a7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d049bb133111eb);
    x ^ (x >> 31)
}

fn experts(layer: usize, pos: usize, token: u32) -> [u32; TOP_K] {
    let h = mix((layer * 1_000_003 + pos * 7919) as u64 ^ token as u64);
    [(h % 16) as u32, 16 + (h >> 8) as u32 % 16]
}

impl DecoderModel for CountingModel {
    type State = Vec<u32>;
    fn new_state(&self) -> Vec<u32> {
        Vec::new()
    }
    fn vocab_size(&self) -> usize {
        VOCAB
    }
    fn experts_per_token(&self) -> usize {
        TOP_K
    }
    fn step(
        &self,
        batch: &mut [StepInput<'_, Vec<u32>>],
        routing: bool,
    ) -> Result<Vec<StepOutput>, EngineError> {
        self.steps.fetch_add(1, Ordering::SeqCst);
        self.max_batch.fetch_max(batch.len(), Ordering::SeqCst);
        let mut out = Vec::new();
        for s in batch.iter_mut() {
            let start = s.state.len();
            s.state.extend_from_slice(s.tokens);
            self.forwarded.fetch_add(s.tokens.len(), Ordering::SeqCst);
            let h = s.state.iter().fold(17u64, |h, &t| mix(h ^ t as u64));
            let last = *s.state.last().unwrap() as usize;
            let logits = (0..VOCAB)
                .map(|v| {
                    let noise = (mix(h ^ v as u64) >> 40) as f32 / (1u64 << 24) as f32;
                    noise + if v == (last + 1) % 1001 { 3.0 } else { 0.0 }
                })
                .collect();
            let experts = routing.then(|| {
                (0..LAYERS)
                    .map(|l| {
                        (0..s.tokens.len())
                            .flat_map(|i| experts(l, start + i, s.tokens[i]))
                            .collect()
                    })
                    .collect()
            });
            out.push(StepOutput {
                logits,
                experts,
                sampled: None,
            });
        }
        Ok(out)
    }
}

fn tokenizer() -> Tokenizer {
    Tokenizer::from_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("models/tokenizer")).unwrap()
}

fn config(max_running: usize, max_batch_tokens: usize, prefill_chunk: usize) -> EngineConfig {
    EngineConfig {
        scheduler: SchedulerConfig {
            max_running,
            max_batch_tokens,
            prefill_chunk,
        },
        max_conversations: 8,
    }
}

fn core(cfg: EngineConfig) -> EngineCore<CountingModel> {
    EngineCore::new(
        Arc::new(CountingModel::default()),
        Arc::new(tokenizer()),
        cfg,
    )
    .unwrap()
}

fn prompt(seed: u64, len: usize) -> Vec<u32> {
    (0..len as u64)
        .map(|i| (mix(seed * 1000 + i) % 800) as u32)
        .collect()
}

fn requests() -> Vec<Request> {
    vec![
        Request::new(prompt(1, 5), SamplingParams::greedy(12)),
        Request::new(
            prompt(2, 40),
            SamplingParams {
                temperature: 1.0,
                seed: Some(3),
                max_tokens: 20,
                ..Default::default()
            },
        ),
        Request::new(
            prompt(3, 1),
            SamplingParams {
                temperature: 0.8,
                top_k: 5,
                top_p: 0.9,
                seed: Some(4),
                max_tokens: 7,
                ..Default::default()
            },
        ),
        Request::new(
            prompt(4, 17),
            SamplingParams {
                temperature: 1.3,
                seed: Some(5),
                max_tokens: 30,
                ..Default::default()
            },
        ),
    ]
}

fn solo(req: &Request) -> Completion {
    let mut c = core(config(1, 64, 512));
    c.add(req.clone()).unwrap();
    let mut done = c.run_to_completion();
    assert_eq!(done.len(), 1);
    done.pop().unwrap().1.unwrap()
}

fn assert_same(a: &Completion, b: &Completion) {
    assert_eq!(a.token_ids, b.token_ids);
    assert_eq!(a.logprobs, b.logprobs);
    assert_eq!(a.sampling_logprobs, b.sampling_logprobs);
    assert_eq!(a.text, b.text);
    assert_eq!(a.finish, b.finish);
}

fn by_id(mut done: Vec<(u64, Result<Completion, EngineError>)>) -> Vec<Completion> {
    done.sort_by_key(|(id, _)| *id);
    done.into_iter().map(|(_, r)| r.unwrap()).collect()
}

#[test]
fn plan_decodes_first_then_chunks_prefills() {
    let cfg = SchedulerConfig {
        max_running: 8,
        max_batch_tokens: 10,
        prefill_chunk: 4,
    };
    let p = |tokens, prefill| Pending { tokens, prefill };
    let running = [
        p(9, true),
        p(1, false),
        p(3, true),
        p(1, false),
        p(20, true),
    ];
    assert_eq!(
        plan(&running, &cfg),
        vec![(0, 4), (1, 1), (2, 3), (3, 1), (4, 1)]
    );
    let only_prefill = [p(30, true), p(30, true), p(30, true)];
    assert_eq!(plan(&only_prefill, &cfg), vec![(0, 4), (1, 4), (2, 2)]);
    assert_eq!(plan(&[], &cfg), vec![]);
}

#[test]
fn batched_generation_equals_one_at_a_time() {
    let reqs = requests();
    let alone: Vec<Completion> = reqs.iter().map(solo).collect();
    for cfg in [config(8, 512, 512), config(8, 12, 3), config(2, 16, 8)] {
        let mut c = core(cfg);
        for r in &reqs {
            c.add(r.clone()).unwrap();
        }
        let together = by_id(c.run_to_completion());
        for (a, b) in alone.iter().zip(&together) {
            assert_same(a, b);
        }
    }
    assert_eq!(alone[0].finish, FinishReason::Length);
    assert_eq!(alone[0].token_ids.len(), 12);
    // Greedy counts upwards from the last prompt token.
    let last = *reqs[0].prompt.last().unwrap();
    assert_eq!(
        alone[0].token_ids,
        (1..=12).map(|i| (last + i) % 1001).collect::<Vec<_>>()
    );
}

#[test]
fn sequences_join_and_leave_mid_flight() {
    let reqs = requests();
    let alone: Vec<Completion> = reqs.iter().map(solo).collect();
    let mut c = core(config(3, 32, 4));
    let mut done = Vec::new();
    c.add(reqs[0].clone()).unwrap();
    c.add(reqs[2].clone()).unwrap();
    for _ in 0..4 {
        done.extend(c.step());
    }
    assert_eq!(c.running(), 2);
    c.add(reqs[1].clone()).unwrap();
    c.add(reqs[3].clone()).unwrap(); // waits: max_running = 3
    done.extend(c.step());
    assert_eq!(c.running(), 3);
    let mut saw_leave_while_running = false;
    while c.has_work() {
        let finished = c.step();
        saw_leave_while_running |= !finished.is_empty() && c.running() > 0;
        done.extend(finished);
    }
    assert!(saw_leave_while_running);
    let together = by_id(done);
    let order = [0, 2, 1, 3];
    for (k, &i) in order.iter().enumerate() {
        assert_same(&alone[i], &together[k]);
    }
}

#[test]
fn stop_tokens_and_stop_strings() {
    let tok = tokenizer();
    let p = prompt(9, 6);
    let free = solo(&Request::new(p.clone(), SamplingParams::greedy(10))).token_ids;
    // A stop id: generation ends on it, it is returned, its text is not.
    let stop_id = free[4];
    let c = solo(&Request::new(
        p.clone(),
        SamplingParams {
            stop_token_ids: vec![stop_id],
            ..SamplingParams::greedy(10)
        },
    ));
    assert_eq!(c.finish, FinishReason::StopToken(stop_id));
    assert_eq!(c.token_ids, free[..5]);
    assert_eq!(c.logprobs.len(), 5);
    assert_eq!(c.text, tok.decode(&free[..4], false).unwrap());
    // A stop string: the text is cut before it; tokens end with the one that completed it.
    let full = tok.decode(&free, false).unwrap();
    let upto5 = tok.decode(&free[..5], false).unwrap();
    let upto6 = tok.decode(&free[..6], false).unwrap();
    let stop = upto6[upto5.len()..].to_string();
    assert!(
        !stop.is_empty() && !upto5.contains(&stop),
        "pick another prompt: {full:?}"
    );
    let c = solo(&Request::new(
        p,
        SamplingParams {
            stop: vec![stop.clone(), "\u{1F600}".into()],
            ..SamplingParams::greedy(10)
        },
    ));
    assert_eq!(c.finish, FinishReason::StopString(stop));
    assert_eq!(c.token_ids, free[..6]);
    assert_eq!(c.text, upto5);
}

#[test]
fn routing_record_covers_forwarded_tokens() {
    let p = prompt(5, 9);
    let mut c = core(config(4, 64, 4));
    c.add(Request::new(p.clone(), SamplingParams::greedy(5)).with_routing())
        .unwrap();
    c.add(Request::new(prompt(6, 3), SamplingParams::greedy(5)))
        .unwrap();
    let done = by_id(c.run_to_completion());
    let rec = done[0].routing.as_ref().unwrap();
    assert!(done[1].routing.is_none());
    assert_eq!(
        (rec.start, rec.top_k, rec.experts.len()),
        (0, TOP_K, LAYERS)
    );
    let fed: Vec<u32> = p.iter().chain(&done[0].token_ids[..4]).copied().collect();
    for (l, layer) in rec.experts.iter().enumerate() {
        let expected: Vec<u32> = fed
            .iter()
            .enumerate()
            .flat_map(|(pos, &t)| experts(l, pos, t))
            .collect();
        assert_eq!(layer, &expected);
    }
}

#[test]
fn resumed_conversation_equals_fresh_prefill() {
    let model = Arc::new(CountingModel::default());
    let mut c = EngineCore::new(model.clone(), Arc::new(tokenizer()), config(4, 64, 8)).unwrap();
    let sampling = SamplingParams {
        temperature: 1.0,
        seed: Some(11),
        max_tokens: 9,
        ..Default::default()
    };
    let turn1 = prompt(7, 21);
    c.add(Request::new(turn1.clone(), sampling.clone()).in_conversation("c"))
        .unwrap();
    let first = by_id(c.run_to_completion()).remove(0);
    assert_eq!(first.cached_tokens, 0);

    // Next turn: the whole conversation so far (sampled tokens as generated) + a new observation.
    let observation = prompt(8, 13);
    let turn2: Vec<u32> = turn1
        .iter()
        .chain(&first.token_ids)
        .chain(&observation)
        .copied()
        .collect();
    let before = model.forwarded.load(Ordering::SeqCst);
    c.add(
        Request::new(turn2.clone(), sampling.clone())
            .in_conversation("c")
            .with_logits(),
    )
    .unwrap();
    let resumed = by_id(c.run_to_completion()).remove(0);
    let read = model.forwarded.load(Ordering::SeqCst) - before;
    assert_eq!(
        resumed.cached_tokens,
        turn1.len() + first.token_ids.len() - 1
    );
    // Only the suffix (last sampled token + observation) and the decode steps were forwarded.
    assert_eq!(read, 1 + observation.len() + resumed.token_ids.len() - 1);
    let fresh = solo(&Request::new(turn2.clone(), sampling.clone()).with_logits());
    assert_same(&resumed, &fresh);
    assert_eq!(resumed.logits, fresh.logits);

    // The re-rendered assistant turn differs from the sampled tokens: the engine rolls back to
    // the turn-boundary snapshot (end of turn-2 prompt), never to a state that is not a prefix.
    let rewritten: Vec<u32> = turn2
        .iter()
        .chain(&[5, 6, 7])
        .chain(&observation)
        .copied()
        .collect();
    c.add(
        Request::new(rewritten.clone(), sampling.clone())
            .in_conversation("c")
            .with_logits(),
    )
    .unwrap();
    let rolled = by_id(c.run_to_completion()).remove(0);
    assert_eq!(rolled.cached_tokens, turn2.len());
    let fresh = solo(&Request::new(rewritten, sampling.clone()).with_logits());
    assert_same(&rolled, &fresh);
    assert_eq!(rolled.logits, fresh.logits);

    // A prompt that shares nothing is prefilled from scratch; a forgotten conversation too.
    c.add(Request::new(prompt(99, 5), sampling.clone()).in_conversation("c"))
        .unwrap();
    assert_eq!(by_id(c.run_to_completion())[0].cached_tokens, 0);
    c.forget_conversation("c");
    assert_eq!(c.cached_conversations(), 0);
}

#[test]
fn conversation_cache_is_bounded() {
    let mut c = core(config(4, 64, 8));
    for i in 0..12 {
        c.add(
            Request::new(prompt(i, 4), SamplingParams::greedy(2)).in_conversation(format!("c{i}")),
        )
        .unwrap();
    }
    c.run_to_completion();
    assert_eq!(c.cached_conversations(), 8);
}

#[test]
fn bad_requests_are_rejected() {
    let mut c = core(config(4, 64, 8));
    assert!(matches!(
        c.add(Request::new(vec![], SamplingParams::greedy(3))),
        Err(EngineError::BadRequest(_))
    ));
    assert!(matches!(
        c.add(Request::new(
            vec![5, VOCAB as u32],
            SamplingParams::greedy(3)
        )),
        Err(EngineError::BadRequest(_))
    ));
    let bad = SamplingParams {
        temperature: -1.0,
        ..SamplingParams::greedy(3)
    };
    assert!(matches!(
        c.add(Request::new(vec![5], bad)),
        Err(EngineError::BadRequest(_))
    ));
    let err = EngineCore::new(
        Arc::new(CountingModel::default()),
        Arc::new(tokenizer()),
        config(8, 8, 4),
    )
    .err()
    .unwrap();
    assert!(matches!(err, EngineError::BadRequest(_)));
}

#[test]
fn async_front_end_batches_concurrent_requests() {
    let reqs = requests();
    let alone: Vec<Completion> = reqs.iter().map(solo).collect();
    let model = CountingModel::default();
    let engine = Engine::start(model, tokenizer(), None, config(8, 256, 32)).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let results = rt.block_on(async {
        let tasks: Vec<_> = reqs
            .iter()
            .cloned()
            .map(|r| {
                let e = engine.clone();
                tokio::spawn(async move { e.submit(r).await })
            })
            .collect();
        let mut out = Vec::new();
        for t in tasks {
            out.push(t.await.unwrap().unwrap());
        }
        out
    });
    for (a, b) in alone.iter().zip(&results) {
        assert_same(a, b);
    }
    // The same through the blocking API, and errors come back as errors.
    let again = engine.generate_blocking(reqs.clone());
    for (a, b) in alone.iter().zip(again) {
        assert_same(a, &b.unwrap());
    }
    let err = engine
        .submit(Request::new(vec![], SamplingParams::greedy(1)))
        .wait()
        .unwrap_err();
    assert!(matches!(err, EngineError::BadRequest(_)));
    assert!(matches!(
        engine.render_chat(&[], &[], Default::default()),
        Err(EngineError::Chat(_))
    ));
}

#[test]
fn engine_batches_requests_in_flight_together() {
    let model = Arc::new(CountingModel::default());
    /// Steps wait until the gate opens, so all requests are queued before generation starts.
    struct Shared(Arc<CountingModel>, Arc<std::sync::atomic::AtomicBool>);
    impl DecoderModel for Shared {
        type State = Vec<u32>;
        fn new_state(&self) -> Vec<u32> {
            Vec::new()
        }
        fn vocab_size(&self) -> usize {
            VOCAB
        }
        fn experts_per_token(&self) -> usize {
            TOP_K
        }
        fn step(
            &self,
            b: &mut [StepInput<'_, Vec<u32>>],
            r: bool,
        ) -> Result<Vec<StepOutput>, EngineError> {
            while !self.1.load(Ordering::SeqCst) {
                std::thread::yield_now();
            }
            self.0.step(b, r)
        }
    }
    let gate = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let engine = Engine::start(
        Shared(model.clone(), gate.clone()),
        tokenizer(),
        None,
        config(8, 256, 32),
    )
    .unwrap();
    let n = 6;
    let pending: Vec<_> = (0..n)
        .map(|i| engine.submit(Request::new(prompt(i, 5), SamplingParams::greedy(40))))
        .collect();
    gate.store(true, Ordering::SeqCst);
    for p in pending {
        assert_eq!(p.wait().unwrap().token_ids.len(), 40);
    }
    // Six 40-token generations submitted together share steps: far fewer than 6 × 41 steps.
    let steps = model.steps.load(Ordering::SeqCst);
    assert_eq!(model.max_batch.load(Ordering::SeqCst), n as usize);
    assert!(steps < 2 * 41, "steps = {steps}");
}

#[test]
fn tokenizer_stop_ids_end_generation_unless_ignored() {
    let p = vec![17, 995];
    let c = solo(&Request::new(p.clone(), SamplingParams::greedy(10)));
    assert_eq!(c.token_ids, [996, 997, 998, 999, 1000]);
    assert_eq!(c.finish, FinishReason::StopToken(1000));
    assert_eq!(
        c.text,
        tokenizer().decode(&[996, 997, 998, 999], false).unwrap()
    );
    let c = solo(&Request {
        ignore_eos: true,
        ..Request::new(p, SamplingParams::greedy(10))
    });
    assert_eq!(c.token_ids, [996, 997, 998, 999, 1000, 0, 1, 2, 3, 4]);
    assert_eq!(c.finish, FinishReason::Length);
}

/// A failing model step fails the requests in that batch (with the model's error) and leaves
/// the engine usable.
#[test]
fn model_failure_fails_the_batch_not_the_engine() {
    struct Flaky(CountingModel, AtomicUsize);
    impl DecoderModel for Flaky {
        type State = Vec<u32>;
        fn new_state(&self) -> Vec<u32> {
            Vec::new()
        }
        fn vocab_size(&self) -> usize {
            VOCAB
        }
        fn experts_per_token(&self) -> usize {
            TOP_K
        }
        fn step(
            &self,
            b: &mut [StepInput<'_, Vec<u32>>],
            r: bool,
        ) -> Result<Vec<StepOutput>, EngineError> {
            match self.1.fetch_add(1, Ordering::SeqCst) {
                2 => Err(EngineError::Model("device lost".into())),
                3 => Ok(Vec::new()),
                _ => self.0.step(b, r),
            }
        }
    }
    let model = Arc::new(Flaky(CountingModel::default(), AtomicUsize::new(0)));
    let mut c = EngineCore::new(model, Arc::new(tokenizer()), config(4, 64, 8)).unwrap();
    c.add(Request::new(prompt(1, 3), SamplingParams::greedy(10)))
        .unwrap();
    c.add(Request::new(prompt(2, 3), SamplingParams::greedy(10)))
        .unwrap();
    let done = c.run_to_completion();
    assert_eq!(done.len(), 2);
    assert!(done
        .iter()
        .all(|(_, r)| matches!(r, Err(EngineError::Model(m)) if m == "device lost")));
    c.add(Request::new(prompt(3, 3), SamplingParams::greedy(10)))
        .unwrap();
    let done = c.run_to_completion();
    assert!(matches!(&done[0].1, Err(EngineError::Model(m)) if m.contains("returned 0 outputs")));
    c.add(Request::new(prompt(3, 3), SamplingParams::greedy(4)))
        .unwrap();
    assert_eq!(
        c.run_to_completion()[0].1.as_ref().unwrap().token_ids.len(),
        4
    );
}

/// A conversation's turn-boundary snapshot sits right after the prompt's last added token, so a
/// next prompt that re-tokenises the text after it differently still resumes there.
#[test]
fn turn_boundary_snapshot_after_last_added_token() {
    let mut c = core(config(4, 64, 2));
    let sampling = SamplingParams::greedy(3);
    let turn1 = vec![5, 6, 999, 40, 1022, 7, 8];
    c.add(Request::new(turn1, sampling.clone()).in_conversation("c"))
        .unwrap();
    c.run_to_completion();
    let turn2: Vec<u32> = vec![5, 6, 999, 40, 1022, 9, 9, 9];
    c.add(
        Request::new(turn2.clone(), sampling.clone())
            .in_conversation("c")
            .with_logits(),
    )
    .unwrap();
    let resumed = by_id(c.run_to_completion()).remove(0);
    assert_eq!(resumed.cached_tokens, 5);
    let fresh = solo(&Request::new(turn2, sampling).with_logits());
    assert_same(&resumed, &fresh);
    assert_eq!(resumed.logits, fresh.logits);
}

/// A model that samples its next tokens itself (as a device backend does), from the engine's
/// `SampleSpec`, returning logits only when they are asked for.
struct SelfSampling(CountingModel);

impl DecoderModel for SelfSampling {
    type State = Vec<u32>;
    fn new_state(&self) -> Vec<u32> {
        Vec::new()
    }
    fn vocab_size(&self) -> usize {
        VOCAB
    }
    fn experts_per_token(&self) -> usize {
        TOP_K
    }
    fn step(
        &self,
        b: &mut [StepInput<'_, Vec<u32>>],
        r: bool,
    ) -> Result<Vec<StepOutput>, EngineError> {
        let wants: Vec<Want> = b.iter().map(|s| s.want).collect();
        let mut out = self.0.step(b, r)?;
        for (o, want) in out.iter_mut().zip(wants) {
            match want {
                Want::Sample(spec) => {
                    let params = SamplingParams {
                        temperature: spec.temperature,
                        top_k: spec.top_k,
                        top_p: spec.top_p,
                        ..Default::default()
                    };
                    o.sampled = Some(Sampler::new(params).sample_with(&o.logits, spec.u));
                    if !spec.logits {
                        o.logits.clear();
                    }
                }
                Want::Nothing => o.logits.clear(),
                Want::Logits => {}
            }
        }
        Ok(out)
    }
}

/// The engine hands a self-sampling model each token's uniform draw from the request's own
/// stream: its seeded completions equal host sampling, top log-probabilities still come (their
/// rows asked for), and only those rows reach the host.
#[test]
fn a_model_that_samples_itself_gets_the_requests_draws() {
    let mut reqs = requests();
    reqs[3].top_logprobs = 2;
    let mut host = core(config(2, 24, 8));
    let mut dev = EngineCore::new(
        Arc::new(SelfSampling(CountingModel::default())),
        Arc::new(tokenizer()),
        config(2, 24, 8),
    )
    .unwrap();
    for r in &reqs {
        host.add(r.clone()).unwrap();
        dev.add(r.clone()).unwrap();
    }
    let (a, b) = (by_id(host.run_to_completion()), by_id(dev.run_to_completion()));
    for (x, y) in a.iter().zip(&b) {
        assert_same(x, y);
        assert_eq!(x.top_logprobs, y.top_logprobs);
    }
    assert!(b[1].sampling_logprobs.iter().any(|&l| l < 0.0), "sampled, not greedy");
    let rows = b[3].token_ids.len() as u64;
    assert_eq!(dev.stats().logits_bytes_to_host, rows * VOCAB as u64 * 4);
    assert!(host.stats().logits_bytes_to_host > dev.stats().logits_bytes_to_host);
    assert_eq!(host.stats().steps, dev.stats().steps);
}

/// A model state whose tokens count against the model's cache (`live`) for as long as it (or
/// a clone: a snapshot) exists, as a device's KV blocks do.
struct Held {
    tokens: Vec<u32>,
    live: Arc<AtomicUsize>,
}

impl Clone for Held {
    fn clone(&self) -> Self {
        self.live.fetch_add(self.tokens.len(), Ordering::SeqCst);
        Held {
            tokens: self.tokens.clone(),
            live: self.live.clone(),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.live.fetch_sub(self.tokens.len(), Ordering::SeqCst);
    }
}

/// [`CountingModel`] with a cache of `capacity` tokens: a step that would overfill it fails
/// with [`EngineError::CacheFull`] and changes nothing.
struct Bounded {
    inner: CountingModel,
    capacity: usize,
    live: Arc<AtomicUsize>,
}

impl Bounded {
    fn new(capacity: usize) -> Self {
        Bounded {
            inner: CountingModel::default(),
            capacity,
            live: Arc::default(),
        }
    }
}

impl DecoderModel for Bounded {
    type State = Held;
    fn new_state(&self) -> Held {
        Held {
            tokens: Vec::new(),
            live: self.live.clone(),
        }
    }
    fn vocab_size(&self) -> usize {
        VOCAB
    }
    fn experts_per_token(&self) -> usize {
        TOP_K
    }
    fn step(
        &self,
        batch: &mut [StepInput<'_, Held>],
        routing: bool,
    ) -> Result<Vec<StepOutput>, EngineError> {
        let new: usize = batch.iter().map(|s| s.tokens.len()).sum();
        let live = self.live.load(Ordering::SeqCst);
        if live + new > self.capacity {
            return Err(EngineError::CacheFull(format!(
                "{live} + {new} tokens > {}",
                self.capacity
            )));
        }
        let mut inner: Vec<StepInput<'_, Vec<u32>>> = batch
            .iter_mut()
            .map(|s| StepInput {
                tokens: s.tokens,
                state: &mut s.state.tokens,
                want: s.want,
            })
            .collect();
        let out = self.inner.step(&mut inner, routing)?;
        self.live.fetch_add(new, Ordering::SeqCst);
        Ok(out)
    }
}

fn quiet(r: Request) -> Request {
    Request {
        ignore_eos: true,
        ..r.with_routing()
    }
}

#[test]
fn a_full_cache_preempts_the_youngest_and_the_output_is_unchanged() {
    // four at once, up to 20 + 19 tokens each: 156 tokens wanted, a cache of 100
    let reqs: Vec<Request> = (0..4)
        .map(|i| {
            let sampling = SamplingParams {
                temperature: 1.0,
                seed: Some(10 + i),
                max_tokens: 20,
                ..Default::default()
            };
            quiet(Request::new(prompt(20 + i, 20), sampling))
        })
        .collect();
    let mut free = core(config(4, 64, 16));
    let mut bounded = EngineCore::new(
        Arc::new(Bounded::new(100)),
        Arc::new(tokenizer()),
        config(4, 64, 16),
    )
    .unwrap();
    for r in &reqs {
        free.add(r.clone()).unwrap();
        bounded.add(r.clone()).unwrap();
    }
    let (want, got) = (
        by_id(free.run_to_completion()),
        by_id(bounded.run_to_completion()),
    );
    let stats = bounded.stats();
    assert!(stats.preemptions > 0, "{stats:?}");
    assert!(stats.prefilled_tokens > free.stats().prefilled_tokens);
    for (a, b) in want.iter().zip(&got) {
        assert_same(a, b);
        assert_eq!(a.routing, b.routing, "every position recorded once");
        assert_eq!(b.token_ids.len(), 20);
    }
}

#[test]
fn cached_conversations_are_evicted_before_preempting_and_a_too_long_request_fails() {
    let mut c = EngineCore::new(
        Arc::new(Bounded::new(60)),
        Arc::new(tokenizer()),
        config(4, 64, 16),
    )
    .unwrap();
    // a conversation keeps its states (a 20-token snapshot, 24 tokens at the end: 44)
    c.add(quiet(Request::new(prompt(30, 20), SamplingParams::greedy(5))).in_conversation("a"))
        .unwrap();
    assert!(c.run_to_completion()[0].1.is_ok());
    assert_eq!(c.cached_conversations(), 1);
    // a request that needs the room: the conversation goes, nothing is preempted
    c.add(quiet(Request::new(prompt(31, 40), SamplingParams::greedy(5))))
        .unwrap();
    assert!(c.run_to_completion()[0].1.is_ok());
    assert_eq!(c.cached_conversations(), 0);
    assert_eq!(c.stats().preemptions, 0);
    // alone and still too long: the typed error, and the engine goes on
    c.add(quiet(Request::new(prompt(32, 70), SamplingParams::greedy(5))))
        .unwrap();
    let done = c.run_to_completion();
    assert!(
        matches!(&done[0].1, Err(EngineError::CacheFull(m)) if m.contains("> 60")),
        "{:?}",
        done[0].1
    );
    c.add(quiet(Request::new(prompt(33, 10), SamplingParams::greedy(5))))
        .unwrap();
    assert_eq!(
        c.run_to_completion()[0].1.as_ref().unwrap().token_ids.len(),
        5
    );
}
