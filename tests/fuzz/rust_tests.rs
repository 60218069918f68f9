//! Fuzz target of the native guard's planner (`harness::guard::libtest`), which reads Rust test
//! files from the repository under test — input the harness does not control.
//!
//! * `libtest_plan_mutated_seeds`: the fixture crates' source files, mutated with fragments of
//!   test code (assertions of every planned and unplanned shape, attributes, modules, literals
//!   at type bounds). For each input: listing the tests and planning every one of them never
//!   panics; where the input is Rust, the rewrite is Rust too, and every run name of the plan
//!   is defined exactly once in it; an input that is not Rust is an error, never a rewrite.

use crate::driver::{fuzz, mutated, seeds};
use execcritic::harness::guard::libtest::{plan_file, run_paths, test_paths};
use proptest::prelude::*;
use rand::SeedableRng;

const DICTIONARY: &[&str] = &[
    "#[test]\nfn t() { assert_eq!(f(), 5); }\n",
    "#[test]\nfn u() { assert!(g() == \"ab\"); }\n",
    "#[test]\n#[should_panic]\nfn v() { assert_eq!(h(), 1); }\n",
    "mod tests {\n#[test]\nfn w() { assert_eq!(vec![1, 2], x()); }\n}\n",
    "assert_eq!(a, Some(-3));",
    "assert_eq!(b, 255u8);",
    "assert_eq!(c, 0);",
    "assert_eq!(d, 2.50);",
    "assert_eq!(e, 'z');",
    "assert_eq!(s, String::from(\"\u{e9}\"));",
    "assert_eq!(n, 1e3);",
    "return;",
    "#[tokio::test]\nasync fn a() { assert_eq!(k().await, 7); }\n",
    "#[test]\nfn o() -> Outcome { assert_eq!(f()?, 5); Ok(()) }\n",
    "-> impl Termination ",
    "macro_rules! assert { ($($t:tt)*) => {}; }\n",
    "extern crate self as std;\n",
    "mod m {\n#![allow(unused)]\n",
    "/// doc\n",
    "r#\"raw\"#",
    "18446744073709551615",
    "{",
    "}",
    "(",
    "fn ",
];

#[test]
fn libtest_plan_mutated_seeds() {
    let corpus = seeds("tests/fixtures/native_guard", &[".rs"]);
    fuzz("libtest_plan_mutated_seeds", 1_500, mutated(corpus, DICTIONARY), |text| {
        let Ok(paths) = test_paths(&text) else {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
            prop_assert!(plan_file("f.rs", &text, &[], 6, &mut rng).is_err(), "not Rust, yet planned");
            return Ok(());
        };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(text.len() as u64);
        let plan = plan_file("f.rs", &text, &paths, 6, &mut rng);
        // Two tests of one path (a mutation may duplicate one) are planned as the first.
        let plan = match plan {
            Ok(p) => p,
            Err(e) => return Err(TestCaseError::fail(format!("planning a file that parses failed: {e}"))),
        };
        prop_assert!(syn::parse_file(&plan.source).is_ok(), "the rewrite is not Rust:\n{}", plan.source);
        for p in run_paths(&plan.map) {
            let name = p.rsplit("::").next().unwrap();
            if name.starts_with("t_") && name.len() == 18 {
                prop_assert_eq!(plan.source.matches(name).count(), 1, "{}", name);
            }
        }
        Ok(())
    });
}

/// A literal of any kind the planner mutates, at any value: integers with and without suffixes
/// (at and near type bounds), floats as written, strings and chars of any character.
fn literal() -> impl Strategy<Value = String> {
    let suffix = prop::sample::select(vec!["", "u8", "i8", "u16", "i32", "u64", "usize", "i128", "u128"]);
    prop_oneof![
        (any::<u128>(), suffix.clone()).prop_map(|(v, s)| format!("{v}{s}")),
        (0u128..300, suffix).prop_map(|(v, s)| format!("{v}{s}")),
        (0u32..100_000, 0u32..4).prop_map(|(v, d)| {
            let s = format!("{v:0>5}");
            let (a, b) = s.split_at(5 - d as usize);
            if d == 0 { format!("{a}.0") } else { format!("{a}.{b}") }
        }),
        any::<String>().prop_map(|s| format!("{s:?}")),
        any::<char>().prop_map(|c| format!("{c:?}")),
    ]
}

/// An expected side around a literal, of a planned or an unplanned shape.
fn expected() -> impl Strategy<Value = String> {
    (literal(), 0u8..8).prop_map(|(l, shape)| match shape {
        0 => l,
        1 => format!("Some({l})"),
        2 => format!("&[{l}, {l}]"),
        3 => format!("vec![{l}]"),
        4 => format!("({l}).to_owned()"),
        5 => format!("Ok::<_, ()>({l})"),
        6 => format!("-{l}"),
        _ => format!("h({l})"),
    })
}

#[test]
fn libtest_plan_generated() {
    let test = (expected(), 0u8..4, any::<bool>()).prop_map(|(e, form, nested)| {
        let body = match form {
            0 => format!("assert_eq!(f(), {e});"),
            1 => format!("assert_eq!({e}, f());"),
            2 => format!("let x = f();\n    assert!(x == {e});"),
            _ => format!("assert!(g());\n    assert_eq!(f(), {e}, \"msg {{}}\", 1)"),
        };
        let func = format!("#[test]\nfn case() {{\n    {body}\n}}\n");
        if nested { format!("#[cfg(test)]\nmod tests {{\n{func}}}\n") } else { func }
    });
    fuzz("libtest_plan_generated", 2_000, test, |text| {
        let Ok(paths) = test_paths(&text) else { return Ok(()) };
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(text.len() as u64);
        let plan = plan_file("f.rs", &text, &paths, 6, &mut rng).map_err(TestCaseError::fail)?;
        prop_assert!(syn::parse_file(&plan.source).is_ok(), "the rewrite is not Rust:\n{}", plan.source);
        for g in &plan.map.groups {
            if g.real.is_none() || g.why.is_some() {
                continue;
            }
            // Seven literal copies, each defined once, each with its own expected side; six tail
            // copies, each the real test with its inner function's result checked, not returned.
            let all: Vec<&str> = plan.source.split("#[test]").filter(|b| b.contains("match (&(")).collect();
            prop_assert_eq!(all.len(), 13, "{}", plan.source);
            let (tails, mut bodies): (Vec<&str>, Vec<&str>) = all.iter().partition(|b| b.contains("ExecCriticTail"));
            prop_assert_eq!(tails.len(), 6, "{}", plan.source);
            bodies.iter_mut().for_each(|b| *b = &b[b.find('{').unwrap()..]);
            let real = plan.source.split("#[test]").find(|b| b.contains(&format!("fn {}()", g.real.as_deref().unwrap().rsplit("::").next().unwrap()))).unwrap();
            let real_body = &real[real.find('{').unwrap()..];
            for t in &tails {
                let body = &t[t.find('{').unwrap()..];
                let call = format!("{}()", execcritic::harness::guard::libtest::BODY_FN);
                let tail_end = execcritic::harness::guard::libtest::tail_end(&call);
                prop_assert_eq!(body.replacen(&tail_end, &call, 1), real_body.to_string(), "{}", plan.source);
            }
            bodies.sort();
            bodies.dedup();
            prop_assert_eq!(bodies.len(), 7, "copies not distinct:\n{}", plan.source);
        }
        Ok(())
    });
}
