//! `Engine`: the async front-end. An [`EngineCore`] runs on a dedicated thread; callers on any
//! thread or task submit requests through a channel and await their completions, so many
//! episodes in flight at once have their generations batched together. Cloning an `Engine` is
//! cheap (all clones share the thread); the thread stops when the last clone is dropped
//! (requests still in flight then fail with [`EngineError::Shutdown`]). [`Engine::stop`] shuts
//! the thread down and hands the model back (the trainer's weights return to the trainer).
//! A request whose [`PendingCompletion`] is dropped (its caller has gone) is cancelled before the
//! next step and its sequence freed; [`Engine::load_stats`] reports queue depth and batch size.

use super::backend::DecoderModel;
use super::core::{EngineConfig, EngineCore, Finished};
use super::error::EngineError;
use super::sequence::{Completion, Request};
use super::stats::{Counters, EngineStats};
use super::turns::TurnRecords;
use crate::model::chat::{ChatError, ChatTemplate};
use crate::model::tokenizer::Tokenizer;
use crate::model::Model;
use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::path::Path;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::sync::{mpsc, oneshot};

enum Command {
    Submit(Request, oneshot::Sender<Result<Completion, EngineError>>),
    Forget(String),
    Shutdown,
}

/// Handle to a running engine.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

struct Inner {
    tx: mpsc::UnboundedSender<Command>,
    /// The engine thread; it returns the model (`Arc<M>`, boxed) when it stops.
    thread: Option<std::thread::JoinHandle<Box<dyn Any + Send>>>,
    tokenizer: Arc<Tokenizer>,
    template: Option<Arc<ChatTemplate>>,
    vocab_size: usize,
    load: Arc<Load>,
    counters: Arc<Counters>,
    /// What each conversation's last chat turn read and sampled (see [`super::turns`]).
    turns: Mutex<TurnRecords>,
}

/// Counters the engine thread updates after every command batch and step.
#[derive(Debug, Default)]
struct Load {
    waiting: AtomicUsize,
    running: AtomicUsize,
    last_batch: AtomicUsize,
}

/// A snapshot of the engine's load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LoadStats {
    /// Requests queued, not yet admitted.
    pub waiting: usize,
    /// Sequences in flight.
    pub running: usize,
    /// Sequences the last step sampled for or read prompt for (its batch size).
    pub last_batch: usize,
}

impl Drop for Inner {
    fn drop(&mut self) {
        let _ = self.tx.send(Command::Shutdown);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Engine {
    /// Load a Hugging Face model folder: weights, tokenizer and (if present) chat template.
    pub fn load(dir: &Path, config: EngineConfig) -> Result<Self, EngineError> {
        let model = Model::load(dir).map_err(|e| EngineError::Load(e.to_string()))?;
        Self::load_with(dir, model, config)
    }

    /// Start over an already loaded `model` (e.g. the CUDA backend), with the tokenizer and chat
    /// template of the model folder `dir`.
    pub fn load_with<M: DecoderModel + 'static>(
        dir: &Path,
        model: M,
        config: EngineConfig,
    ) -> Result<Self, EngineError> {
        let tokenizer = Tokenizer::from_dir(dir)?;
        let template = match ChatTemplate::from_dir(dir) {
            Ok(t) => Some(t),
            Err(ChatError::NoTemplate(_)) => None,
            Err(e) => return Err(e.into()),
        };
        Self::start(model, tokenizer, template, config)
    }

    /// Start the engine thread over any [`DecoderModel`].
    pub fn start<M: DecoderModel + 'static>(
        model: M,
        tokenizer: Tokenizer,
        template: Option<ChatTemplate>,
        config: EngineConfig,
    ) -> Result<Self, EngineError> {
        let tokenizer = Arc::new(tokenizer);
        let vocab_size = model.vocab_size();
        let model = Arc::new(model);
        let core = EngineCore::new(model.clone(), tokenizer.clone(), config)?;
        let counters = core.counters();
        let (tx, rx) = mpsc::unbounded_channel();
        let load = Arc::new(Load::default());
        let thread_load = load.clone();
        let thread = std::thread::Builder::new()
            .name("execcritic-engine".into())
            .spawn(move || {
                serve(core, rx, &thread_load);
                Box::new(model) as Box<dyn Any + Send>
            })
            .map_err(|e| EngineError::Load(format!("cannot start the engine thread: {e}")))?;
        Ok(Engine {
            inner: Arc::new(Inner {
                tx,
                thread: Some(thread),
                tokenizer,
                template: template.map(Arc::new),
                vocab_size,
                load,
                counters,
                turns: Mutex::new(TurnRecords::new(config.max_conversations)),
            }),
        })
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.inner.tokenizer
    }

    /// The model folder's chat template, if it has one.
    pub fn template(&self) -> Option<&ChatTemplate> {
        self.inner.template.as_deref()
    }

    /// Logits per position of the model.
    pub fn vocab_size(&self) -> usize {
        self.inner.vocab_size
    }

    /// Queue a request; the returned [`PendingCompletion`] resolves when it finishes.
    pub fn submit(&self, request: Request) -> PendingCompletion {
        let (tx, rx) = oneshot::channel();
        if let Err(mpsc::error::SendError(Command::Submit(_, tx))) =
            self.inner.tx.send(Command::Submit(request, tx))
        {
            let _ = tx.send(Err(EngineError::Shutdown));
        }
        PendingCompletion { rx }
    }

    /// Submit several requests at once (they are batched) and await them all, in order.
    pub async fn generate(&self, requests: Vec<Request>) -> Vec<Result<Completion, EngineError>> {
        let pending: Vec<PendingCompletion> =
            requests.into_iter().map(|r| self.submit(r)).collect();
        let mut out = Vec::with_capacity(pending.len());
        for p in pending {
            out.push(p.await);
        }
        out
    }

    /// [`Engine::generate`] for code outside an async runtime.
    pub fn generate_blocking(
        &self,
        requests: Vec<Request>,
    ) -> Vec<Result<Completion, EngineError>> {
        let pending: Vec<PendingCompletion> =
            requests.into_iter().map(|r| self.submit(r)).collect();
        pending.into_iter().map(PendingCompletion::wait).collect()
    }

    /// Queue depth and batch size as of the engine thread's last step.
    pub fn load_stats(&self) -> LoadStats {
        let l = &self.inner.load;
        LoadStats {
            waiting: l.waiting.load(Ordering::Relaxed),
            running: l.running.load(Ordering::Relaxed),
            last_batch: l.last_batch.load(Ordering::Relaxed),
        }
    }

    /// Number of live handles (clones) to this engine.
    pub fn handles(&self) -> usize {
        Arc::strong_count(&self.inner)
    }

    /// Stop the engine thread (requests still in flight fail with [`EngineError::Shutdown`])
    /// and hand back the model it was started with. Fails, without stopping anything, while
    /// other clones of this handle exist; fails when `M` is not the model's type.
    pub fn stop<M: DecoderModel + 'static>(self) -> Result<M, EngineError> {
        let mut inner = Arc::try_unwrap(self.inner).map_err(|inner| {
            EngineError::BadRequest(format!(
                "cannot stop the engine: {} other handle(s) to it are still alive",
                Arc::strong_count(&inner) - 1
            ))
        })?;
        let _ = inner.tx.send(Command::Shutdown);
        let thread = inner.thread.take();
        drop(inner);
        let boxed = thread
            .ok_or(EngineError::Shutdown)?
            .join()
            .map_err(|_| EngineError::Model("the engine thread panicked".into()))?;
        let model = boxed.downcast::<Arc<M>>().map_err(|_| {
            EngineError::BadRequest(format!(
                "the engine does not run a {}",
                std::any::type_name::<M>()
            ))
        })?;
        Arc::try_unwrap(*model).map_err(|_| {
            EngineError::BadRequest("the engine's model is still shared after shutdown".into())
        })
    }

    /// Token and turn counters since the engine started (prefilled, decoded and cached tokens).
    pub fn stats(&self) -> EngineStats {
        self.inner.counters.snapshot()
    }

    pub(crate) fn counters(&self) -> &Counters {
        &self.inner.counters
    }

    pub(crate) fn turn_records(&self) -> &Mutex<TurnRecords> {
        &self.inner.turns
    }

    /// Drop a conversation's cached model states.
    pub fn forget_conversation(&self, id: &str) {
        if let Ok(mut t) = self.inner.turns.lock() {
            t.forget(id);
        }
        let _ = self.inner.tx.send(Command::Forget(id.to_string()));
    }
}

/// A submitted request: await it (async) or [`PendingCompletion::wait`] (blocking threads).
pub struct PendingCompletion {
    rx: oneshot::Receiver<Result<Completion, EngineError>>,
}

impl PendingCompletion {
    /// Block the current thread until the completion is ready. Not for use inside an async task.
    pub fn wait(self) -> Result<Completion, EngineError> {
        self.rx
            .blocking_recv()
            .unwrap_or(Err(EngineError::Shutdown))
    }
}

impl Future for PendingCompletion {
    type Output = Result<Completion, EngineError>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(EngineError::Shutdown)))
    }
}

/// The engine thread: take commands, step while there is work, answer finished requests.
fn serve<M: DecoderModel>(
    mut core: EngineCore<M>,
    mut rx: mpsc::UnboundedReceiver<Command>,
    load: &Load,
) {
    let mut waiters: HashMap<u64, oneshot::Sender<Result<Completion, EngineError>>> =
        HashMap::new();
    loop {
        // Block for a command when idle; otherwise take what has arrived and keep stepping.
        let mut commands = Vec::new();
        if !core.has_work() {
            match rx.blocking_recv() {
                Some(c) => commands.push(c),
                None => return,
            }
        }
        while let Ok(c) = rx.try_recv() {
            commands.push(c);
        }
        for c in commands {
            match c {
                Command::Submit(request, reply) => match core.add(request) {
                    Ok(id) => {
                        waiters.insert(id, reply);
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                    }
                },
                Command::Forget(id) => core.forget_conversation(&id),
                Command::Shutdown => {
                    answer(&mut waiters, core.abort_all(EngineError::Shutdown));
                    return;
                }
            }
        }
        // Callers that have gone (dropped their PendingCompletion) free their sequences now.
        waiters.retain(|&id, reply| {
            let gone = reply.is_closed();
            if gone {
                core.cancel(id);
            }
            !gone
        });
        if core.has_work() {
            let finished = core.step();
            load.last_batch
                .store(core.running() + finished.len(), Ordering::Relaxed);
            answer(&mut waiters, finished);
        }
        load.waiting.store(core.waiting(), Ordering::Relaxed);
        load.running.store(core.running(), Ordering::Relaxed);
    }
}

fn answer(
    waiters: &mut HashMap<u64, oneshot::Sender<Result<Completion, EngineError>>>,
    finished: Vec<Finished>,
) {
    for (id, result) in finished {
        if let Some(reply) = waiters.remove(&id) {
            let _ = reply.send(result);
        }
    }
}
