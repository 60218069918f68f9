//! Fuzz targets of every log parser: the official SWE-bench parsers by name (all of
//! `PARSER_NAMES`), swebench's `get_logs_eval` replica, the fail-closed `read_test_output`, and the
//! harness's own runners' readers (`harness::logparse`).
//!
//! * `logs_mutated_seeds`: byte-level mutations of the recorded logs under
//!   `tests/fixtures/swebench_official/logs` with the markers and status words the parsers branch
//!   on: no panic, for every parser.
//! * `logs_structured`: logs assembled line by line from those markers, status lines, test names
//!   and noise, with long runs of one line (repetition): no panic.
//! * `logs_native_runners`: byte-level mutations of the real `cargo test` and `go test -json`
//!   outputs under `tests/fixtures/native_runners`, with libtest and go event markers: the native
//!   readers (`harness::runners`) never panic.

use crate::driver::{fuzz, mutated, seeds};
use execcritic::harness::logparse::parse_log;
use execcritic::harness::official::{self, PARSER_NAMES};
use execcritic::harness::runners::{cargo::read_libtest, go::read_go_json};
use execcritic::harness::selector::CommandRunner;
use proptest::prelude::*;

const MARKERS: &[&str] = &[
    ">>>>> Start Test Output", ">>>>> End Test Output", ">>>>> Test Exit Code: 0",
    ">>>>> Test Exit Code: 1", "+ echo '>>>>> Test Exit Code: 0'", ">>>>> Patch Apply Failed",
    ">>>>> Tests Timed Out", "PASSED tests/test_a.py::test_x", "FAILED tests/test_a.py::test_y - E",
    "tests/test_a.py::test_z PASSED", "ERROR tests/x.py", "XFAIL t.py::q", "SKIPPED [1] t.py:3",
    "test_a (m.T) ... ok", "test_b (m.T) ... FAIL", "test_c (m.T) ... ERROR", "FAIL: test_d (m.T)",
    "ERROR:", "FAIL:", "Ran 3 tests in 0.1s", "OK", "FAILED (failures=1)",
    "test_e ok", "test_f F", "test_g E", "________ test_h ________", "=== short test summary info ===",
    "==== 1 passed in 0.1s ====", "--- PASS: TestX (0.00s)", "--- FAIL: TestY (0.00s)", "ok  \tpkg\t0.1s",
    "test tests::a ... ok", "test tests::b ... FAILED", "test result: ok. 1 passed", "[100%]",
    "\u{1b}[32mPASSED\u{1b}[0m t.py::c", "\r", "\u{1c}", "\u{e9}", "::", " - ", "[", "]",
];

pub fn every_parser(log: &str) {
    for name in PARSER_NAMES {
        let _ = official::parse(name, log);
        let _ = official::official_logs_eval(name, log);
        let _ = official::read_test_output(name, log);
    }
    for runner in [CommandRunner::Pytest, CommandRunner::Django, CommandRunner::Unittest, CommandRunner::Sympy] {
        let _ = parse_log(runner, log);
    }
    native_readers(log);
}

fn native_readers(log: &str) {
    let _ = read_libtest(log, "demo/lib");
    let _ = read_go_json(log, "example.com/demo", &["./calc".to_string(), ".".to_string()]);
}

const NATIVE_MARKERS: &[&str] = &[
    "running 1 test\n", "running 18446744073709551616 tests\n", "test tests::a ... ok\n",
    "test tests::a ... FAILED\n", "test tests::a ... ignored, slow\n", "failures:\n",
    "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n",
    "   Doc-tests demo\n", "     Running unittests src/lib.rs (x)\n", "error[E0425]: x\n",
    "{\"Action\":\"run\",\"Package\":\"example.com/demo/calc\",\"Test\":\"TestA\"}\n",
    "{\"Action\":\"pass\",\"Package\":\"example.com/demo/calc\",\"Test\":\"TestA\"}\n",
    "{\"Action\":\"fail\",\"Package\":\"example.com/demo\"}\n", "FAIL\texample.com/demo [build failed]\n",
    "# example.com/demo/calc\n", "{\"Action\":7}\n", "\"", "}", "\u{e9}", "\r",
];

#[test]
fn logs_native_runners() {
    let corpus = seeds("tests/fixtures/native_runners", &[".log", ".stdout"]);
    fuzz("logs_native_runners", 400, mutated(corpus, NATIVE_MARKERS), |log| {
        native_readers(&log);
        Ok(())
    });
}

#[test]
fn logs_mutated_seeds() {
    let corpus = seeds("tests/fixtures/swebench_official/logs", &[".txt"]);
    fuzz("logs_mutated_seeds", 400, mutated(corpus, MARKERS), |log| {
        every_parser(&log);
        Ok(())
    });
}

#[test]
fn logs_structured() {
    let line = (prop::sample::select(MARKERS), "[a-z_:. /()\\[\\]-]{0,12}", 1usize..50, 0u8..4)
        .prop_map(|(m, noise, repeat, shape)| {
            let l = match shape {
                0 => m.to_string(),
                1 => format!("{m}{noise}"),
                2 => format!("{noise}{m}"),
                _ => noise,
            };
            // Mostly single lines; now and then a long run of one line.
            let n = if repeat > 45 { repeat * 40 } else { 1 };
            vec![l; n].join("\n")
        });
    fuzz("logs_structured", 300, prop::collection::vec(line, 0..40), |lines| {
        let log = lines.join("\n");
        every_parser(&log);
        Ok(())
    });
}
