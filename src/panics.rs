//! Panics of third-party code as errors. Some crates we hand untrusted input to panic on
//! malformed input instead of returning an error (`tokenizers` on a `tokenizer.json`, minijinja on
//! a template, `parquet` on a task file; each found by a fuzz target, docs/testing.md). A bad
//! file must be a clear error, not a crash, so those calls run under [`caught`].

use std::panic::AssertUnwindSafe;

/// The message of a panic payload.
pub fn message(p: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic without a message".to_string()
    }
}

/// `f()`, or `"<who> panicked: <message>"` when it panics. (The panic hook still prints the
/// panic on stderr.)
pub fn caught<T>(who: &str, f: impl FnOnce() -> T) -> Result<T, String> {
    std::panic::catch_unwind(AssertUnwindSafe(f)).map_err(|p| format!("{who} panicked: {}", message(p.as_ref())))
}
