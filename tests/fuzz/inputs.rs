//! Fuzz targets of the loaders of user-brought files and of the bundle the Test agent submits.
//!
//! * `tasks_jsonl`: mutations of the task files under `tests/fixtures` (JSONL and JSON arrays of
//!   SWE-bench-shaped rows): `parse_tasks` never panics.
//! * `tasks_parquet`: byte mutations of `tests/fixtures/tasks/swebench-sample.parquet`:
//!   `parquet_to_jsonl` never panics and returns a typed error on what it cannot read.
//! * `bundle_validation`: bundles from mutated fixture patches, generated test commands (with
//!   shell syntax and mutations) and generated contracts: `Bundle::from_parts`, `validate` and
//!   the selector's `parse_command`, `runners::parse_native_command` and a cargo task's
//!   `task_build_flags` (cargo/go words and node ids included) never panic; well-formed cargo
//!   commands with their contracts (and near-misses) reach the native node binding, and some
//!   validate.
//! * `go_subtest_selectors`: `go test -run '^<tests>$/^<cases>$'` commands from generated subtest
//!   names (any printable characters, regexp metacharacters and quotes included), escaped as
//!   `regexp.QuoteMeta` does: every node comes back as the (test, case) pair it names, and a
//!   damaged regex (an escape dropped, an anchor lost) never panics and never yields a node whose
//!   case is not a name go can print.
//! * `checkpoint_open`: checkpoint directories with a generated `model.safetensors` (headers with
//!   huge or inconsistent lengths, offsets and shapes) or a shard index whose file names escape
//!   the directory: `Checkpoint::open` never panics, and refuses every shard name that is not a
//!   plain file name inside the checkpoint.

use crate::driver::{fuzz, mutated, seeds};
use execcritic::harness::bundle::Bundle;
use execcritic::harness::runners::cargo::task_build_flags;
use execcritic::harness::runners::parse_native_command;
use execcritic::harness::selector::parse_command;
use execcritic::harness::validate::validate;
use execcritic::model::checkpoint::Checkpoint;
use execcritic::task::parquet::parquet_to_jsonl;
use execcritic::task::parse_tasks;
use proptest::prelude::*;
use serde_json::json;
use std::path::Path;

const JSON_DICTIONARY: &[&str] = &[
    "{", "}", "[", "]", "\"", ",", ":", "null", "\"FAIL_TO_PASS\": \"[\\\"a\\\"]\"", "\"instance_id\": \"x__y-1\"",
    "\\u0000", "\\ud800", "1e999", "-0", "\n", "[[[[[[[[[[[[[[[[[[[[", "\u{feff}", " ",
];

#[test]
fn tasks_jsonl() {
    let corpus = seeds("tests/fixtures", &[".jsonl"]);
    fuzz("tasks_jsonl", 1_000, mutated(corpus, JSON_DICTIONARY), |text| {
        let _ = parse_tasks(&text, Path::new("fuzz.jsonl"), None);
        Ok(())
    });
}

#[test]
fn tasks_parquet() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tasks/swebench-sample.parquet");
    let bytes = std::fs::read(path).unwrap();
    let mutation = prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..3), 1..8);
    let scratch = tempfile::tempdir().unwrap();
    let file = scratch.path().join("t.parquet");
    fuzz("tasks_parquet", 300, mutation, |steps| {
        let mut b = bytes.clone();
        for (at, byte, kind) in steps {
            let i = at.index(b.len());
            match kind {
                0 => b[i] = byte,
                1 => b[i] ^= 1 << (byte % 8),
                _ => b.truncate(i.max(1)),
            }
        }
        std::fs::write(&file, &b).unwrap();
        if let Ok(jsonl) = parquet_to_jsonl(&file) {
            let _ = parse_tasks(&jsonl, &file, None);
        }
        Ok(())
    });
}

fn contract() -> impl Strategy<Value = String> {
    let s = "[a-z ]{0,8}";
    let list = prop::collection::vec(s, 0..3);
    let node = prop_oneof!["tests/test_[a-z]{1,3}\\.py::test_[a-z]{1,3}", "(demo/(lib|test/[a-z]{1,2})::)?(tests::)?[a-z]{1,2}"];
    (s, s, s, list.clone(), list.clone(), list, prop::collection::vec(node, 0..3), 0u8..4)
        .prop_map(|(e, t, o, i, a, n, nodes, shape)| {
            let v = json!({"entrypoint": e, "trigger": t, "expected_output": o, "issue_evidence": i,
                "alternative_hypotheses": a, "non_assertions": n, "test_nodes": nodes});
            match shape {
                0 => v.to_string(),
                1 => json!([v]).to_string(),
                2 => v.to_string().replace('"', ""),
                _ => serde_json::to_string_pretty(&v).unwrap(),
            }
        })
}

fn command() -> impl Strategy<Value = String> {
    let word = prop_oneof![
        Just("pytest".to_string()), Just("python -m pytest".to_string()), Just("./tests/runtests.py".to_string()),
        Just("bin/test".to_string()), Just("-q".to_string()), Just("-k".to_string()), Just("--no-header".to_string()),
        prop::sample::select(vec!["cargo test", "go test", "-p demo", "--lib", "--test", "--", "--exact", "tests::a", "a", "--features=x", "--release", "-F",
            "-run", "'^TestA$'", "'^(TestA|TestB)$'", "./calc", "./...", "-count=1", "RUST_BACKTRACE=1", "GOFLAGS=x"])
            .prop_map(str::to_string),
        "tests/test_[a-z]{1,3}\\.py(::test_[a-z]{1,3})?(\\[[a-z0-9-]{0,4}\\])?",
        prop::sample::select(vec![";", "&&", "|", "$(x)", "`x`", ">", "'a b'", "\"a\"", "\\", "\n", "#", "*", "~", "{a,b}"]).prop_map(str::to_string),
    ];
    prop::collection::vec(word, 1..6).prop_map(|ws| ws.join(" "))
}

/// A well-formed `cargo test` command and a contract declaring its tests (bare paths or full
/// ids, sometimes one more or one fewer), the words then and again swapped for a near-miss: the
/// native binding of declared to selected nodes is reached, not only the command parser.
fn cargo_bundle() -> impl Strategy<Value = (String, String)> {
    let path = prop::sample::select(vec!["a", "tests::a", "tests::b", "m::tests::c", "levenshtein_works", "r#type", "a::", "::a", "a b"]);
    let target = prop::sample::select(vec!["--lib", "--test lib", "--test calc", "--bin tool", "--tests", "--doc"]);
    let flag = prop::sample::select(vec!["", "--features=x", "--release", "-F a,b", "--locked", "-q", "--nocapture", "--all-features"]);
    let env = prop::sample::select(vec!["", "TZ=UTC ", "RUST_BACKTRACE=1 ", "CARGO_TARGET_DIR=/tmp "]);
    let package = prop::sample::select(vec!["demo", "strsim", "calc", "-x"]);
    let paths = prop::collection::vec(path, 1..4);
    (env, package, target, flag, paths, 0u8..6, 0u8..4)
        .prop_map(|(env, package, target, flag, paths, declare, damage)| {
            let scope = match target {
                "--lib" => format!("{package}/lib"),
                t => format!("{package}/{}", t.trim_start_matches("--").replace(' ', "/")),
            };
            let mut cmd = format!("{env}cargo test -p {package} {target} {flag} -- --exact {}", paths.join(" "));
            match damage {
                0 => cmd = cmd.replace(" --exact", ""),
                1 => cmd = cmd.replace(" -- ", " "),
                _ => {}
            }
            let mut nodes: Vec<String> = paths
                .iter()
                .map(|p| if declare % 2 == 0 { p.to_string() } else { format!("{scope}::{p}") })
                .collect();
            match declare {
                4 => nodes.push("tests::undeclared".into()),
                5 => {
                    nodes.pop();
                }
                _ => {}
            }
            let contract = json!({"entrypoint": "e", "trigger": "t", "expected_output": "o", "issue_evidence": ["i"],
                "alternative_hypotheses": ["a"], "non_assertions": ["n"], "test_nodes": nodes});
            (cmd, contract.to_string())
        })
}

/// How many generated bundles validated (the native path's binding reached).
static VALIDATED_CARGO: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

#[test]
fn bundle_validation() {
    let patches = seeds("tests/fixtures", &["test.patch"]);
    let pair = prop_oneof![(command(), contract()), cargo_bundle()];
    // A seed patch as it is, now and then: whole bundles get past the patch checks.
    let patch = prop_oneof![3 => mutated(patches.clone(), &["diff --git a/t b/t\n", "+def test_x():\n", "\n"]), 1 => prop::sample::select(patches)];
    let bundle = (patch, pair);
    fuzz("bundle_validation", 1_000, bundle, |(patch, (cmd, contract))| {
        let _ = parse_command(&cmd);
        let _ = parse_native_command(&cmd);
        let _ = task_build_flags(&cmd);
        if let Ok(b) = Bundle::from_parts(&patch, &cmd, &contract) {
            if let Ok(plan) = validate(&b) {
                if matches!(plan.command, execcritic::harness::validate::PlanCommand::Native(_)) {
                    VALIDATED_CARGO.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
        Ok(())
    });
    // The generator reaches whole valid cargo bundles, not only parse errors.
    assert!(VALIDATED_CARGO.load(std::sync::atomic::Ordering::Relaxed) > 0, "no generated cargo bundle validated");
}

#[test]
fn go_subtest_selectors() {
    use execcritic::harness::runners::go::{is_case_name, quote_meta};
    use execcritic::harness::sandbox::shell_quote;
    let case = "[a-z0-9_=#.+*?()|\\[\\]{}^$\\\\'\"é:,-]{1,6}";
    let tests = prop::sample::subsequence(vec!["TestA", "TestB", "Test_c", "Test"], 1..3);
    let cases = prop::collection::btree_set(case, 1..4);
    fuzz("go_subtest_selectors", 1_000, (tests, cases, 0u8..4, any::<prop::sample::Index>()), |(tests, cases, damage, at)| {
        let alt = |names: Vec<String>| if names.len() == 1 { format!("^{}$", names[0]) } else { format!("^({})$", names.join("|")) };
        let mut regex = format!("{}/{}", alt(tests.iter().map(|t| t.to_string()).collect()), alt(cases.iter().map(|c| quote_meta(c)).collect()));
        if damage == 1 {
            if let Some(i) = regex.match_indices('\\').map(|(i, _)| i).nth(at.index(regex.len().max(1))) {
                regex.remove(i);
            }
        } else if damage == 2 {
            regex.pop();
        }
        let cmd = format!("go test -run {} ./calc", shell_quote(&regex));
        match parse_native_command(&cmd) {
            Some(Ok(p)) => {
                for n in &p.nodes {
                    let (test, case) = n.strip_prefix("./calc::").and_then(|r| r.split_once('/')).unwrap_or_default();
                    prop_assert!(tests.contains(&test) && is_case_name(case), "{}: {}", cmd, n);
                }
                if damage == 0 || damage == 3 {
                    let want: Vec<String> = tests.iter().flat_map(|t| cases.iter().map(move |c| format!("./calc::{t}/{c}"))).collect();
                    prop_assert_eq!(&p.nodes, &want, "{}", cmd);
                }
            }
            Some(Err(_)) => prop_assert!(damage == 1 || damage == 2, "{} refused", cmd),
            None => prop_assert!(false, "{} is not a go command", cmd),
        }
        Ok(())
    });
}

/// A safetensors file: an 8-byte little-endian header length (possibly lying), the header, data.
fn safetensors() -> impl Strategy<Value = Vec<u8>> {
    let tensor = (
        prop::sample::select(vec!["F32", "BF16", "F16", "I64", "BOOL", "X"]),
        prop::collection::vec(prop_oneof![0usize..5, Just(usize::MAX / 2), Just(1 << 40)], 0..4),
        (0usize..64, 0usize..64),
    );
    (prop::collection::btree_map("[a-z.]{1,6}", tensor, 0..4), 0usize..128, prop_oneof![Just(None), any::<u64>().prop_map(Some)])
        .prop_map(|(tensors, data, lie)| {
            let header: serde_json::Map<String, serde_json::Value> = tensors
                .into_iter()
                .map(|(n, (dtype, shape, (a, b)))| (n, json!({"dtype": dtype, "shape": shape, "data_offsets": [a, b]})))
                .collect();
            let header = serde_json::to_vec(&header).unwrap();
            let mut out = lie.unwrap_or(header.len() as u64).to_le_bytes().to_vec();
            out.extend(&header);
            out.extend(std::iter::repeat_n(0u8, data));
            out
        })
}

/// Shard names an index may list; only the plain ones name a file inside the checkpoint.
const SHARDS: &[&str] = &[
    "model-00001-of-00001.safetensors", "../outside.safetensors", "/etc/hostname", "sub/x.safetensors",
    "", ".", "..", "fifo",
];

#[test]
fn checkpoint_open() {
    let input = (safetensors(), prop::option::of(prop::collection::vec(prop::sample::select(SHARDS), 1..3)));
    fuzz("checkpoint_open", 300, input, |(bytes, index)| {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().join("ckpt");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(scratch.path().join("outside.safetensors"), &bytes).unwrap();
        std::fs::write(dir.join("sub/x.safetensors"), &bytes).unwrap();
        std::fs::write(dir.join("model-00001-of-00001.safetensors"), &bytes).unwrap();
        std::fs::write(dir.join("model.safetensors"), &bytes).unwrap();
        nix::unistd::mkfifo(&dir.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let plain = |n: &str| n == SHARDS[0];
        if let Some(names) = &index {
            let map: serde_json::Map<String, serde_json::Value> =
                names.iter().enumerate().map(|(i, n)| (format!("t{i}"), json!(n))).collect();
            std::fs::write(dir.join("model.safetensors.index.json"), json!({"weight_map": map}).to_string()).unwrap();
        }
        let opened = Checkpoint::open(&dir);
        if let Some(names) = index {
            prop_assert!(opened.is_err() || names.iter().all(|n| plain(n)), "opened shards {:?}", names);
        }
        Ok(())
    });
}
