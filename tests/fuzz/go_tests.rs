//! Fuzz target of the `go test` guard's tokenizer and planner (`harness::guard::{golex, gotest}`),
//! which read Go test files from the repository under test — input the harness does not control.
//!
//! * `gotest_plan_mutated_seeds`: the Go fixture module's and the golang suite's files, mutated
//!   with fragments of Go test code (assertions of every planned and unplanned shape, literals of
//!   every kind, brackets, comments, raw strings). For each input: tokenizing, listing the tests
//!   and planning every one of them never panics; where the input tokenizes, the rewrite does
//!   too, and every run name of the plan is defined exactly once in it; an input that does not
//!   tokenize is an error, never a rewrite. Every other input also judges subtests (`TestX/a`
//!   beside `TestX`, and `TestX/b` alone; a test whose subtests cannot be guarded — no `t.Run(`
//!   in its body, say — is refused by name and planned again without them): the rewrite still
//!   tokenizes, each run path is a copy defined once, and a subtest's copies have its case
//!   written into them.

use crate::driver::{fuzz, mutated, seeds};
use execcritic::harness::guard::golex::{lex, quote};
use execcritic::harness::guard::gotest::{plan_file, test_functions};
use execcritic::harness::guard::libtest::run_paths;
use proptest::prelude::*;
use rand::SeedableRng;

const DICTIONARY: &[&str] = &[
    "func TestA(t *testing.T) {\n\tif got := F(); got != 5 {\n\t\tt.Errorf(\"x\")\n\t}\n}\n",
    "func TestB(t *testing.T) {\n\twant := \"ab\"\n\tif G() != want {\n\t\tt.Fatal(want)\n\t}\n}\n",
    "func TestC(t *testing.T) {\n\tif got, want := H(), 'z'; got != want {\n\t\tt.FailNow()\n\t}\n}\n",
    "func TestD(t *testing.T) {\n\tfor _, c := range cases {\n\t\tif c.f() != c.want {\n\t\t\tt.Error(c)\n\t\t}\n\t}\n}\n",
    "func TestE(t *testing.T) {\n\tfor _, c := range cases {\n\t\tt.Run(c.name, func(t *testing.T) {\n\t\t\tif F(c.in) != 5 {\n\t\t\t\tt.Error(\"x\")\n\t\t\t}\n\t\t})\n\t}\n}\n",
    "t.Run(\"a\", func(t *testing.T) { t.Parallel() })",
    "if x != -3 { t.Fail(); return }",
    "if 2.50 != y { t.Error() } else { z() }",
    "if f(func() {}) != 1 { t.Fail() }",
    "`raw\nstring`",
    "\"\\u00e9\\x41\\n\"",
    "'\\''",
    "0x1F",
    "1_000",
    "1e3",
    "2i",
    "18446744073709551615",
    "/* c\n */",
    "// note\n",
    "package p\n",
    "import \"testing\"\n",
    "{",
    "}",
    "(",
    ";",
];

#[test]
fn gotest_plan_mutated_seeds() {
    let mut corpus = seeds("tests/fixtures/native_guard_go", &[".go"]);
    corpus.extend(seeds("tests/fixtures/suites/golang", &[".patch"]));
    fuzz("gotest_plan_mutated_seeds", 1_500, mutated(corpus, DICTIONARY), |text| {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(text.len() as u64);
        let Ok(names) = test_functions(&text) else {
            prop_assert!(lex(&text).is_err(), "listing failed on input that tokenizes");
            prop_assert!(plan_file("f_test.go", &text, &[], 6, &mut rng).is_err(), "does not tokenize, yet planned");
            return Ok(());
        };
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        if text.len() % 2 == 1 {
            let mut judged = Vec::new();
            for (i, n) in unique.iter().enumerate() {
                if i % 2 == 0 {
                    judged.push(n.clone());
                    judged.push(format!("{n}/a"));
                } else {
                    judged.push(format!("{n}/b"));
                }
            }
            unique = judged;
        }
        // A file without a package clause is refused as a whole; a subtest of a test that cannot
        // be renamed, or whose body starts none, is the caller's error: that test's subtests are
        // dropped from the judged names and the file planned again.
        let plan = loop {
            match plan_file("f_test.go", &text, &unique, 6, &mut rng) {
                Ok(p) => break p,
                Err(e) if e.contains("no package clause") => return Ok(()),
                Err(e) if e.contains("cannot be guarded for its subtests") => {
                    let parent = e.split('`').nth(1).unwrap_or_default().to_string();
                    let before = unique.len();
                    unique.retain(|n| n.split_once('/').is_none_or(|(f, _)| f != parent));
                    prop_assert!(unique.len() < before, "the refusal names no judged parent: {}", e);
                }
                Err(e) => return Err(TestCaseError::fail(format!("planning a file that tokenizes failed: {e}"))),
            }
        };
        let tokens = lex(&plan.source);
        prop_assert!(tokens.is_ok(), "the rewrite does not tokenize:\n{}", plan.source);
        let tokens = tokens.unwrap_or_default();
        // Every run name is defined once: the tokens `func NAME (`, whatever blanks the input had
        // between them (`func  TestX (t …)`).
        let text = |i: usize| tokens.get(i).map_or("", |t| t.text(&plan.source));
        for g in plan.map.groups.iter().filter(|g| g.name.contains('/')) {
            let case = g.name.split_once('/').map(|(_, c)| c).unwrap_or_default();
            prop_assert!(g.real.iter().chain(&g.mutants).all(|p| !p.contains('/')), "{:?}", g);
            // Each copy is a one-line wrapper calling a shared body with the case written in.
            for copy in g.real.iter().chain(&g.mutants) {
                let head = format!("func {copy}(");
                let line = plan.source.lines().find(|l| l.starts_with(&head)).unwrap_or_default();
                prop_assert!(line.contains(&format!("(execcritict__, {}) }}", quote(case, '"'))), "{}: {:?}", copy, line);
            }
            prop_assert!(plan.source.contains("+\"/\"+execcriticcase__ {"), "{:?}", g);
        }
        for p in run_paths(&plan.map) {
            let p = p.as_str();
            if p.starts_with("TestX") && p.len() == 21 {
                let defs = (0..tokens.len()).filter(|&i| text(i) == "func" && text(i + 1) == p && text(i + 2) == "(").count();
                prop_assert_eq!(defs, 1, "{}", p);
            }
        }
        Ok(())
    });
}
