//! Conversation cache: model states kept between the requests of one conversation, so a new
//! turn (e.g. a tool observation) is read on top of the cached state instead of re-reading the
//! whole conversation.
//!
//! A cached state must correspond exactly to a prefix of the next prompt. The state after a
//! generation covers prompt + completion (minus the last sampled token); the next prompt is the
//! re-rendered conversation, whose tokens for the assistant turn may differ from the sampled ones
//! (the template normalises whitespace, drops reasoning, or the text tokenises differently).
//! Gated DeltaNet states cannot be rewound, so the engine also snapshots the state at the turn
//! boundary: right after the prompt's last added token (`<think>` of the generation prompt, or
//! `<|im_start|>`), where text is split before BPE and the next, re-rendered prompt is sure to
//! tokenise the same way. Each conversation keeps these two snapshots; the
//! next request resumes from the longest one whose tokens are a strict prefix of its prompt, and
//! prefills from scratch when none is. Conversations are evicted least-recently-used beyond a
//! capacity, or dropped explicitly.

use std::collections::{HashMap, VecDeque};

/// A model state and the exact tokens it has consumed.
pub(crate) struct Snapshot<S> {
    pub tokens: Vec<u32>,
    pub state: S,
}

pub(crate) struct ConversationCache<S> {
    entries: HashMap<String, Vec<Snapshot<S>>>,
    /// Least recently used first.
    order: VecDeque<String>,
    capacity: usize,
}

impl<S> ConversationCache<S> {
    pub fn new(capacity: usize) -> Self {
        ConversationCache {
            entries: HashMap::new(),
            order: VecDeque::new(),
            capacity,
        }
    }

    /// Take the conversation's longest snapshot that is a strict prefix of `prompt` (at least one
    /// prompt token must remain to be read). The conversation's entry is removed either way: its
    /// next snapshots come from this request.
    pub fn take(&mut self, id: &str, prompt: &[u32]) -> Option<Snapshot<S>> {
        let snapshots = self.entries.remove(id)?;
        self.order.retain(|k| k != id);
        snapshots
            .into_iter()
            .filter(|s| s.tokens.len() < prompt.len() && prompt.starts_with(&s.tokens))
            .max_by_key(|s| s.tokens.len())
    }

    /// Store the snapshots of a finished request (replacing older ones).
    pub fn store(&mut self, id: String, snapshots: Vec<Snapshot<S>>) {
        if self.capacity == 0 || snapshots.is_empty() {
            return;
        }
        self.forget(&id);
        while self.entries.len() >= self.capacity {
            match self.order.pop_front() {
                Some(old) => {
                    self.entries.remove(&old);
                }
                None => break,
            }
        }
        self.order.push_back(id.clone());
        self.entries.insert(id, snapshots);
    }

    /// Drop the least recently used conversation (to make room in the model's cache); false
    /// when none is cached.
    pub fn evict_oldest(&mut self) -> bool {
        match self.order.pop_front() {
            Some(old) => self.entries.remove(&old).is_some(),
            None => false,
        }
    }

    pub fn forget(&mut self, id: &str) {
        if self.entries.remove(id).is_some() {
            self.order.retain(|k| k != id);
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }
}
