//! Agent turns reuse the engine's cache: a 20-turn episode through the engine policy (tiny
//! random Qwen3.5-MoE fixture with the test tokenizer and chat template, scripted tool
//! observations) prefills, at every turn after the first, exactly the new tokens — the turn's
//! closing token(s), the observation and the next generation prompt — on the CPU engine and on
//! the emulated CUDA device (whose cached conversation states are device slot copies). Both
//! devices sample the same tokens and route them to the same experts. Snapshots taken and
//! resumed while the original state moves on (device slot copies) give the CPU engine's logits.

use execcritic::engine::cuda_backend::CudaDecoder;
use execcritic::engine::{
    DecoderModel, Engine, EngineConfig, EngineStats, SchedulerConfig, StepInput, StepOutput,
};
use execcritic::model::Model;
use execcritic::policy::{ChatMessage, ChatRequest, Completion, EnginePolicy, Policy, SamplingParams};
use execcritic::model::backend::cuda::CudaModel;
use execcritic::tensor::cuda::Gpu;
use std::path::Path;

#[path = "common/tiny_model.rs"]
mod tiny_model;
use tiny_model::tiny_model_dir as model_dir;

const TURNS: usize = 20;


fn config() -> EngineConfig {
    EngineConfig {
        scheduler: SchedulerConfig {
            max_running: 2,
            max_batch_tokens: 258,
            prefill_chunk: 256,
        },
        max_conversations: 1,
    }
}

/// One turn as seen by the test: what the policy returned and what the engine counted.
struct Turn {
    completion: Completion,
    delta: EngineStats,
}

fn delta(a: EngineStats, b: EngineStats) -> EngineStats {
    EngineStats {
        prefilled_tokens: b.prefilled_tokens - a.prefilled_tokens,
        decoded_tokens: b.decoded_tokens - a.decoded_tokens,
        cached_tokens: b.cached_tokens - a.cached_tokens,
        requests: b.requests - a.requests,
        continued_turns: b.continued_turns - a.continued_turns,
        rerendered_turns: b.rerendered_turns - a.rerendered_turns,
        steps: b.steps - a.steps,
        logits_bytes_to_host: b.logits_bytes_to_host - a.logits_bytes_to_host,
        preemptions: b.preemptions - a.preemptions,
    }
}

/// The scripted episode: the model's answer is kept as the assistant message (as the agent loop
/// keeps it), a tool observation follows, 20 turns.
fn episode(engine: Engine, dir: &Path) -> Vec<Turn> {
    let policy = EnginePolicy::from_engine(engine.clone(), dir).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut messages = vec![
        ChatMessage::system("You fix bugs in the repository."),
        ChatMessage::user("The test suite fails; find out why."),
    ];
    let mut turns = Vec::new();
    for t in 0..TURNS {
        let request = ChatRequest {
            messages: messages.clone(),
            tools: Vec::new(),
            sampling: SamplingParams {
                temperature: 1.0,
                max_tokens: 6,
                seed: Some(t as u64),
                routing: true,
                ..SamplingParams::default()
            },
            conversation: Some("episode".into()),
        };
        let before = engine.stats();
        let mut out = rt.block_on(policy.complete(&[request])).unwrap();
        let completion = out.pop().unwrap();
        let after = engine.stats();
        let mut assistant = ChatMessage::assistant(completion.text.clone());
        assistant.reasoning_content = completion.reasoning.clone();
        messages.push(assistant);
        messages.push(ChatMessage::tool(
            format!("call-{t}"),
            format!("exit code {}\ntest_{t}.py: {} passed", t % 3, t * 7),
        ));
        turns.push(Turn {
            completion,
            delta: delta(before, after),
        });
    }
    policy.end_conversation("episode");
    turns
}

/// Every turn after the first prefills exactly its new tokens, and its prompt is the previous
/// prompt + completion followed by them.
fn check_new_tokens_only(engine_name: &str, turns: &[Turn], dir: &Path) {
    let tok = execcritic::model::tokenizer::Tokenizer::from_dir(dir).unwrap();
    let im_end = tok.token_id("<|im_end|>").unwrap();
    let first = &turns[0];
    let p0 = first.completion.prompt_ids.as_ref().unwrap();
    assert_eq!(first.delta.prefilled_tokens, p0.len() as u64);
    assert_eq!(first.delta.cached_tokens, 0);
    for (t, pair) in turns.windows(2).enumerate() {
        let (prev, cur) = (&pair[0].completion, &pair[1]);
        let prev_prompt = prev.prompt_ids.as_ref().unwrap();
        let prev_ids = prev.token_ids.as_ref().unwrap();
        let prompt = cur.completion.prompt_ids.as_ref().unwrap();
        let history = [&prev_prompt[..], &prev_ids[..]].concat();
        assert!(
            prompt.starts_with(&history),
            "{engine_name} turn {}: the prompt does not extend the previous prompt + completion",
            t + 1
        );
        // The new tokens, from the template's format: the closing `<|im_end|>` (unless the
        // model sampled it), the observation's user turn, the generation prompt.
        let observation = format!(
            "\n<|im_start|>user\n<tool_response>\nexit code {}\ntest_{t}.py: {} passed\n\
             </tool_response><|im_end|>\n<|im_start|>assistant\n<think>\n",
            t % 3,
            t * 7
        );
        let mut new = Vec::new();
        if prev_ids.last() != Some(&im_end) {
            new.push(im_end);
        }
        new.extend(tok.encode(&observation).unwrap());
        assert_eq!(&prompt[history.len()..], &new[..], "{engine_name} turn {}", t + 1);
        // Prefilled: the new tokens plus the last sampled token (never forwarded while sampling).
        let d = cur.delta;
        assert_eq!(
            d.prefilled_tokens,
            new.len() as u64 + 1,
            "{engine_name} turn {}: prefilled tokens",
            t + 1
        );
        assert_eq!(d.cached_tokens, history.len() as u64 - 1);
        assert_eq!((d.continued_turns, d.rerendered_turns), (1, 0));
        let n = cur.completion.token_ids.as_ref().unwrap().len() as u64;
        assert_eq!(d.decoded_tokens, n - 1);
        // The routing record still covers the whole sequence from position 0.
        let r = cur.completion.routing.as_ref().unwrap();
        assert_eq!(r.start, 0);
        let fed = prompt.len() + n as usize - 1;
        assert!(r.experts.iter().all(|l| l.len() == fed * r.top_k));
    }
}

#[test]
fn twenty_agent_turns_prefill_only_new_tokens_on_cpu_and_emulated_cuda() {
    let dir = model_dir();
    let cpu = Engine::load(dir.path(), config()).unwrap();
    let cpu_turns = episode(cpu, dir.path());
    check_new_tokens_only("cpu", &cpu_turns, dir.path());

    let gpu = Gpu::emulator().unwrap();
    let model = CudaModel::<f32>::load(&gpu, dir.path()).unwrap();
    let decoder = CudaDecoder::new(gpu, model, 4, 1024, 258).unwrap();
    let emu = Engine::load_with(dir.path(), decoder, config()).unwrap();
    let emu_turns = episode(emu, dir.path());
    check_new_tokens_only("emulator", &emu_turns, dir.path());

    for (t, (c, e)) in cpu_turns.iter().zip(&emu_turns).enumerate() {
        assert_eq!(c.completion.prompt_ids, e.completion.prompt_ids, "turn {t}");
        assert_eq!(c.completion.token_ids, e.completion.token_ids, "turn {t}");
        assert_eq!(c.completion.routing, e.completion.routing, "turn {t}: routing");
        for (a, b) in c
            .completion
            .logprobs
            .iter()
            .flatten()
            .zip(e.completion.logprobs.iter().flatten())
        {
            assert!((a - b).abs() < 1e-3, "turn {t}: logprob {a} vs {b}");
        }
    }
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()))
}

/// Logits (and routing) of one step of `tokens` on `state`.
fn step<M: DecoderModel>(m: &M, state: &mut M::State, tokens: &[u32]) -> StepOutput {
    let mut batch = [StepInput::new(tokens, state)];
    m.step(&mut batch, true).unwrap().remove(0)
}

/// Snapshots taken mid-conversation, the original moving on, the snapshot resumed with other
/// tokens, both fed in one batch: the outputs of every step, in order.
fn snapshot_script<M: DecoderModel>(m: &M) -> Vec<StepOutput> {
    let prompt: Vec<u32> = (0..40).map(|i| (i * 37 + 11) % 900).collect();
    let mut a = m.new_state();
    let mut out = vec![step(m, &mut a, &prompt)];
    let snap = a.clone();
    out.push(step(m, &mut a, &[5, 6, 7])); // the original moves on (its slot is copied)
    let mut b = snap.clone();
    out.push(step(m, &mut b, &[9, 10])); // the snapshot resumes with other tokens
    out.push(step(m, &mut a, &[11]));
    drop(snap);
    out.push(step(m, &mut b, &[12])); // sole owner now: fed in place
    let mut c = b.clone();
    let mut batch = [
        StepInput::new(&[13], &mut a),
        StepInput::new(&[14, 15], &mut b),
        StepInput::new(&[16], &mut c),
    ];
    out.extend(m.step(&mut batch, true).unwrap());
    // The resumed snapshot equals a fresh prefill of the same tokens.
    let mut fresh = m.new_state();
    let all = [&prompt[..], &[9, 10, 12, 14, 15]].concat();
    out.push(step(m, &mut fresh, &all));
    out
}

#[test]
fn snapshot_and_resume_on_the_emulator_equal_the_cpu_engine() {
    let dir = model_dir();
    let cpu = Model::load(dir.path()).unwrap();
    let gpu = Gpu::emulator().unwrap();
    let model = CudaModel::<f32>::load(&gpu, dir.path()).unwrap();
    let emu = CudaDecoder::new(gpu, model, 4, 128, 64).unwrap();
    let (c, e) = (snapshot_script(&cpu), snapshot_script(&emu));
    assert_eq!(c.len(), e.len());
    for (i, (c, e)) in c.iter().zip(&e).enumerate() {
        let err = max_abs_diff(&c.logits, &e.logits);
        assert!(err <= 1e-4, "step {i}: max |emulator − cpu| = {err}");
        assert_eq!(c.experts, e.experts, "step {i}: routing");
    }
    // the resumed snapshot's last logits equal the fresh prefill's (both devices)
    for out in [&c, &e] {
        let (resumed, fresh) = (&out[6], &out[8]);
        let err = max_abs_diff(&resumed.logits, &fresh.logits);
        assert!(err <= 1e-4, "resumed snapshot vs fresh prefill: {err}");
    }
}
