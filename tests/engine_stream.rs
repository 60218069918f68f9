//! The engine's serving capabilities on the tiny Qwen3.5-MoE fixture: per-token streaming (the
//! deltas add up to the completion's text, also with stop strings), top log-probabilities (equal
//! to the log-softmax of the logits, most likely first), and cancellation (a dropped receiver or
//! completion frees the sequence), with the load the engine reports.

#[path = "common/tiny_model.rs"]
mod tiny_model;

use execcritic::engine::sampler::{log_softmax, top_logprobs};
use execcritic::engine::{Engine, EngineConfig, Request, SamplingParams, TokenEvent};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

fn engine() -> (Engine, tempfile::TempDir) {
    let dir = tiny_model::tiny_model_dir();
    (Engine::load(dir.path(), EngineConfig::default()).unwrap(), dir)
}

fn drain(rx: &mut mpsc::UnboundedReceiver<TokenEvent>) -> Vec<TokenEvent> {
    let mut v = Vec::new();
    while let Ok(e) = rx.try_recv() {
        v.push(e);
    }
    v
}

#[test]
fn streamed_tokens_match_the_completion() {
    let (engine, _dir) = engine();
    let prompt = engine.tokenizer().encode("def main():\n    return").unwrap();
    for (sampling, stops) in [
        (SamplingParams { temperature: 0.8, seed: Some(3), max_tokens: 40, ..Default::default() }, vec![]),
        (SamplingParams { temperature: 0.0, max_tokens: 40, ..Default::default() }, vec!["e", "ab"]),
    ] {
        let sampling = SamplingParams { stop: stops.iter().map(|s| s.to_string()).collect(), ..sampling };
        let (tx, mut rx) = mpsc::unbounded_channel();
        let mut r = Request::new(prompt.clone(), sampling).with_logits();
        r.top_logprobs = 5;
        r.events = Some(tx);
        let c = engine.submit(r).wait().unwrap();
        let events = drain(&mut rx);
        assert_eq!(events.len(), c.token_ids.len());
        let text: String = events.iter().map(|e| e.delta.as_str()).collect();
        assert_eq!(text, c.text);
        for (i, e) in events.iter().enumerate() {
            assert_eq!((e.token, e.logprob), (c.token_ids[i], c.logprobs[i]));
            assert_eq!(e.top_logprobs, c.top_logprobs[i]);
            // The top 5 are the 5 largest entries of log_softmax(logits), in order.
            let mut all: Vec<(u32, f32)> = log_softmax(&c.logits[i]).into_iter().enumerate().map(|(t, l)| (t as u32, l)).collect();
            all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            let want: Vec<u32> = all[..5].iter().map(|x| x.0).collect();
            assert_eq!(e.top_logprobs.iter().map(|x| x.0).collect::<Vec<_>>(), want);
            for (&(_, got), &(_, w)) in e.top_logprobs.iter().zip(&all) {
                assert!((got - w).abs() < 1e-5);
            }
        }
    }
}

#[test]
fn top_logprobs_orders_ties_by_id() {
    let logits = [1.0, 3.0, 3.0, 0.0];
    let top = top_logprobs(&logits, 3);
    assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), [1, 2, 0]);
    assert_eq!(top_logprobs(&logits, 9).len(), 4);
    assert!(top_logprobs(&logits, 0).is_empty());
}

/// Poll the engine's load until nothing runs (a deadline, not a timing assertion).
fn wait_idle(engine: &Engine) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while engine.load_stats().running > 0 || engine.load_stats().waiting > 0 {
        assert!(Instant::now() < deadline, "the sequence was never freed: {:?}", engine.load_stats());
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_caller_that_goes_away_frees_its_sequence() {
    let (engine, _dir) = engine();
    let long = || {
        let mut r = Request::new(vec![1, 2, 3], SamplingParams::greedy(30_000));
        r.ignore_eos = true;
        r
    };
    // Streaming: the receiver is dropped after a few tokens.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut r = long();
    r.events = Some(tx);
    let pending = engine.submit(r);
    for _ in 0..3 {
        rx.blocking_recv().unwrap();
    }
    assert_eq!(engine.load_stats().running, 1);
    drop(rx);
    assert!(matches!(pending.wait(), Err(execcritic::engine::EngineError::Cancelled)));
    wait_idle(&engine);
    // Not streaming: the completion is dropped.
    let pending = engine.submit(long());
    let deadline = Instant::now() + Duration::from_secs(30);
    while engine.load_stats().running == 0 {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(pending);
    wait_idle(&engine);
    // The engine still answers.
    let c = engine.submit(Request::new(vec![1, 2, 3], SamplingParams::greedy(4))).wait().unwrap();
    assert_eq!(c.token_ids.len(), 4);
}
