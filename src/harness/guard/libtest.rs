//! Canaries for Rust's libtest: the Python guard's evidence carried over to `cargo test`.
//!
//! A libtest report — and the test binary's exit status — is written by the process the code
//! under test runs in: a candidate can print a whole consistent report and `exit(0)`, install a
//! panic hook that turns the judged assertion's panic into a success, or return a value whose
//! `PartialEq` says yes to everything. None of that can be told from a real pass by reading
//! the report. So a verdict here rests on what the code cannot predict, as in [`super::canary`]:
//!
//! 1. **Look-alikes.** [`plan_file`] rewrites the test file: each judged test gets a fresh
//!    random name, and beside it, in random order, K copies under random names of the same
//!    shape that differ from it in one literal of the *expected* side of one assertion the test
//!    must execute to pass (`assert_eq!(add(2, 3), 5)` becomes `…, 4)` and `…, 6)`; the K + 1
//!    values are consecutive and the original's rank among them is uniformly random wherever
//!    the literal's type allows). Each module with a judged test also gets a must-pass and a
//!    must-fail control.
//! 2. **No value reaches the code under test through the failure path.** In every copy, real
//!    and mutant alike, that assertion becomes `match (&a, &b) { (l, r) => if !(*l == *r) {
//!    abort() } }`: no panic, no message, no location — a panic hook learns nothing, and a
//!    SIGABRT handler or an `atexit` that turns the abort into a success does so for every copy.
//! 3. **One process per test** ([`judge`], [`run_exact`]): the rewritten files are put back as
//!    they were once the binaries are built (they name the copies and hold their values), then
//!    `<binary> --exact <path> --test-threads=1` runs each path of [`run_paths`]; the status is
//!    the process's own exit status, never its output. Wherever the real test passed,
//!    every mutant must have failed and the controls must have come out as written
//!    ([`CanaryMap::violations`]); otherwise the run is `tampered`.
//!
//! 4. **Tail copies.** K more copies of the real test as it runs, failing at their end: code
//!    that exits 0 from inside the test after its first assertion passed makes them pass too.
//!    Every copy runs its body in one inner function ([`BODY_FN`]); only what follows it differs
//!    ([`tail_end`]), so however the body ends, every copy ends alike — a probe of the test
//!    binary cannot sort them.
//!
//! 5. **The standard library's assertions.** Every module of the rewritten file reaches `std`
//!    through an `extern crate` item of its own ([`STD`]) and every check macro of the file
//!    ([`CHECK_MACROS`]) is qualified with it ([`reach_std`]): a `macro_rules! assert` of the code
//!    under test, or its `extern crate self as std`, cannot make a test's assertions vacuous.
//!
//! 6. **Tests a macro writes** from a closure body (`rgtest!(r16, |dir, cmd| { … })`): each copy
//!    is a module of a random name holding the invocation ([`plan_macro`]); the test keeps its
//!    name inside. Whether the macro writes such a test shows only in the build: every run
//!    path is checked against the binary's own test list first ([`check_listed`]). Where the
//!    body is in the definition of a `macro_rules!` of the file (`t!(test1: "a" => "b");`), the
//!    invocation is expanded ([`super::macro_rules`]) and the function it writes planned like
//!    any other ([`plan_expanded`]).
//!
//! To pass the real test and fail its mutants the code must know which copy runs *and* what it
//! expects: the names are random per run, and the expected literal never leaves the test's own
//! comparison (for the standard types; a candidate's own `PartialEq` sees it, which is
//! equivalent to returning the expected value — overfitting, left to the official tests).
//!
//! Not covered here (docs/harness.md, "Native runtime guard"): code that runs at *build* time
//! (a candidate's `build.rs` or proc macro) can read the rewritten file and, knowing the expected
//! value from feedback, map it to the real name. The guard is sound only where the candidate
//! changed no build-time code — which [`super::super::tamper_native`] refuses by class from
//! Base's manifests (build scripts, proc-macro crates) — or where the judged tests are compiled
//! in a phase with no candidate code. A `#[should_panic]` test is guarded by look-alikes that
//! expect another panic message ([`should_panic_copies`]). Tests that cannot be renamed
//! (`ignore`, parameters, `impl Trait` returns) keep their name and are reported in
//! [`Group::why`]; a sandboxed run that judges one (`ignore` aside: skipped) is the harness's
//! error ([`super::libtest_run`]'s `judge_in`); tests with no literal to mutate are guarded by
//! their tail copies alone.

use super::canary::{CanaryMap, Control, Group};
use crate::harness::logparse::TestStatus;
use proc_macro2::{TokenStream, TokenTree};
use rand::seq::SliceRandom;
use rand::Rng;
use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::time::Duration;
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, Item, ItemFn, Lit, Stmt, Token};

/// A rewritten test file and what was planted in it.
#[derive(Clone, Debug)]
pub struct FilePlan {
    /// The file's new source.
    pub source: String,
    /// Groups (one per judged test; `real: None` where it could not be planned) and controls.
    /// Names are the run's test paths inside the file (`tests::t_3f9a…`).
    pub map: CanaryMap,
}

/// Rewrite `source` (one `.rs` file, `file` its path for the map) for the judged tests, given
/// by their paths inside the file (`adds`, `tests::adds`), with `k` mutants each.
pub fn plan_file(
    file: &str,
    source: &str,
    judged: &[String],
    k: usize,
    rng: &mut impl Rng,
) -> Result<FilePlan, String> {
    // syn parses what follows a shebang line, with spans from there: so does the plan.
    let (shebang, body) = split_shebang(source);
    let parsed = syn::parse_file(body).map_err(|e| format!("{file}: not Rust syntax: {e}"));
    let result = parsed.and_then(|ast| plan_parsed(file, body, &ast, judged, k, rng));
    // proc-macro2 keeps every parsed file's text for its spans, per thread: drop it.
    proc_macro2::extra::invalidate_current_thread_spans();
    result.map(|p| FilePlan { source: format!("{shebang}{}", p.source), map: p.map })
}

/// A first line `#!…` that does not open an inner attribute (`#![…]`) is a shebang, as syn and
/// rustc read it: `(shebang, rest)`, the rest starting at its line break.
fn split_shebang(source: &str) -> (&str, &str) {
    match source.strip_prefix("#!") {
        Some(rest) if !rest.trim_start().starts_with('[') => source.split_at(source.find('\n').unwrap_or(source.len())),
        _ => ("", source),
    }
}

struct Found<'a> {
    path: String,
    test: Written<'a>,
    /// The module's path (the part of `path` before the function's name).
    module: String,
}

/// Where a test's function is in the source.
enum Written<'a> {
    /// A `#[test]` function.
    Fn(&'a ItemFn),
    /// An item macro whose arguments name it (`rgtest!(r16, |dir, cmd| { … })`, ripgrep's form):
    /// the macro writes the function ([`plan_macro`]).
    Macro(&'a syn::ItemMacro),
    /// An invocation of a `macro_rules!` of the file that expands to the `#[test]` function
    /// (heck's `t!(test1: "CamelCase" => "camel-case");`): the expansion's text
    /// ([`super::macro_rules`], [`plan_expanded`]).
    Expanded(&'a syn::ItemMacro, String),
}

fn plan_parsed(
    file: &str,
    source: &str,
    ast: &syn::File,
    judged: &[String],
    k: usize,
    rng: &mut impl Rng,
) -> Result<FilePlan, String> {
    let mut tests = Vec::new();
    let defs = super::macro_rules::definitions(&ast.items);
    collect_tests(&ast.items, "", &defs, &mut tests);
    let idents = ident_counts(source)?;
    // Definitions whose invocation the copies replace: marked `#[allow(unused_macros)]`, as the
    // copies may have taken their only use (mime's `#![deny(warnings)]` makes that an error).
    let mut expanded_defs: Vec<usize> = Vec::new();
    // (range in source, replacement), applied back to front.
    let mut edits: Vec<(Range<usize>, String)> = Vec::new();
    let mut map = CanaryMap::default();
    let mut controlled: Vec<String> = Vec::new();
    for want in judged {
        // A `#[test]` function first; else a macro invocation that names the test and holds
        // its body as a closure; else the expansion of a macro of the file. The first that
        // plans is copied; where none does, the first one's reason stands.
        let rank = |t: &Found| match t.test {
            Written::Fn(_) => 0,
            Written::Macro(_) => 1,
            Written::Expanded(..) => 2,
        };
        let mut candidates: Vec<&Found> = tests.iter().filter(|t| &t.path == want).collect();
        candidates.sort_by_key(|t| rank(t));
        if candidates.is_empty() {
            return Err(format!("{file}: no #[test] function `{want}`"));
        }
        let name = want.rsplit("::").next().unwrap_or(want).to_string();
        let mut group = Group { path: file.to_string(), name: want.clone(), ..Group::default() };
        let mut planned = Err(String::new());
        let mut found = candidates[0];
        for (i, candidate) in candidates.iter().enumerate() {
            let attempt = match &candidate.test {
                Written::Fn(f) => plan_function(source, f, k, rng),
                Written::Macro(m) => plan_macro(source, m, k, rng),
                Written::Expanded(m, text) => plan_expanded(source, m, text, k, rng),
            };
            // One invocation naming two judged tests (`m!(a, b, || { … })`) is copied once.
            let attempt = attempt.and_then(|p| match edits.iter().any(|(r, _)| r.start < p.0.end && p.0.start < r.end) {
                true => Err("an invocation that another judged test's copies already hold".to_string()),
                false => Ok(p),
            });
            if attempt.is_ok() || i == 0 {
                planned = attempt;
                found = candidate;
            }
            if planned.is_ok() {
                break;
            }
        }
        // A name used elsewhere in the file (a call from another test, `const _: fn() = x;`)
        // keeps its function as written, never run by the guard, beside the renamed copies: no
        // judged test runs under a name the code could know because some other code names it.
        // (A macro-written test keeps its name inside a module of a random name.)
        let referenced = !matches!(found.test, Written::Macro(_)) && idents.get(&name).copied().unwrap_or(0) > 1;
        match planned {
            Err(why) => group.why = Some(why),
            Ok((range, variants, why)) => {
                let prefix = if found.module.is_empty() { String::new() } else { format!("{}::", found.module) };
                let mut text = name_copies(&mut group, variants, why, rng, fresh_name);
                if let Written::Macro(_) = found.test {
                    // Each copy is a module of a random name holding the invocation; the
                    // test keeps its own name inside it.
                    group.real = group.real.map(|n| format!("{n}::{name}"));
                    group.mutants = group.mutants.iter().map(|n| format!("{n}::{name}")).collect();
                }
                if referenced {
                    text = format!("{}\n\n{text}", &source[range.clone()]);
                }
                if let Written::Expanded(m, expansion) = &found.test {
                    // What else the invocation writes (mime's enum and constants), once.
                    let rest = expansion_rest(expansion).unwrap_or_default();
                    if !rest.is_empty() {
                        text = format!("{rest}\n\n{text}");
                    }
                    let name = m.mac.path.get_ident().map(|i| i.to_string()).unwrap_or_default();
                    let at = m.mac.path.span().byte_range().start;
                    if let Some(def) = super::macro_rules::reaching(&defs, &name, &found.module, at) {
                        if !expanded_defs.contains(&def.at()) {
                            expanded_defs.push(def.at());
                        }
                    }
                }
                if !controlled.contains(&found.module) {
                    controlled.push(found.module.clone());
                    for expect in ["pass", "fail"] {
                        let control = fresh_name(rng);
                        let body = if expect == "fail" { "execcritic_std__::process::abort()" } else { "" };
                        text.push_str(&format!("\n\n#[test]\nfn {control}() {{ {body} }}"));
                        map.controls.push(Control { path: file.to_string(), cls: None, name: format!("{prefix}{control}"), expect: expect.into() });
                    }
                }
                group.real = group.real.map(|n| format!("{prefix}{n}"));
                group.mutants = group.mutants.iter().map(|n| format!("{prefix}{n}")).collect();
                edits.push((range, text));
            }
        }
        map.groups.push(group);
    }
    for at in expanded_defs {
        edits.push((at..at, "#[allow(unused_macros)] ".to_string()));
    }
    edits.sort_by_key(|(r, _)| std::cmp::Reverse(r.start));
    let planned = !edits.is_empty();
    let mut out = source.to_string();
    for (range, text) in edits {
        out.replace_range(range, &text);
    }
    if planned {
        out = reach_std(&out).map_err(|e| format!("{file}: {e}"))?;
    }
    Ok(FilePlan { source: out, map })
}

/// The name under which every module of a rewritten file reaches the standard library:
/// `extern crate std as execcritic_std__;` ([`reach_std`]). An `extern crate` item loads the crate
/// by its own name, so it is the real `std` whatever the crate under test calls `std` — code can
/// rename the paths `::std` and `::core` (`extern crate self as std;` at its crate root, then a
/// `process` module and `#[macro_export]` macros of its own), never this item.
pub const STD: &str = "execcritic_std__";

/// The standard macros that decide whether a test passes: every unqualified invocation of them in
/// a rewritten file is qualified as `execcritic_std__::name!` ([`reach_std`]).
pub const CHECK_MACROS: [&str; 11] = [
    "assert", "assert_eq", "assert_ne", "debug_assert", "debug_assert_eq", "debug_assert_ne", "panic", "unreachable", "unimplemented",
    "todo", "matches",
];

/// Every module of a rewritten file (the file's own and each inline `mod { … }`) gets
/// [`STD`]'s `extern crate` item, on the line of its first item (lines stay), and every
/// unqualified invocation of a [`CHECK_MACROS`] macro outside a `macro_rules!` definition
/// becomes `execcritic_std__::name!(…)`. A test's assertions are the standard library's, not
/// whatever the code under test put in scope under their names: a `macro_rules! assert` above a
/// test module (textual scope, no import needed), a `#[macro_use] extern crate` of the crate
/// under test, or a renamed `::std`. The guard's own code (the literal assertion's abort, the
/// tail copies, the controls) goes through the same name.
fn reach_std(source: &str) -> Result<String, String> {
    let ast = syn::parse_file(source).map_err(|e| format!("the rewrite is not Rust syntax: {e}"))?;
    let item = format!("#[allow(unused_extern_crates)] extern crate std as {STD}; ");
    let mut inserts: Vec<(usize, String)> = Vec::new();
    fn modules(items: &[Item], at: usize, item: &str, inserts: &mut Vec<(usize, String)>) {
        if !items.is_empty() {
            inserts.push((at, item.to_string()));
        }
        for i in items {
            if let Item::Mod(m) = i {
                if let Some((brace, inner)) = &m.content {
                    let after_inner = m
                        .attrs
                        .iter()
                        .filter(|a| matches!(a.style, syn::AttrStyle::Inner(_)))
                        .map(|a| a.bracket_token.span.close().byte_range().end)
                        .max()
                        .unwrap_or_else(|| brace.span.open().byte_range().end);
                    let first = inner.first().map(|f| f.span().byte_range().start).unwrap_or(after_inner);
                    modules(inner, first.max(after_inner), item, inserts);
                }
            }
        }
    }
    let first = ast.items.first().map(|f| f.span().byte_range().start).unwrap_or(0);
    modules(&ast.items, first, &item, &mut inserts);
    let tokens: TokenStream = source.parse().map_err(|e| format!("the rewrite does not lex: {e:?}"))?;
    qualify_check_macros(tokens, &mut inserts);
    // Back to front; at one position the module's item goes in last, so it comes first (an
    // item-position `assert!(…);` opening a module gets the item, then its path).
    let item_first = |t: &String| t.starts_with("#[");
    inserts.sort_by_key(|(at, t)| (std::cmp::Reverse(*at), item_first(t)));
    let mut out = source.to_string();
    for (at, text) in inserts {
        if at > out.len() || !out.is_char_boundary(at) {
            return Err("no source positions".into());
        }
        out.insert_str(at, &text);
    }
    Ok(out)
}

/// Macros whose arguments are code for another crate (a proc macro's output): a path of this
/// file's modules means nothing there, so their arguments are left as written.
const QUOTING_MACROS: [&str; 4] = ["quote", "quote_spanned", "parse_quote", "parse_quote_spanned"];

/// Positions of unqualified [`CHECK_MACROS`] invocations (`name ! (…)` not after `::`), outside
/// `macro_rules!` bodies and [`QUOTING_MACROS`] arguments, each with the path to insert.
fn qualify_check_macros(tokens: TokenStream, inserts: &mut Vec<(usize, String)>) {
    let tts: Vec<TokenTree> = tokens.into_iter().collect();
    for (i, tt) in tts.iter().enumerate() {
        match tt {
            TokenTree::Ident(id) if CHECK_MACROS.iter().any(|m| id == m) => {
                let bang = matches!(tts.get(i + 1), Some(TokenTree::Punct(p)) if p.as_char() == '!');
                let group = matches!(tts.get(i + 2), Some(TokenTree::Group(_)));
                let qualified = i > 0 && matches!(&tts[i - 1], TokenTree::Punct(p) if p.as_char() == ':');
                if bang && group && !qualified {
                    inserts.push((id.span().byte_range().start, format!("{STD}::")));
                }
            }
            TokenTree::Group(g) => {
                let definition = i >= 3
                    && matches!(&tts[i - 3], TokenTree::Ident(m) if m == "macro_rules")
                    && matches!(&tts[i - 2], TokenTree::Punct(p) if p.as_char() == '!');
                let quoted = i >= 2
                    && matches!(&tts[i - 2], TokenTree::Ident(m) if QUOTING_MACROS.iter().any(|q| m == q))
                    && matches!(&tts[i - 1], TokenTree::Punct(p) if p.as_char() == '!');
                if !definition && !quoted {
                    qualify_check_macros(g.stream(), inserts);
                }
            }
            _ => {}
        }
    }
}

/// Give a planned test's texts (each named `__EXECCRITIC_NAME__`, the real test first) fresh run
/// names of one shape, record them in `group` (with `why`, where the look-alikes are the tail
/// copies alone), and return the texts shuffled and joined.
pub(super) fn name_copies<R: Rng>(
    group: &mut Group,
    variants: Vec<String>,
    why: Option<String>,
    rng: &mut R,
    fresh: fn(&mut R) -> String,
) -> String {
    group.why = why.map(|w| format!("{w}: guarded by its tail copies alone"));
    let mut texts = Vec::new();
    for (i, text) in variants.into_iter().enumerate() {
        let run_name = fresh(rng);
        texts.push(text.replacen("__EXECCRITIC_NAME__", &run_name, 1));
        if i == 0 {
            group.real = Some(run_name);
        } else {
            group.mutants.push(run_name);
        }
    }
    texts.shuffle(rng);
    texts.join("\n\n")
}

/// The paths of every `#[test]`-like function of a file (through inline modules).
pub fn test_paths(source: &str) -> Result<Vec<String>, String> {
    let parsed = syn::parse_file(source).map_err(|e| format!("not Rust syntax: {e}"));
    let result = parsed.map(|ast| {
        let mut tests = Vec::new();
        collect_tests(&ast.items, "", &super::macro_rules::definitions(&ast.items), &mut tests);
        let mut paths: Vec<String> = tests.into_iter().map(|t| t.path).collect();
        paths.dedup();
        paths
    });
    proc_macro2::extra::invalidate_current_thread_spans();
    result
}

/// Every `#[test]`-like function (an attribute whose last segment is `test`) with its path,
/// through inline modules; `defs`: the file's `macro_rules!` definitions, whose invocations are
/// expanded where they write one `#[test]` function.
fn collect_tests<'a>(items: &'a [Item], module: &str, defs: &BTreeMap<String, Vec<super::macro_rules::Definition>>, out: &mut Vec<Found<'a>>) {
    for item in items {
        match item {
            Item::Fn(f) if is_test_fn(f) => {
                let name = f.sig.ident.to_string();
                let path = if module.is_empty() { name } else { format!("{module}::{name}") };
                out.push(Found { path, test: Written::Fn(f), module: module.to_string() });
            }
            Item::Macro(m) if m.ident.is_none() => {
                if let Some((name, text)) = expanded_test(m, module, defs) {
                    let path = if module.is_empty() { name } else { format!("{module}::{name}") };
                    out.push(Found { path, test: Written::Expanded(m, text), module: module.to_string() });
                }
                // Each bare identifier among its comma-separated arguments may be the name of
                // the test it writes; the judged path picks one, and the build's test list
                // confirms it ([`check_listed`]).
                for name in macro_names(m) {
                    let path = if module.is_empty() { name } else { format!("{module}::{name}") };
                    out.push(Found { path, test: Written::Macro(m), module: module.to_string() });
                }
            }
            Item::Mod(m) => {
                if let Some((_, inner)) = &m.content {
                    let sub = if module.is_empty() { m.ident.to_string() } else { format!("{module}::{}", m.ident) };
                    collect_tests(inner, &sub, defs, out);
                }
            }
            _ => {}
        }
    }
}

/// The name and text of the one `#[test]` function an invocation (in inline module `module`) of a
/// macro of the file expands to, if it expands exactly ([`super::macro_rules`]) to items among
/// which that function is the only test (mime's `mimes!` writes an enum, constants and one test).
fn expanded_test(m: &syn::ItemMacro, module: &str, defs: &BTreeMap<String, Vec<super::macro_rules::Definition>>) -> Option<(String, String)> {
    let name = m.mac.path.get_ident()?.to_string();
    let def = super::macro_rules::reaching(defs, &name, module, m.mac.path.span().byte_range().start)?;
    let text = super::macro_rules::expand(&def.rules, &m.mac.tokens).ok()?;
    let file: syn::File = syn::parse_str(&text).ok()?;
    let [f] = expansion_tests(&file)[..] else { return None };
    Some((f.sig.ident.to_string(), text))
}

/// A `#[test]`-like function: an attribute whose last path segment is `test`.
fn is_test_fn(f: &ItemFn) -> bool {
    f.attrs.iter().any(|a| a.path().segments.last().is_some_and(|s| s.ident == "test"))
}

/// The `#[test]` functions among the items of a macro's expansion.
fn expansion_tests(file: &syn::File) -> Vec<&ItemFn> {
    file.items
        .iter()
        .filter_map(|i| match i {
            Item::Fn(f) if is_test_fn(f) => Some(f),
            _ => None,
        })
        .collect()
}

/// How often each identifier occurs in the file's tokens (a renamed test must occur once).
fn ident_counts(source: &str) -> Result<BTreeMap<String, usize>, String> {
    let tokens: TokenStream = source.parse().map_err(|e| format!("not Rust tokens: {e}"))?;
    let mut counts = BTreeMap::new();
    fn walk(ts: TokenStream, counts: &mut BTreeMap<String, usize>) {
        for t in ts {
            match t {
                TokenTree::Ident(i) => *counts.entry(i.to_string()).or_insert(0) += 1,
                TokenTree::Group(g) => walk(g.stream(), counts),
                _ => {}
            }
        }
    }
    walk(tokens, &mut counts);
    Ok(counts)
}

/// Plan one test function: its range in `source` and its texts, each named
/// `__EXECCRITIC_NAME__` — the real test first, its literal look-alikes, then K tail copies —
/// and, where it has no literal assertion to mutate, why (its look-alikes are then the tail
/// copies alone). `Err`: it is not renamed (`#[should_panic]`, `#[ignore]`, parameters, a return
/// type that names no concrete type).
///
/// Every copy runs its body in one inner function, [`BODY_FN`], and returns what it returns;
/// a tail copy checks it instead ([`tail_end`]). Up to the body's end the copies run the same
/// code, so however the body ends — a panic, an `Err`, an exit from inside — it ends alike in
/// every copy, and code that probes its own test binary learns nothing from how a copy ends.
fn plan_function(source: &str, f: &ItemFn, k: usize, rng: &mut impl Rng) -> Result<(Range<usize>, Vec<String>, Option<String>), String> {
    if f.attrs.iter().any(|a| a.path().is_ident("ignore")) {
        return Err(IGNORED.into());
    }
    if !f.sig.inputs.is_empty() {
        return Err("a test with parameters".into());
    }
    if let Some(a) = f.attrs.iter().find(|a| a.path().is_ident("should_panic")) {
        return should_panic_copies(source, f, a, k, rng).map(|(range, texts)| (range, texts, None));
    }
    let output = match &f.sig.output {
        syn::ReturnType::Default => String::new(),
        // The tail copies tell success by the return value's type ([`tail_end`]), so an alias
        // of a `Result` is guarded like a `Result`; a type the tail does not know makes the
        // rewrite fail to build — the harness's error, never a verdict. Only what names no
        // concrete type is left unrenamed.
        syn::ReturnType::Type(_, ty) => {
            if matches!(&**ty, syn::Type::ImplTrait(_) | syn::Type::Never(_) | syn::Type::Infer(_) | syn::Type::Macro(_)) {
                return Err("a return type that names no concrete type (`impl Trait`, `!`, a macro)".into());
            }
            format!(" {}", &source[f.sig.output.span().byte_range()])
        }
    };
    // Outer attributes (doc comments included) come first.
    let start = f.attrs.first().map_or(f.sig.fn_token.span.byte_range().start, |a| a.pound_token.span.byte_range().start);
    let end = f.block.brace_token.span.close().byte_range().end;
    let open = f.block.brace_token.span.open().byte_range().end;
    if end <= start || end > source.len() || !(start..end).contains(&open) {
        return Err("no source positions".into());
    }
    let ident = f.sig.ident.span().byte_range();
    let (texts, why) = match literal_copies(source, &f.block.stmts, start, end, Some(ident.clone()), k, rng) {
        Ok(texts) => (texts, None),
        Err(why) => (vec![format!("{}__EXECCRITIC_NAME__{}", &source[start..ident.start], &source[ident.end..end])], Some(why)),
    };
    // The body's `{` in the real test's text: the name is the only edit before it; every text
    // ends with the body's `}`.
    let at = open - start - (ident.end - ident.start) + "__EXECCRITIC_NAME__".len();
    let asyncness = if f.sig.asyncness.is_some() { "async " } else { "" };
    let call = format!("{BODY_FN}(){}", if asyncness.is_empty() { "" } else { ".await" });
    // The inner function goes on the `{`'s line and the call on the `}`'s: the body keeps its
    // lines, and its first line's columns move alike in every copy.
    let wrap = |text: &str, end: &str| {
        let (head, rest) = text.split_at(at);
        let body = &rest[..rest.len() - 1];
        format!("{head} #[inline(never)] {asyncness}fn {BODY_FN}(){output} {{{body}}} {end} }}")
    };
    let mut all: Vec<String> = texts.iter().map(|t| wrap(t, &call)).collect();
    let tail = wrap(&texts[0], &tail_end(&call));
    all.extend(std::iter::repeat_n(tail, k));
    Ok((start..end, all, why))
}

/// The bare identifiers among an item macro's comma-separated arguments (`r16` in
/// `rgtest!(r16, |dir, cmd| { … })`): the names the test it may write could have.
fn macro_names(m: &syn::ItemMacro) -> Vec<String> {
    if m.mac.path.is_ident("macro_rules") {
        return Vec::new();
    }
    let Ok(args) = m.mac.parse_body_with(Punctuated::<Expr, Token![,]>::parse_terminated) else { return Vec::new() };
    args.iter()
        .filter_map(|a| match a {
            Expr::Path(p) if p.qself.is_none() && p.attrs.is_empty() => p.path.get_ident().map(|i| i.to_string()),
            _ => None,
        })
        .collect()
}

/// Plan a test a macro writes from an invocation whose arguments hold its body as a closure
/// (`rgtest!(r16, |dir: Dir, mut cmd: TestCommand| { … })`, as ripgrep's tests are written):
/// the invocation's range and its texts — the real test, its literal look-alikes, K tail
/// copies, as [`plan_function`] plans a function — each a module of its own named
/// `__EXECCRITIC_NAME__` holding the invocation (`mod t_… { use super::*; rgtest!(r16, …); }`).
///
/// The test keeps its own name (a macro may use it: `stringify!($name)` names a fixture
/// file in roxmltree's tests), and its path gains a random module; which copy runs is as
/// unknowable as with renamed functions. The closure's body runs inside an inner closure called
/// at once (`(|| -> R { body })()`, its return type where the closure declares one), so copies
/// differ only in the one literal and in what follows that call ([`tail_end`]). Whether the
/// macro writes a `#[test]` function under that name is known only once the binary is built:
/// the run checks every copy against the binary's own test list ([`check_listed`]). Refused
/// here: no closure, or more than one, among the arguments; an `async` closure; `super` in the
/// invocation (the copies are one module deeper).
fn plan_macro(source: &str, m: &syn::ItemMacro, k: usize, rng: &mut impl Rng) -> Result<(Range<usize>, Vec<String>, Option<String>), String> {
    let args = m
        .mac
        .parse_body_with(Punctuated::<Expr, Token![,]>::parse_terminated)
        .map_err(|_| "a macro-written test whose arguments are not expressions".to_string())?;
    let closures: Vec<&syn::ExprClosure> = args.iter().filter_map(|a| if let Expr::Closure(c) = a { Some(c) } else { None }).collect();
    let [c] = closures.as_slice() else {
        return Err("a macro-written test whose invocation holds no closure body, or more than one".into());
    };
    let Expr::Block(body) = &*c.body else {
        return Err("a macro-written test whose closure's body is not a block".into());
    };
    if c.asyncness.is_some() || body.label.is_some() || !body.attrs.is_empty() {
        return Err("a macro-written test whose closure is async, labelled or has attributes".into());
    }
    fn names_super(ts: TokenStream) -> bool {
        ts.into_iter().any(|t| match t {
            TokenTree::Ident(i) => i == "super",
            TokenTree::Group(g) => names_super(g.stream()),
            _ => false,
        })
    }
    if names_super(m.mac.tokens.clone()) {
        return Err("a macro-written test whose invocation names `super`".into());
    }
    let start = m.attrs.first().map_or(m.mac.path.span().byte_range().start, |a| a.pound_token.span.byte_range().start);
    let end = m.semi_token.map_or(m.mac.delimiter.span().close().byte_range().end, |t| t.span.byte_range().end);
    let open = body.block.brace_token.span.open().byte_range().start;
    let close = body.block.brace_token.span.close().byte_range().end;
    if !(start < open && open < close && close <= end && end <= source.len()) {
        return Err("no source positions".into());
    }
    let (texts, why) = match literal_copies(source, &body.block.stmts, start, end, None, k, rng) {
        Ok(texts) => (texts, None),
        Err(why) => (vec![source[start..end].to_string()], Some(why)),
    };
    let output = match &c.output {
        syn::ReturnType::Default => String::new(),
        o => format!("{} ", &source[o.span().byte_range()]),
    };
    // Every text has the source's head up to the body's `{` and its tail after the body's `}`.
    let (head, tail) = (open - start, end - close);
    let wrap = |text: &str, end: &dyn Fn(&str) -> String| {
        let body = &text[head + 1..text.len() - tail - 1];
        let call = format!("(|| {output}{{{body}}})()");
        format!(
            "mod __EXECCRITIC_NAME__ {{ #[allow(unused_imports)] use super::*; {}{{ {} }}{} }}",
            &text[..head],
            end(&call),
            &text[text.len() - tail..]
        )
    };
    let mut all: Vec<String> = texts.iter().map(|t| wrap(t, &|call| call.to_string())).collect();
    let tail_copy = wrap(&texts[0], &|call| tail_end(call));
    all.extend(std::iter::repeat_n(tail_copy, k));
    Ok((start..end, all, why))
}

/// Plan a test a macro of the file writes (`t!(test1: "CamelCase" => "camel-case");`) from the
/// invocation's expansion `text` (items, one of them the `#[test]` function): the invocation's
/// range (its attributes included) and the texts [`plan_function`] plans for the expanded
/// function, each after the invocation's attributes (a `#[cfg(…)]` on the invocation applies to
/// the function it writes). The expansion's other items ([`expansion_rest`]) are written once,
/// before the copies, by the caller. An invocation with attributes that writes more than the
/// test is not planned (an outer attribute covers one item).
fn plan_expanded(source: &str, m: &syn::ItemMacro, text: &str, k: usize, rng: &mut impl Rng) -> Result<(Range<usize>, Vec<String>, Option<String>), String> {
    let file: syn::File = syn::parse_str(text).map_err(|_| "a macro's expansion that is not items".to_string())?;
    let [f] = expansion_tests(&file)[..] else {
        return Err("a macro's expansion without exactly one test function".into());
    };
    let (_, texts, why) = plan_function(text, f, k, rng)?;
    let path = m.mac.path.span().byte_range().start;
    let start = m.attrs.first().map_or(path, |a| a.pound_token.span.byte_range().start);
    let end = m.semi_token.map_or(m.mac.delimiter.span().close().byte_range().end, |t| t.span.byte_range().end);
    if !(start <= path && path < end && end <= source.len()) {
        return Err("no source positions".into());
    }
    let attrs = &source[start..path];
    if !expansion_rest(text)?.is_empty() && !attrs.trim().is_empty() {
        return Err("an invocation with attributes whose expansion writes more than the test".into());
    }
    Ok((start..end, texts.into_iter().map(|t| format!("{attrs}{t}")).collect(), why))
}

/// A macro's expansion without its one `#[test]` function: the other items it writes, trimmed.
fn expansion_rest(text: &str) -> Result<String, String> {
    let file: syn::File = syn::parse_str(text).map_err(|_| "a macro's expansion that is not items".to_string())?;
    let [f] = expansion_tests(&file)[..] else {
        return Err("a macro's expansion without exactly one test function".into());
    };
    let start = f.attrs.first().map_or(f.sig.fn_token.span.byte_range().start, |a| a.pound_token.span.byte_range().start);
    let end = f.block.brace_token.span.close().byte_range().end;
    let (Some(before), Some(after)) = (text.get(..start), text.get(end..)) else {
        return Err("no source positions".into());
    };
    Ok(format!("{}\n{}", before.trim(), after.trim()).trim().to_string())
}

/// A `#[should_panic]` test: the real test as written and K look-alikes that expect its panic
/// message followed by 16 random hex digits (`#[should_panic(expected = "<E><hex>")]`, E the
/// real test's `expected`, or nothing). Every copy runs the same body, so however it ends —
/// no panic, an exit with any status, a panic whose message lacks E — it ends alike in every
/// copy; only a panic whose message contains E passes the real test and fails the look-alikes
/// (whose suffixes the code cannot predict). An `exit(0)` from inside, the cheapest pass of a
/// test that must panic, passes them all: tampered. What a probe of the test binary can learn —
/// which copy a panic with some message passes — needs E, and code that knows E can pass the
/// test by panicking with it, which is the test's own rule.
fn should_panic_copies(source: &str, f: &ItemFn, attr: &syn::Attribute, k: usize, rng: &mut impl Rng) -> Result<(Range<usize>, Vec<String>), String> {
    let unread = || "a #[should_panic] form the planner does not read".to_string();
    let expected: Option<String> = match &attr.meta {
        syn::Meta::Path(_) => None,
        syn::Meta::NameValue(nv) => match &nv.value {
            Expr::Lit(syn::ExprLit { lit: Lit::Str(s), .. }) => Some(s.value()),
            _ => return Err(unread()),
        },
        syn::Meta::List(list) => {
            let mut e = None;
            list.parse_nested_meta(|m| {
                if m.path.is_ident("expected") && e.is_none() {
                    e = Some(m.value()?.parse::<syn::LitStr>()?.value());
                    Ok(())
                } else {
                    Err(m.error("not `expected`"))
                }
            })
            .map_err(|_| unread())?;
            Some(e.ok_or_else(unread)?)
        }
    };
    if !matches!(f.sig.output, syn::ReturnType::Default) || f.sig.asyncness.is_some() {
        return Err("a #[should_panic] test that returns a value or is async".into());
    }
    let start = f.attrs.first().map_or(f.sig.fn_token.span.byte_range().start, |a| a.pound_token.span.byte_range().start);
    let end = f.block.brace_token.span.close().byte_range().end;
    let at = attr.pound_token.span.byte_range().start..attr.bracket_token.span.close().byte_range().end;
    let ident = f.sig.ident.span().byte_range();
    if end <= start || end > source.len() || !(start <= at.start && at.end <= ident.start && ident.end <= end) {
        return Err("no source positions".into());
    }
    let copy = |attribute: &str| {
        format!(
            "{}{attribute}{}__EXECCRITIC_NAME__{}",
            &source[start..at.start],
            &source[at.end..ident.start],
            &source[ident.end..end]
        )
    };
    let mut texts = vec![copy(&source[at.clone()])];
    for _ in 0..k {
        let want = format!("{}{:016x}", expected.as_deref().unwrap_or_default(), rng.random::<u64>());
        texts.push(copy(&format!("#[should_panic(expected = {want:?})]")));
    }
    Ok((start..end, texts))
}

/// The inner function every copy runs its body in.
pub const BODY_FN: &str = "execcritic_body__";

/// A tail copy's end, after its body (`call`, the inner function's call) returned: a body that
/// succeeded (`()`, `ExitCode::SUCCESS`, `Ok` of one — libtest's own rule, told by the value's
/// type, whatever alias names it) fails there — the copy runs exactly what the real test runs and then
/// fails, so it exits 0 only where the process is ended from inside (an `exit(0)` after the first
/// assertion passed, where the literal look-alikes have already aborted), by code that cannot
/// tell it from the real test; a body that failed (`Err`, another exit code) is returned, as the
/// real test returns it, and libtest reports it alike.
pub fn tail_end(call: &str) -> String {
    format!(
        "let execcritic_r = {call}; trait ExecCriticTail {{ fn execcritic_ok(&self) -> bool; }} \
         impl ExecCriticTail for () {{ fn execcritic_ok(&self) -> bool {{ true }} }} \
         impl<T: ExecCriticTail, E> ExecCriticTail for execcritic_std__::result::Result<T, E> {{ fn execcritic_ok(&self) -> bool {{ self.as_ref().is_ok_and(ExecCriticTail::execcritic_ok) }} }} \
         impl ExecCriticTail for execcritic_std__::process::ExitCode {{ fn execcritic_ok(&self) -> bool {{ *self == execcritic_std__::process::ExitCode::SUCCESS }} }} \
         if ExecCriticTail::execcritic_ok(&execcritic_r) {{ execcritic_std__::process::abort() }} execcritic_r"
    )
}

/// The real test and its K literal look-alikes (its first top-level assertion against a
/// literal, mutated), or why there are none.
/// `ident`: the test's name, replaced by `__EXECCRITIC_NAME__` in every text (`None`: the
/// texts keep the source's names).
fn literal_copies(source: &str, stmts: &[Stmt], start: usize, end: usize, ident: Option<Range<usize>>, k: usize, rng: &mut impl Rng) -> Result<Vec<String>, String> {
    let mut earlier_return = false;
    for stmt in stmts {
        if let Some(site) = assertion(stmt) {
            if earlier_return {
                return Err("a `return` before the first literal assertion".into());
            }
            if let Some(site) = site {
                let alternatives = mutate(source, &site.literal, k, rng)?;
                let mut texts = Vec::new();
                for lit in alternatives {
                    let expected = splice(source, site.expected.clone(), &site.literal.range, &lit);
                    let actual = &source[site.actual.clone()];
                    let mut check = format!(
                        "match (&({actual}), &({expected})) {{ (l, r) => if !(*l == *r) {{ execcritic_std__::process::abort() }} }}"
                    );
                    if let Some(m) = &site.message {
                        check = format!("{{ if false {{ let _ = execcritic_std__::format!({}); }} {check} }}", &source[m.clone()]);
                    }
                    let mut text = String::new();
                    match &ident {
                        Some(ident) => {
                            text.push_str(&source[start..ident.start]);
                            text.push_str("__EXECCRITIC_NAME__");
                            text.push_str(&source[ident.end..site.call.start]);
                        }
                        None => text.push_str(&source[start..site.call.start]),
                    }
                    text.push_str(&check);
                    text.push_str(&source[site.call.end..end]);
                    texts.push(text);
                }
                return Ok(texts);
            }
        }
        let text: TokenStream = source[stmt.span().byte_range()].parse().unwrap_or_default();
        if has_return(text) {
            earlier_return = true;
        }
    }
    Err("no top-level assertion against a literal".into())
}

fn has_return(ts: TokenStream) -> bool {
    ts.into_iter().any(|t| match t {
        TokenTree::Ident(i) => i == "return",
        TokenTree::Group(g) => has_return(g.stream()),
        _ => false,
    })
}

/// One assertion a test must execute to pass.
struct Site {
    /// The macro call (`assert_eq!(…)`), without its `;`.
    call: Range<usize>,
    actual: Range<usize>,
    expected: Range<usize>,
    literal: LitSite,
    /// The assertion's message arguments, kept referenced (never evaluated) so that a variable
    /// used only there is still used (`#![deny(warnings)]` files compile as before).
    message: Option<Range<usize>>,
}

struct LitSite {
    range: Range<usize>,
    lit: Lit,
}

/// `Some(Some(site))`: a usable assertion; `Some(None)`: an assertion statement without a usable
/// literal (later ones are still tried); `None`: not an assertion.
fn assertion(stmt: &Stmt) -> Option<Option<Site>> {
    let mac = match stmt {
        Stmt::Macro(m) => &m.mac,
        Stmt::Expr(Expr::Macro(m), _) => &m.mac,
        _ => return None,
    };
    let last = mac.path.segments.last()?.ident.to_string();
    if !matches!(last.as_str(), "assert_eq" | "assert") {
        return None;
    }
    let call = mac.path.span().byte_range().start..mac.delimiter.span().close().byte_range().end;
    let args = mac.parse_body_with(Punctuated::<Expr, Token![,]>::parse_terminated).ok()?;
    let skip = if last == "assert_eq" { 2 } else { 1 };
    let rest: Vec<&Expr> = args.iter().skip(skip).collect();
    let message = match (rest.first(), rest.last()) {
        (Some(f), Some(l)) => Some(f.span().byte_range().start..l.span().byte_range().end),
        _ => None,
    };
    let (a, b): (&Expr, &Expr) = match last.as_str() {
        "assert_eq" => {
            let mut it = args.iter();
            (it.next()?, it.next()?)
        }
        _ => match args.first()? {
            Expr::Binary(bin) if matches!(bin.op, syn::BinOp::Eq(_)) => (&bin.left, &bin.right),
            _ => return Some(None),
        },
    };
    for (actual, expected) in [(a, b), (b, a)] {
        if let Some(literal) = constant_literal(expected) {
            return Some(Some(Site {
                call: call.clone(),
                actual: actual.span().byte_range(),
                expected: expected.span().byte_range(),
                literal,
                message: message.clone(),
            }));
        }
    }
    Some(None)
}

/// The first mutable literal of an expression built only from literals, paths (`None`, `Ok`,
/// constants), tuples, arrays, references, negation, constructor calls (`Some(5)`), `T::from(…)`
/// (`String::from("x")`), `vec![…]` and the conversions `.to_string()`, `.to_owned()`,
/// `.into()`, `.to_vec()`: an expected value, not a computation.
fn constant_literal(e: &Expr) -> Option<LitSite> {
    fn walk(e: &Expr, first: &mut Option<LitSite>) -> bool {
        match e {
            Expr::Lit(l) => {
                if first.is_none() && matches!(l.lit, Lit::Int(_) | Lit::Float(_) | Lit::Str(_) | Lit::Char(_)) {
                    *first = Some(LitSite { range: l.lit.span().byte_range(), lit: l.lit.clone() });
                }
                true
            }
            Expr::Path(_) => true,
            Expr::Paren(p) => walk(&p.expr, first),
            Expr::Group(g) => walk(&g.expr, first),
            Expr::Reference(r) => walk(&r.expr, first),
            Expr::Unary(u) if matches!(u.op, syn::UnOp::Neg(_)) => walk(&u.expr, first),
            Expr::Tuple(t) => t.elems.iter().all(|x| walk(x, first)),
            Expr::Array(a) => a.elems.iter().all(|x| walk(x, first)),
            Expr::Call(c) => {
                let upper = |s: &syn::PathSegment| s.ident.to_string().starts_with(|ch: char| ch.is_ascii_uppercase());
                let ctor = matches!(&*c.func, Expr::Path(p) if {
                    let segs: Vec<&syn::PathSegment> = p.path.segments.iter().collect();
                    match segs.as_slice() {
                        [.., last] if upper(last) => true,
                        [.., ty, last] => upper(ty) && last.ident == "from",
                        _ => false,
                    }
                });
                ctor && c.args.iter().all(|x| walk(x, first))
            }
            Expr::MethodCall(m) => {
                let conversion = ["to_string", "to_owned", "into", "to_vec"].iter().any(|n| m.method == n);
                conversion && m.args.is_empty() && m.turbofish.is_none() && walk(&m.receiver, first)
            }
            Expr::Macro(m) if m.mac.path.is_ident("vec") => m
                .mac
                .parse_body_with(Punctuated::<Expr, Token![,]>::parse_terminated)
                .is_ok_and(|items| items.iter().all(|x| walk(x, first))),
            _ => false,
        }
    }
    let mut first = None;
    if walk(e, &mut first) {
        first
    } else {
        None
    }
}

fn splice(source: &str, outer: Range<usize>, inner: &Range<usize>, with: &str) -> String {
    format!("{}{}{}", &source[outer.start..inner.start], with, &source[inner.end..outer.end])
}

/// The literal's K + 1 texts, the original first; the others are its neighbours in a window of
/// consecutive values that holds the original at a uniformly random rank (within the bounds of
/// the smallest integer type that can hold it, since the type is not known here).
fn mutate(source: &str, site: &LitSite, k: usize, rng: &mut impl Rng) -> Result<Vec<String>, String> {
    let original = source[site.range.clone()].to_string();
    let window = |v: u128, max: u128, rng: &mut dyn rand::RngCore| neighbours(v, max, k, rng);
    let others: Vec<String> = match &site.lit {
        Lit::Int(i) => {
            let v: u128 = i.base10_parse().map_err(|e| format!("literal {original}: {e}"))?;
            let max = int_bound(v, i.suffix());
            window(v, max, rng).into_iter().map(|x| format!("{x}{}", i.suffix())).collect()
        }
        Lit::Float(f) => {
            // The digits as written, as an integer over a power of ten: mutate the last digit.
            let digits = f.base10_digits();
            let (int_part, frac) = digits.split_once('.').unwrap_or((digits, ""));
            if digits.contains(['e', 'E']) {
                return Err(format!("float literal {original} with an exponent"));
            }
            let scaled: u128 = format!("{int_part}{frac}").parse().map_err(|_| format!("float literal {original}"))?;
            // The step between neighbours is the last digit's place, or a coarser power of ten
            // where that is under 4 units in the last place of an `f32` of this value (an
            // unsuffixed literal may be one): `123.492188f32`'s neighbours in its last digit
            // round to the same `f32`, and such a look-alike passes with the real test (seen on
            // number_prefix's tests). The neighbours keep every digit as written below the
            // step (`123.492288f32`, `123.492088f32`, …): none stands out by its precision.
            let value: f64 = digits.parse().map_err(|_| format!("float literal {original}"))?;
            let at = (value.abs() as f32).max(f32::MIN_POSITIVE);
            let ulp32 = (f32::from_bits(at.to_bits() + 1) - at) as f64;
            let mut place = -(frac.len() as i32);
            while 10f64.powi(place) < 4.0 * ulp32 {
                place += 1;
            }
            let unit = 10u128.checked_pow((place + frac.len() as i32) as u32).ok_or_else(|| format!("float literal {original}"))?;
            let (steps, below) = (scaled / unit, scaled % unit);
            window(steps, u64::MAX as u128 / unit, rng)
                .into_iter()
                .map(|x| {
                    let x = x * unit + below;
                    let s = format!("{x:0>width$}", width = frac.len() + 1);
                    let (a, b) = s.split_at(s.len() - frac.len());
                    let body = if frac.is_empty() { format!("{a}.0") } else { format!("{a}.{b}") };
                    format!("{body}{}", f.suffix())
                })
                .collect()
        }
        Lit::Str(s) => {
            let v = s.value();
            let Some(last) = v.chars().last() else { return Err("an empty expected string".into()) };
            let head = &v[..v.len() - last.len_utf8()];
            window(last as u128, 0xD7FF, rng)
                .into_iter()
                .filter_map(|c| char::from_u32(c as u32))
                .map(|c| format!("{:?}", format!("{head}{c}")))
                .collect()
        }
        Lit::Char(c) => window(c.value() as u128, 0xD7FF, rng)
            .into_iter()
            .filter_map(|x| char::from_u32(x as u32))
            .map(|c| format!("{c:?}"))
            .collect(),
        _ => return Err(format!("literal {original} cannot be mutated")),
    };
    if others.len() != k {
        return Err(format!("literal {original}: only {} neighbours", others.len()));
    }
    let mut all = vec![original];
    all.extend(others);
    Ok(all)
}

/// The K neighbours of `v` in a window of K + 1 consecutive values within `0..=max` that holds
/// `v` at a uniformly random rank (where the bounds allow).
pub(super) fn neighbours(v: u128, max: u128, k: usize, rng: &mut dyn rand::RngCore) -> Vec<u128> {
    let k = k as u128;
    let lo_min = v.saturating_sub(k);
    let lo_max = v.min(max.saturating_sub(k));
    let lo = if lo_max <= lo_min { lo_min.min(lo_max) } else { rng.random_range(lo_min..=lo_max) };
    (lo..=lo + k).filter(|x| *x != v).collect()
}

/// The largest value the literal's type may hold: its suffix's, or (unsuffixed) that of the
/// smallest type among i8, u8, i16, … that holds it — a neighbour must compile whatever the
/// inferred type.
pub(super) fn int_bound(v: u128, suffix: &str) -> u128 {
    let by_suffix = match suffix {
        "i8" => Some(i8::MAX as u128),
        "u8" => Some(u8::MAX as u128),
        "i16" => Some(i16::MAX as u128),
        "u16" => Some(u16::MAX as u128),
        "i32" => Some(i32::MAX as u128),
        "u32" => Some(u32::MAX as u128),
        "i64" | "isize" => Some(i64::MAX as u128),
        "u64" | "usize" => Some(u64::MAX as u128),
        "i128" => Some(i128::MAX as u128),
        "u128" => Some(u128::MAX),
        _ => None,
    };
    by_suffix.unwrap_or_else(|| {
        [i8::MAX as u128, u8::MAX as u128, i16::MAX as u128, u16::MAX as u128, i32::MAX as u128, u32::MAX as u128, i64::MAX as u128, u64::MAX as u128, i128::MAX as u128]
            .into_iter()
            .find(|b| v <= *b)
            .unwrap_or(u128::MAX)
    })
}

/// A random test name of one shape for every copy: `t_` and 16 hex digits.
fn fresh_name<R: Rng>(rng: &mut R) -> String {
    format!("t_{:016x}", rng.random::<u64>())
}

/// What one run of a planned binary found: statuses by run path (mutants and controls included)
/// and, under the tests' own paths, the real tests' statuses.
#[derive(Clone, Debug, Default)]
pub struct Judged {
    pub real: BTreeMap<String, TestStatus>,
    /// Non-empty: the run is `tampered`, never a verdict.
    pub violations: Vec<String>,
    pub run: BTreeMap<String, TestStatus>,
}

/// The `why` of a judged `#[ignore]` test: it is not run, and counts as skipped ([`verdict`]).
/// libtest does not run an ignored test selected with `--exact` and exits 0 — read as a pass, a
/// candidate that adds `#[ignore]` to a unit test in the file it edits would hide its failure.
pub const IGNORED: &str = "#[ignore]";

fn ignored(g: &Group) -> bool {
    g.real.is_none() && g.why.as_deref() == Some(IGNORED)
}

/// Every test path a planned file asks to run: real tests (planned or not, judged `#[ignore]`
/// tests excepted), mutants, controls.
pub fn run_paths(map: &CanaryMap) -> Vec<String> {
    let mut out = Vec::new();
    for g in map.groups.iter().filter(|g| !ignored(g)) {
        out.push(g.real.clone().unwrap_or_else(|| g.name.clone()));
        out.extend(g.mutants.iter().cloned());
    }
    out.extend(map.controls.iter().map(|c| c.name.clone()));
    out
}

/// [`run_paths`] in random order: the real test is not the first of its group to run.
pub fn run_order(map: &CanaryMap, rng: &mut impl Rng) -> Vec<String> {
    let mut paths = run_paths(map);
    paths.shuffle(rng);
    paths
}

/// Run each path of the plan, in random order, in its own process of the test binary and judge
/// the statuses. `run` executes one `--exact` path and returns its status (the process's own
/// exit status: 0 passed, anything else failed; a timeout is `Error`).
pub fn judge(map: &CanaryMap, rng: &mut impl Rng, mut run: impl FnMut(&str) -> TestStatus) -> Judged {
    let statuses = run_order(map, rng).into_iter().map(|p| {
        let st = run(&p);
        (p, st)
    });
    verdict(map, statuses.collect())
}

/// The verdict on a plan's statuses (by run path: real tests, mutants and controls).
pub fn verdict(map: &CanaryMap, statuses: BTreeMap<String, TestStatus>) -> Judged {
    let violations = map.violations(&statuses);
    let real = map
        .groups
        .iter()
        .filter_map(|g| {
            if ignored(g) {
                return Some((g.name.clone(), TestStatus::Skipped));
            }
            let run_path = g.real.as_ref().unwrap_or(&g.name);
            statuses.get(run_path).map(|s| (g.name.clone(), *s))
        })
        .collect();
    Judged { real, violations, run: statuses }
}

/// Check a plan against the built binary's own test list (`listed`: the run paths, as
/// [`run_paths`] gives them, that `<binary> --list` names as tests) before anything runs:
/// `--exact` with a path no test has runs nothing and exits 0, which would read as a pass.
///
/// A judged test none of whose copies the binary has — the change under test made the macro
/// write no such test, or the build compiled it out — is removed from the plan and its name
/// returned (`.0`): a failed node, never the harness's error (as a deleted test). A copy or
/// control missing beside a listed real test is a violation (`.1`): no honest build lists some
/// copies of one invocation and not others. The list is written by the binary, that is by the
/// code under test, so nothing in it may turn out better for a candidate than running: a
/// listed path that runs nothing passes every copy (tampered), an unlisted one fails. (Ignored
/// tests are not read from it: `--list --ignored` could call any test ignored, and a skipped
/// PASS_TO_PASS test counts as kept.)
pub fn check_listed(map: &mut CanaryMap, listed: &std::collections::BTreeSet<String>) -> (Vec<String>, Vec<String>) {
    let mut missing = Vec::new();
    for g in &map.groups {
        if g.real.iter().chain(&g.mutants).all(|p| !listed.contains(p)) && g.real.is_some() {
            missing.push(g.name.clone());
        }
    }
    map.groups.retain(|g| !missing.contains(&g.name));
    let guarded = map.groups.iter().filter(|g| g.real.is_some()).flat_map(|g| g.real.iter().chain(&g.mutants));
    let violations = guarded
        .chain(map.controls.iter().map(|c| &c.name))
        .filter(|p| !listed.contains(*p))
        .map(|p| format!("the built binary does not list the guard's copy `{p}` beside the others"))
        .collect();
    (missing, violations)
}

/// Run one test of a libtest binary in its own process on this host: `--exact <path>
/// --test-threads=1`, stdin closed, `timeout` enforced by SIGKILL. The status is the exit status.
pub fn run_exact(binary: &Path, path: &str, timeout: Duration) -> TestStatus {
    use std::process::{Command, Stdio};
    let child = Command::new(binary)
        .args(["--exact", path, "--test-threads=1", "-q"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else { return TestStatus::Error };
    let deadline = std::time::Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return if status.success() { TestStatus::Passed } else { TestStatus::Failed },
            Ok(None) if std::time::Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return TestStatus::Error;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn plan(src: &str, judged: &[&str], seed: u64) -> FilePlan {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let judged: Vec<String> = judged.iter().map(|s| s.to_string()).collect();
        plan_file("t.rs", src, &judged, DEFAULT_K, &mut rng).unwrap()
    }

    const DEFAULT_K: usize = 6;

    /// The expected literals of every copy of the one judged test, the real one first.
    fn expected_values(p: &FilePlan) -> Vec<String> {
        let g = &p.map.groups[0];
        let names: Vec<&String> = g.real.iter().chain(&g.mutants).collect();
        names
            .iter()
            .map(|n| {
                let n = n.rsplit("::").next().unwrap();
                let at = p.source.find(&format!("fn {n}()")).unwrap();
                let body = &p.source[at..];
                let from = body.find("&(").unwrap();
                let rest = &body[from..];
                let second = rest[2..].find("&(").unwrap() + 2;
                let close = rest[second..].find(")) {").unwrap() + second;
                rest[second + 2..close].to_string()
            })
            .collect()
    }

    #[test]
    fn a_judged_test_becomes_k_plus_one_look_alikes_and_two_controls() {
        let src = "use m::f;\n\n/// doc\n#[test]\nfn checks() {\n    let x = f();\n    assert_eq!(x, 50, \"msg {}\", 1);\n    assert_eq!(x, 7);\n}\n";
        let p = plan(src, &["checks"], 1);
        let g = &p.map.groups[0];
        // 6 literal look-alikes and 6 tail copies.
        assert_eq!((g.name.as_str(), g.mutants.len(), p.map.controls.len()), ("checks", 12, 2));
        assert!(g.why.is_none());
        // The original name is gone; every copy keeps its doc comment and the rest of its body.
        assert!(!p.source.contains("fn checks"));
        assert_eq!(p.source.matches("/// doc").count(), 13);
        assert_eq!(p.source.matches("assert_eq!(x, 7);").count(), 13);
        // Every copy runs its body in the inner function; the tail copies check what it returned,
        // the others return it.
        assert_eq!(p.source.matches(&format!("#[inline(never)] fn {BODY_FN}() {{\n")).count(), 13, "{}", p.source);
        assert_eq!(p.source.matches(&tail_end(&format!("{BODY_FN}()"))).count(), 6);
        assert_eq!(p.source.matches(&format!("}} {BODY_FN}() }}")).count(), 7);
        let real = g.real.as_deref().unwrap();
        assert!(p.source.contains(&format!("fn {real}() {{ #[inline(never)] fn {BODY_FN}() {{\n")), "{}", p.source);
        assert_eq!(p.source.matches("execcritic_std__::process::abort()").count(), 13 + 6 + 1);
        // The message's arguments stay referenced, never evaluated.
        assert_eq!(p.source.matches("if false { let _ = execcritic_std__::format!(\"msg {}\", 1); }").count(), 13);
        let values: Vec<i64> = expected_values(&p).iter().map(|v| v.parse().unwrap()).collect();
        assert_eq!(values[0], 50);
        assert_eq!(values.iter().filter(|v| **v == 50).count(), 7, "the tail copies keep the value");
        let mut sorted = values.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, (sorted[0]..sorted[0] + 7).collect::<Vec<_>>(), "consecutive: {values:?}");
        // Syntax still valid.
        syn::parse_file(&p.source).unwrap();
    }

    #[test]
    fn the_real_value_takes_every_rank_among_its_neighbours() {
        let src = "#[test]\nfn t() { assert_eq!(g(), 1000); }\n";
        let mut ranks = [0usize; 7];
        for seed in 0..400 {
            let values: Vec<i64> = expected_values(&plan(src, &["t"], seed)).iter().map(|v| v.parse().unwrap()).collect();
            ranks[values.iter().filter(|v| **v < 1000).count()] += 1;
        }
        // Uniform: each rank ≈ 57 of 400.
        assert!(ranks.iter().all(|n| (25..=95).contains(n)), "{ranks:?}");
    }

    #[test]
    fn neighbours_stay_within_the_literal_type() {
        for (lit, lo, hi) in [("0", 0, 6), ("250u8", 244, 255), ("127", 121, 127), ("3", 0, 9)] {
            let src = format!("#[test]\nfn t() {{ assert_eq!(g(), {lit}); }}\n");
            for seed in 0..20 {
                for v in expected_values(&plan(&src, &["t"], seed)) {
                    let n: i64 = v.trim_end_matches("u8").parse().unwrap();
                    assert!((lo..=hi).contains(&n), "{lit}: {v}");
                    assert_eq!(v.ends_with("u8"), lit.ends_with("u8"));
                }
            }
        }
    }

    #[test]
    fn strings_chars_floats_and_constructors_are_mutated_in_their_last_literal_unit() {
        let cases = [
            ("\"seven\"", "\"seve"),
            ("'q'", "'"),
            ("2.50", "2."),
            ("Some(5)", "Some("),
            ("-5", "-"),
            ("vec![1, 2, 30]", "vec!["),
            ("\"ab\".to_string()", "\"a"),
            ("String::from(\"ab\")", "String::from(\"a"),
            ("Ok(\"x\".into())", "Ok(\""),
        ];
        for (lit, prefix) in cases {
            let src = format!("#[test]\nfn t() {{ assert_eq!(g(), {lit}); }}\n");
            let p = plan(&src, &["t"], 3);
            let values = expected_values(&p);
            assert_eq!(values[0], lit);
            let mut distinct = values.clone();
            distinct.sort();
            distinct.dedup();
            assert_eq!(distinct.len(), 7, "{values:?}");
            assert!(values.iter().all(|v| v.starts_with(prefix)), "{values:?}");
            syn::parse_file(&p.source).unwrap();
        }
        // A float's look-alikes differ from it as an `f32` (an unsuffixed literal may be one):
        // where its last digit is finer than that, a coarser digit moves.
        for (lit, step) in [("123.492188f32", 1e-4), ("123.492188", 1e-4), ("2.50", 1e-2), ("0.1", 1e-1), ("16777216.0", 1e1), ("1f64", 1.0), ("0.000001f32", 1e-6)] {
            for seed in 0..8 {
                let p = plan(&format!("#[test]\nfn t() {{ assert_eq!(g(), {lit}); }}\n"), &["t"], seed);
                // The real value and its 6 literal look-alikes (the tail copies follow).
                let values = expected_values(&p)[..7].to_vec();
                let parse = |v: &str| v.trim_end_matches("f32").trim_end_matches("f64").parse::<f64>().unwrap();
                let real = parse(&values[0]);
                let mut as_f32: Vec<u32> = values.iter().map(|v| (parse(v) as f32).to_bits()).collect();
                as_f32.sort();
                as_f32.dedup();
                assert_eq!(as_f32.len(), 7, "{lit}: {values:?}");
                for v in &values[1..] {
                    let d = (parse(v) - real).abs();
                    assert!(d >= step * 0.999 && d <= step * 6.001, "{lit}: {v} ({values:?})");
                    let decimals = |v: &str| v.trim_end_matches("f32").trim_end_matches("f64").split_once('.').map_or(0, |(_, f)| f.len());
                    assert_eq!(decimals(v), decimals(lit), "{lit}: {v} keeps the digits as written");
                    assert!(v.ends_with(lit.trim_start_matches(|c: char| c.is_ascii_digit() || c == '.')), "{lit}: suffix of {v}");
                }
            }
        }
        // `assert!(a == b)` and the literal on the left.
        for body in ["assert!(g() == 42);", "assert_eq!(42, g());"] {
            let src = format!("#[test]\nfn t() {{ {body} }}\n");
            let p = plan(&src, &["t"], 4);
            assert_eq!(expected_values(&p)[0], "42", "{body}");
            assert!(p.source.contains("match (&(g()), &(42))"), "{}", p.source);
        }
    }

    #[test]
    fn tests_that_cannot_be_renamed_keep_their_name_and_say_why() {
        for (src, why) in [
            ("#[test]\n#[ignore]\nfn t() { assert_eq!(g(), 1); }\n", "ignore"),
            ("#[test]\n#[should_panic(note = \"x\")]\nfn t() { g(); }\n", "should_panic"),
            ("#[rstest]\n#[test]\nfn t(#[values(1, 2)] x: u8) { assert_eq!(g(x), 1); }\n", "parameters"),
            ("#[test]\nfn t() -> impl Termination { assert_eq!(g(), 1); }\n", "return type"),
        ] {
            let p = plan(src, &["t"], 5);
            let g = &p.map.groups[0];
            assert!(g.real.is_none() && g.mutants.is_empty(), "{src}");
            assert!(g.why.as_deref().unwrap_or_default().contains(why), "{src}: {:?}", g.why);
            assert_eq!(p.source, src, "a test that is not renamed is left as written");
            if why == "ignore" {
                // Not run, and skipped whatever a run would say.
                assert!(run_paths(&p.map).is_empty());
                assert_eq!(judge(&p.map, &mut rand::rng(), |_| TestStatus::Passed).real["t"], TestStatus::Skipped);
            } else {
                assert_eq!(run_paths(&p.map), vec!["t".to_string()]);
            }
        }
    }

    #[test]
    fn a_test_named_elsewhere_keeps_its_function_unrun_beside_its_copies() {
        // Another item calls it, and a candidate could name it just to keep it unrenamed.
        let src = "#[test]\nfn t() { assert_eq!(g(), 1); }\nfn u() { t() }\nconst _: fn() = t;\n";
        let p = plan(src, &["t"], 5);
        let g = &p.map.groups[0];
        assert!(g.why.is_none() && g.real.as_ref().is_some_and(|r| r != "t") && g.mutants.len() == 2 * DEFAULT_K, "{g:?}");
        assert!(!run_paths(&p.map).contains(&"t".to_string()));
        assert!(p.source.starts_with("#[allow(unused_extern_crates)] extern crate std as execcritic_std__; #[test]\nfn t() { execcritic_std__::assert_eq!(g(), 1); }\n\n"), "{}", p.source);
        assert!(p.source.contains("fn u() { t() }\nconst _: fn() = t;"), "{}", p.source);
        syn::parse_file(&p.source).unwrap();
    }

    #[test]
    fn every_module_reaches_std_and_every_check_macro_goes_through_it() {
        let src = "//! doc\n#![allow(unused)]\nmacro_rules! assert { ($($t:tt)*) => { assert_eq!(1, 1) }; }\nfn helper() { assert!(g()); std::assert!(h()); x::panic!(); let _ = quote::quote! { assert!(#x) }; }\n\
                   mod tests {\n    #![allow(dead_code)]\n    assert_eq!(a, 1);\n    mod inner { fn f() { todo!() } }\n    #[test]\n    fn checks() { let v = vec![matches!(g(), Some(_))]; assert_eq!(v, [true]); helper(); }\n    mod empty {}\n}\n";
        let p = plan(src, &["tests::checks"], 3);
        assert!(p.map.groups[0].real.is_some(), "{:?}", p.map.groups[0]);
        let item = "#[allow(unused_extern_crates)] extern crate std as execcritic_std__; ";
        // The file's module, `tests` (after its inner attribute), `inner`; not the empty module.
        assert_eq!(p.source.matches(item).count(), 3, "{}", p.source);
        assert!(p.source.starts_with(&format!("//! doc\n#![allow(unused)]\n{item}macro_rules! assert {{ ($($t:tt)*) => {{ assert_eq!(1, 1) }}; }}\n")), "{}", p.source);
        assert!(p.source.contains(&format!("#![allow(dead_code)]\n    {item}execcritic_std__::assert_eq!(a, 1);")), "{}", p.source);
        assert!(p.source.contains(&format!("mod inner {{ {item}fn f() {{ execcritic_std__::todo!() }} }}")), "{}", p.source);
        assert!(p.source.contains("fn helper() { execcritic_std__::assert!(g()); std::assert!(h()); x::panic!(); let _ = quote::quote! { assert!(#x) }; }"), "{}", p.source);
        assert!(p.source.contains("vec![execcritic_std__::matches!(g(), Some(_))]"), "{}", p.source);
        assert!(p.source.contains("mod empty {}"), "{}", p.source);
        syn::parse_file(&p.source).unwrap();
        // A file with nothing planned is left as written.
        let src = "#[test]\n#[ignore]\nfn t() { assert!(g()); }\n";
        assert_eq!(plan(src, &["t"], 3).source, src);
    }

    #[test]
    fn should_panic_tests_get_look_alikes_expecting_another_message() {
        for (attr, expected) in [
            ("#[should_panic]", ""),
            ("#[should_panic(expected = \"negative: \\\"x\\\"\")]", "negative: \\\"x\\\""),
            ("#[should_panic = \"neg\"]", "neg"),
            ("#[should_panic(expected = r\"a\\b\",)]", "a\\\\b"),
        ] {
            let src = format!("/// doc\n#[test]\n{attr}\nfn t() {{ g(-1); }}\n");
            let p = plan(&src, &["t"], 9);
            let g = &p.map.groups[0];
            assert!(g.real.is_some() && g.mutants.len() == DEFAULT_K && g.why.is_none(), "{src}: {g:?}");
            let real = g.real.as_deref().unwrap();
            assert!(p.source.contains(&format!("/// doc\n#[test]\n{attr}\nfn {real}() {{ g(-1); }}")), "{}", p.source);
            for m in &g.mutants {
                let at = p.source.find(&format!("fn {m}() {{ g(-1); }}")).unwrap_or_else(|| panic!("{m}: {}", p.source));
                let head = &p.source[..at];
                let line = head.lines().last().unwrap();
                let prefix = format!("#[should_panic(expected = \"{expected}");
                assert!(line.starts_with(&prefix) && line.ends_with("\")]") && line.len() == prefix.len() + 16 + 3, "{line} / {prefix}");
            }
            syn::parse_file(&p.source).unwrap();
        }
    }

    #[test]
    fn tests_without_a_literal_assertion_are_guarded_by_tail_copies_alone() {
        let cases = [
            ("#[test]\nfn t() { assert_eq!(g(), h()); }\n", "literal"),
            ("#[test]\nfn t() { assert_eq!(g(), \"a\".repeat(3)); }\n", "literal"),
            ("#[test]\nfn t() { assert_eq!(g(), x::from(\"a\")); }\n", "literal"),
            ("#[test]\nfn t() { assert_eq!(g(), format!(\"{}\", 1)); }\n", "literal"),
            ("#[test]\nfn t() { assert!(g()); }\n", "literal"),
            ("#[test]\nfn t() { if g() { return; } assert_eq!(h(), 1); }\n", "return"),
            ("#[test]\nfn t() { assert_eq!(g(), \"\"); }\n", "empty"),
            ("#[test]\nfn t() { assert_eq!(g(), 1e3); }\n", "exponent"),
        ];
        for (src, why) in cases {
            let p = plan(src, &["t"], 5);
            let g = &p.map.groups[0];
            assert!(g.real.is_some() && g.mutants.len() == 6, "{src}: {g:?}");
            let w = g.why.as_deref().unwrap_or_default();
            assert!(w.contains(why) && w.contains("tail copies alone"), "{src}: {w}");
            assert_eq!(p.source.matches("trait ExecCriticTail").count(), 6, "{src}");
            assert!(!p.source.contains("fn t()"), "renamed: {}", p.source);
            assert_eq!(run_paths(&p.map).len(), 1 + 6 + 2);
            syn::parse_file(&p.source).unwrap();
        }
        // Later assertions are tried when an earlier one has no literal.
        let p = plan("#[test]\nfn t() { assert!(g()); assert_eq!(h(), 9); }\n", &["t"], 6);
        assert_eq!(expected_values(&p)[0], "9");
    }

    /// The source text of the module a copy's run path names (`t_…::r16` → `mod t_… { … }`).
    fn copy_module<'a>(p: &'a FilePlan, run: &str) -> &'a str {
        let module = run.rsplit("::").nth(1).unwrap();
        let at = p.source.find(&format!("mod {module} {{")).unwrap();
        let rest = &p.source[at..];
        // Copies are separated by a blank line (the test's body has none).
        &rest[..rest.find("\n\n").unwrap_or(rest.len())]
    }

    #[test]
    fn a_test_a_macro_writes_from_a_closure_is_copied_in_modules_of_random_names() {
        // ripgrep's form: the macro writes `#[test] fn $name()` and calls the closure.
        let src = "use crate::util::{Dir, TestCommand};\n\n// issue 25\nrgtest!(r25, |dir: Dir, mut cmd: TestCommand| {\n    dir.create(\"a\", \"test\");\n    assert_eq!(cmd.arg(\"test\").stdout(), \"a:test\\n\");\n    cmd.current_dir(dir.path());\n});\n\nrgtest!(r30, |_dir: Dir, _cmd: TestCommand| {});\n";
        let p = plan(src, &["r25"], 3);
        let g = &p.map.groups[0];
        assert_eq!(g.name, "r25");
        assert!(g.why.is_none(), "{g:?}");
        let real = g.real.clone().unwrap();
        assert!(real.starts_with("t_") && real.ends_with("::r25"), "{real}");
        assert_eq!(g.mutants.len(), 2 * DEFAULT_K);
        assert!(g.mutants.iter().all(|m| m.ends_with("::r25") && m.len() == real.len()), "{g:?}");
        // 13 modules, each holding the invocation under the test's own name, importing its parent.
        assert_eq!(p.source.matches("use super::*; rgtest!(r25, |dir: Dir, mut cmd: TestCommand| {").count(), 13, "{}", p.source);
        // The other invocation is left as written, and the module gets its two controls.
        assert!(p.source.contains("rgtest!(r30, |_dir: Dir, _cmd: TestCommand| {});"));
        assert_eq!(p.map.controls.len(), 2);
        // The real copy runs the body in a closure called at once; its assertion aborts, with
        // the expected value as written; the literal look-alikes expect the value's neighbours.
        let body = copy_module(&p, &real);
        assert!(body.contains("{ (|| {\n    dir.create(\"a\", \"test\");\n    match (&(cmd.arg(\"test\").stdout()), &(\"a:test\\n\"))"), "{body}");
        assert!(!body.contains("ExecCriticTail"), "{body}");
        let mut expected: Vec<String> = g.mutants.iter().map(|m| copy_module(&p, m)).filter(|b| !b.contains("ExecCriticTail")).map(|b| {
            let at = b.find("&(\"").unwrap();
            b[at + 2..at + 2 + b[at + 2..].find('"').unwrap() + b[at + 2 + 1..].find('"').unwrap() + 2].to_string()
        }).collect();
        expected.sort();
        expected.dedup();
        assert_eq!(expected.len(), DEFAULT_K, "{expected:?}");
        assert!(!expected.contains(&"\"a:test\\n\"".to_string()), "{expected:?}");
        // The tail copies run the real body, then fail where it succeeded.
        let tails: Vec<&str> = g.mutants.iter().map(|m| copy_module(&p, m)).filter(|b| b.contains("ExecCriticTail")).collect();
        assert_eq!(tails.len(), DEFAULT_K);
        assert!(tails.iter().all(|t| t.contains("let execcritic_r = (|| {\n    dir.create(")), "{}", tails[0]);
        // Every module reaches std through its own item, and the lines stay where they were.
        syn::parse_file(&p.source).unwrap();
        assert!(p.source.matches(&format!("extern crate std as {STD};")).count() >= 14, "{}", p.source);
        for run in std::iter::once(&real).chain(&g.mutants) {
            assert_eq!(copy_module(&p, run).lines().count(), 5, "{}", copy_module(&p, run));
        }
    }

    #[test]
    fn a_macro_invocations_declared_return_type_and_other_forms() {
        // A closure declaring its return type keeps it on the inner closure.
        let p = plan("t!(r, |c: C| -> Result<(), E> { assert_eq!(c.f()?, 3); Ok(()) });\n", &["r"], 4);
        assert!(p.map.groups[0].real.is_some(), "{:?}", p.map.groups[0]);
        assert!(p.source.contains("(|| -> Result<(), E> {"), "{}", p.source);
        syn::parse_file(&p.source).unwrap();
        // A `#[test]` function of the same path wins over an invocation naming it.
        let p = plan("#[test]\nfn r() { assert_eq!(f(), 1); }\nm!(r, || {});\n", &["r"], 4);
        assert!(!p.map.groups[0].real.as_ref().unwrap().contains("::"), "{:?}", p.map.groups[0]);
        assert!(p.source.contains("m!(r, || {});"));
        // Forms the planner does not guard: the test is not renamed, and says why.
        for (src, why) in [
            ("t!(r, \"input\" => \"output\");\n", "not expressions"),
            ("t!(r, 5);\n", "no closure"),
            ("t!(r, || {}, || {});\n", "more than one"),
            ("t!(r, |x| x + 1);\n", "not a block"),
            ("t!(r, async || {});\n", "async"),
            ("t!(r, || { super::f(); });\n", "super"),
        ] {
            let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
            match plan_file("t.rs", src, &["r".to_string()], DEFAULT_K, &mut rng) {
                Ok(p) => {
                    let g = &p.map.groups[0];
                    assert!(g.real.is_none() && g.why.as_deref().unwrap_or_default().contains(why), "{src}: {g:?}");
                    assert_eq!(p.source, src);
                }
                Err(e) => assert!(why == "not expressions" && e.contains("no #[test] function"), "{src}: {e}"),
            }
        }
        // `macro_rules!` definitions and invocations in inline modules.
        let p = plan("macro_rules! t { ($n:ident, $f:expr) => { #[test] fn $n() { $f() } }; }\nmod m {\n    t!(x, || { assert!(g() == 2); });\n}\n", &["m::x"], 4);
        let real = p.map.groups[0].real.clone().unwrap();
        assert!(real.starts_with("m::t_") && real.ends_with("::x"), "{real}");
        assert!(test_paths("t!(a, b, || {});\nmacro_rules! u { () => {} }\n").unwrap() == ["a", "b"]);
        // Two judged names in one invocation: copied once, the second left unguarded.
        let p = plan("t!(a, b, || { assert_eq!(f(), 1); });\n", &["a", "b"], 4);
        assert!(p.map.groups[0].real.is_some() && p.map.groups[1].real.is_none(), "{:?}", p.map.groups);
        assert!(p.map.groups[1].why.as_deref().unwrap().contains("already"), "{:?}", p.map.groups[1]);
        syn::parse_file(&p.source).unwrap();
    }

    #[test]
    fn a_test_a_macro_of_the_file_writes_is_planned_from_its_expansion() {
        // heck's form: the body is in the definition, the invocation holds the name and values.
        let src = "#[cfg(test)]\nmod tests {\n    use super::*;\n\n    macro_rules! t {\n        ($t:ident : $s1:expr => $s2:expr) => {\n            #[test]\n            fn $t() {\n                assert_eq!($s1.to_kebab_case(), $s2)\n            }\n        };\n    }\n\n    t!(test1: \"CamelCase\" => \"camel-case\");\n    t!(test2: \"This is Human case.\" => \"this-is-human-case\");\n}\n";
        assert_eq!(test_paths(src).unwrap(), ["tests::test1", "tests::test2"]);
        let p = plan(src, &["tests::test1"], 3);
        let g = &p.map.groups[0];
        assert!(g.why.is_none(), "{g:?}");
        let real = g.real.clone().unwrap();
        assert!(real.starts_with("tests::t_") && real.matches("::").count() == 1, "{real}");
        assert_eq!(g.mutants.len(), 2 * DEFAULT_K);
        // The invocation gives way to the copies; the other invocation and the definition stay.
        assert!(!p.source.contains("t!(test1"), "{}", p.source);
        assert!(p.source.contains("t!(test2: \"This is Human case.\" => \"this-is-human-case\");"));
        assert!(p.source.contains("macro_rules! t {"));
        // The real copy and the K tail copies expect the value as written, the K look-alikes
        // its neighbours; every assertion is the guard's abort.
        assert_eq!(p.source.matches("&(\"camel-case\")").count(), 1 + DEFAULT_K, "{}", p.source);
        assert_eq!(p.source.matches("&(\"CamelCase\" . to_kebab_case ())").count(), 1 + 2 * DEFAULT_K, "{}", p.source);
        syn::parse_file(&p.source).unwrap();

        // roxmltree's form: no assertion to mutate, so the tail copies alone; the test keeps
        // the name it gives its fixture (`stringify!($name)`), and the attribute on the
        // invocation stays on every copy.
        let src = "macro_rules! test {\n    ($name:ident) => {\n        #[test]\n        fn $name() {\n            actual_test(&format!(\"tests/files/{}.xml\", stringify!($name)))\n        }\n    };\n}\n\n#[cfg(unix)]\ntest!(attrs_001);\ntest!(attrs_002);\n";
        let p = plan(src, &["attrs_001"], 3);
        let g = &p.map.groups[0];
        assert!(g.real.is_some() && g.why.as_deref().unwrap().contains("tail copies alone"), "{g:?}");
        assert_eq!(p.source.matches("#[cfg(unix)]\n# [test] fn").count(), 1 + DEFAULT_K, "{}", p.source);
        assert_eq!(p.source.matches("stringify ! (attrs_001)").count(), 1 + DEFAULT_K, "{}", p.source);
        assert!(p.source.contains("test!(attrs_002);"));
        syn::parse_file(&p.source).unwrap();

        // mime's form: one invocation writes an enum, constants (through another macro) and one
        // test, from a nested repetition; the other items are written once, before the copies.
        let src = "macro_rules! c { ($id:ident, $($p:expr),*) => { pub const $id: u8 = 1; }; }\nmacro_rules! mimes {\n    ($($id:ident, $($piece:expr),*;)*) => (\n        enum __Atoms { __Dynamic, $($id,)* }\n        $( c! { $id, $($piece),* } )*\n        #[test]\n        fn test_mimes_macro_consts() {\n            let _ = [$( $id ),*].iter().enumerate().map(|(pos, &atom)| { assert_eq!(pos + 1, atom as usize); }).collect::<Vec<()>>();\n        }\n    )\n}\nmimes! {\n    STAR, \"*/*\", 1;\n    TEXT, \"text/*\", 4;\n}\n";
        assert_eq!(test_paths(src).unwrap(), ["test_mimes_macro_consts"]);
        let p = plan(src, &["test_mimes_macro_consts"], 3);
        assert!(p.map.groups[0].real.is_some(), "{:?}", p.map.groups[0]);
        assert_eq!(p.source.matches("enum __Atoms { __Dynamic , STAR , TEXT , }").count(), 1, "{}", p.source);
        assert_eq!(p.source.matches("c ! { TEXT , \"text/*\" ,4 }").count(), 1, "{}", p.source);
        assert!(p.source.find("enum __Atoms { __Dynamic ,").unwrap() < p.source.find("# [test] fn t_").unwrap(), "{}", p.source);
        assert!(!p.source.contains("mimes! {"), "{}", p.source);
        // The copies took the macro's only use: `#![deny(warnings)]` must not fail the build.
        assert!(p.source.contains("#[allow(unused_macros)] macro_rules! mimes {"), "{}", p.source);
        assert_eq!(p.source.matches("#[allow(unused_macros)]").count(), 1, "{}", p.source);
        syn::parse_file(&p.source).unwrap();
        // With an attribute on such an invocation: not planned (it would cover one item).
        let with_attr = src.replace("mimes! {\n    STAR", "#[cfg(test)]\nmimes! {\n    STAR");
        let p = plan(&with_attr, &["test_mimes_macro_consts"], 3);
        assert!(p.map.groups[0].why.as_deref().unwrap_or("").contains("attributes"), "{:?}", p.map.groups[0]);
    }

    #[test]
    fn the_binarys_test_list_decides_what_a_plan_may_run() {
        let src = "t!(a, || { assert_eq!(f(), 1); });\nt!(b, || { assert_eq!(f(), 2); });\n#[test]\nfn c() { assert_eq!(f(), 3); }\n";
        let p = plan(src, &["a", "b", "c"], 8);
        let all: std::collections::BTreeSet<String> = run_paths(&p.map).into_iter().collect();
        // Everything listed: the plan stands.
        let mut map = p.map.clone();
        assert_eq!(check_listed(&mut map, &all), (vec![], vec![]));
        assert_eq!(map, p.map);
        // `b` not written at all: removed from the plan (nothing of it runs), a failed node.
        let of = |name: &str| {
            let g = p.map.groups.iter().find(|g| g.name == name).unwrap();
            g.real.iter().chain(&g.mutants).cloned().collect::<Vec<String>>()
        };
        let listed = all.iter().filter(|x| !of("b").contains(x)).cloned().collect();
        let mut map = p.map.clone();
        assert_eq!(check_listed(&mut map, &listed), (vec!["b".to_string()], vec![]));
        assert_eq!(map.groups.len(), 2);
        assert!(run_paths(&map).iter().all(|x| !of("b").contains(x)));
        // A look-alike or control the binary lacks beside the rest: a violation.
        for lost in [p.map.groups[2].mutants[0].clone(), p.map.controls[0].name.clone(), p.map.groups[0].real.clone().unwrap()] {
            let mut map = p.map.clone();
            let listed = all.iter().filter(|x| **x != lost).cloned().collect();
            let (missing, violations) = check_listed(&mut map, &listed);
            assert!(missing.is_empty() && violations.len() == 1 && violations[0].contains(&lost), "{violations:?}");
        }
    }

    #[test]
    fn paths_through_modules_and_missing_tests() {
        let src = "mod a {\n    mod tests {\n        #[tokio::test]\n        async fn t() { assert_eq!(g().await, 3); }\n    }\n}\n";
        let p = plan(src, &["a::tests::t"], 7);
        let g = &p.map.groups[0];
        assert!(g.real.as_deref().unwrap().starts_with("a::tests::t_"), "{g:?}");
        assert!(p.map.controls.iter().all(|c| c.name.starts_with("a::tests::t_")));
        assert!(p.source.contains("#[tokio::test]\n        async fn t_"));
        // An async test's inner function is async, and awaited.
        assert_eq!(p.source.matches(&format!("#[inline(never)] async fn {BODY_FN}() {{")).count(), 13, "{}", p.source);
        assert_eq!(p.source.matches(&tail_end(&format!("{BODY_FN}().await"))).count(), 6);
        syn::parse_file(&p.source).unwrap();
        // A test returning a `Result`: the inner function returns it too.
        let p = plan("#[test]\nfn t() -> io::Result<()> {\n    assert_eq!(g()?, 3);\n    Ok(())\n}\n", &["t"], 7);
        assert_eq!(p.source.matches(&format!("#[inline(never)] fn {BODY_FN}() -> io::Result<()> {{\n")).count(), 13, "{}", p.source);
        syn::parse_file(&p.source).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0);
        let err = plan_file("t.rs", src, &["a::t".to_string()], 6, &mut rng).unwrap_err();
        assert!(err.contains("no #[test] function `a::t`"), "{err}");
        let err = plan_file("t.rs", "fn (", &["t".to_string()], 6, &mut rng).unwrap_err();
        assert!(err.contains("not Rust syntax"), "{err}");
    }

    #[test]
    fn judging_reads_exit_statuses_only() {
        let p = plan("#[test]\nfn t() { assert_eq!(g(), 20); }\n", &["t"], 8);
        let real = p.map.groups[0].real.clone().unwrap();
        let fail_ctl = p.map.controls.iter().find(|c| c.expect == "fail").unwrap().name.clone();
        // Honest fix: the real test passes, its mutants fail.
        let j = judge(&p.map, &mut rand::rng(), |path| if path == real || !path.starts_with("t_") || (path != fail_ctl && !p.map.groups[0].mutants.iter().any(|m| m == path)) { TestStatus::Passed } else { TestStatus::Failed });
        assert!(j.violations.is_empty(), "{:?}", j.violations);
        assert_eq!(j.real["t"], TestStatus::Passed);
        // Everything exits 0.
        let j = judge(&p.map, &mut rand::rng(), |_| TestStatus::Passed);
        assert_eq!(j.violations.len(), 12 + 1, "{:?}", j.violations);
        // Honest bug: nothing is asked of the mutants.
        let j = judge(&p.map, &mut rand::rng(), |path| if path == fail_ctl || path == real || p.map.groups[0].mutants.iter().any(|m| m == path) { TestStatus::Failed } else { TestStatus::Passed });
        assert!(j.violations.is_empty());
        assert_eq!(j.real["t"], TestStatus::Failed);
        // Copies inside modules (a unit test's `tests::t_…`, a macro-written test's
        // `t_…::name`): every path is judged as a whole.
        let src = "mod tests {\n    #[test]\n    fn t() { assert_eq!(g(), 20); }\n    m!(u, || { assert_eq!(g(), 3); });\n}\n";
        let p = plan(src, &["tests::t", "tests::u"], 9);
        let j = judge(&p.map, &mut rand::rng(), |_| TestStatus::Passed);
        assert_eq!(j.violations.len(), 2 * 12 + 1, "{:?}", j.violations);
        assert!(j.violations.iter().filter(|v| v.contains(" of tests::u ")).count() == 12, "{:?}", j.violations);
    }
}
