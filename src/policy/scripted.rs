//! `scripted:FILE` — a policy that replays assistant turns from a JSONL file, one
//! `{"content": "..."}` object per line (optionally `"reasoning_content"`), in order. Used by
//! tests and the demo; running out of turns is a clear error, never a silent empty answer.

use super::{BoxFuture, ChatRequest, Completion, Policy, PolicyError, Usage};
use serde::Deserialize;
use std::path::Path;
use std::sync::Mutex;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ScriptedTurn {
    content: String,
    #[serde(default)]
    reasoning_content: Option<String>,
}

/// Replays a fixed list of assistant turns. Each `complete` call consumes one turn per request.
#[derive(Debug)]
pub struct ScriptedPolicy {
    source_name: String,
    turns: Vec<ScriptedTurn>,
    next: Mutex<usize>,
}

impl ScriptedPolicy {
    /// Load a JSONL script from disk.
    pub fn from_file(path: &Path) -> Result<Self, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|e| PolicyError::Script {
            source_name: path.display().to_string(),
            reason: format!("cannot read: {e}"),
        })?;
        Self::from_jsonl(&path.display().to_string(), &text)
    }

    /// Parse a JSONL script held in memory (`source_name` labels errors and trajectories).
    pub fn from_jsonl(source_name: &str, text: &str) -> Result<Self, PolicyError> {
        let mut turns = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let turn: ScriptedTurn =
                serde_json::from_str(line).map_err(|e| PolicyError::Script {
                    source_name: source_name.to_string(),
                    reason: format!("line {}: expected {{\"content\": \"...\"}}: {e}", i + 1),
                })?;
            turns.push(turn);
        }
        if turns.is_empty() {
            return Err(PolicyError::Script {
                source_name: source_name.to_string(),
                reason: "the script holds no assistant turns".into(),
            });
        }
        Ok(ScriptedPolicy {
            source_name: source_name.to_string(),
            turns,
            next: Mutex::new(0),
        })
    }

    /// How many turns have been served so far.
    pub fn served(&self) -> usize {
        *self.next.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many turns the script holds.
    pub fn len(&self) -> usize {
        self.turns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.turns.is_empty()
    }
}

impl Policy for ScriptedPolicy {
    fn complete<'a>(
        &'a self,
        requests: &'a [ChatRequest],
    ) -> BoxFuture<'a, Result<Vec<Completion>, PolicyError>> {
        Box::pin(async move {
            let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
            if *next + requests.len() > self.turns.len() {
                return Err(PolicyError::ScriptExhausted {
                    source_name: self.source_name.clone(),
                    served: *next,
                });
            }
            let out = requests
                .iter()
                .map(|req| {
                    let turn = &self.turns[*next];
                    *next += 1;
                    let prompt_chars: usize = req.messages.iter().map(|m| m.content.len()).sum();
                    Completion {
                        text: turn.content.clone(),
                        reasoning: turn.reasoning_content.clone(),
                        usage: Usage {
                            // A script has no tokenizer: usage counts characters / 4, labelled
                            // as an estimate in the trajectory header ("scripted").
                            prompt_tokens: (prompt_chars / 4) as u64,
                            completion_tokens: (turn.content.len() / 4) as u64,
                        },
                        finish_reason: Some("stop".into()),
                        ..Completion::default()
                    }
                })
                .collect();
            Ok(out)
        })
    }

    fn describe(&self) -> String {
        format!("scripted:{}", self.source_name)
    }
}
