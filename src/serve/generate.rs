//! Running a request's choices on the engine and watching them token by token: every choice is a
//! streaming engine request whose tokens a small task forwards, tagged with the choice index,
//! into one channel, recording time to first token and inter-token latency on the way. Dropping
//! the receiver (a client that went away) ends the forwarding tasks, which drops the engine's
//! token receivers and completions, so the engine cancels those sequences before its next step.

use super::metrics::Metrics;
use crate::engine::{Completion, Engine, EngineError, Request, TokenEvent};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// What happened to one choice.
#[derive(Debug)]
pub enum Update {
    Token(TokenEvent),
    Done(Result<Completion, EngineError>),
}

/// Start `requests` (one per choice) and return the channel their updates arrive on, as
/// `(choice index, update)`; every choice ends with one `Done`.
pub fn start(
    engine: &Engine,
    requests: Vec<Request>,
    metrics: Arc<Metrics>,
    arrived: Instant,
) -> mpsc::UnboundedReceiver<(usize, Update)> {
    let (out, rx) = mpsc::unbounded_channel();
    for (index, mut request) in requests.into_iter().enumerate() {
        let (tx, mut events) = mpsc::unbounded_channel();
        request.events = Some(tx);
        let pending = engine.submit(request);
        let out = out.clone();
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let mut last: Option<Instant> = None;
            while let Some(event) = events.recv().await {
                let now = Instant::now();
                match last {
                    None => metrics.time_to_first_token.observe(now - arrived),
                    Some(t) => metrics.inter_token_latency.observe(now - t),
                }
                last = Some(now);
                if out.send((index, Update::Token(event))).is_err() {
                    return; // the client has gone: dropping `events` and `pending` cancels
                }
            }
            let result = pending.await;
            if let Ok(c) = &result {
                metrics.tokens(c.prompt_tokens, c.cached_tokens, c.token_ids.len());
                metrics.request_latency.observe(arrived.elapsed());
            }
            let _ = out.send((index, Update::Done(result)));
        });
    }
    rx
}

/// Await every choice's completion (tokens are only counted on the way), in choice order.
pub async fn collect(
    mut rx: mpsc::UnboundedReceiver<(usize, Update)>,
    n: usize,
) -> Result<Vec<Completion>, EngineError> {
    let mut done: Vec<Option<Completion>> = vec![None; n];
    let mut left = n;
    while left > 0 {
        match rx.recv().await {
            Some((i, Update::Done(result))) => {
                done[i] = Some(result?);
                left -= 1;
            }
            Some((_, Update::Token(_))) => {}
            None => return Err(EngineError::Shutdown),
        }
    }
    Ok(done.into_iter().flatten().collect())
}
