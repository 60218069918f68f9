//! SWE-bench's official parsers and grading, checked against swebench 5.0.2 itself.
//!
//! 1. Every case of `tests/fixtures/swebench_official/cases.json` against the committed answers
//!    of the reference package (`expected.json`, written by `scripts/swebench-oracle.py`).
//! 2. When swebench 5.0.2 can be imported here, a live differential: a few hundred logs made by
//!    mutating the fixture logs with a fixed seed (reordered, duplicated, prefixed, coloured,
//!    truncated, forged lines, odd whitespace, CRs), each read by a random registry parser, run
//!    through the oracle and through ours, and compared field by field. Without the package the
//!    differential prints why it skipped (`SWEBENCH_ORACLE_REQUIRED=1` turns that into a failure).
//!
//! Both also check that the fail-closed reading refuses every log swebench refuses.

use execcritic::harness::official::grading::{read_test_output, EvalType};
use execcritic::harness::official::infra::classify_text;
use execcritic::harness::official::parsers::{parse, LogParser, ParseError, PARSER_NAMES};
use execcritic::harness::official::pytext::python_newlines;
use execcritic::harness::official::report::{eval_report, python_json, GradingSpec};
use execcritic::harness::official::{eval_tests_report, resolution_status};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/swebench_official")
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

fn raised(e: &ParseError) -> Value {
    match e {
        ParseError::Raised(r) => json!({ "raised": r.exception }),
        ParseError::UnknownParser(name) => json!({ "raised": format!("KeyError: {name}") }),
        // The oracle's logs are small; over the bound is ours alone (no Python counterpart).
        ParseError::TooLarge { bytes } => json!({ "too_large": bytes }),
    }
}

/// Our answer to one case, in the oracle's shape.
fn ours(case: &Value) -> Value {
    let id = case["id"].as_str().unwrap_or("");
    let version = case["version"].as_str().unwrap_or("");
    let parser = LogParser::new(case["parser"].as_str().unwrap_or(""), id, version);
    let log = case["log"].as_str().unwrap_or("");
    let f2p = strings(&case["fail_to_pass"]);
    let p2p = strings(&case["pass_to_pass"]);
    let eval_type: EvalType =
        serde_json::from_value(case["eval_type"].clone()).unwrap_or(EvalType::PassAndFail);
    let model_patch = match case.get("model_patch") {
        None => Some("diff"),
        Some(v) => v.as_str(),
    };
    let mut out = json!({ "id": id, "tests_report": null, "resolution": null });
    match parse(parser, log) {
        Ok(map) => {
            let pairs: Vec<Value> = map.iter().map(|(k, v)| json!([k, v.as_str()])).collect();
            out["parse"] = json!({ "map": pairs });
            let report = eval_tests_report(&f2p, &p2p, &map, eval_type);
            out["resolution"] = json!(resolution_status(&report).as_str());
            out["tests_report"] = serde_json::to_value(&report).unwrap_or(Value::Null);
        }
        Err(e) => out["parse"] = raised(&e),
    }
    let spec = GradingSpec {
        parser,
        fail_to_pass: &f2p,
        pass_to_pass: &p2p,
        eval_type,
    };
    let text = python_newlines(log);
    out["report_json"] = match eval_report(id, model_patch, &spec, &text, true) {
        Ok(r) => json!(python_json(&r).unwrap_or_default()),
        Err(e) => raised(&e),
    };
    out["classification"] = match classify_text(log) {
        Some((reason, tier)) => json!([reason, tier.as_str()]),
        None => Value::Null,
    };
    out
}

/// Field-by-field differences between ours and swebench's answer.
fn differences(case: &Value, expected: &Value) -> Vec<String> {
    let got = ours(case);
    [
        "parse",
        "tests_report",
        "resolution",
        "report_json",
        "classification",
    ]
    .iter()
    .filter(|k| got[**k] != expected[**k])
    .map(|k| {
        format!(
            "{}: {k}\n  ours:     {}\n  swebench: {}",
            case["id"], got[*k], expected[*k]
        )
    })
    .collect()
}

/// swebench refused the log (no results, or its parser raised): the fail-closed reading must
/// refuse it too. Returns whether swebench graded a log that we refuse.
fn check_fail_closed(case: &Value, expected: &Value) -> bool {
    let id = case["id"].as_str().unwrap_or("");
    let version = case["version"].as_str().unwrap_or("");
    let parser = LogParser::new(case["parser"].as_str().unwrap_or(""), id, version);
    let text = python_newlines(case["log"].as_str().unwrap_or(""));
    let ours = read_test_output(parser, &text);
    let graded = expected["report_json"]
        .as_str()
        .and_then(|s| serde_json::from_str::<Value>(s).ok())
        .and_then(|v| v.as_object().and_then(|o| o.values().next().cloned()))
        .is_some_and(|r| r["patch_successfully_applied"] == json!(true));
    let patch_missing = case.get("model_patch").is_some_and(Value::is_null);
    if !graded && !patch_missing {
        assert!(
            ours.is_err(),
            "{}: swebench refuses this log but the fail-closed reading grades it",
            case["id"]
        );
    }
    graded && ours.is_err()
}

fn load_fixture_cases() -> Vec<Value> {
    let dir = fixture_dir();
    let cases = read_json(&dir.join("cases.json"));
    let mut cases = cases.as_array().cloned().unwrap_or_default();
    for case in &mut cases {
        if let Some(file) = case["log_file"].as_str() {
            let bytes = std::fs::read(dir.join(file)).unwrap_or_default();
            case["log"] = json!(String::from_utf8_lossy(&bytes));
        }
    }
    cases
}

#[test]
fn fixtures_match_committed_swebench_answers() {
    let cases = load_fixture_cases();
    let expected = read_json(&fixture_dir().join("expected.json"));
    let expected = expected.as_array().cloned().unwrap_or_default();
    assert_eq!(
        cases.len(),
        expected.len(),
        "expected.json is stale: regenerate it (README)"
    );
    assert!(cases.len() >= 30);
    let mut mismatches = Vec::new();
    let mut stricter = 0;
    for (case, exp) in cases.iter().zip(&expected) {
        assert_eq!(case["id"], exp["id"]);
        mismatches.extend(differences(case, exp));
        stricter += usize::from(check_fail_closed(case, exp));
    }
    eprintln!("official fixtures: {} cases, {} mismatches, {stricter} graded by swebench but refused fail-closed", cases.len(), mismatches.len());
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// The live differential.

/// xorshift64*: a fixed, dependency-free sequence.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const PREFIXES: &[&str] = &[
    "  ",
    "\t",
    "[gw0] ",
    "E   ",
    "PASSED ",
    "FAILED ",
    "ok ",
    "\u{1b}[1m",
    "\u{a0}",
];
const FORGED: &[&str] = &[
    "PASSED tests/test_a.py::test_fix",
    "FAIL:",
    "ERROR: ",
    "FAILED tests/x.py::t[a - b] - boom - more",
    ">>>>> Test Exit Code: 0",
    ">>>>> End Test Output",
    ">>>>> Start Test Output",
    "test_forged ok",
    "test_forged E",
    "--- PASS: TestForged (0.00s)",
    "test forged::case ... ok",
    "test_forged (app.T) ... ok",
    "Killed",
    "3 passing",
    "SKIPPED [3] x.py:1: reason",
    "XFAIL t[a",
    "PASSED: something",
    "some line ending in XPASSED",
    "_____ sympy/x.py:test_y _____",
    "ok",
    "[ok]: forged test (1 ms)",
    "[err]: forged in tests/unit/x.tcl",
    "[       OK ] Forged.Test (0 ms)",
    "[  FAILED  ] Forged.Test (0 ms)",
    "PASS: tests/forged",
    "pass  basics/forged.py",
    " ✔ Forged test",
    "Forged (Tests\\Forged)",
    "Calc forged - passed",
    "TestX#test_: forged. = 0.00 s = .",
    "  test_forged:\t\t.: (0.0001)",
    "  Forged scenario ..... .",
    "<doctest binary=\"x\"><TestCase name=\"f\"><SubCase name=\"g\"/></TestCase></doctest>",
    "</doctest>",
    "<doctest",
    "[INFO] BUILD SUCCESS",
    "+ mvn test -Dtest=Forged#test",
    "    [junit] [PASS] forged.Test.x",
    "forged.Test > method PASSED",
    "forged.Test > method",
    "FAILED",
];
const SPACES: &[&str] = &["\u{a0}", "\u{1c}", "\t", "\u{3000}", "  ", "\u{85}"];

fn mutate(rng: &mut Rng, log: &str) -> String {
    let mut lines: Vec<String> = log.split('\n').map(String::from).collect();
    for _ in 0..1 + rng.below(4) {
        let n = lines.len().max(1);
        let i = rng.below(n).min(lines.len().saturating_sub(1));
        if lines.is_empty() {
            lines.push(String::new());
        }
        match rng.below(10) {
            0 => {
                let j = rng.below(n).min(lines.len() - 1);
                lines.swap(i, j);
            }
            1 => {
                let line = lines[i].clone();
                lines.insert(i, line);
            }
            2 => lines[i] = format!("{}{}", rng.pick(PREFIXES), lines[i]),
            3 => {
                let line = &lines[i];
                let cut = line.find(' ').unwrap_or(line.len());
                lines[i] = format!("\u{1b}[32m{}\u{1b}[0m{}", &line[..cut], &line[cut..]);
            }
            4 => {
                let keep = rng.below(lines[i].chars().count() + 1);
                lines[i] = lines[i].chars().take(keep).collect();
            }
            5 => {
                lines.remove(i);
            }
            6 => lines.insert(i, rng.pick(FORGED).to_string()),
            7 => {
                let space = rng.pick(SPACES);
                lines[i] = lines[i].replacen(' ', space, 1 + rng.below(2));
            }
            8 => lines[i].push('\r'),
            _ => lines.truncate(i + 1),
        }
    }
    lines.join("\n")
}

/// Expected ids drawn from what the log mentions: exact keys, ids truncated inside their
/// brackets, and an id that is not there.
fn pick_ids(rng: &mut Rng, parser: &str, log: &str) -> Vec<String> {
    let keys: Vec<String> = parse(parser, log)
        .map(|m| m.iter().map(|(k, _)| k.to_string()).collect())
        .unwrap_or_default();
    let mut ids = Vec::new();
    for _ in 0..rng.below(4) {
        if keys.is_empty() {
            break;
        }
        let key = rng.pick(&keys).clone();
        let truncated = key.find('[').map(|b| {
            key.chars()
                .take(key[..b].chars().count() + 1 + rng.below(4))
                .collect::<String>()
        });
        match (rng.below(3), truncated) {
            (0, Some(t)) => ids.push(t),
            _ => ids.push(key),
        }
    }
    if rng.below(4) == 0 {
        ids.push("tests/test_absent.py::test_absent".to_string());
    }
    ids
}

fn generated_cases(fixtures: &[Value], count: usize) -> Vec<Value> {
    let mut rng = Rng(0x5EB0_2025_0502_0001);
    (0..count)
        .map(|i| {
            let base = rng.pick(fixtures);
            let log = mutate(&mut rng, base["log"].as_str().unwrap_or(""));
            let own = rng.below(5) < 3;
            let parser = if own {
                base["parser"]
                    .as_str()
                    .unwrap_or("parse_log_pytest")
                    .to_string()
            } else {
                rng.pick(&PARSER_NAMES).to_string()
            };
            // With its own parser a log keeps its instance (the parsers that choose a format by
            // instance id or version then choose as they did for the fixture).
            let (id, version) = match own {
                true => (base["id"].as_str().unwrap_or("").to_string(), base["version"].clone()),
                false => (format!("gen__case-{i}"), Value::Null),
            };
            let eval_type = if rng.below(6) == 0 {
                "fail_only"
            } else {
                "pass_and_fail"
            };
            let f2p = pick_ids(&mut rng, &parser, &log);
            let p2p = pick_ids(&mut rng, &parser, &log);
            let mut case = json!({
                "id": id, "parser": parser, "log": log,
                "fail_to_pass": f2p, "pass_to_pass": p2p, "eval_type": eval_type,
            });
            if version.is_string() {
                case["version"] = version;
            }
            case
        })
        .collect()
}

/// swebench's answers, or why the oracle cannot run here.
fn run_oracle(cases: &[Value]) -> Result<Vec<Value>, String> {
    let path = std::env::temp_dir().join(format!(
        "execcritic-swebench-cases-{}.json",
        std::process::id()
    ));
    std::fs::write(
        &path,
        serde_json::to_string(cases).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/swebench-oracle.py");
    let output = Command::new("python3").arg(script).arg(&path).output();
    let _ = std::fs::remove_file(&path);
    let output = output.map_err(|e| format!("python3 not runnable: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "oracle exited {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    let answers: Value =
        serde_json::from_slice(&output.stdout).map_err(|e| format!("oracle output: {e}"))?;
    Ok(answers.as_array().cloned().unwrap_or_default())
}

/// How the oracle's answers spread (so a differential that only ever compares empty maps shows).
fn coverage(answers: &[Value]) -> String {
    let mut counts = std::collections::BTreeMap::<String, usize>::new();
    for a in answers {
        let report = a["report_json"]
            .as_str()
            .and_then(|s| serde_json::from_str::<Value>(s).ok());
        let key = match report
            .as_ref()
            .and_then(|r| r.as_object()?.values().next().cloned())
        {
            None => "report raised".to_string(),
            Some(r) if r["patch_successfully_applied"] == json!(true) => {
                format!("graded resolved={}", r["resolved"])
            }
            Some(_) => "not graded".to_string(),
        };
        *counts.entry(key).or_default() += 1;
        let parse = if a["parse"].get("raised").is_some() {
            "parser raised"
        } else if a["parse"]["map"].as_array().is_some_and(|m| m.is_empty()) {
            "empty map"
        } else {
            "non-empty map"
        };
        *counts.entry(parse.to_string()).or_default() += 1;
        if let Some(r) = a["resolution"].as_str() {
            *counts.entry(r.to_string()).or_default() += 1;
        }
    }
    format!("{counts:?}")
}

#[test]
fn live_differential_against_swebench_5_0_2() {
    let fixtures = load_fixture_cases();
    // DIFFERENTIAL_CASES raises the count for a longer search (CI runs 400).
    let count = std::env::var("DIFFERENTIAL_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(400);
    let cases = generated_cases(&fixtures, count);
    let expected = match run_oracle(&cases) {
        Ok(answers) => answers,
        Err(why) => {
            let msg = format!(
                "SKIP live swebench differential: {why} (install with scripts/ci-deps-swebench.sh)"
            );
            assert!(
                std::env::var("SWEBENCH_ORACLE_REQUIRED").ok().as_deref() != Some("1"),
                "{msg}"
            );
            eprintln!("{msg}");
            return;
        }
    };
    assert_eq!(expected.len(), cases.len());
    let mut mismatches = Vec::new();
    let mut stricter = 0;
    for (case, exp) in cases.iter().zip(&expected) {
        let diffs = differences(case, exp);
        if !diffs.is_empty() {
            mismatches.push(format!("{}\n  log: {:?}", diffs.join("\n"), case["log"]));
        }
        stricter += usize::from(check_fail_closed(case, exp));
    }
    eprintln!("live swebench differential: {} cases, {} mismatching, {stricter} graded by swebench but refused fail-closed", cases.len(), mismatches.len());
    eprintln!("  coverage: {}", coverage(&expected));
    let shown: Vec<_> = mismatches.iter().take(5).cloned().collect();
    assert!(mismatches.is_empty(), "{}", shown.join("\n\n"));
}

#[test]
fn run_summary_matches_swebench_make_run_report() {
    use execcritic::harness::official::report::{run_summary, RunInputs, StoredReport};
    let spec = json!({
        "dataset": ["a", "b", "c", "d", "e", "f", "a", "g"],
        "predictions": {"a": "p", "b": "p", "c": "", "d": "p", "e": "p", "z": null, "f": null, "g": "p"},
        "reports": {
            "a": "{\"a\": {\"resolved\": true}}", "b": "{\"b\": {\"resolved\": false}}", "d": "  ",
            "g": "{\"g\": {\"patch_exists\": true}}",
        },
        "test_outputs": {"b": "x\nKilled\n", "e": "collected 0 items\n", "a": "Cannot allocate memory", "g": "Could not resolve host"},
    });
    let mut inputs = RunInputs {
        dataset: strings(&spec["dataset"]),
        ..Default::default()
    };
    for (id, patch) in spec["predictions"].as_object().into_iter().flatten() {
        inputs
            .predictions
            .insert(id.clone(), patch.as_str().map(String::from));
    }
    for (id, text) in spec["reports"].as_object().into_iter().flatten() {
        inputs.reports.insert(
            id.clone(),
            StoredReport::read(text.as_str().unwrap_or(""), id),
        );
    }
    for (id, text) in spec["test_outputs"].as_object().into_iter().flatten() {
        if let Some((reason, tier)) = classify_text(text.as_str().unwrap_or("")) {
            inputs
                .classifications
                .insert(id.clone(), (reason.to_string(), tier));
        }
    }
    let ours = python_json(&run_summary(&inputs)).unwrap_or_default() + "\n";
    let path = std::env::temp_dir().join(format!(
        "execcritic-swebench-run-{}.json",
        std::process::id()
    ));
    std::fs::write(&path, spec.to_string()).unwrap_or_else(|e| panic!("{e}"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/swebench-oracle.py");
    let output = Command::new("python3")
        .arg(script)
        .arg("--run-summary")
        .arg(&path)
        .output();
    let _ = std::fs::remove_file(&path);
    let theirs = match output {
        Ok(o) if o.status.success() => serde_json::from_slice::<Value>(&o.stdout)
            .ok()
            .and_then(|v| v["summary"].as_str().map(String::from))
            .unwrap_or_default(),
        other => {
            let why = match other {
                Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
                Err(e) => e.to_string(),
            };
            assert!(
                std::env::var("SWEBENCH_ORACLE_REQUIRED").ok().as_deref() != Some("1"),
                "{why}"
            );
            eprintln!("SKIP run-summary differential: {why}");
            return;
        }
    };
    assert_eq!(ours, theirs);
}

/// Registry names whose runner this machine cannot run, read on logs in the runner's published
/// format instead (`logs/multilingual/`, `logs/js/`), each graded above against swebench: the
/// repository's own test harness (Redis's and Valkey's Tcl suite, MicroPython's `run-tests.py`,
/// Lombok's Ant formatter, Jekyll's Cucumber formatter, marked's and Quarto's runners, Prism's
/// mocha command), a browser under Karma (bpmn-js, Chart.js, OpenLayers, p5.js, Preact's
/// `parse_log_karma`), jq's autotools `make check`, a registry we cannot reach (Maven Central for
/// Surefire; Gradle with the eval scripts' init script), or a parser that dispatches on the
/// instance (`parse_log_jekyll`, `_immutable_js`, `_next`, `_lighthouse`: their fixtures carry
/// the ids and versions of each branch).
const FORMAT_ONLY: &[&str] = &[
    "parse_log_redis", "parse_log_jq", "parse_log_micropython_test", "parse_log_maven",
    "parse_log_ant", "parse_log_gradle_custom", "parse_log_cucumber", "parse_log_jekyll",
    "parse_log_bpmn_js", "parse_log_chart_js", "parse_log_karma", "parse_log_openlayers",
    "parse_log_p5js", "parse_log_lighthouse", "parse_log_next", "parse_log_immutable_js",
    "parse_log_marked", "parse_log_prismjs", "parse_log_quarto_cli",
];

/// Every registry name we implement reads at least one real log: the output of the real runner
/// of its repositories, made by scripts/make-real-logs.py (pytest in the specs' variants,
/// Django's runner, sympy's runner, `cargo test`, `go test -v`, GoogleTest, doctest, PHPUnit,
/// Minitest, test-unit, RSpec, Jest, Vitest, mocha, tape), graded above against swebench — or is
/// in [`FORMAT_ONLY`] and reads a log in its format.
#[test]
fn every_parser_name_reads_a_real_runners_log() {
    let cases = read_json(&fixture_dir().join("cases.json"));
    let read = |name: &str, dir: &str| {
        cases.as_array().unwrap().iter().any(|c| {
            c["parser"] == name && c["log_file"].as_str().is_some_and(|f| f.starts_with(dir))
        })
    };
    for name in PARSER_NAMES {
        if FORMAT_ONLY.contains(&name) {
            assert!(read(name, "logs/"), "{name}: no case on a log in its format");
            assert!(!read(name, "logs/real/"), "{name} has a real log: take it off FORMAT_ONLY");
        } else {
            assert!(read(name, "logs/real/"), "{name}: no case on a real runner's log (scripts/make-real-logs.py)");
        }
    }
}
