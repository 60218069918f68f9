//! The stable-Rust fuzz driver every target of this binary runs under: a proptest
//! [`TestRunner`] fed in batches with seeds derived from the target's name, so that
//!
//! * **CI mode** (the default, and what `cargo test --test fuzz` runs) executes a fixed number of
//!   inputs from a fixed seed: deterministic, a few seconds per target;
//! * **soak mode** (`FUZZ_SECONDS=N`, see `scripts/fuzz-soak.sh`) runs batch after batch with fresh
//!   seeds until N seconds have passed; `FUZZ_CASES=N` instead runs exactly N inputs;
//!   `FUZZ_SEED=K` offsets the seeds (to resume a soak elsewhere in the input space).
//!
//! A failing input is shrunk by proptest and reported with its batch seed; the minimal input then
//! becomes a plain `#[test]` next to the code it broke. Every run prints
//! `fuzz <target>: <inputs> inputs in <seconds> s` on stderr (the soak script reads this line).

use proptest::strategy::Strategy;
use proptest::test_runner::{Config, RngAlgorithm, TestCaseError, TestError, TestRng, TestRunner};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Inputs per batch in soak mode (one seed each).
const SOAK_BATCH: u32 = 2_000;

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn seed(target: &str, batch: u64) -> [u8; 32] {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(target.as_bytes());
    h.update(batch.to_le_bytes());
    h.finalize().into()
}

/// Run `test` on inputs drawn from `strategy`: `ci_cases` inputs in CI mode, or as the
/// environment asks (module doc). Panics, with the shrunk input and its seed, on the first
/// failing input.
pub fn fuzz<S: Strategy>(
    target: &str,
    ci_cases: u32,
    strategy: S,
    test: impl Fn(S::Value) -> Result<(), TestCaseError>,
) {
    let seconds = env_u64("FUZZ_SECONDS");
    let total = env_u64("FUZZ_CASES").unwrap_or(ci_cases as u64);
    let first = env_u64("FUZZ_SEED").unwrap_or(0);
    let started = Instant::now();
    let deadline = seconds.map(|s| started + Duration::from_secs(s));
    let executed = AtomicU64::new(0);
    let counted = |v: S::Value| {
        executed.fetch_add(1, Ordering::Relaxed);
        test(v)
    };
    let mut batch = first;
    loop {
        let done = executed.load(Ordering::Relaxed);
        let cases = match deadline {
            Some(d) if Instant::now() >= d => break,
            Some(_) => SOAK_BATCH,
            None if done >= total => break,
            None => (total - done).min(u32::MAX as u64) as u32,
        };
        let config = Config {
            cases,
            failure_persistence: None,
            max_shrink_iters: 4_096,
            ..Config::default()
        };
        let rng = TestRng::from_seed(RngAlgorithm::ChaCha, &seed(target, batch));
        let mut runner = TestRunner::new_with_rng(config, rng);
        match runner.run(&strategy, &counted) {
            Ok(()) => {}
            Err(TestError::Fail(why, input)) => panic!(
                "fuzz {target}: batch seed {batch} failed: {why}\nminimal input: {input:#?}"
            ),
            Err(TestError::Abort(why)) => panic!("fuzz {target}: batch seed {batch} aborted: {why}"),
        }
        batch += 1;
    }
    eprintln!(
        "fuzz {target}: {} inputs in {:.1} s",
        executed.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64()
    );
}

/// Every file under `dir` (relative to the crate root) whose name ends with one of `suffixes`,
/// read as UTF-8 (files that are not are skipped): the seed corpora of the targets.
pub fn seeds(dir: &str, suffixes: &[&str]) -> Vec<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut out: Vec<(std::path::PathBuf, String)> = walkdir::WalkDir::new(&root)
        .into_iter()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_file())
        .filter(|e| suffixes.iter().any(|s| e.file_name().to_string_lossy().ends_with(s)))
        .filter_map(|e| Some((e.path().to_path_buf(), std::fs::read_to_string(e.path()).ok()?)))
        .collect();
    out.sort();
    assert!(!out.is_empty(), "no seeds under {dir} ending with {suffixes:?}");
    out.into_iter().map(|(_, text)| text).collect()
}

/// A byte-level mutation of a seed text, kept valid UTF-8: each step deletes a range, duplicates
/// a range, inserts a fragment from `dictionary` or arbitrary bytes, or truncates.
pub fn mutated(
    seeds: Vec<String>,
    dictionary: &'static [&'static str],
) -> impl Strategy<Value = String> {
    use proptest::prelude::*;
    let step = (0u8..5, any::<prop::sample::Index>(), any::<prop::sample::Index>(), 0usize..64,
        prop::sample::select(dictionary), "[\\x00-\\x7f\u{e9}\u{2028}]{0,8}");
    (prop::sample::select(seeds), prop::collection::vec(step, 1..6)).prop_map(|(seed, steps)| {
        let mut s = seed.into_bytes();
        for (kind, at, from, len, word, junk) in steps {
            let i = at.index(s.len() + 1);
            match kind {
                0 => {
                    let end = (i + len).min(s.len());
                    s.drain(i..end);
                }
                1 => {
                    let j = from.index(s.len() + 1);
                    let end = (j + len).min(s.len());
                    let piece = s[j..end].to_vec();
                    s.splice(i..i, piece);
                }
                2 => {
                    s.splice(i..i, word.bytes());
                }
                3 => {
                    s.splice(i..i, junk.bytes());
                }
                _ => s.truncate(i),
            }
        }
        String::from_utf8_lossy(&s).into_owned()
    })
}
