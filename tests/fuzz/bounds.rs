//! The size and time bounds of the log parsers (issue #26, item 3): a log over the stated
//! maximum is a typed error (`logparse::LogTooLarge`, `ParseError::TooLarge`,
//! `InfraKind::LogTooLarge`), and below it every parser is linear on adversarial shapes (one
//! very long line, many lines, long runs of one character or marker, many failure sections
//! against many summary entries).
//!
//! * `logs_adversarial_linear` (CI): every adversarial shape at 1 MiB through every parser,
//!   each shape within a CPU time (of the test's thread, not wall time) a quadratic parser could
//!   not meet.
//! * `logs_adversarial_timing` (`--ignored`): the same shapes at `FUZZ_LOG_MB` MiB (default
//!   16), one line of timings per shape (recorded in `benches/results/fuzz.md`).

use crate::logs::every_parser;
use execcritic::harness::logparse::{parse_log, MAX_LOG_BYTES};
use execcritic::harness::official::{self, InfraKind, ParseError, PARSER_NAMES};
use execcritic::harness::selector::CommandRunner;
use std::time::{Duration, Instant};

/// `unit` repeated up to about `size` bytes (`{i}` in it numbered), then `tail`.
fn fill(size: usize, unit: &str, tail: &str) -> String {
    let mut s = String::with_capacity(size + tail.len() + unit.len() + 20);
    let mut i = 0usize;
    while s.len() < size {
        s.push_str(&unit.replace("{i}", &i.to_string()));
        i += 1;
    }
    s.push_str(tail);
    s
}

/// The adversarial shapes, each about `size` bytes.
pub fn adversarial(size: usize) -> Vec<(&'static str, String)> {
    const START: &str = ">>>>> Start Test Output\n";
    const END: &str = ">>>>> End Test Output\n>>>>> Test Exit Code: 1\n";
    vec![
        ("one long line", format!("{START}PASSED {}\n{END}", "a".repeat(size))),
        ("long line of spaces", format!("{START}PASSED x{}y\n{END}", " ".repeat(size))),
        ("newlines only", format!("{START}{}{END}", "\n".repeat(size))),
        ("underscores", format!("{START}{}\n{END}", "_".repeat(size))),
        ("rule of `=`", format!("{START}{}\n{END}", "=".repeat(size))),
        ("distinct PASSED lines", fill(size, "PASSED t.py::test_{i}\n", END)),
        ("FAILED with ` - ` runs", format!("{START}FAILED t.py::x{}\n{END}", " - ".repeat(size / 3))),
        ("brackets and dashes", format!("{START}PASSED t.py::x{}\n{END}", "[] - ".repeat(size / 5))),
        ("colour escapes", format!("{START}{}PASSED x\n{END}", "\u{1b}[31m".repeat(size / 5))),
        (
            "failure sections then summary",
            format!(
                "{START}{}=== short test summary info ===\n{}{END}",
                fill(size / 2, "_ test_{i} _\nE   ValueError: {i}\n", ""),
                fill(size / 2, "FAILED t.py::test_{i} - E\n", "=== 1 failed in 1s ===\n"),
            ),
        ),
        (
            "one long exception for many nodes",
            format!(
                "{START}_ c _\nE   {}\n=== short test summary info ===\n{}{END}",
                "x".repeat(size / 2),
                fill(size / 2, "FAILED f_{i}.py::c\n", "=== 1 failed in 1s ===\n"),
            ),
        ),
        ("unittest heads without status", fill(size, "test_{i} (m.C)\n", END)),
        ("unittest traceback blocks", fill(size, "FAIL: test_{i} (m.C)\nValueError: x\n", END)),
        (
            "django prints without `ok`",
            fill(size, "t_{i} (m.C) ... Testing against Django installed in x\n", "silenced).\nok\n"),
        ),
        ("sympy headers", fill(size, "_ a_{i}.py:b _\n", END)),
        ("sympy statuses", fill(size, "test_{i} ok\n", END)),
        ("markers repeated", fill(size, START, END)),
        ("exit codes repeated", fill(size, ">>>>> Test Exit Code: 0\n", "")),
    ]
}

/// Every parser on `log`: the slowest single call and its parser, and the total.
fn timed(log: &str) -> (Duration, String, Duration) {
    let mut slowest = (Duration::ZERO, String::new());
    let mut total = Duration::ZERO;
    let mut time = |what: String, f: &dyn Fn()| {
        let t = Instant::now();
        f();
        let d = t.elapsed();
        total += d;
        if d > slowest.0 {
            slowest = (d, what);
        }
    };
    for entry in official::parsers::entries().filter(|e| e.alias_of.is_none()) {
        time(entry.name.to_string(), &|| {
            let _ = official::parse(entry.name, log);
        });
    }
    time("official_logs_eval".into(), &|| {
        let _ = official::official_logs_eval("parse_log_pytest", log);
    });
    time("read_test_output".into(), &|| {
        let _ = official::read_test_output("parse_log_pytest", log);
    });
    for runner in [CommandRunner::Pytest, CommandRunner::Unittest, CommandRunner::Sympy] {
        time(format!("logparse {runner:?}"), &|| {
            let _ = parse_log(runner, log);
        });
    }
    (slowest.0, slowest.1, total)
}

/// CPU time of the calling thread (every parser runs in it). The bound is on the work done, not
/// on wall time: CI runs this beside the other fuzz targets on two cores, and a wall-clock bound
/// (20 s for a shape that takes ≈ 2 s alone) once failed there under load alone.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a valid out-pointer for the calling thread's CPU clock.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[test]
fn logs_adversarial_linear() {
    for (shape, log) in adversarial(1 << 20) {
        let t = thread_cpu();
        every_parser(&log);
        let took = thread_cpu() - t;
        assert!(took < Duration::from_secs(20), "{shape}: every parser took {took:?} of CPU on 1 MiB");
    }
}

#[test]
#[ignore = "timing probe: cargo test --test fuzz logs_adversarial_timing -- --ignored --nocapture"]
fn logs_adversarial_timing() {
    let mb: usize = std::env::var("FUZZ_LOG_MB").ok().and_then(|v| v.parse().ok()).unwrap_or(16);
    for (shape, log) in adversarial(mb << 20) {
        let (slowest, which, total) = timed(&log);
        eprintln!(
            "| {shape} | {:.1} MB | {:.2} s ({which}) | {:.2} s |",
            log.len() as f64 / 1e6,
            slowest.as_secs_f64(),
            total.as_secs_f64()
        );
    }
}

/// A log one byte over the bound, shaped like a real one.
fn over_size() -> String {
    let mut log = fill(MAX_LOG_BYTES, "PASSED t.py::test_{i}\n", "");
    log.truncate(MAX_LOG_BYTES - 200);
    log.insert_str(0, ">>>>> Start Test Output\n");
    log.push_str(">>>>> End Test Output\n>>>>> Test Exit Code: 0\n");
    while log.len() <= MAX_LOG_BYTES {
        log.push('\n');
    }
    log
}

#[test]
fn logs_over_the_bound_are_typed_errors() {
    let log = over_size();
    for runner in [CommandRunner::Pytest, CommandRunner::Django, CommandRunner::Unittest, CommandRunner::Sympy] {
        let e = parse_log(runner, &log).expect_err("over-size log parsed");
        assert_eq!(e.bytes, log.len());
    }
    for name in PARSER_NAMES {
        assert!(matches!(official::parse(name, &log), Err(ParseError::TooLarge { .. })), "{name}");
        assert!(matches!(official::official_logs_eval(name, &log), Err(ParseError::TooLarge { .. })), "{name}");
        let infra = official::read_test_output(name, &log).expect_err("over-size log read");
        assert_eq!(infra.kind, InfraKind::LogTooLarge, "{name}");
    }
    // At the bound, a log is read.
    let mut at = log;
    at.truncate(MAX_LOG_BYTES);
    assert!(parse_log(CommandRunner::Pytest, &at).is_ok());
    assert!(official::parse("parse_log_pytest", &at).is_ok());
}

/// One failure section's exception line becomes the reason of every node it names, cut to
/// 1 KiB (else a long line times many nodes is their product in memory).
#[test]
fn logs_section_reason_is_cut_to_its_bound() {
    let log = format!(
        "_ test_c _\nE   ValueError: {}\n=== short test summary info ===\nFAILED t.py::test_c\nFAILED u.py::test_c\n=== 2 failed in 1s ===\n",
        "\u{e9}".repeat(3000)
    );
    let parsed = parse_log(CommandRunner::Pytest, &log).unwrap();
    for id in ["t.py::test_c", "u.py::test_c"] {
        let r = &parsed.reasons[id];
        assert!(r.starts_with("ValueError: \u{e9}") && r.len() <= 1024 && r.len() > 1000, "{id}: {}", r.len());
    }
}
