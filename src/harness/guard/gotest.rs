//! Canaries for `go test`: [`super::libtest`]'s look-alikes carried over to Go test files.
//!
//! A Go test binary's exit status and its `-json` stream are written by the process the code
//! under test runs in: a candidate's `init` can print a passing report and `os.Exit(0)` before a
//! test starts. So, as for libtest, the verdict rests on what the code cannot predict:
//!
//! 1. **Look-alikes.** [`plan_file`] rewrites a `_test.go` file: each judged `func TestX(t
//!    *testing.T)` gets a fresh random name `TestX<16 hex>`, and beside it, in random order, K
//!    copies under names of the same shape that differ from it in one literal of the *expected*
//!    side of its first assertion. An assertion is a top-level `if [init;] a != b { … }` whose
//!    body only fails the test (`t.Error`, `t.Errorf`, `t.Fatal`, `t.Fatalf`, `t.Fail`,
//!    `t.FailNow`, `return`) and one of whose sides is a constant: a literal (`-5`, `"abc"`,
//!    `'x'`, `1.5`), or a name bound to one earlier in the function or in the `if`'s own init
//!    (`want := 5`, `got, want := f(), "x"`) and used nowhere else. The K + 1 values are
//!    consecutive with the original's rank uniformly random (the bounds of [`super::libtest`]). Each
//!    file with a planned test also gets a must-pass and a must-fail control.
//!    **Tail copies**: K more copies of the real test exactly as it runs (same literal), each
//!    calling `t.Fail()` after its body: they run what the real test runs and then fail through
//!    the testing framework. Code that ends the process with status 0 from inside the test —
//!    after the first assertion passed, where the literal look-alikes have already failed —
//!    makes them pass too. Every copy, real included, runs its body inside `func() { … }()`, so
//!    a panic, a `runtime.Goexit` or a failed assertion ends a tail copy exactly as it ends the
//!    real test (status and output): code that runs its own test binary to probe the copies
//!    tells the tail copies apart only where the real test passes. A test with no literal
//!    assertion to mutate is still renamed and gets its tail copies (its `why` says so), so no
//!    judged test runs under a name the code could know.
//! 2. **No value on the failure path.** In every copy the assertion's body becomes `{ if false {
//!    <body> }; os.Exit(1) }`: the body stays compiled (its names stay used), never runs — no
//!    message formats a value through candidate code (`String()` methods), and the process ends
//!    at once.
//! 3. **One process per test** ([`super::gotest_run`]): the binary from `go test -c` runs each
//!    copy by an anchored `-test.run`; the status is the exit status. Wherever the real test
//!    passed, every mutant must have failed and the controls must have come out as written.
//!
//! 4. **Subtests** (judged names `TestX/case`): a filter that matches no subtest runs the parent
//!    and passes, the subtest's name may be made by the code under test, and the code can rewrite
//!    the `-test.run` filter (`os.Args`, in an `init`) before `testing` reads it. Each judged
//!    subtest has its own set of copies, apart from the set that judges the whole test, with the
//!    case written into them (each copy calls one of a set of bodies shared by the test's judged
//!    subtests, the case a parameter: a table-driven test is copied once, not once per case;
//!    go-cmp's 112 judged `TestOptions` cases made a rewrite the compiler ran out of 4 GiB on):
//!    they run whole (`-test.run '^<copy>$'`, every sibling as in a
//!    plain run), route the parent's `t.Run` through a local wrapper, and exit in a cleanup, 0
//!    only if the subtest of that name returned unfailed ([`subtest_preamble`]).
//!
//! A test whose name the file uses elsewhere (`var _ = TestX`, a call from another test) keeps
//! its function as written, never run by the guard, and gets its renamed copies beside it. Tests
//! that cannot be renamed (a signature other than `(t *testing.T)`) keep their name, with the
//! reason in the map; a run that judges one, or its subtests, is the harness's error.

use super::canary::{CanaryMap, Control, Group};
use super::golex::{lex, matching, quote, unquote, Kind, Token};
use super::libtest::{int_bound, name_copies, neighbours, FilePlan};
use rand::seq::SliceRandom;
use rand::Rng;
use std::collections::BTreeMap;
use std::ops::Range;

/// Go's keywords: never a package name.
const KEYWORDS: [&str; 25] = [
    "break", "case", "chan", "const", "continue", "default", "defer", "else", "fallthrough", "for", "func", "go", "goto", "if",
    "import", "interface", "map", "package", "range", "return", "select", "struct", "switch", "type", "var",
];

/// The import names the rewrite adds (after the package clause, on its line).
const OS: &str = "execcriticos__";
const TESTING: &str = "execcritictesting__";
const ATOMIC: &str = "execcriticatomic__";
const SYSCALL: &str = "execcriticsyscall__";
const STRINGS: &str = "execcriticstrings__";
/// The locals of a copy that judges a subtest ([`subtest_preamble`]).
const SEEN: &str = "execcriticseen__";
const RUN: &str = "execcriticrun__";
/// The parameter through which a body of copies that judge subtests gets its case.
const CASE: &str = "execcriticcase__";
/// The local every copy keeps its own run name in (for the name calls it maps back).
const NAMED: &str = "execcriticnamed__";

/// The exit status of a copy whose test skipped (`t.Skip`, its judged subtest's `s.Skip`): every
/// copy exits with it from a cleanup, so a test that skips comes out skipped, as `go test` says,
/// never passed (its look-alikes would have passed beside it: a false `tampered`). A status the
/// code under test can give too, and gains nothing by: a skip is never a pass.
pub const SKIPPED_EXIT: i32 = 86;

/// A top-level function of a Go file.
struct Func {
    name: String,
    /// Token indices: `func`, the name, the body's `{` and `}`.
    func: usize,
    name_tok: usize,
    open: usize,
    close: usize,
    /// The parameter list's tokens (between the parentheses).
    params: Range<usize>,
}

/// Top-level functions (no methods, no type parameters).
fn functions(t: &[Token], src: &str) -> Vec<Func> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut i = 0;
    while i < t.len() {
        let tx = t[i].text(src);
        if t[i].kind == Kind::Op {
            match tx {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" => depth -= 1,
                _ => {}
            }
        }
        let is_func = depth == 0
            && t[i].kind == Kind::Ident
            && tx == "func"
            && t.get(i + 1).is_some_and(|n| n.kind == Kind::Ident)
            && t.get(i + 2).is_some_and(|p| p.text(src) == "(");
        if is_func {
            if let Some(pclose) = matching(t, src, i + 2) {
                // A test has no results: the body opens right after the parameters.
                if t.get(pclose + 1).is_some_and(|b| b.kind == Kind::Op && b.text(src) == "{") {
                    if let Some(close) = matching(t, src, pclose + 1) {
                        out.push(Func {
                            name: t[i + 1].text(src).to_string(),
                            func: i,
                            name_tok: i + 1,
                            open: pclose + 1,
                            close,
                            params: i + 3..pclose,
                        });
                        i = close + 1;
                        continue;
                    }
                }
            }
        }
        i += 1;
    }
    out
}

/// Whether `name` is a Go test function's name (`Test`, then nothing or a character that is
/// not a lower-case letter).
pub fn is_test_name(name: &str) -> bool {
    name.strip_prefix("Test").is_some_and(|rest| !rest.chars().next().is_some_and(|c| c.is_lowercase()))
}

/// A judged name split into the test function and, for a subtest, the case: `TestAdd/neg` →
/// (`TestAdd`, `Some("neg")`), `TestAdd` → (`TestAdd`, `None`).
pub fn split_case(name: &str) -> (&str, Option<&str>) {
    match name.split_once('/') {
        Some((test, case)) => (test, Some(case)),
        None => (name, None),
    }
}

/// The names of a file's top-level test functions.
pub fn test_functions(source: &str) -> Result<Vec<String>, String> {
    let t = lex(source)?;
    Ok(functions(&t, source).into_iter().map(|f| f.name).filter(|n| is_test_name(n)).collect())
}

/// Rewrite `source` (one `_test.go` file, `file` its path for the map) for the judged tests
/// (function names), with `k` mutants each.
pub fn plan_file(file: &str, source: &str, judged: &[String], k: usize, rng: &mut impl Rng) -> Result<FilePlan, String> {
    let t = lex(source).map_err(|e| format!("{file}: not Go syntax: {e}"))?;
    let funcs = functions(&t, source);
    let package_end = match (t.first(), t.get(1)) {
        (Some(p), Some(n)) if p.text(source) == "package" && n.kind == Kind::Ident && !KEYWORDS.contains(&n.text(source)) => n.range.end,
        _ => return Err(format!("{file}: no package clause")),
    };
    let mut idents: BTreeMap<&str, usize> = BTreeMap::new();
    for tok in t.iter().filter(|x| x.kind == Kind::Ident) {
        *idents.entry(tok.text(source)).or_default() += 1;
    }
    let mut edits: Vec<(Range<usize>, String)> = Vec::new();
    let mut map = CanaryMap::default();
    // Judged names by test function: judged whole, and the subtests judged.
    let mut by_function: Vec<(&str, bool, Vec<&str>)> = Vec::new();
    for want in judged {
        let (test, case) = split_case(want);
        let at = match by_function.iter().position(|(n, _, _)| *n == test) {
            Some(at) => at,
            None => {
                by_function.push((test, false, Vec::new()));
                by_function.len() - 1
            }
        };
        match case {
            Some(c) => by_function[at].2.push(c),
            None => by_function[at].1 = true,
        }
    }
    let mut subtests_planned = false;
    for (want, whole, cases) in by_function {
        let Some(f) = funcs.iter().find(|f| f.name == want) else {
            return Err(format!("{file}: no test function `{want}`"));
        };
        // A name used elsewhere in the file (`var _ = TestX`, a call) keeps its function as it
        // is, never run by the guard, beside the renamed copies: no judged test runs under a
        // name the code could know because some other code names it.
        let referenced = idents.get(want).copied().unwrap_or(0) > 1;
        let mut texts = Vec::new();
        if referenced {
            texts.push(source[t[f.func].range.start..t[f.close].range.end].to_string());
        }
        if whole {
            let mut group = Group { path: file.to_string(), name: want.to_string(), ..Group::default() };
            let plan = plan_function(&t, source, f, k, false, rng);
            match plan {
                Err(why) => group.why = Some(why),
                Ok((variants, why)) => texts.push(name_copies(&mut group, variants, why, rng, fresh_name)),
            }
            map.groups.push(group);
        }
        // The judged subtests share one set of bodies — the real one, its look-alikes and tails,
        // each taking the case as a parameter ([`subtest_preamble`]) — and each subtest has a set
        // of copies of its own that call them with its case written in: a large table-driven test
        // is copied once, not once per judged case. One that cannot be renamed is the caller's
        // error, never run unguarded.
        if !cases.is_empty() {
            let plan = plan_function(&t, source, f, k, true, rng);
            let (bodies, why) = plan.map_err(|why| format!("{file}: `{want}` cannot be guarded for its subtests: {why}"))?;
            let names: Vec<String> = bodies.iter().map(|_| body_name(rng)).collect();
            let mut named: Vec<String> = bodies.iter().zip(&names).map(|(b, n)| b.replacen("__EXECCRITIC_NAME__", n, 1)).collect();
            // The real body first keeps the lines of the code that stays; the rest in random order.
            named[1..].shuffle(rng);
            texts.extend(named);
            for case in cases {
                let lit = quote(case, '"');
                let wrappers = names.iter().map(|n| format!("func __EXECCRITIC_NAME__({T_PARAM} *{TESTING}.T) {{ {n}({T_PARAM}, {lit}) }}")).collect();
                let mut group = Group { path: file.to_string(), name: format!("{want}/{case}"), ..Group::default() };
                texts.push(name_copies(&mut group, wrappers, why.clone(), rng, fresh_name));
                map.groups.push(group);
            }
            subtests_planned = true;
        }
        if texts.len() > usize::from(referenced) {
            edits.push((t[f.func].range.start..t[f.close].range.end, texts.join("\n\n")));
        }
    }
    if map.groups.iter().any(|g| g.real.is_some()) {
        let mut controls = String::new();
        for expect in ["pass", "fail"] {
            let name = fresh_name(rng);
            let body = if expect == "fail" { format!("{OS}.Exit(1)") } else { String::new() };
            controls.push_str(&format!("\n\nfunc {name}(_ *{TESTING}.T) {{ {body} }}\n"));
            map.controls.push(Control { path: file.to_string(), cls: None, name, expect: expect.into() });
        }
        // The `strings` import is used whether or not a copy reads its name.
        controls.push_str(&format!("\nvar _ = {STRINGS}.Replace\n"));
        let at = source.len();
        edits.push((at..at, controls));
        let atomic = if subtests_planned { format!("; {ATOMIC} \"sync/atomic\"; {SYSCALL} \"syscall\"") } else { String::new() };
        edits.push((package_end..package_end, format!("; import ({OS} \"os\"; {STRINGS} \"strings\"; {TESTING} \"testing\"{atomic})")));
    }
    edits.sort_by_key(|(r, _)| std::cmp::Reverse(r.start));
    let mut out = source.to_string();
    for (range, text) in edits {
        out.replace_range(range, &text);
    }
    Ok(FilePlan { source: out, map })
}

/// The statements of a block between token indices `open` and `close` (its braces), as token
/// index ranges.
fn statements(t: &[Token], src: &str, open: usize, close: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = open + 1;
    // In the header of `if`, `for` or `switch` (up to its block's `{`), `;` separates clauses.
    let mut header = false;
    for j in open + 1..close {
        if t[j].kind == Kind::Op {
            match t[j].text(src) {
                "{" if depth == 0 => {
                    header = false;
                    depth += 1
                }
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" => depth -= 1,
                _ => {}
            }
        }
        if depth == 0 && t[j].kind == Kind::Ident && matches!(t[j].text(src), "if" | "for" | "switch") {
            header = true;
        }
        if depth == 0 && !header && t[j].is_semi(src) {
            if j > start {
                out.push(start..j);
            }
            start = j + 1;
        }
    }
    if close > start {
        out.push(start..close);
    }
    out
}

/// Split `range` at top-level (bracket depth 0) tokens satisfying `at`.
fn split_top(t: &[Token], src: &str, range: Range<usize>, at: impl Fn(&str) -> bool) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = range.start;
    for j in range.clone() {
        if t[j].kind != Kind::Op {
            continue;
        }
        let x = t[j].text(src);
        match x {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => depth -= 1,
            _ if depth == 0 && at(x) => {
                out.push(start..j);
                start = j + 1;
            }
            _ => {}
        }
    }
    out.push(start..range.end);
    out
}

/// The literal token of a constant operand (`5`, `-5`, `"x"`), if `r` is one.
fn literal_operand(t: &[Token], src: &str, r: &Range<usize>) -> Option<usize> {
    match r.len() {
        1 if t[r.start].is_literal() => Some(r.start),
        2 if matches!(t[r.start].text(src), "-" | "+") && t[r.start].kind == Kind::Op && matches!(t[r.start + 1].kind, Kind::Int | Kind::Float) => {
            Some(r.start + 1)
        }
        _ => None,
    }
}

/// `a, b := x, y` (or `=`, or `var a = x`, `const a = x`): the bound names with their
/// expressions' token ranges.
fn bindings(t: &[Token], src: &str, stmt: &Range<usize>) -> Vec<(String, Range<usize>)> {
    let mut r = stmt.clone();
    if matches!(t[r.start].text(src), "var" | "const") && t[r.start].kind == Kind::Ident {
        r.start += 1;
    }
    let Some(eq) = r.clone().find(|&j| t[j].kind == Kind::Op && matches!(t[j].text(src), ":=" | "=")) else {
        return Vec::new();
    };
    let names = split_top(t, src, r.start..eq, |x| x == ",");
    let exprs = split_top(t, src, eq + 1..r.end, |x| x == ",");
    if names.len() != exprs.len() {
        return Vec::new();
    }
    names
        .into_iter()
        .zip(exprs)
        .filter(|(n, _)| n.len() == 1 && t[n.start].kind == Kind::Ident)
        .map(|(n, e)| (t[n.start].text(src).to_string(), e))
        .collect()
}

/// Failing calls an assertion's body may consist of.
const FAILS: [&str; 6] = ["Error", "Errorf", "Fatal", "Fatalf", "Fail", "FailNow"];

/// Plan one test function: its texts, each named `__EXECCRITIC_NAME__` — the real test first,
/// then its look-alikes — and, where it has no literal assertion to mutate, why (its look-alikes
/// are then the tail copies alone). With `subtest` (a case, as go prints it), the copies judge
/// that subtest. `Err`: it cannot be renamed (not `(t *testing.T)`).
fn plan_function(t: &[Token], src: &str, f: &Func, k: usize, subtests: bool, rng: &mut impl Rng) -> Result<(Vec<String>, Option<String>), String> {
    // `(t *testing.T)`: the name the body fails through.
    let p = &t[f.params.clone()];
    let tname = match p {
        [n, star, _, dot, ty] if n.kind == Kind::Ident && star.text(src) == "*" && dot.text(src) == "." && ty.text(src) == "T" => n.text(src),
        _ => return Err("the signature is not (t *testing.T)".into()),
    };
    // A subtest is judged by the wrapper its parent's `t.Run(` calls; one started elsewhere
    // (testify's `suite.Run(t, s)` runs each method through `t.Run` in library code) would
    // never set the flag and fail for every candidate, the fix included: not a verdict.
    if subtests && run_calls(t, src, f, tname).is_empty() {
        return Err(format!("its body starts no subtest with `{tname}.Run(` (subtests started in other code, such as testify's `suite.Run`, cannot be seen to run)"));
    }
    let planned = find_site(t, src, f, tname).and_then(|site| {
        let lits = mutate(t[site.literal].text(src), t[site.literal].kind, k, rng)?;
        Ok((site, lits))
    });
    let (site, lits, why) = match planned {
        Ok((site, lits)) => (Some(site), lits, None),
        Err(why) => (None, Vec::new(), Some(why)),
    };
    let original = lits.first().cloned();
    // The tail copies fail through the parameter: a blank one gets a name of ours in every copy.
    let param = (tname == "_").then_some(f.params.start);
    let fail_with = if tname == "_" { T_PARAM } else { tname };
    let text = |lit: Option<&String>, tail: bool| function_text(t, src, f, site.as_ref().zip(lit), param, fail_with, tail, subtests);
    let mut out = vec![text(original.as_ref(), false)];
    out.extend(lits.iter().skip(1).map(|lit| text(Some(lit), false)));
    out.extend((0..k).map(|_| text(original.as_ref(), true)));
    Ok((out, why))
}

/// The first top-level assertion with a constant expected side, if no `return` comes before.
fn find_site(t: &[Token], src: &str, f: &Func, tname: &str) -> Result<Site, String> {
    let stmts = statements(t, src, f.open, f.close);
    for (si, s) in stmts.iter().enumerate() {
        let head = t[s.start].text(src);
        if t[s.start].kind == Kind::Ident && head == "if" {
            if let Some(site) = assertion(t, src, s, &stmts[..si], tname) {
                return Ok(site);
            }
        }
        if s.clone().any(|j| t[j].kind == Kind::Ident && matches!(t[j].text(src), "return" | "goto")) {
            return Err("a return before the assertion".into());
        }
    }
    Err("no assertion `if a != <constant> { t.Error… }` at the top level".into())
}

/// What the rewrite changes in a planned function.
struct Site {
    /// The literal token to mutate.
    literal: usize,
    /// The assertion's body braces.
    open: usize,
    close: usize,
}

fn assertion(t: &[Token], src: &str, s: &Range<usize>, before: &[Range<usize>], tname: &str) -> Option<Site> {
    // The header runs to the first top-level `{`; a function literal in it is not followed.
    let mut depth = 0i32;
    let mut open = None;
    for j in s.start + 1..s.end {
        let x = t[j].text(src);
        if t[j].kind == Kind::Ident && x == "func" {
            return None;
        }
        if t[j].kind != Kind::Op {
            continue;
        }
        match x {
            "{" if depth == 0 => {
                open = Some(j);
                break;
            }
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => depth -= 1,
            _ => {}
        }
    }
    let open = open?;
    let close = matching(t, src, open)?;
    if close + 1 != s.end {
        return None; // an `else` follows
    }
    // The body only fails the test.
    let body = statements(t, src, open, close);
    let mut fails = false;
    for b in &body {
        let w: Vec<&str> = b.clone().map(|j| t[j].text(src)).collect();
        match w.as_slice() {
            ["return"] => {}
            [n, ".", m, "(", .., ")"] if *n == tname && FAILS.contains(m) && matching(t, src, b.start + 3) == Some(b.end - 1) => fails = true,
            _ => return None,
        }
    }
    if !fails {
        return None;
    }
    // `[init;] a != b`.
    let parts = split_top(t, src, s.start + 1..open, |x| x == ";");
    let (init, cond) = match parts.as_slice() {
        [c] => (None, c.clone()),
        [i, c] => (Some(i.clone()), c.clone()),
        _ => return None,
    };
    let comparisons = ["==", "!=", "<", "<=", ">", ">=", "&&", "||"];
    let sides = split_top(t, src, cond.clone(), |x| comparisons.contains(&x));
    let [a, b] = sides.as_slice() else { return None };
    let op = t[a.end].text(src);
    if op != "!=" || a.is_empty() || b.is_empty() {
        return None;
    }
    let constant = |r: &Range<usize>| -> Option<usize> {
        if let Some(l) = literal_operand(t, src, r) {
            return Some(l);
        }
        if r.len() != 1 || t[r.start].kind != Kind::Ident {
            return None;
        }
        let name = t[r.start].text(src);
        // Bound in the init, or in an earlier top-level statement, to a literal.
        let mut scopes: Vec<&Range<usize>> = before.iter().collect();
        if let Some(i) = &init {
            scopes.push(i);
        }
        let (stmt, expr) = scopes.iter().rev().find_map(|st| {
            bindings(t, src, st).into_iter().find(|(n, _)| n == name).map(|(_, e)| (*st, e))
        })?;
        let lit = literal_operand(t, src, &expr)?;
        // Used nowhere else before the assertion's end (the binding, the comparison, the body).
        let uses = before
            .iter()
            .chain(std::iter::once(s))
            .flat_map(|r| r.clone())
            .filter(|&j| t[j].kind == Kind::Ident && t[j].text(src) == name && !stmt.contains(&j) && !(open..=close).contains(&j))
            .count();
        (uses == 1 && !later_in_function(t, src, s.end, name)).then_some(lit)
    };
    let (ca, cb) = (constant(a), constant(b));
    let literal = match (ca, cb) {
        (Some(_), Some(_)) | (None, None) => return None,
        (Some(l), None) | (None, Some(l)) => l,
    };
    Some(Site { literal, open, close })
}

/// Whether `name` occurs after token `from` up to the end of the enclosing function's body (the
/// first `}` that closes below the statement's depth).
fn later_in_function(t: &[Token], src: &str, from: usize, name: &str) -> bool {
    let mut depth = 0i32;
    for tok in &t[from..] {
        if tok.kind == Kind::Op {
            match tok.text(src) {
                "(" | "[" | "{" => depth += 1,
                ")" | "]" | "}" => {
                    depth -= 1;
                    if depth < 0 {
                        return false;
                    }
                }
                _ => {}
            }
        }
        if tok.kind == Kind::Ident && tok.text(src) == name {
            return true;
        }
    }
    false
}

/// The name a blank test parameter (`_ *testing.T`) gets in every copy.
const T_PARAM: &str = "execcritict__";

/// One copy of the function, named `__EXECCRITIC_NAME__`, its body run inside `func() { … }()` in
/// every copy alike: with `site`, its assertion's body replaced by the exit and its literal by
/// the given text; with `param`, the blank parameter at that token named [`T_PARAM`]; with
/// `tail` (the parameter's name), `<t>.Fail()` after the wrapped body — a copy that runs exactly
/// what the real test runs and then fails through the testing framework, as the real test
/// fails. However the code under test behaves (a panic, `runtime.Goexit`, a failed assertion, an
/// exit from inside), a tail copy and the real test end alike — same status, same output — except
/// where the real test passes honestly: an exit 0 from inside makes the tail copies pass too, and
/// probing the binary (running each copy as a subprocess) tells them apart only by passing.
/// With `subtest` (a case), the copy judges that subtest: [`subtest_preamble`] first, every
/// `<t>.Run(` of the body a call of its wrapper, and a tail copy fails the subtest, not the
/// parent, after its body. Every copy then registers the cleanup that ends a skipped test with
/// [`SKIPPED_EXIT`] (registered last, it runs first).
#[allow(clippy::too_many_arguments)]
fn function_text(t: &[Token], src: &str, f: &Func, site: Option<(&Site, &String)>, param: Option<usize>, p: &str, tail: bool, subtests: bool) -> String {
    let start = t[f.func].range.start;
    let end = t[f.close].range.end;
    let mut edits = vec![(t[f.name_tok].range.clone(), "__EXECCRITIC_NAME__".to_string())];
    // Its own run name, for the name calls below (read before any code of the body runs).
    let mut preamble = format!(" {NAMED} := {p}.Name(); _ = {NAMED};");
    if subtests {
        let last = t[f.params.end - 1].range.end;
        edits.push((last..last, format!(", {CASE} string")));
        preamble.push_str(&subtest_preamble(p, CASE, tail));
        let tname = t[f.params.start].text(src);
        for j in run_calls(t, src, f, tname) {
            edits.push((t[j].range.start..t[j + 3].range.end, format!("{RUN}({tname}, ")));
        }
    }
    // A test that reads its own name (`t.Name()`: golden files keyed by it, names in its
    // messages) reads the one it was written with: every copy maps its run name back, so no
    // copy tells another apart by it.
    let own = quote(&f.name, '"');
    for j in name_calls(t, src, f, p) {
        let x = t[j].text(src);
        edits.push((t[j].range.start..t[j + 4].range.end, format!("{STRINGS}.Replace({x}.Name(), {NAMED}, {own}, 1)")));
    }
    if let Some(at) = param {
        edits.push((t[at].range.clone(), T_PARAM.to_string()));
    }
    if let Some((site, lit)) = site {
        let body_inner = &src[t[site.open].range.end..t[site.close].range.start];
        edits.push((t[site.literal].range.clone(), lit.clone()));
        edits.push((t[site.open].range.start..t[site.close].range.end, format!("{{ if false {{{body_inner}}}; {OS}.Exit(1) }}")));
    }
    let open = t[f.open].range.end;
    let close = t[f.close].range.start;
    edits.push((open..open, format!("{preamble} {p}.Cleanup(func() {{ if {p}.Skipped() && !{p}.Failed() {{ {OS}.Exit({SKIPPED_EXIT}) }} }}); func() {{")));
    let after = if tail && !subtests { format!("}}(); {p}.Fail() ") } else { "}() ".to_string() };
    edits.push((close..close, after));
    edits.sort_by_key(|(r, _)| std::cmp::Reverse(r.start));
    let mut text = src[start..end].to_string();
    for (r, with) in edits {
        text.replace_range(r.start - start..r.end - start, &with);
    }
    text
}

/// The first tokens of every `<x>.Name()` call of the body where `x` is the test's `*testing.T`
/// (`p`, its name in the copy) or one a function literal of the body declares (`func(x
/// *testing.T)`, a subtest's).
fn name_calls(t: &[Token], src: &str, f: &Func, p: &str) -> Vec<usize> {
    let mut ts: Vec<&str> = vec![p, t[f.params.start].text(src)];
    for j in f.open + 1..f.close.saturating_sub(4) {
        let decl = t[j].kind == Kind::Ident
            && matches!(t[j - 1].text(src), "(" | ",")
            && t[j + 1].text(src) == "*"
            && t[j + 2].text(src) == "testing"
            && t[j + 3].text(src) == "."
            && t[j + 4].text(src) == "T";
        if decl {
            ts.push(t[j].text(src));
        }
    }
    (f.open + 1..f.close.saturating_sub(4))
        .filter(|&j| {
            t[j].kind == Kind::Ident
                && ts.contains(&t[j].text(src))
                && t[j - 1].text(src) != "."
                && t[j + 1].text(src) == "."
                && t[j + 2].text(src) == "Name"
                && t[j + 3].text(src) == "("
                && t[j + 4].text(src) == ")"
        })
        .collect()
}

/// The first tokens of every `<tname>.Run(` call of the body (not a field's `x.t.Run(`).
fn run_calls(t: &[Token], src: &str, f: &Func, tname: &str) -> Vec<usize> {
    (f.open + 1..f.close.saturating_sub(3))
        .filter(|&j| {
            t[j].kind == Kind::Ident
                && t[j].text(src) == tname
                && t[j + 1].text(src) == "."
                && t[j + 2].text(src) == "Run"
                && t[j + 3].text(src) == "("
                && t[j - 1].text(src) != "."
        })
        .collect()
}

/// What a copy that judges a subtest runs before its body (`p`: its `*testing.T`'s name; `case`:
/// the expression of the case — the body's parameter, which the copy's wrapper calls it with,
/// the case written into the wrapper as a Go string). The copy runs whole — every subtest, in order, as a plain run does, so a subtest that
/// needs what its siblings did (a counter, a router they set up) runs as it does there — and
/// only the judged one decides. A subtest's name is often made by the code under test
/// (`t.Run(tc.String(), …)`), and the code can rewrite `os.Args` in an `init` before `testing`
/// reads its `-test.run` filter: neither may choose which subtest is judged. So the copy's
/// `t.Run` goes through a local wrapper that, called on the copy's own `T` (depth 1; a deeper
/// `Run` passes through), compares the subtest's full name with the copy's own name and the
/// case written into the copy's wrapper, and for that one subtest sets a local flag once its body
/// returned without failing (a tail copy fails it after its body instead); a cleanup of the
/// copy — registered first, it runs last, after parallel subtests — exits 0 if the flag is set
/// and 1 otherwise, whatever the siblings did. The flag is a local the code under test cannot
/// name, the copy's name comes from the test table `go test` compiled, and the exit 0 is
/// `syscall.Exit` (`-test.paniconexit0` makes the code's own `os.Exit(0)` a failure; a raw exit
/// 0 from the code ends the tail copies alike). A judged subtest that does not run, or is
/// started through a method value (`run := t.Run`), fails; one that skips (and did not fail)
/// ends the process with [`SKIPPED_EXIT`]: skipped, as `go test` reports it.
fn subtest_preamble(p: &str, case: &str, tail: bool) -> String {
    let want = case;
    let done = if tail { "s.Fail()" } else { "" };
    format!(
        " var {SEEN} int32; {RUN} := func(r *{TESTING}.T, n string, f func(*{TESTING}.T)) bool {{ if r != {p} {{ return r.Run(n, f) }}; \
         return r.Run(n, func(s *{TESTING}.T) {{ if s.Name() != {p}.Name()+\"/\"+{want} {{ f(s); return }}; \
         defer func() {{ if s.Skipped() && !s.Failed() {{ {OS}.Exit({SKIPPED_EXIT}) }} }}(); f(s); {done}; \
         if !s.Failed() {{ {ATOMIC}.StoreInt32(&{SEEN}, 1) }} }}) }}; _ = {RUN}; \
         {p}.Cleanup(func() {{ if {ATOMIC}.LoadInt32(&{SEEN}) == 1 {{ {SYSCALL}.Exit(0) }}; {OS}.Exit(1) }});"
    )
}

/// The literal's K + 1 texts, the original first (see [`super::libtest`]'s `mutate`).
fn mutate(original: &str, kind: Kind, k: usize, rng: &mut impl Rng) -> Result<Vec<String>, String> {
    let others: Vec<String> = match kind {
        Kind::Int => {
            let digits = original.replace('_', "");
            let v: u128 = if let Some(h) = digits.strip_prefix("0x").or_else(|| digits.strip_prefix("0X")) {
                u128::from_str_radix(h, 16)
            } else if let Some(b) = digits.strip_prefix("0b").or_else(|| digits.strip_prefix("0B")) {
                u128::from_str_radix(b, 2)
            } else if let Some(o) = digits.strip_prefix("0o").or_else(|| digits.strip_prefix("0O")) {
                u128::from_str_radix(o, 8)
            } else if digits.len() > 1 && digits.starts_with('0') {
                u128::from_str_radix(&digits[1..], 8)
            } else {
                digits.parse()
            }
            .map_err(|e| format!("literal {original}: {e}"))?;
            neighbours(v, int_bound(v, ""), k, rng).into_iter().map(|x| x.to_string()).collect()
        }
        Kind::Float => {
            let digits = original.replace('_', "");
            if digits.contains(['e', 'E', 'p', 'P', 'x', 'X']) {
                return Err(format!("float literal {original} with an exponent"));
            }
            let (int_part, frac) = digits.split_once('.').unwrap_or((&digits, ""));
            let scaled: u128 = format!("{int_part}{frac}").parse().map_err(|_| format!("float literal {original}"))?;
            neighbours(scaled, u64::MAX as u128, k, rng)
                .into_iter()
                .map(|x| {
                    let s = format!("{x:0>width$}", width = frac.len() + 1);
                    let (a, b) = s.split_at(s.len() - frac.len());
                    if frac.is_empty() { format!("{a}.0") } else { format!("{a}.{b}") }
                })
                .collect()
        }
        Kind::Str | Kind::RawStr => {
            let v = unquote(original).ok_or_else(|| format!("literal {original} cannot be read"))?;
            let Some(last) = v.chars().last() else { return Err("an empty expected string".into()) };
            let head = &v[..v.len() - last.len_utf8()];
            neighbours(last as u128, 0xD7FF, k, rng)
                .into_iter()
                .filter_map(|c| char::from_u32(c as u32))
                .map(|c| quote(&format!("{head}{c}"), '"'))
                .collect()
        }
        Kind::Rune => {
            let v = unquote(original).ok_or_else(|| format!("literal {original} cannot be read"))?;
            let mut cs = v.chars();
            let (Some(c), None) = (cs.next(), cs.next()) else { return Err(format!("literal {original} is not one rune")) };
            // An ASCII rune may be compared with a byte: its neighbours stay ASCII.
            let max = if (c as u32) < 0x80 { 0x7F } else { 0xD7FF };
            neighbours(c as u128, max, k, rng)
                .into_iter()
                .filter_map(|x| char::from_u32(x as u32))
                .map(|x| quote(&x.to_string(), '\''))
                .collect()
        }
        _ => return Err(format!("literal {original} cannot be mutated")),
    };
    if others.len() != k {
        return Err(format!("literal {original}: only {} neighbours", others.len()));
    }
    let mut all = vec![original.to_string()];
    all.extend(others);
    Ok(all)
}

/// A random name for a body of copies that judge subtests (not a test: no `Test` prefix).
fn body_name<R: Rng>(rng: &mut R) -> String {
    format!("execcriticbody{:016x}__", rng.random::<u64>())
}

/// A random test name of one shape for every copy: `TestX` and 16 hex digits.
fn fresh_name<R: Rng>(rng: &mut R) -> String {
    format!("TestX{:016x}", rng.random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    const FILE: &str = r#"package calc

import (
	"testing"
)

func TestAdd(t *testing.T) {
	got := Add(2, 3)
	want := 5
	if got != want {
		t.Errorf("Add(2, 3) = %d, want %d", got, want)
	}
}

func TestSub(t *testing.T) {
	if got := Sub(5, 3); got != -2 {
		t.Fatalf("Sub = %d", got)
		return
	}
	t.Log("more")
}

func TestName(t *testing.T) {
	if got, want := Name(), "calc"; got != want {
		t.Error("name", got)
	}
}

func TestRune(t *testing.T) {
	if First("xy") != 'x' {
		t.FailNow()
	}
}

func TestTable(t *testing.T) {
	for _, c := range cases {
		if Add(c.a, c.b) != c.want {
			t.Errorf("%v", c)
		}
	}
}

func TestEarlyReturn(t *testing.T) {
	if testing.Short() {
		return
	}
	if Add(1, 1) != 2 {
		t.Error("x")
	}
}

func TestLogs(t *testing.T) {
	if Add(1, 1) != 2 {
		t.Log("not a failure")
	}
}

func TestReused(t *testing.T) {
	expected := 2
	if Add(1, 1) != expected {
		t.Error("x")
	}
	expected = 3
	_ = expected
}

func TestBench(b *testing.B) {}

func helper(t *testing.T) {}
"#;

    fn all() -> Vec<String> {
        ["TestAdd", "TestSub", "TestName", "TestRune", "TestTable", "TestEarlyReturn", "TestLogs", "TestReused"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    #[test]
    fn test_functions_are_the_top_level_test_names() {
        let names = test_functions(FILE).unwrap();
        assert_eq!(names, [all(), vec!["TestBench".to_string()]].concat());
        assert!(is_test_name("Test") && is_test_name("Test_x") && is_test_name("TestÉ") && !is_test_name("Testx"));
    }

    #[test]
    fn judged_tests_get_lookalikes_and_unplannable_ones_say_why() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let plan = plan_file("calc_test.go", FILE, &all(), 6, &mut rng).unwrap();
        let why: BTreeMap<&str, Option<&str>> = plan.map.groups.iter().map(|g| (g.name.as_str(), g.why.as_deref())).collect();
        for planned in ["TestAdd", "TestSub", "TestName", "TestRune"] {
            assert_eq!(why[planned], None, "{planned}");
        }
        for (tail_only, reason) in [("TestTable", "no assertion"), ("TestEarlyReturn", "return"), ("TestLogs", "no assertion"), ("TestReused", "no assertion")] {
            let w = why[tail_only].unwrap();
            assert!(w.contains(reason) && w.contains("tail copies alone"), "{tail_only}: {w}");
        }
        for g in &plan.map.groups {
            // Every test is renamed: 6 literal look-alikes and 6 tail copies where planned, the 6
            // tail copies alone where not.
            let want = if g.why.is_none() { 12 } else { 6 };
            assert_eq!(g.mutants.len(), want, "{}", g.name);
            let real = g.real.as_ref().unwrap();
            assert!(real.starts_with("TestX") && real.len() == 21, "{real}");
            for m in &g.mutants {
                assert!(plan.source.contains(&format!("func {m}(t *testing.T) {{")), "{m}");
            }
            assert!(!plan.source.contains(&format!("func {}(", g.name)));
            let text_of = |name: &str| {
                let at = plan.source.find(&format!("func {name}(")).unwrap();
                let rest = &plan.source[at..];
                rest[..rest[1..].find("\nfunc ").map_or(rest.len(), |n| n + 1)].to_string()
            };
            let tails = g.mutants.iter().filter(|m| text_of(m).contains("}(); t.Fail() }")).count();
            assert_eq!(tails, 6, "{}", g.name);
            // Every copy ends a skip alike and runs its body in the same wrapper; the real test
            // has no tail.
            let start = |name: &str| format!("func {name}(t *testing.T) {{ {NAMED} := t.Name(); _ = {NAMED}; t.Cleanup(func() {{ if t.Skipped() && !t.Failed() {{ {OS}.Exit({SKIPPED_EXIT}) }} }}); func() {{");
            let real_text = text_of(real);
            assert!(real_text.starts_with(&start(real)) && real_text.trim_end().ends_with("}() }"), "{real_text}");
            for m in &g.mutants {
                assert!(text_of(m).starts_with(&start(m)), "{m}");
            }
        }
        assert!(plan.source.starts_with(&format!("package calc; import ({OS} \"os\"; {STRINGS} \"strings\"; {TESTING} \"testing\")\n")));
        assert_eq!(plan.map.controls.len(), 2);
        // Line numbers of the code that stays are kept.
        let at = |s: &str, needle: &str| s[..s.find(needle).unwrap()].lines().count();
        assert!(at(&plan.source, "func TestBench") >= at(FILE, "func TestBench"));
        // Each planned assertion now exits, its body compiled but dead.
        assert!(plan.source.contains(&format!("if got != want {{ if false {{\n\t\tt.Errorf(\"Add(2, 3) = %d, want %d\", got, want)\n\t}}; {OS}.Exit(1) }}")));
        // The expected values of the copies are consecutive around the original, which the tail
        // copies keep.
        let wants: Vec<i64> = plan.source.lines().filter_map(|l| l.trim().strip_prefix("want := ")).map(|v| v.parse().unwrap()).collect();
        assert_eq!(wants.len(), 13);
        assert_eq!(wants.iter().filter(|w| **w == 5).count(), 7);
        let mut distinct = wants.clone();
        distinct.sort();
        distinct.dedup();
        assert!(distinct.len() == 7 && distinct.windows(2).all(|w| w[1] == w[0] + 1), "{distinct:?}");
        assert_eq!(plan.source.matches("got != -").count(), 13);
        assert_eq!(plan.source.matches("; got != want {").count(), 13);
        assert!(plan.source.contains(" != 'x' {") && (plan.source.contains(" != 'y' {") || plan.source.contains(" != 'w' {")));
    }

    #[test]
    fn subtests_are_judged_by_copies_that_see_them_run() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(9);
        let src = "package p\n\nimport \"testing\"\n\nfunc TestCases(t *testing.T) {\n\tif Init() != 3 {\n\t\tt.Fatal(\"init\")\n\t}\n\tfor _, c := range cases {\n\t\tt.Run(c.name, func(t *testing.T) {\n\t\t\tt.Run(\"deeper\", func(t *testing.T) {})\n\t\t\tx.t.Run(\"field\", nil)\n\t\t})\n\t}\n}\n";
        let judged: Vec<String> = ["TestCases/a(1)", "TestCases", "TestCases/b"].iter().map(|s| s.to_string()).collect();
        let plan = plan_file("p_test.go", src, &judged, 6, &mut rng).unwrap();
        let names: Vec<&str> = plan.map.groups.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["TestCases", "TestCases/a(1)", "TestCases/b"]);
        let (whole, a, b) = (&plan.map.groups[0], &plan.map.groups[1], &plan.map.groups[2]);
        // Each subtest has copies of its own, apart from the whole test's; they run whole.
        let copies = |g: &Group| -> Vec<String> { g.real.iter().chain(&g.mutants).cloned().collect() };
        let all: Vec<String> = [whole, a, b].iter().flat_map(|g| copies(g)).collect();
        assert_eq!(all.len(), 3 * 13, "a literal to mutate: 6 look-alikes and 6 tails each");
        assert!(all.iter().all(|c| !c.contains('/')) && all.iter().collect::<std::collections::BTreeSet<_>>().len() == all.len());
        // The case is written into its copies (Go string syntax); each calls one of 13 bodies
        // shared by the judged subtests, which compares it with the full name.
        let text_of = |name: &str| {
            let at = plan.source.find(&format!("func {name}(")).unwrap();
            let rest = &plan.source[at..];
            rest[..rest[1..].find("\n\nfunc ").map_or(rest.len(), |n| n + 1)].to_string()
        };
        let body_of = |copy: &str| {
            let text = text_of(copy);
            let name = text.split("{ ").nth(1).unwrap().split('(').next().unwrap().to_string();
            assert!(name.starts_with("execcriticbody"), "{text}");
            name
        };
        let mut bodies = std::collections::BTreeSet::new();
        for (g, case) in [(a, "\"a(1)\""), (b, "\"b\"")] {
            for c in copies(g) {
                assert_eq!(text_of(&c).trim_end(), format!("func {c}({T_PARAM} *{TESTING}.T) {{ {}({T_PARAM}, {case}) }}", body_of(&c)));
                let body = text_of(&body_of(&c));
                assert!(body.contains(&format!("(t *testing.T, {CASE} string)")), "{body}");
                assert!(body.contains(&format!("if s.Name() != t.Name()+\"/\"+{CASE} {{ f(s); return }}")), "{body}");
                bodies.insert(body_of(&c));
            }
            // The tails fail the judged subtest after its body; the real copy and the literal
            // look-alikes do not.
            let tails = copies(g).iter().filter(|c| text_of(&body_of(c)).contains("f(s); s.Fail();")).count();
            assert_eq!(tails, 6);
            assert!(!text_of(&body_of(g.real.as_ref().unwrap())).contains("s.Fail()"));
        }
        assert_eq!(bodies.len(), 13, "one set of bodies for both subtests");
        // Only the 13 bodies have the flag, and end in the cleanup, 0 only when the flag is set.
        assert_eq!(plan.source.matches(&format!("var {SEEN} int32;")).count(), 13, "{}", plan.source);
        let exit = format!("t.Cleanup(func() {{ if {ATOMIC}.LoadInt32(&{SEEN}) == 1 {{ {SYSCALL}.Exit(0) }}; {OS}.Exit(1) }});");
        assert_eq!(plan.source.matches(&exit).count(), 13);
        // In those, the parent's `t.Run(` calls the wrapper, with the receiver; a field's does not.
        assert_eq!(plan.source.matches(&format!("{RUN}(t, c.name, func")).count(), 13);
        assert_eq!(plan.source.matches(&format!("{RUN}(t, \"deeper\"")).count(), 13);
        assert_eq!(plan.source.matches("x.t.Run(\"field\"").count(), 26);
        assert!(plan.source.starts_with(&format!(
            "package p; import ({OS} \"os\"; {STRINGS} \"strings\"; {TESTING} \"testing\"; {ATOMIC} \"sync/atomic\"; {SYSCALL} \"syscall\")\n"
        )));
        assert!(lex(&plan.source).is_ok());
        // Lines of the code that stays are kept.
        let line_of = |text: &str| text.lines().position(|l| l.contains("\"deeper\"")).unwrap();
        assert_eq!(line_of(&plan.source), line_of(src));
        // Without subtests judged, no flag and no atomic import.
        let plan = plan_file("p_test.go", src, &["TestCases".to_string()], 6, &mut rng).unwrap();
        assert!(!plan.source.contains(SEEN) && !plan.source.contains(ATOMIC));
        // A subtest of a test that cannot be renamed is the caller's error, never run unguarded.
        let referenced = format!("{src}var keep = TestCases\n");
        let plan = plan_file("p_test.go", &referenced, &["TestCases/b".to_string()], 6, &mut rng).unwrap();
        assert!(plan.map.groups[0].real.is_some() && plan.source.contains("func TestCases(t *testing.T) {\n") && lex(&plan.source).is_ok());
        let odd = src.replace("func TestCases(t *testing.T)", "func TestCases(t *testing.T, n int)");
        assert!(plan_file("p_test.go", &odd, &["TestCases/b".to_string()], 6, &mut rng).unwrap_err().contains("cannot be guarded"));
        // Subtests the parent's body does not start itself (testify's `suite.Run` starts each
        // method in library code) could never set the flag: the fix would fail them too, so
        // judging them is the caller's error, not a failed verdict. The whole test is judged.
        let suite = "package p\n\nfunc TestSuite(t *testing.T) {\n\tsuite.Run(t, new(S))\n}\n";
        let err = plan_file("p_test.go", suite, &["TestSuite/TestAdd".to_string()], 6, &mut rng).unwrap_err();
        assert!(err.contains("cannot be guarded for its subtests") && err.contains("suite.Run"), "{err}");
        assert!(plan_file("p_test.go", suite, &["TestSuite".to_string()], 6, &mut rng).is_ok());
        let blank = "package p\n\nfunc TestB(_ *testing.T) {\n\tcheck()\n}\n";
        assert!(plan_file("p_test.go", blank, &["TestB/x".to_string()], 6, &mut rng).is_err());
    }

    #[test]
    fn copies_read_the_name_the_test_was_written_with() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(4);
        let src = "package p\n\nfunc TestGolden(t *testing.T) {\n\tif got := F(); got != golden[t.Name()] {\n\t\tt.Fatal(t.Name())\n\t}\n\tt.Run(\"c\", func(s *testing.T) { check(s.Name(), x.t.Name(), u.Name()) })\n}\n";
        let plan = plan_file("g_test.go", src, &["TestGolden".into(), "TestGolden/c".into()], 6, &mut rng).unwrap();
        let copies: Vec<String> = plan.map.groups.iter().flat_map(|g| g.real.iter().chain(&g.mutants).cloned()).collect();
        assert_eq!(copies.len(), 14, "no literal to mutate: the real copy and 6 tails each");
        // 7 copies of the whole test and 7 bodies of the subtest's copies: each keeps its run name
        // (read before its body runs) and maps its own T's and its subtests' `Name()` back; others
        // stay.
        let src_out = &plan.source;
        assert_eq!(src_out.matches(&format!("{{ {NAMED} := t.Name(); _ = {NAMED};")).count(), 14, "{src_out}");
        assert_eq!(src_out.matches(&format!("{STRINGS}.Replace(t.Name(), {NAMED}, \"TestGolden\", 1)")).count(), 28);
        assert_eq!(src_out.matches(&format!("{STRINGS}.Replace(s.Name(), {NAMED}, \"TestGolden\", 1)")).count(), 14);
        assert_eq!(src_out.matches("x.t.Name()").count(), 14);
        assert_eq!(src_out.matches(", u.Name())").count(), 14);
        assert!(plan.source.contains(&format!("var _ = {STRINGS}.Replace")) && lex(&plan.source).is_ok());
    }

    #[test]
    fn a_blank_test_parameter_is_named_for_the_tail_copies() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        let src = "package p\n\nfunc TestA(_ *testing.T) {\n\tcheck()\n}\n";
        let plan = plan_file("x_test.go", src, &["TestA".into()], 6, &mut rng).unwrap();
        let g = &plan.map.groups[0];
        assert_eq!(g.mutants.len(), 6, "{g:?}");
        assert_eq!(plan.source.matches(&format!("(execcritict__ *testing.T)")).count(), 7, "{}", plan.source);
        assert_eq!(plan.source.matches("}(); execcritict__.Fail() }").count(), 6, "{}", plan.source);
        assert!(lex(&plan.source).is_ok());
    }

    #[test]
    fn refusals_are_reasons_and_errors_never_panics() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(1);
        assert!(plan_file("x_test.go", FILE, &["TestMissing".into()], 6, &mut rng).is_err());
        assert!(plan_file("x_test.go", "func TestA(t *testing.T) {}", &["TestA".into()], 6, &mut rng).is_err());
        // A name used elsewhere keeps its function, unrun, beside the renamed copies.
        let referenced = "package p\nfunc TestA(t *testing.T) { if f() != 1 { t.Fail() } }\nvar x = TestA\n";
        let plan = plan_file("x_test.go", referenced, &["TestA".into()], 6, &mut rng).unwrap();
        let g = &plan.map.groups[0];
        assert!(g.why.is_none() && g.real.as_ref().is_some_and(|r| r.starts_with("TestX")) && g.mutants.len() == 12, "{g:?}");
        assert!(plan.source.contains("func TestA(t *testing.T) { if f() != 1 { t.Fail() } }\n\nfunc TestX") && plan.source.contains("var x = TestA"));
        let unplannable = "package p\nfunc TestA(t *testing.T, n int) { if f() != 1 { t.Fail() } }\n";
        let plan = plan_file("x_test.go", unplannable, &["TestA".into()], 6, &mut rng).unwrap();
        assert!(plan.map.groups[0].why.as_deref().is_some_and(|w| w.contains("signature")));
        assert_eq!(plan.source, unplannable, "nothing planned, nothing changed");
        for (src, why) in [
            ("package p\nfunc TestA(t *testing.T) { if f() != \"\" { t.Fail() } }\n", "empty"),
            ("package p\nfunc TestA(t *testing.T) { if f() != 1e3 { t.Fail() } }\n", "exponent"),
            ("package p\nfunc TestA(t *testing.T) { if f() != 1 { t.Fail() } else { g() } }\n", "no assertion"),
            ("package p\nfunc TestA(t *testing.T) { if f() != 1 && g() { t.Fail() } }\n", "no assertion"),
            ("package p\nfunc TestA(t *testing.T) { if 1 != 2 { t.Fail() } }\n", "no assertion"),
            ("package p\nfunc TestA(t *testing.T) { if f(func() {}) != 1 { t.Fail() } }\n", "no assertion"),
            ("package p\nfunc TestA(x int) { if f() != 1 { t.Fail() } }\n", "signature"),
        ] {
            let plan = plan_file("x_test.go", src, &["TestA".into()], 6, &mut rng).unwrap();
            let got = plan.map.groups[0].why.clone().unwrap_or_default();
            assert!(got.contains(why), "{src}: {got}");
        }
        for odd in ["", "package", "package p\nfunc TestA(t *testing.T) {", "package p\nfunc TestA(t *testing.T) { if f() != 0x { t.Fail() } }"] {
            let _ = plan_file("x_test.go", odd, &["TestA".into()], 6, &mut rng);
        }
    }

    #[test]
    fn literals_mutate_to_neighbours_of_their_own_kind() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        for (lit, kind) in [("0x1F", Kind::Int), ("0", Kind::Int), ("250", Kind::Int), ("1_000", Kind::Int), ("2.50", Kind::Float), ("\"abc\"", Kind::Str), ("`a\\b`", Kind::RawStr), ("'\\n'", Kind::Rune), ("'é'", Kind::Rune)] {
            let v = mutate(lit, kind, 6, &mut rng).unwrap();
            assert_eq!(v.len(), 7, "{lit}");
            assert_eq!(v[0], lit);
            let mut seen = v.clone();
            seen.sort();
            seen.dedup();
            assert_eq!(seen.len(), 7, "{lit}: {v:?}");
            for m in &v[1..] {
                let toks = lex(m).unwrap();
                let expect = if kind == Kind::RawStr { Kind::Str } else { kind };
                assert_eq!(toks[0].kind, expect, "{m}");
            }
        }
        assert!(mutate("250", Kind::Int, 6, &mut rng).unwrap()[1..].iter().all(|v| v.parse::<u32>().unwrap() <= 255));
        assert!(mutate("'a'", Kind::Rune, 6, &mut rng).unwrap()[1..].iter().all(|v| unquote(v).unwrap().chars().next().unwrap() < '\u{80}'));
        assert!(mutate("2i", Kind::Imaginary, 6, &mut rng).is_err());
    }
}
