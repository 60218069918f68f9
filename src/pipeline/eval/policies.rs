//! Where each unit's policy comes from.
//!
//! - `scripted:DIR` (a directory): `DIR/<instance_id>.jsonl` is replayed for that instance, the
//!   same file for every run; `scripted:FILE` replays one file for every instance. Every unit
//!   gets a fresh replay; a unit that continues a conversation (a repair run after the shared
//!   Round 0) starts after the turns the earlier unit consumed.
//! - `http:URL`, `engine:DIR`: one policy shared by every instance, at most `slots` requests in
//!   flight at once (the engine batches the ones it is given).

use super::EvalError;
use crate::policy::{open_policy, BoxFuture, ChatRequest, Completion, Policy, PolicyError, PolicySpec, ScriptedPolicy};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A role's policy source.
pub enum PolicySource {
    /// Replayed scripts: a directory of per-instance files or one file for all.
    Scripted { spec: String, path: PathBuf },
    /// One live policy for every instance.
    Shared { spec: String, policy: Arc<dyn Policy> },
}

/// A live policy with at most `slots` concurrent requests.
struct Slotted {
    inner: Box<dyn Policy>,
    slots: tokio::sync::Semaphore,
}

impl Policy for Slotted {
    fn complete<'a>(&'a self, requests: &'a [ChatRequest]) -> BoxFuture<'a, Result<Vec<Completion>, PolicyError>> {
        Box::pin(async move {
            let _slot = self.slots.acquire().await.map_err(|e| PolicyError::Engine(e.to_string()))?;
            self.inner.complete(requests).await
        })
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

impl PolicySource {
    /// Open the policy a spec names (`slots`: concurrent requests to a shared policy).
    pub fn open(spec: &str, slots: usize) -> Result<PolicySource, EvalError> {
        match spec.parse::<PolicySpec>()? {
            PolicySpec::Scripted(path) => Ok(PolicySource::Scripted { spec: spec.to_string(), path }),
            other => Ok(PolicySource::Shared {
                spec: spec.to_string(),
                policy: Arc::new(Slotted {
                    inner: open_policy(&other)?,
                    slots: tokio::sync::Semaphore::new(slots.max(1)),
                }),
            }),
        }
    }

    /// The spec as given (recorded as `model_name_or_path`).
    pub fn spec(&self) -> &str {
        match self {
            PolicySource::Scripted { spec, .. } | PolicySource::Shared { spec, .. } => spec,
        }
    }

    fn script_path(path: &Path, instance_id: &str) -> PathBuf {
        if path.is_dir() {
            path.join(format!("{instance_id}.jsonl"))
        } else {
            path.to_path_buf()
        }
    }

    /// The identity of this instance's policy for result keys: the spec, and for a script the
    /// hash of its bytes (an edited script is a different policy).
    pub fn identity(&self, instance_id: &str) -> String {
        match self {
            PolicySource::Scripted { spec, path } => {
                let file = Self::script_path(path, instance_id);
                let digest = std::fs::read(&file).map_or_else(|e| format!("unreadable: {e}"), |b| hex::encode(Sha256::digest(b)));
                format!("{spec} {} sha256={digest}", file.display())
            }
            PolicySource::Shared { spec, .. } => spec.clone(),
        }
    }

    /// The policy of one unit of `instance_id`; a replay starts after `skip` turns.
    pub fn for_unit(&self, instance_id: &str, skip: usize) -> Result<Arc<dyn Policy>, PolicyError> {
        match self {
            PolicySource::Shared { policy, .. } => Ok(policy.clone()),
            PolicySource::Scripted { path, .. } => {
                let file = Self::script_path(path, instance_id);
                let text = std::fs::read_to_string(&file).map_err(|e| PolicyError::Script {
                    source_name: file.display().to_string(),
                    reason: format!("cannot read: {e}"),
                })?;
                let rest: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).skip(skip).collect();
                Ok(Arc::new(ScriptedPolicy::from_jsonl(&file.display().to_string(), &rest.join("\n"))?))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts requests in flight and the most seen at once.
    #[derive(Default)]
    struct Counting {
        now: AtomicUsize,
        most: AtomicUsize,
    }

    impl Policy for Counting {
        fn complete<'a>(&'a self, _: &'a [ChatRequest]) -> BoxFuture<'a, Result<Vec<Completion>, PolicyError>> {
            Box::pin(async move {
                let n = self.now.fetch_add(1, Ordering::SeqCst) + 1;
                self.most.fetch_max(n, Ordering::SeqCst);
                for _ in 0..10 {
                    tokio::task::yield_now().await;
                }
                self.now.fetch_sub(1, Ordering::SeqCst);
                Err(PolicyError::Engine("counted".into()))
            })
        }
        fn describe(&self) -> String {
            "counting".into()
        }
    }

    #[test]
    fn a_shared_policy_serves_at_most_slots_requests_at_once() {
        let counting = std::sync::Arc::new(Counting::default());
        struct Shared(std::sync::Arc<Counting>);
        impl Policy for Shared {
            fn complete<'a>(&'a self, r: &'a [ChatRequest]) -> BoxFuture<'a, Result<Vec<Completion>, PolicyError>> {
                self.0.complete(r)
            }
            fn describe(&self) -> String {
                self.0.describe()
            }
        }
        let slotted = Slotted { inner: Box::new(Shared(counting.clone())), slots: tokio::sync::Semaphore::new(2) };
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(futures_util::future::join_all((0..6).map(|_| slotted.complete(&[]))));
        assert_eq!(counting.most.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn scripted_dir_replays_per_instance_files_after_skipped_turns() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.jsonl"), "{\"content\": \"one\"}\n\n{\"content\": \"two\"}\n").unwrap();
        let src = PolicySource::open(&format!("scripted:{}", dir.path().display()), 1).unwrap();
        let p = src.for_unit("a", 0).unwrap();
        assert_eq!(p.describe(), src.for_unit("a", 0).unwrap().describe());
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let req = ChatRequest { messages: Vec::new(), tools: Vec::new(), sampling: crate::policy::SamplingParams::default(), conversation: None };
        let first = rt.block_on(crate::policy::complete_one(p.as_ref(), req.clone())).unwrap();
        assert_eq!(first.text, "one");
        let skipped = src.for_unit("a", 1).unwrap();
        assert_eq!(rt.block_on(crate::policy::complete_one(skipped.as_ref(), req)).unwrap().text, "two");
        assert!(src.for_unit("a", 2).is_err(), "nothing left to replay");
        assert!(src.for_unit("missing", 0).is_err());
        assert_ne!(src.identity("a"), src.identity("missing"));
    }
}
