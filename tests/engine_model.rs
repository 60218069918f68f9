//! The engine on the real Qwen3.5-MoE forward pass (tiny random-weight fixture from
//! models/tiny-qwen35 with the tokenizer and chat template of models/tokenizer): batched
//! generation equals one-at-a-time generation, chunked prefill equals whole-prompt prefill,
//! and a resumed conversation equals a fresh prefill of the whole conversation.

use execcritic::engine::{
    ChatRequest, Completion, Engine, EngineConfig, EngineCore, FinishReason, Request,
    SamplingParams, SchedulerConfig,
};
use execcritic::model::chat::Message;
use execcritic::model::tokenizer::Tokenizer;
use execcritic::model::Model;
use std::path::Path;
use std::sync::Arc;

/// A model folder: the fixture's config and weights plus the tokenizer and chat template.
fn model_dir() -> tempfile::TempDir {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("models");
    let dir = tempfile::tempdir().unwrap();
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(root.join("tiny-qwen35").join(f), dir.path().join(f)).unwrap();
    }
    for f in [
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
    ] {
        std::fs::copy(root.join("tokenizer").join(f), dir.path().join(f)).unwrap();
    }
    dir
}

fn core(dir: &Path, scheduler: SchedulerConfig) -> EngineCore<Model> {
    let model = Arc::new(Model::load(dir).unwrap());
    let tok = Arc::new(Tokenizer::from_dir(dir).unwrap());
    EngineCore::new(
        model,
        tok,
        EngineConfig {
            scheduler,
            max_conversations: 4,
        },
    )
    .unwrap()
}

fn sched(max_running: usize, max_batch_tokens: usize, prefill_chunk: usize) -> SchedulerConfig {
    SchedulerConfig {
        max_running,
        max_batch_tokens,
        prefill_chunk,
    }
}

fn run(c: &mut EngineCore<Model>, reqs: &[Request]) -> Vec<Completion> {
    for r in reqs {
        c.add(r.clone()).unwrap();
    }
    let mut done = c.run_to_completion();
    done.sort_by_key(|(id, _)| *id);
    done.into_iter().map(|(_, r)| r.unwrap()).collect()
}

fn max_abs_diff(a: &[Vec<f32>], b: &[Vec<f32>]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .flat_map(|(x, y)| x.iter().zip(y).map(|(p, q)| (p - q).abs()))
        .fold(0.0, f32::max)
}

fn prompts(tok: &Tokenizer) -> Vec<Vec<u32>> {
    // One prompt longer than a 64-token GDN chunk.
    let long = "def parse(text):\n    \"\"\"Split the text into words and count them.\"\"\"\n    counts = {}\n    for word in text.split():\n        counts[word] = counts.get(word, 0) + 1\n    return counts\n";
    ["Hello", "List the files, then run the tests.", long]
        .iter()
        .map(|t| tok.encode(t).unwrap())
        .collect()
}

#[test]
fn batched_and_chunked_generation_equal_one_at_a_time() {
    let dir = model_dir();
    let tok = Tokenizer::from_dir(dir.path()).unwrap();
    let reqs: Vec<Request> = prompts(&tok)
        .into_iter()
        .map(|p| Request::new(p, SamplingParams::greedy(24)).with_logits())
        .collect();
    assert!(reqs[2].prompt.len() > 64, "{}", reqs[2].prompt.len());
    let alone: Vec<Completion> = reqs
        .iter()
        .map(|r| {
            run(
                &mut core(dir.path(), sched(1, 4096, 4096)),
                std::slice::from_ref(r),
            )
            .remove(0)
        })
        .collect();
    for s in [sched(8, 4096, 4096), sched(8, 40, 16)] {
        let together = run(&mut core(dir.path(), s), &reqs);
        for (a, b) in alone.iter().zip(&together) {
            assert_eq!(a.token_ids, b.token_ids, "{s:?}");
            let d = max_abs_diff(&a.logits, &b.logits);
            eprintln!("{s:?}: max abs logit diff {d:e}");
            assert!(d <= 1e-4, "{s:?}: logits differ by {d}");
            for (x, y) in a.logprobs.iter().zip(&b.logprobs) {
                assert!((x - y).abs() <= 1e-4);
            }
        }
    }
    assert!(alone
        .iter()
        .all(|c| c.finish == FinishReason::Length && c.token_ids.len() == 24));
}

#[test]
fn resumed_conversation_equals_fresh_prefill() {
    let dir = model_dir();
    let tok = Tokenizer::from_dir(dir.path()).unwrap();
    let mut c = core(dir.path(), sched(4, 256, 32));
    let sampling = SamplingParams {
        temperature: 1.0,
        seed: Some(5),
        max_tokens: 20,
        ..Default::default()
    };
    let turn1 = prompts(&tok).remove(2);
    let first = run(
        &mut c,
        &[Request::new(turn1.clone(), sampling.clone()).in_conversation("c")],
    )
    .remove(0);
    let observation = tok
        .encode("<|im_start|>user\n<tool_response>\nok\n</tool_response><|im_end|>\n")
        .unwrap();
    let turn2: Vec<u32> = turn1
        .iter()
        .chain(&first.token_ids)
        .chain(&observation)
        .copied()
        .collect();
    let resumed = run(
        &mut c,
        &[Request::new(turn2.clone(), sampling.clone())
            .in_conversation("c")
            .with_logits()],
    )
    .remove(0);
    assert_eq!(
        resumed.cached_tokens,
        turn1.len() + first.token_ids.len() - 1
    );
    let fresh = run(
        &mut core(dir.path(), sched(4, 256, 256)),
        &[Request::new(turn2, sampling).with_logits()],
    )
    .remove(0);
    assert_eq!(resumed.token_ids, fresh.token_ids);
    let d = max_abs_diff(&resumed.logits, &fresh.logits);
    eprintln!("resumed vs fresh: max abs logit diff {d:e}");
    assert!(d <= 1e-4, "resumed vs fresh logits differ by {d}");
}

#[test]
fn chat_through_the_async_engine() {
    let dir = model_dir();
    let engine = Engine::load(dir.path(), EngineConfig::default()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let sampling = SamplingParams {
        temperature: 0.7,
        seed: Some(1),
        max_tokens: 16,
        ..Default::default()
    };
    let mut req = ChatRequest::new(vec![Message::user("Run the tests.")], sampling);
    req.conversation = Some("episode-1".into());
    req.routing = true;
    let out = rt.block_on(engine.chat(req.clone())).unwrap();
    assert!(out.prompt.ends_with("<|im_start|>assistant\n<think>\n"));
    assert_eq!(
        out.completion.prompt_tokens,
        engine.tokenizer().encode(&out.prompt).unwrap().len()
    );
    let routing = out.completion.routing.as_ref().unwrap();
    let fed = out.completion.prompt_tokens + out.completion.token_ids.len() - 1;
    assert!(routing
        .experts
        .iter()
        .all(|l| l.len() == fed * routing.top_k));
    // A random model rarely closes </think>: the whole completion is then (truncated) reasoning.
    if let Ok(turn) = &out.turn {
        assert!(turn.reasoning.is_some());
    }
    let again = rt
        .block_on(engine.chat(ChatRequest {
            conversation: Some("episode-2".into()),
            ..req
        }))
        .unwrap();
    assert_eq!(again.completion.token_ids, out.completion.token_ids);
}

/// Two agent turns through `Engine::chat` with a conversation id: the second turn's prompt is the
/// first prompt + completion followed by the new messages' tokens, it reuses the cached state of
/// all of them but the last sampled token, and it generates exactly what a fresh engine
/// generates for the same prompt ids.
#[test]
fn chat_conversation_resumes_from_cache() {
    let dir = model_dir();
    let engine = Engine::load(dir.path(), EngineConfig::default()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let sampling = SamplingParams {
        temperature: 1.0,
        seed: Some(9),
        max_tokens: 12,
        ..Default::default()
    };
    let mut messages = vec![
        Message::system("You fix bugs."),
        Message::user("Run the tests."),
    ];
    let mut req = ChatRequest::new(messages.clone(), sampling.clone());
    req.conversation = Some("episode".into());
    let first = rt.block_on(engine.chat(req)).unwrap();
    messages.push(Message::assistant(first.completion.text.clone()));
    messages.push(Message::tool("2 passed, 1 failed"));
    let mut req = ChatRequest::new(messages.clone(), sampling.clone());
    req.conversation = Some("episode".into());
    let second = rt.block_on(engine.chat(req)).unwrap();
    // The second prompt continues the first turn's own tokens (not a re-rendering of its text).
    let history = [&first.prompt_ids[..], &first.completion.token_ids[..]].concat();
    assert!(second.prompt_ids.starts_with(&history));
    assert_eq!(second.completion.cached_tokens, history.len() - 1);
    assert_eq!(engine.stats().continued_turns, 1);
    let fresh_engine = Engine::load(dir.path(), EngineConfig::default()).unwrap();
    let fresh = fresh_engine
        .submit(Request::new(second.prompt_ids.clone(), sampling.clone()))
        .wait()
        .unwrap();
    assert_eq!(fresh.cached_tokens, 0);
    let rendered = rt
        .block_on(fresh_engine.chat(ChatRequest::new(messages, sampling)))
        .unwrap();
    assert_eq!(second.prompt, rendered.prompt);
    assert_eq!(second.completion.token_ids, fresh.token_ids);
}
