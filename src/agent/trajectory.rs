//! Trajectories: the full record of one agent run as JSONL — a header, every message (with the
//! turn, token usage and model time of assistant turns, and the token record of turns sampled by
//! a backend that has one), every command (exit code, timeout, refusal, duration), controller
//! events (submissions, gate results, round boundaries) and a footer with totals. Loadable again
//! to seed Round-0 conversations into repair, as SFT conversations ([`sft_conversations`]) or as
//! GRPO samples ([`turn_samples`]: per assistant turn, the exact tokens the engine read and
//! sampled, with their log-probabilities and routing).

use crate::engine::RoutingRecord;
use crate::policy::{ChatMessage, Role, Usage};
use crate::train::sft_data::Conversation;
use serde::{Deserialize, Serialize};
use std::io::{BufRead, Write};
use std::path::Path;

pub const TRAJECTORY_SCHEMA: u32 = 1;

/// One line of a trajectory file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Entry {
    Header {
        schema: u32,
        /// `test`, `repair`, …
        role: String,
        instance_id: String,
        policy: String,
        /// Seconds since the Unix epoch.
        started_at: u64,
    },
    Message {
        turn: usize,
        message: ChatMessage,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        usage: Option<Usage>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        model_ms: Option<u64>,
        /// Assistant turns sampled by the engine: what it read and sampled.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tokens: Option<TurnTokens>,
    },
    Command {
        turn: usize,
        command: String,
        exit_code: Option<i32>,
        timed_out: bool,
        truncated: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refused: Option<String>,
        duration_ms: u64,
    },
    /// A controller event; `data` is the event's own record (gate verdict, submission, …).
    Event {
        turn: usize,
        name: String,
        data: serde_json::Value,
    },
    Footer {
        outcome: serde_json::Value,
        turns: usize,
        usage: Usage,
        model_ms: u64,
        tool_ms: u64,
        wall_ms: u64,
    },
}

/// The token record of one sampled assistant turn.
///
/// Every turn re-reads the whole conversation, so prompts are stored relative to the previous
/// recorded turn of the same trajectory: the first `prompt_shared` tokens of this turn's prompt
/// equal the first tokens of the previous recorded turn's prompt followed by its completion, and
/// `prompt_suffix` holds the rest (stored in full, prompts would make a file quadratic in its
/// length). The routing record stays in memory only (`#[serde(skip)]`): it is `layers × tokens ×
/// top_k` per turn, derived from weights and tokens, and needed only by an in-process GRPO step
/// that holds the trajectory anyway.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnTokens {
    pub prompt_shared: usize,
    pub prompt_suffix: Vec<u32>,
    /// Sampled ids, stop token included.
    pub completion_ids: Vec<u32>,
    /// Policy log-probability of each sampled id.
    pub logprobs: Vec<f32>,
    #[serde(skip)]
    pub routing: Option<RoutingRecord>,
}

impl TurnTokens {
    /// Record a turn whose prompt was `prompt`, given the previous recorded turn's prompt followed
    /// by its completion (`reference`; empty for the first turn).
    pub fn new(
        reference: &[u32],
        prompt: &[u32],
        completion_ids: Vec<u32>,
        logprobs: Vec<f32>,
        routing: Option<RoutingRecord>,
    ) -> Self {
        let shared = reference
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        TurnTokens {
            prompt_shared: shared,
            prompt_suffix: prompt[shared..].to_vec(),
            completion_ids,
            logprobs,
            routing,
        }
    }
}

/// One assistant turn as a training sample (the unit GRPO trains on): the prompt the engine
/// actually read at that turn and what it sampled, so rollout log-probabilities are exactly those
/// of the sequence the loss sees, even where the chat template re-renders earlier turns
/// differently.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnSample {
    /// The trajectory turn number of the assistant message.
    pub turn: usize,
    pub prompt_ids: Vec<u32>,
    pub completion_ids: Vec<u32>,
    /// Rollout log-probability of each completion id.
    pub logprobs: Vec<f32>,
    /// The engine's routing record (when requested and still in memory).
    pub routing: Option<RoutingRecord>,
}

impl TurnSample {
    /// Prompt followed by completion.
    pub fn ids(&self) -> Vec<u32> {
        [&self.prompt_ids[..], &self.completion_ids[..]].concat()
    }

    /// Per token of [`TurnSample::ids`]: true on sampled (trained) tokens.
    pub fn train_mask(&self) -> Vec<bool> {
        let mut m = vec![false; self.prompt_ids.len()];
        m.resize(m.len() + self.completion_ids.len(), true);
        m
    }

    /// Rollout log-probabilities aligned with [`TurnSample::ids`] (0 on prompt tokens).
    pub fn old_logprobs(&self) -> Vec<f32> {
        let mut l = vec![0.0; self.prompt_ids.len()];
        l.extend_from_slice(&self.logprobs);
        l
    }

    /// The routing for replay over [`TurnSample::ids`]: per layer `[T · top_k]`, from the
    /// engine's record (the whole prompt — turns served from the conversation cache get a
    /// record stitched onto the previous turn's, so it starts at 0 — and the completion but its never-forwarded last token; see
    /// [`crate::train::rollout::replay_routing`]). `None` without a record or when the record
    /// does not cover the sequence from its start.
    pub fn replay_routing(&self) -> Option<Vec<Vec<u32>>> {
        let total = self.prompt_ids.len() + self.completion_ids.len();
        crate::train::rollout::replay_routing(self.routing.as_ref()?, total).ok()
    }
}

/// Every assistant turn with a token record, in order, with its full prompt rebuilt.
pub fn turn_samples(t: &Trajectory) -> Result<Vec<TurnSample>, TrajectoryError> {
    let mut reference: Vec<u32> = Vec::new();
    let mut out = Vec::new();
    for e in &t.entries {
        let Entry::Message {
            turn,
            tokens: Some(k),
            ..
        } = e
        else {
            continue;
        };
        if k.prompt_shared > reference.len() || k.logprobs.len() != k.completion_ids.len() {
            return Err(TrajectoryError::Tokens {
                turn: *turn,
                reason: format!(
                    "prompt_shared {} of {} reference tokens, {} logprobs for {} completion ids",
                    k.prompt_shared,
                    reference.len(),
                    k.logprobs.len(),
                    k.completion_ids.len()
                ),
            });
        }
        let prompt = [&reference[..k.prompt_shared], &k.prompt_suffix[..]].concat();
        reference = [&prompt[..], &k.completion_ids[..]].concat();
        out.push(TurnSample {
            turn: *turn,
            prompt_ids: prompt,
            completion_ids: k.completion_ids.clone(),
            logprobs: k.logprobs.clone(),
            routing: k.routing.clone(),
        });
    }
    Ok(out)
}

/// The conversations of a trajectory file as SFT data: one per trajectory in the file (a file
/// may hold several, each starting with its header line), every message in order, with the
/// agent's tool declaration (`bash`, the only tool). The chat template decides what of them is
/// rendered (e.g. reasoning of earlier turns); `train::sft_data` masks the assistant tokens.
pub fn sft_conversations(path: &Path) -> Result<Vec<Conversation>, TrajectoryError> {
    let all = Trajectory::read_jsonl(path)?;
    let mut out: Vec<Conversation> = Vec::new();
    let mut current: Option<Conversation> = None;
    for e in &all.entries {
        match e {
            Entry::Header { .. } => out.extend(current.replace(Conversation {
                messages: Vec::new(),
                tools: super::tool::bash_tools(),
            })),
            Entry::Message { message, .. } => current
                .get_or_insert_with(|| Conversation {
                    messages: Vec::new(),
                    tools: super::tool::bash_tools(),
                })
                .messages
                .push(message.to_model()),
            _ => {}
        }
    }
    out.extend(current);
    out.retain(|c| !c.messages.is_empty());
    if out.is_empty() {
        return Err(TrajectoryError::Parse {
            path: path.display().to_string(),
            line: 0,
            reason: "no messages".into(),
        });
    }
    Ok(out)
}

#[derive(Debug, thiserror::Error)]
pub enum TrajectoryError {
    #[error("trajectory turn {turn}: inconsistent token record: {reason}")]
    Tokens { turn: usize, reason: String },
    #[error("trajectory {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("trajectory {path}, line {line}: {reason}")]
    Parse {
        path: String,
        line: usize,
        reason: String,
    },
}

/// An in-memory trajectory.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    pub entries: Vec<Entry>,
}

impl Trajectory {
    pub fn push(&mut self, e: Entry) {
        self.entries.push(e);
    }

    /// Every message, in order.
    pub fn messages(&self) -> Vec<ChatMessage> {
        self.entries
            .iter()
            .filter_map(|e| match e {
                Entry::Message { message, .. } => Some(message.clone()),
                _ => None,
            })
            .collect()
    }

    /// Events named `name`, in order.
    pub fn events<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a serde_json::Value> + 'a {
        self.entries.iter().filter_map(move |e| match e {
            Entry::Event { name: n, data, .. } if n == name => Some(data),
            _ => None,
        })
    }

    /// Write as JSONL (one entry per line), creating parent directories.
    pub fn write_jsonl(&self, path: &Path) -> Result<(), TrajectoryError> {
        let io = |source| TrajectoryError::Io {
            path: path.display().to_string(),
            source,
        };
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(io)?;
        }
        let mut f = std::io::BufWriter::new(std::fs::File::create(path).map_err(io)?);
        for e in &self.entries {
            let line = serde_json::to_string(e).expect("trajectory entries serialise");
            writeln!(f, "{line}").map_err(io)?;
        }
        f.flush().map_err(io)?;
        f.get_ref().sync_all().map_err(io)
    }

    /// Read a JSONL trajectory.
    pub fn read_jsonl(path: &Path) -> Result<Self, TrajectoryError> {
        let p = path.display().to_string();
        let f = std::fs::File::open(path).map_err(|source| TrajectoryError::Io {
            path: p.clone(),
            source,
        })?;
        let mut t = Trajectory::default();
        for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
            let line = line.map_err(|source| TrajectoryError::Io {
                path: p.clone(),
                source,
            })?;
            if line.trim().is_empty() {
                continue;
            }
            let e = serde_json::from_str(&line).map_err(|e| TrajectoryError::Parse {
                path: p.clone(),
                line: i + 1,
                reason: e.to_string(),
            })?;
            t.entries.push(e);
        }
        Ok(t)
    }
}

/// Seed conversion (paper B.3.2): keep system, user and assistant text plus *paired* tool calls and
/// their observations; drop reasoning, unpaired tool items and the exit row (the final submission
/// turn and anything after it, which the controller replaces with its own message).
pub fn seed_messages(messages: &[ChatMessage]) -> Vec<ChatMessage> {
    // Drop the exit row: the last assistant turn whose observation (if any) ends the conversation
    // is the submission; everything from it on is dropped.
    let exit = messages.iter().rposition(|m| m.role == Role::Assistant);
    let kept = match exit {
        Some(i) => &messages[..i],
        None => messages,
    };
    let answered: std::collections::HashSet<&str> = kept
        .iter()
        .filter(|m| m.role == Role::Tool)
        .filter_map(|m| m.tool_call_id.as_deref())
        .collect();
    let called: std::collections::HashSet<&str> = kept
        .iter()
        .flat_map(|m| m.tool_calls.iter().map(|c| c.id.as_str()))
        .collect();
    kept.iter()
        .filter_map(|m| {
            let mut m = m.clone();
            m.reasoning_content = None;
            match m.role {
                Role::Tool => {
                    let id = m.tool_call_id.as_deref()?;
                    called.contains(id).then_some(m)
                }
                Role::Assistant => {
                    m.tool_calls.retain(|c| answered.contains(c.id.as_str()));
                    Some(m)
                }
                _ => Some(m),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::ToolCall;

    fn call(id: &str) -> ChatMessage {
        let mut m = ChatMessage::assistant("run");
        m.reasoning_content = Some("thinking".into());
        m.tool_calls = vec![ToolCall {
            id: id.into(),
            name: "bash".into(),
            arguments: serde_json::json!({"command": "ls"}),
        }];
        m
    }

    #[test]
    fn roundtrip_jsonl() {
        let dir = tempfile::tempdir().unwrap();
        let mut t = Trajectory::default();
        t.push(Entry::Header {
            schema: TRAJECTORY_SCHEMA,
            role: "test".into(),
            instance_id: "x".into(),
            policy: "scripted:a".into(),
            started_at: 1,
        });
        t.push(Entry::Message {
            turn: 1,
            message: call("c1"),
            usage: Some(Usage {
                prompt_tokens: 3,
                completion_tokens: 4,
            }),
            model_ms: Some(5),
            tokens: Some(TurnTokens::new(
                &[],
                &[1, 2, 3],
                vec![4, 5],
                vec![-0.5, -0.25],
                None,
            )),
        });
        t.push(Entry::Event {
            turn: 1,
            name: "gate".into(),
            data: serde_json::json!({"status": "pass"}),
        });
        let p = dir.path().join("sub/t.jsonl");
        t.write_jsonl(&p).unwrap();
        assert_eq!(Trajectory::read_jsonl(&p).unwrap(), t);
    }

    #[test]
    fn bad_line_is_a_typed_error() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.jsonl");
        std::fs::write(&p, "{\"type\":\"nope\"}\n").unwrap();
        assert!(matches!(
            Trajectory::read_jsonl(&p),
            Err(TrajectoryError::Parse { line: 1, .. })
        ));
    }

    #[test]
    fn seed_drops_reasoning_unpaired_and_exit_row() {
        let msgs = vec![
            ChatMessage::system("s"),
            ChatMessage::user("u"),
            call("c1"),
            ChatMessage::tool("c1", "out"),
            call("c2"), // unpaired (no observation)
            ChatMessage::tool("zz", "orphan"),
            ChatMessage::user("note"),
            call("c3"), // exit row
            ChatMessage::tool("c3", "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"),
        ];
        let s = seed_messages(&msgs);
        assert_eq!(s.len(), 6);
        assert!(s.iter().all(|m| m.reasoning_content.is_none()));
        assert_eq!(s[2].tool_calls.len(), 1);
        assert!(s[4].tool_calls.is_empty());
        assert_eq!(s[5].content, "note");
    }

    fn sampled(reference: &[u32], prompt: &[u32], completion: &[u32]) -> Entry {
        let lp: Vec<f32> = completion.iter().map(|&c| -(c as f32) / 10.0).collect();
        Entry::Message {
            turn: 1,
            message: ChatMessage::assistant("x"),
            usage: None,
            model_ms: None,
            tokens: Some(TurnTokens::new(
                reference,
                prompt,
                completion.to_vec(),
                lp,
                None,
            )),
        }
    }

    #[test]
    fn turn_samples_rebuild_prompts_through_the_file() {
        // Turn 2 re-renders turn 1's completion differently (9 instead of 5 6): only the shared
        // prefix is stored, and the full prompt comes back exactly.
        let p1 = [1, 2, 3];
        let c1 = [5, 6, 7];
        let p2 = [1, 2, 3, 9, 7, 8];
        let c2 = [10, 11];
        let mut t = Trajectory::default();
        t.push(Entry::Message {
            turn: 0,
            message: ChatMessage::user("u"),
            usage: None,
            model_ms: None,
            tokens: None,
        });
        t.push(sampled(&[], &p1, &c1));
        t.push(sampled(&[1, 2, 3, 5, 6, 7], &p2, &c2));
        match &t.entries[2] {
            Entry::Message {
                tokens: Some(k), ..
            } => {
                assert_eq!((k.prompt_shared, &k.prompt_suffix[..]), (3, &[9, 7, 8][..]))
            }
            _ => unreachable!(),
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        t.write_jsonl(&path).unwrap();
        let s = turn_samples(&Trajectory::read_jsonl(&path).unwrap()).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(
            (&s[0].prompt_ids[..], &s[0].completion_ids[..]),
            (&p1[..], &c1[..])
        );
        assert_eq!(
            (&s[1].prompt_ids[..], &s[1].completion_ids[..]),
            (&p2[..], &c2[..])
        );
        assert_eq!(s[1].logprobs, vec![-1.0, -1.1]);
        assert_eq!(s[1].ids(), vec![1, 2, 3, 9, 7, 8, 10, 11]);
        assert_eq!(
            s[1].train_mask(),
            vec![false, false, false, false, false, false, true, true]
        );
        assert_eq!(s[1].old_logprobs()[6..], [-1.0, -1.1]);
        // A broken record is a typed error, not a panic.
        let mut bad = t.clone();
        if let Entry::Message {
            tokens: Some(k), ..
        } = &mut bad.entries[2]
        {
            k.prompt_shared = 99;
        }
        assert!(matches!(
            turn_samples(&bad),
            Err(TrajectoryError::Tokens { .. })
        ));
    }

    #[test]
    fn replay_routing_covers_every_token() {
        let mut s = TurnSample {
            turn: 1,
            prompt_ids: vec![1, 2],
            completion_ids: vec![3, 4],
            logprobs: vec![0.0, 0.0],
            routing: Some(RoutingRecord {
                start: 0,
                top_k: 2,
                experts: vec![vec![0, 1, 2, 3, 4, 5]],
            }),
        };
        // Three forwarded tokens (prompt + first completion token); the never-forwarded last
        // token gets experts 0..top_k.
        assert_eq!(s.replay_routing(), Some(vec![vec![0, 1, 2, 3, 4, 5, 0, 1]]));
        s.routing.as_mut().unwrap().start = 1;
        assert_eq!(
            s.replay_routing(),
            None,
            "a partial record cannot be replayed"
        );
    }

    #[test]
    fn sft_conversations_split_at_headers() {
        let dir = tempfile::tempdir().unwrap();
        let header = |id: &str| Entry::Header {
            schema: TRAJECTORY_SCHEMA,
            role: "test".into(),
            instance_id: id.into(),
            policy: "scripted:a".into(),
            started_at: 1,
        };
        let msg = |m: ChatMessage| Entry::Message {
            turn: 0,
            message: m,
            usage: None,
            model_ms: None,
            tokens: None,
        };
        let mut t = Trajectory::default();
        t.push(header("a"));
        t.push(msg(ChatMessage::user("one")));
        t.push(msg(call("c1")));
        t.push(msg(ChatMessage::tool("c1", "out")));
        t.push(header("b"));
        t.push(msg(ChatMessage::user("two")));
        let p = dir.path().join("t.jsonl");
        t.write_jsonl(&p).unwrap();
        let c = sft_conversations(&p).unwrap();
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].messages.len(), 3);
        assert_eq!(c[0].messages[1].tool_calls[0].name, "bash");
        assert_eq!(
            c[0].messages[1].reasoning_content.as_deref(),
            Some("thinking")
        );
        assert_eq!(c[1].messages[0].content, "two");
        assert_eq!(c[0].tools, crate::agent::tool::bash_tools());
        std::fs::write(&p, "").unwrap();
        assert!(sft_conversations(&p).is_err());
    }
}
