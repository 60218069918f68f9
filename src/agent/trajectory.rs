//! Trajectories: the full record of one agent run as JSONL — a header, every message (with the
//! turn, token usage and model time of assistant turns), every command (exit code, timeout,
//! refusal, duration), controller events (submissions, gate results, round boundaries) and a
//! footer with totals. Loadable again to seed Round-0 conversations into repair or as SFT data.

use crate::policy::{ChatMessage, Role, Usage};
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

#[derive(Debug, thiserror::Error)]
pub enum TrajectoryError {
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
}
