//! Agent-turn continuation: the prompt of a conversation's next turn is the conversation's own
//! tokens — the previous turn's prompt followed by the completion exactly as sampled — plus the
//! rendering of what was added since (the tool observation, the next generation prompt). The
//! engine's conversation cache then holds a state for every token but the new ones, so a turn
//! prefills only its new tokens, and the trainer sees the tokens the policy actually produced.
//!
//! Re-rendering the whole conversation instead would give different tokens for the assistant
//! turn (the template normalises reasoning and tool calls, and the sampled text need not
//! tokenise canonically), and the cached state could only be reused up to the turn boundary.
//!
//! The continuation is used when the new messages extend the previous request's messages by one
//! assistant message and any number of new messages, and the template renders that extension as
//! a pure suffix (the conversation rendered up to the assistant turn, without a generation
//! prompt, is a prefix of the new rendering). The assistant turn ends with a closing token (for
//! Qwen3.5 `<|im_end|>`); when the completion did not end with it (`max_tokens`), it is appended.
//! Otherwise — a real user query makes the template drop earlier reasoning, another stop token
//! ended the turn, the history was edited — the conversation is rendered in full and only the
//! longest cached prefix is reused ([`crate::engine::EngineStats::rerendered_turns`]).

use super::error::EngineError;
use crate::model::chat::{ChatOptions, ChatTemplate, Message, Role};
use super::sequence::RoutingRecord;
use crate::model::tokenizer::Tokenizer;
use serde_json::Value;
use std::collections::HashMap;

/// What the engine read and sampled for a conversation's last turn.
#[derive(Debug, Clone)]
pub(crate) struct TurnRecord {
    /// The messages of the last request.
    pub messages: Vec<Message>,
    /// Its prompt ids followed by the sampled ids.
    pub tokens: Vec<u32>,
    /// Its routing record from position 0 (when routing was requested).
    pub routing: Option<RoutingRecord>,
}

/// Turn records by conversation id, at most `capacity`, least recently used evicted.
pub(crate) struct TurnRecords {
    map: HashMap<String, (u64, TurnRecord)>,
    capacity: usize,
    clock: u64,
}

impl TurnRecords {
    pub fn new(capacity: usize) -> Self {
        TurnRecords {
            map: HashMap::new(),
            capacity,
            clock: 0,
        }
    }

    pub fn get(&self, id: &str) -> Option<TurnRecord> {
        self.map.get(id).map(|(_, r)| r.clone())
    }

    pub fn store(&mut self, id: String, record: TurnRecord) {
        if self.capacity == 0 {
            return;
        }
        self.clock += 1;
        if !self.map.contains_key(&id) && self.map.len() >= self.capacity {
            let oldest = self.map.iter().min_by_key(|(_, (t, _))| *t).map(|(k, _)| k.clone());
            if let Some(k) = oldest {
                self.map.remove(&k);
            }
        }
        self.map.insert(id, (self.clock, record));
    }

    pub fn forget(&mut self, id: &str) {
        self.map.remove(id);
    }
}

/// The next turn's prompt ids as a continuation of `prev`, or `None` when `messages` (rendered
/// as `rendered`, with the generation prompt) do not extend it as a suffix.
pub(crate) fn continue_turn(
    template: &ChatTemplate,
    tokenizer: &Tokenizer,
    prev: &TurnRecord,
    messages: &[Message],
    tools: &[Value],
    options: ChatOptions,
    rendered: &str,
) -> Result<Option<Vec<u32>>, EngineError> {
    let n = prev.messages.len();
    let extends = messages.len() > n
        && messages[..n] == prev.messages[..]
        && messages[n].role == Role::Assistant;
    if !extends {
        return Ok(None);
    }
    let history_options = ChatOptions {
        add_generation_prompt: false,
        ..options
    };
    let Ok(old) = template.render(&messages[..=n], tools, history_options) else {
        return Ok(None);
    };
    if !rendered.starts_with(&old) {
        return Ok(None);
    }
    // The assistant turn ends with a closing token; everything after it is new.
    let turn_end = old.trim_end();
    let close = tokenizer
        .stop_ids()
        .iter()
        .copied()
        .find(|&id| tokenizer.id_token(id).is_some_and(|t| turn_end.ends_with(&t)));
    let Some(close) = close else {
        return Ok(None);
    };
    let mut ids = prev.tokens.clone();
    match ids.last() {
        Some(&last) if last == close => {}
        Some(last) if tokenizer.stop_ids().contains(last) => return Ok(None),
        _ => ids.push(close),
    }
    ids.extend(tokenizer.encode(&rendered[turn_end.len()..])?);
    Ok(Some(ids))
}

/// Make a turn's routing record start at position 0 again: a turn served partly from the
/// conversation cache records only the tokens it forwarded (from `rec.start`); the earlier
/// turn's record (from 0) supplies the positions before. Left as is when the earlier record does
/// not reach `rec.start`.
pub(crate) fn stitch_routing(earlier: Option<&RoutingRecord>, rec: &mut RoutingRecord) {
    let Some(e) = earlier else { return };
    let (k, start) = (rec.top_k, rec.start);
    let covers = |l: &Vec<u32>| l.len() >= start * k;
    if start == 0
        || e.start != 0
        || e.top_k != k
        || e.experts.len() != rec.experts.len()
        || !e.experts.iter().all(covers)
    {
        return;
    }
    for (acc, old) in rec.experts.iter_mut().zip(&e.experts) {
        let mut full = old[..start * k].to_vec();
        full.append(acc);
        *acc = full;
    }
    rec.start = 0;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_is_stitched_onto_the_earlier_record() {
        let earlier = RoutingRecord {
            start: 0,
            top_k: 2,
            experts: vec![vec![1, 2, 3, 4, 5, 6], vec![7, 8, 9, 10, 11, 12]],
        };
        let mut rec = RoutingRecord {
            start: 2,
            top_k: 2,
            experts: vec![vec![20, 21], vec![22, 23]],
        };
        stitch_routing(Some(&earlier), &mut rec);
        assert_eq!(rec.start, 0);
        assert_eq!(rec.experts, vec![vec![1, 2, 3, 4, 20, 21], vec![7, 8, 9, 10, 22, 23]]);
        // an earlier record that does not reach the start leaves the record alone
        let mut far = RoutingRecord {
            start: 5,
            top_k: 2,
            experts: vec![vec![0, 1], vec![0, 1]],
        };
        stitch_routing(Some(&earlier), &mut far);
        assert_eq!(far.start, 5);
        stitch_routing(None, &mut far);
        assert_eq!(far.experts, vec![vec![0, 1], vec![0, 1]]);
    }

    #[test]
    fn turn_records_are_bounded_least_recently_stored_first() {
        let rec = |n: u32| TurnRecord {
            messages: Vec::new(),
            tokens: vec![n],
            routing: None,
        };
        let mut t = TurnRecords::new(2);
        t.store("a".into(), rec(1));
        t.store("b".into(), rec(2));
        t.store("a".into(), rec(3));
        t.store("c".into(), rec(4));
        assert!(t.get("b").is_none());
        assert_eq!(t.get("a").unwrap().tokens, vec![3]);
        t.forget("a");
        assert!(t.get("a").is_none());
        assert_eq!(t.get("c").unwrap().tokens, vec![4]);
    }
}
