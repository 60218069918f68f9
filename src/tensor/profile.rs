//! Op timing counters for the CPU forward pass, off unless `EXECCRITIC_PROFILE` is set (then
//! each named scope adds its wall time and call count to a process-wide table).
//! `benches/model_cpu.rs` prints the table per phase (prefill, decode batch 1 / 8); disabled,
//! a scope costs one cached flag check.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| {
        std::env::var_os("EXECCRITIC_PROFILE").is_some_and(|v| !v.is_empty() && v != "0")
    })
}

/// (seconds, calls) per scope name.
fn table() -> &'static Mutex<HashMap<&'static str, (f64, u64)>> {
    static T: OnceLock<Mutex<HashMap<&'static str, (f64, u64)>>> = OnceLock::new();
    T.get_or_init(|| Mutex::new(HashMap::new()))
}

/// A running timer; adds its elapsed time to `name` when dropped.
pub struct Scope {
    name: &'static str,
    start: Option<Instant>,
}

impl Drop for Scope {
    fn drop(&mut self) {
        if let Some(t) = self.start {
            let dt = t.elapsed().as_secs_f64();
            let mut tab = table().lock().unwrap_or_else(|e| e.into_inner());
            let e = tab.entry(self.name).or_insert((0.0, 0));
            e.0 += dt;
            e.1 += 1;
        }
    }
}

/// Time the rest of the enclosing block under `name` (when profiling is enabled).
#[inline]
pub fn scope(name: &'static str) -> Scope {
    Scope {
        name,
        start: enabled().then(Instant::now),
    }
}

/// Whether counters are being collected.
pub fn is_enabled() -> bool {
    enabled()
}

/// Take the table (sorted by time, largest first) and clear it.
pub fn take() -> Vec<(&'static str, f64, u64)> {
    let mut tab = table().lock().unwrap_or_else(|e| e.into_inner());
    let mut v: Vec<_> = tab.drain().map(|(k, (s, c))| (k, s, c)).collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v
}
