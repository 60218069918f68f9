//! The CPU engine's heap policy: freed buffers stay in the process for the next forward pass.
//!
//! A forward pass allocates and frees tens of MiB of activation buffers per layer (projections,
//! gathered expert rows, SwiGLU and attention scratch). With glibc's defaults a buffer above the
//! dynamic mmap threshold is a fresh mapping, and the top of a heap is trimmed back to the kernel
//! as soon as it is free, so every layer pays a page fault and the zeroing of every page it
//! touches: on 2 Zen 5 vCPUs that was 25–30% of a bf16 prefill (`perf`: `clear_page_erms`,
//! `exc_page_fault`, LRU locks; benches/results/cpu-engine.md has the before/after run).
//!
//! [`retain_freed_memory`] sets glibc's mmap threshold to its ceiling (32 MiB on 64-bit: smaller
//! buffers come from the heap and are reused) and the trim threshold to 2 GiB (freed memory is
//! kept), once per process, when the CPU model is built. Resident memory then stays near the
//! high-water mark of a forward pass, as with PyTorch's caching allocators. Set
//! `EXECCRITIC_HEAP=system` to keep the C library's defaults (for comparison runs); off glibc
//! this is a no-op.

use std::sync::OnceLock;

/// Environment variable: `system` keeps the C library's heap defaults.
pub const ENV: &str = "EXECCRITIC_HEAP";

/// The policy in force after [`retain_freed_memory`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HeapPolicy {
    /// Freed buffers are reused (the thresholds were raised).
    Retain,
    /// The C library's defaults (asked for, or the C library refused, or not glibc).
    System,
}

impl HeapPolicy {
    pub fn name(self) -> &'static str {
        match self {
            HeapPolicy::Retain => "retain",
            HeapPolicy::System => "system",
        }
    }
}

/// Apply the policy once per process (later calls return the first result).
pub fn retain_freed_memory() -> HeapPolicy {
    static POLICY: OnceLock<HeapPolicy> = OnceLock::new();
    *POLICY.get_or_init(|| {
        let asked_system = std::env::var(ENV).is_ok_and(|v| v.trim().eq_ignore_ascii_case("system"));
        if asked_system {
            HeapPolicy::System
        } else {
            apply()
        }
    })
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn apply() -> HeapPolicy {
    /// glibc's ceiling for the mmap threshold on 64-bit (`DEFAULT_MMAP_THRESHOLD_MAX`).
    const MMAP_THRESHOLD: libc::c_int = 32 << 20;
    // SAFETY: mallopt only changes allocator parameters; it is thread-safe in glibc.
    let ok = unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
            && libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX) == 1
    };
    if ok {
        HeapPolicy::Retain
    } else {
        HeapPolicy::System
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn apply() -> HeapPolicy {
    HeapPolicy::System
}

#[cfg(test)]
mod tests {
    use super::*;

    /// On glibc the thresholds are accepted (unless the environment asks for the defaults), and
    /// the policy is decided once: every later call reports the first result.
    #[test]
    fn freed_memory_is_retained_once_per_process() {
        let first = retain_freed_memory();
        let asked_system = std::env::var(ENV).is_ok_and(|v| v.trim().eq_ignore_ascii_case("system"));
        if cfg!(all(target_os = "linux", target_env = "gnu")) && !asked_system {
            assert_eq!(first, HeapPolicy::Retain, "glibc refused the heap thresholds");
        } else {
            assert_eq!(first, HeapPolicy::System);
        }
        assert_eq!(retain_freed_memory(), first);
        assert_eq!(first.name(), if first == HeapPolicy::Retain { "retain" } else { "system" });
    }
}
