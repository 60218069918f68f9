//! Expanding a test file's own `macro_rules!` invocations, for tests whose body lives in the
//! macro's definition (heck's `t!(test1: "CamelCase" => "camel-case");`, roxmltree's
//! `test!(attrs_001);`).
//!
//! [`super::libtest`] plans a test from its source text. Where a macro writes the test and the
//! invocation holds only the name and the literals, there is no body to copy: the copies would
//! have to change the macro. Instead the planner expands the invocation here, by the macro's
//! own rules, into the `#[test]` function it writes, and plans that function like any other
//! (renamed, literal look-alikes, tail copies, the standard library's assertions); the
//! invocation's place in the file holds the copies.
//!
//! Only what this expansion gives exactly as rustc does is expanded, else it says why (the
//! planner's harness error, as before):
//! - a macro of the file (`macro_rules! t { … }`) invoked in item position with a plain name
//!   (`t!(…);`), the definition the invocation reaches by textual scope ([`reaching`]): the last
//!   one written before it, in its module or one around it;
//! - rules tried in order, the first whose matcher matches the whole invocation; matchers of
//!   literal tokens, delimited groups and fragments (`ident`, `expr`, `literal`, `tt`, `ty`,
//!   `path`, `pat`, `block`, `lifetime`, `vis`); repetitions (`$( … ),*`, `+`, `?`, nested
//!   too), matched greedily, written once per round of the metavariables they repeat;
//! - an `expr` fragment is substituted in parentheses unless nothing can bind tighter (a path,
//!   literal, call, …): rustc keeps a fragment one expression (`$a * 2` with `1 + 1` is 4);
//!   `$crate` becomes `crate`;
//! - hygiene: a macro's local names cannot capture the invocation's; textual expansion could. An
//!   identifier that could name a local (not a keyword, method, field, path segment or macro)
//!   and occurs so both in the invocation's fragments and in the rule's transcriber refuses the
//!   expansion.

use proc_macro2::{Delimiter, Group, Spacing, TokenStream, TokenTree};
use std::collections::{BTreeMap, BTreeSet};
use syn::parse::{ParseStream, Parser};

/// A `macro_rules! name { … }` of a file: its rules, the inline module it is in (`""`: the
/// file's top level, `a::b`) and where its name starts in the file.
#[derive(Clone, Debug)]
pub struct Definition {
    pub rules: TokenStream,
    module: String,
    at: usize,
}

impl Definition {
    /// Where the definition's `macro_rules` starts in the file (after its attributes).
    pub fn at(&self) -> usize {
        self.at
    }
}

/// The definitions `macro_rules! name { … }` of a file, by name, in the order they are written
/// (every inline module).
pub fn definitions(items: &[syn::Item]) -> BTreeMap<String, Vec<Definition>> {
    use syn::spanned::Spanned;
    let mut out = BTreeMap::new();
    fn walk(items: &[syn::Item], module: &str, out: &mut BTreeMap<String, Vec<Definition>>) {
        for item in items {
            match item {
                syn::Item::Macro(m) if m.mac.path.is_ident("macro_rules") => {
                    if let Some(name) = &m.ident {
                        out.entry(name.to_string()).or_default().push(Definition {
                            rules: m.mac.tokens.clone(),
                            module: module.to_string(),
                            at: m.mac.path.span().byte_range().start,
                        });
                    }
                }
                syn::Item::Mod(m) => {
                    if let Some((_, inner)) = &m.content {
                        let sub = if module.is_empty() { m.ident.to_string() } else { format!("{module}::{}", m.ident) };
                        walk(inner, &sub, out);
                    }
                }
                _ => {}
            }
        }
    }
    walk(items, "", &mut out);
    out
}

/// The definition an invocation of `name` at byte `at` of inline module `module` reaches by
/// rustc's textual scope, where the file alone decides it: the last definition of that name
/// written before the invocation, if it is in the invocation's module or one around it (a
/// definition in a module the invocation is not inside is out of scope there, unless
/// `#[macro_use]` carries it out: not followed, so no expansion); `None` also when no definition
/// precedes it (a macro from elsewhere, or a later one: not this file's to expand).
pub fn reaching<'d>(defs: &'d BTreeMap<String, Vec<Definition>>, name: &str, module: &str, at: usize) -> Option<&'d Definition> {
    let last = defs.get(name)?.iter().filter(|d| d.at < at).max_by_key(|d| d.at)?;
    let encloses = last.module.is_empty() || module == last.module || module.starts_with(&format!("{}::", last.module));
    encloses.then_some(last)
}

/// The expansion of `name!(input)` by the definition `rules` (the tokens inside
/// `macro_rules! name { … }`), as source text, or why it is not expanded.
pub fn expand(rules: &TokenStream, input: &TokenStream) -> Result<String, String> {
    for (matcher, transcriber) in parse_rules(rules)? {
        let Ok(bindings) = match_all(&matcher, input.clone()) else { continue };
        let fragment_idents: BTreeSet<String> = bindings.values().flat_map(|b| b.values()).flat_map(|(ts, _)| local_like(&ts)).collect();
        let written = local_like(&transcriber);
        if let Some(shared) = fragment_idents.intersection(&written).next() {
            return Err(format!("a macro-written test whose invocation and macro both name `{shared}` (hygiene)"));
        }
        return Ok(substitute(&transcriber, &bindings)?.to_string());
    }
    Err("a macro-written test whose invocation matches none of the macro's rules as read here".into())
}

/// `(matcher) => {transcriber}` rules separated by `;`.
fn parse_rules(rules: &TokenStream) -> Result<Vec<(Vec<TokenTree>, TokenStream)>, String> {
    let tts: Vec<TokenTree> = rules.clone().into_iter().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let unread = || "a macro_rules! definition not read here".to_string();
    while i < tts.len() {
        let TokenTree::Group(m) = &tts[i] else { return Err(unread()) };
        let arrow = matches!((tts.get(i + 1), tts.get(i + 2)),
            (Some(TokenTree::Punct(a)), Some(TokenTree::Punct(b))) if a.as_char() == '=' && a.spacing() == Spacing::Joint && b.as_char() == '>');
        let Some(TokenTree::Group(t)) = tts.get(i + 3) else { return Err(unread()) };
        if !arrow {
            return Err(unread());
        }
        out.push((m.stream().into_iter().collect(), t.stream()));
        i += 4;
        match tts.get(i) {
            Some(TokenTree::Punct(p)) if p.as_char() == ';' => i += 1,
            None => {}
            Some(_) => return Err(unread()),
        }
    }
    Ok(out)
}

/// What a metavariable matched: one fragment (its tokens and kind), or one binding per round of
/// the repetition it is in (a binding per round of the inner one, in a nested repetition).
#[derive(Clone, Debug)]
enum Binding {
    One(TokenStream, String),
    Seq(Vec<Binding>),
}

impl Binding {
    /// Every fragment bound, at any depth.
    fn values(&self) -> Vec<(TokenStream, String)> {
        match self {
            Binding::One(ts, k) => vec![(ts.clone(), k.clone())],
            Binding::Seq(v) => v.iter().flat_map(Binding::values).collect(),
        }
    }
}

type Bindings = BTreeMap<String, Binding>;

/// Match the whole `input` against `matcher`.
fn match_all(matcher: &[TokenTree], input: TokenStream) -> Result<Bindings, ()> {
    let mut bindings = Bindings::new();
    let rest = match_seq(matcher, input, &mut bindings)?;
    if rest.is_empty() {
        Ok(bindings)
    } else {
        Err(())
    }
}

/// A repetition `$( … ) sep? op` starting at `tts[i]` (the `$`): its inner tokens, separator,
/// operator (`*`, `+`, `?`) and the index after it.
fn repetition(tts: &[TokenTree], i: usize) -> Option<(Vec<TokenTree>, Option<TokenTree>, char, usize)> {
    let TokenTree::Group(g) = tts.get(i + 1)? else { return None };
    if g.delimiter() != Delimiter::Parenthesis {
        return None;
    }
    let op = |t: Option<&TokenTree>| match t {
        Some(TokenTree::Punct(p)) if matches!(p.as_char(), '*' | '+' | '?') => Some(p.as_char()),
        _ => None,
    };
    let inner = g.stream().into_iter().collect();
    match (op(tts.get(i + 2)), op(tts.get(i + 3))) {
        (Some(o), _) => Some((inner, None, o, i + 3)),
        (None, Some(o)) if !matches!(tts.get(i + 2), Some(TokenTree::Group(_))) => Some((inner, tts.get(i + 2).cloned(), o, i + 4)),
        _ => None,
    }
}

fn same_token(a: &TokenTree, b: &TokenTree) -> bool {
    match (a, b) {
        (TokenTree::Punct(a), TokenTree::Punct(b)) => a.as_char() == b.as_char(),
        (TokenTree::Ident(a), TokenTree::Ident(b)) => a == b,
        (TokenTree::Literal(a), TokenTree::Literal(b)) => a.to_string() == b.to_string(),
        _ => false,
    }
}

/// The metavariables a matcher declares (`$name:kind`), at any depth.
fn declared(tts: &[TokenTree]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, t) in tts.iter().enumerate() {
        match t {
            TokenTree::Punct(p) if p.as_char() == '$' => {
                if let (Some(TokenTree::Ident(n)), Some(TokenTree::Punct(c))) = (tts.get(i + 1), tts.get(i + 2)) {
                    if c.as_char() == ':' {
                        out.push(n.to_string());
                    }
                }
            }
            TokenTree::Group(g) => out.extend(declared(&g.stream().into_iter().collect::<Vec<_>>())),
            _ => {}
        }
    }
    out
}

/// Match a prefix of `input` against `matcher`; the tokens after it. A repetition matches as
/// many rounds as it can (rustc's matcher does not backtrack either: where stopping early would
/// also match, rustc reports an ambiguity), repetitions inside it likewise per round.
fn match_seq(matcher: &[TokenTree], input: TokenStream, bindings: &mut Bindings) -> Result<TokenStream, ()> {
    let mut input = input;
    let mut i = 0;
    while i < matcher.len() {
        match &matcher[i] {
            TokenTree::Punct(p) if p.as_char() == '$' => {
                if let Some((inner, sep, op, next)) = repetition(matcher, i) {
                    let mut rounds: BTreeMap<String, Vec<Binding>> =
                        declared(&inner).into_iter().map(|n| (n, Vec::new())).collect();
                    let mut count = 0;
                    while !(op == '?' && count == 1) {
                        let mut attempt = input.clone();
                        if let (true, Some(sep)) = (count > 0, &sep) {
                            let mut it = attempt.into_iter();
                            match it.next() {
                                Some(t) if same_token(sep, &t) => attempt = it.collect(),
                                _ => break,
                            }
                        }
                        let before = input.clone().into_iter().count();
                        let mut round = Bindings::new();
                        let Ok(rest) = match_seq(&inner, attempt, &mut round) else { break };
                        if rest.clone().into_iter().count() >= before {
                            break;
                        }
                        for (name, b) in round {
                            rounds.entry(name).or_default().push(b);
                        }
                        input = rest;
                        count += 1;
                    }
                    if op == '+' && count == 0 {
                        return Err(());
                    }
                    bindings.extend(rounds.into_iter().map(|(n, v)| (n, Binding::Seq(v))));
                    i = next;
                    continue;
                }
                let (Some(TokenTree::Ident(name)), Some(TokenTree::Punct(colon)), Some(TokenTree::Ident(kind))) =
                    (matcher.get(i + 1), matcher.get(i + 2), matcher.get(i + 3))
                else {
                    return Err(());
                };
                if colon.as_char() != ':' {
                    return Err(());
                }
                let (frag, rest) = fragment(&kind.to_string(), input)?;
                bindings.insert(name.to_string(), Binding::One(frag, kind.to_string()));
                input = rest;
                i += 4;
            }
            TokenTree::Group(g) => {
                let mut it = input.into_iter();
                let Some(TokenTree::Group(h)) = it.next() else { return Err(()) };
                if h.delimiter() != g.delimiter() {
                    return Err(());
                }
                let inner: Vec<TokenTree> = g.stream().into_iter().collect();
                if !match_seq(&inner, h.stream(), bindings)?.is_empty() {
                    return Err(());
                }
                input = it.collect();
                i += 1;
            }
            want => {
                let mut it = input.into_iter();
                let got = it.next().ok_or(())?;
                if !same_token(want, &got) {
                    return Err(());
                }
                input = it.collect();
                i += 1;
            }
        }
    }
    Ok(input)
}

/// One fragment of `kind` from the front of `input`: its tokens and the rest.
fn fragment(kind: &str, input: TokenStream) -> Result<(TokenStream, TokenStream), ()> {
    fn rest_after<T>(parse: impl Fn(ParseStream) -> syn::Result<T>) -> impl Fn(ParseStream) -> syn::Result<TokenStream> {
        move |s: ParseStream| {
            parse(s)?;
            s.parse::<TokenStream>()
        }
    }
    let all: Vec<TokenTree> = input.clone().into_iter().collect();
    let rest = match kind {
        "ident" => rest_after(|s| s.call(<proc_macro2::Ident as syn::ext::IdentExt>::parse_any)).parse2(input),
        "expr" => rest_after(|s| s.parse::<syn::Expr>()).parse2(input),
        "literal" => rest_after(|s| s.parse::<syn::Lit>()).parse2(input),
        "tt" => rest_after(|s| s.parse::<TokenTree>()).parse2(input),
        "ty" => rest_after(|s| s.parse::<syn::Type>()).parse2(input),
        "path" => rest_after(|s| s.parse::<syn::Path>()).parse2(input),
        "pat" => rest_after(syn::Pat::parse_multi_with_leading_vert).parse2(input),
        "block" => rest_after(|s| s.parse::<syn::Block>()).parse2(input),
        "lifetime" => rest_after(|s| s.parse::<syn::Lifetime>()).parse2(input),
        "vis" => rest_after(|s| s.parse::<syn::Visibility>()).parse2(input),
        _ => return Err(()),
    }
    .map_err(|_| ())?;
    // The fragment is the token trees the parse consumed, as written.
    let n = all.len().checked_sub(rest.clone().into_iter().count()).ok_or(())?;
    if n == 0 && kind != "vis" {
        return Err(());
    }
    Ok((all[..n].iter().cloned().collect(), rest))
}

/// Rust's keywords: never a local name.
const KEYWORDS: [&str; 38] = [
    "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum", "extern", "false", "fn", "for", "if", "impl", "in",
    "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return", "self", "Self", "static", "struct", "super", "trait", "true",
    "type", "unsafe", "use", "where", "while",
];

/// The identifiers of `ts` that could name a local variable: not a keyword, not after `$`, `.`
/// or `::` (a metavariable, method, field or path segment), not before `::` or `!` (a path or
/// a macro). A name a macro binds for itself can capture only such an identifier of the
/// invocation's, and only one the macro itself writes so.
fn local_like(ts: &TokenStream) -> BTreeSet<String> {
    let tts: Vec<TokenTree> = ts.clone().into_iter().collect();
    let punct = |j: Option<&TokenTree>, c: char| matches!(j, Some(TokenTree::Punct(p)) if p.as_char() == c);
    let mut out = BTreeSet::new();
    for (i, t) in tts.iter().enumerate() {
        match t {
            TokenTree::Ident(id) => {
                let before = if i > 0 { tts.get(i - 1) } else { None };
                let after_sep = punct(before, '$') || punct(before, '.') || punct(before, ':');
                let before_sep = punct(tts.get(i + 1), '!') || (punct(tts.get(i + 1), ':') && punct(tts.get(i + 2), ':'));
                let name = id.to_string();
                if !after_sep && !before_sep && !KEYWORDS.contains(&name.as_str()) {
                    out.insert(name);
                }
            }
            TokenTree::Group(g) => out.extend(local_like(&g.stream())),
            _ => {}
        }
    }
    out
}

/// An expression that binds tighter than any operator around it (a path, literal, call, method
/// call, field, index, macro call, array, tuple, struct literal, parenthesised): substituted as
/// written, the same expression as rustc's fragment. Any other is substituted in parentheses.
fn postfix_atomic(frag: &TokenStream) -> bool {
    matches!(
        syn::parse2::<syn::Expr>(frag.clone()),
        Ok(syn::Expr::Path(_) | syn::Expr::Lit(_) | syn::Expr::Call(_) | syn::Expr::MethodCall(_) | syn::Expr::Field(_)
            | syn::Expr::Index(_) | syn::Expr::Macro(_) | syn::Expr::Array(_) | syn::Expr::Tuple(_) | syn::Expr::Struct(_)
            | syn::Expr::Paren(_))
    )
}

/// The names used after `$` in a transcriber, at any depth.
fn used(tts: &[TokenTree]) -> Vec<String> {
    let mut out = Vec::new();
    for (i, t) in tts.iter().enumerate() {
        match t {
            TokenTree::Ident(n) if i > 0 && matches!(&tts[i - 1], TokenTree::Punct(p) if p.as_char() == '$') => out.push(n.to_string()),
            TokenTree::Group(g) => out.extend(used(&g.stream().into_iter().collect::<Vec<_>>())),
            _ => {}
        }
    }
    out
}

/// The transcriber with every `$name` replaced by its fragment, and every repetition
/// `$( … ) sep? op` written once per round of the repeated metavariables it uses (all of one
/// count), a repetition inside it once per round of that round's bindings.
fn substitute(ts: &TokenStream, bindings: &Bindings) -> Result<TokenStream, String> {
    let tts: Vec<TokenTree> = ts.clone().into_iter().collect();
    let mut out = TokenStream::new();
    let mut i = 0;
    while i < tts.len() {
        match &tts[i] {
            TokenTree::Punct(p) if p.as_char() == '$' => {
                if let Some((inner, sep, _, next)) = repetition(&tts, i) {
                    let repeated: Vec<(String, Vec<Binding>)> = used(&inner)
                        .into_iter()
                        .filter_map(|n| match bindings.get(&n) {
                            Some(Binding::Seq(v)) => Some((n, v.clone())),
                            _ => None,
                        })
                        .collect();
                    let Some(rounds) = repeated.first().map(|(_, v)| v.len()) else {
                        return Err("a macro-written test whose macro repeats no repeated metavariable".into());
                    };
                    if repeated.iter().any(|(_, v)| v.len() != rounds) {
                        return Err("a macro-written test whose macro repeats metavariables of different counts".into());
                    }
                    let inner: TokenStream = inner.into_iter().collect();
                    for r in 0..rounds {
                        if let (true, Some(sep)) = (r > 0, &sep) {
                            out.extend([sep.clone()]);
                        }
                        let mut round = bindings.clone();
                        for (n, v) in &repeated {
                            round.insert(n.clone(), v[r].clone());
                        }
                        out.extend(substitute(&inner, &round)?);
                    }
                    i = next;
                    continue;
                }
                let Some(TokenTree::Ident(name)) = tts.get(i + 1) else {
                    return Err("a macro-written test whose macro writes a `$` this expansion does not read".into());
                };
                let name = name.to_string();
                if name == "crate" {
                    out.extend([TokenTree::Ident(proc_macro2::Ident::new("crate", proc_macro2::Span::call_site()))]);
                } else {
                    let Some(Binding::One(frag, kind)) = bindings.get(&name) else {
                        return Err(format!("a macro-written test whose macro writes `${name}` unbound or still repeating"));
                    };
                    if kind == "expr" && !postfix_atomic(frag) {
                        out.extend([TokenTree::Group(Group::new(Delimiter::Parenthesis, frag.clone()))]);
                    } else {
                        out.extend(frag.clone());
                    }
                }
                i += 2;
            }
            TokenTree::Group(g) => {
                out.extend([TokenTree::Group(Group::new(g.delimiter(), substitute(&g.stream(), bindings)?))]);
                i += 1;
            }
            t => {
                out.extend([t.clone()]);
                i += 1;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn expand_in(src: &str, call: &str) -> Result<String, String> {
        let file = syn::parse_file(src).unwrap();
        let defs = definitions(&file.items);
        let m: syn::ItemMacro = syn::parse_str(call).unwrap();
        let rules = defs[&m.mac.path.get_ident().unwrap().to_string()][0].rules.clone();
        expand(&rules, &m.mac.tokens)
    }

    #[test]
    fn heck_and_roxmltree_forms_expand_as_rustc_does() {
        let heck = "macro_rules! t { ($t:ident : $s1:expr => $s2:expr) => { #[test] fn $t() { assert_eq!($s1.to_kebab_case(), $s2) } }; }";
        let e = expand_in(heck, r#"t!(test1: "CamelCase" => "camel-case");"#).unwrap();
        let f: syn::ItemFn = syn::parse_str(&e).unwrap();
        assert_eq!(f.sig.ident, "test1");
        assert!(e.contains(r#"assert_eq ! ("CamelCase" . to_kebab_case () , "camel-case")"#), "{e}");
        let rox = "mod a { macro_rules! test { ($name:ident) => { #[test] fn $name() { actual_test(&format!(\"tests/files/{}.xml\", stringify!($name))) } }; } }";
        let e = expand_in(rox, "test!(attrs_001);").unwrap();
        assert!(e.contains("fn attrs_001 ()") && e.contains("stringify ! (attrs_001)"), "{e}");
    }

    #[test]
    fn rules_are_tried_in_order_and_expressions_keep_their_precedence() {
        let src = "macro_rules! m { ($n:ident) => { fn $n() {} }; ($n:ident, $a:expr) => { fn $n() { f($a * 2, $crate::x) } }; }";
        assert_eq!(expand_in(src, "m!(a);").unwrap(), "fn a () { }");
        let e = expand_in(src, "m!(b, 1 + 1);").unwrap();
        assert!(e.contains("f ((1 + 1) * 2 , crate :: x)"), "{e}");
    }

    #[test]
    fn one_level_of_repetition_is_matched_and_written_per_round() {
        // roxmltree's tokenizer tests: one assertion per token given.
        let src = "macro_rules! test { ($name:ident, $text:expr, $($token:expr),*) => ( #[test] fn $name() { let tokens = collect_tokens($text); let mut iter = tokens.iter(); $( let t = iter.next().unwrap(); assert_eq!(*t, $token); )* assert!(iter.next().is_none()); } ) }";
        let e = expand_in(src, r#"test!(attribute_01, "<e a='v'/>", Token::ElementStart("", "e", 0..2), Token::Attribute("", "a", "v", 3..8), Token::ElementEnd(ElementEnd::Empty, 8..10));"#).unwrap();
        assert_eq!(e.matches("let t = iter . next () . unwrap () ;").count(), 3, "{e}");
        assert!(e.contains(r#"assert_eq ! (* t , Token :: Attribute ("" , "a" , "v" , 3 .. 8))"#), "{e}");
        // Separators, `+` and `?`; a count of zero.
        let src = "macro_rules! m { ($n:ident $(, $v:literal)+ $(;)?) => { fn $n() { f([$($v),+]) } }; }";
        let bare = |s: String| s.replace(' ', "");
        assert_eq!(bare(expand_in(src, "m!(a, 1, 2;);").unwrap()), "fna(){f([1,2])}");
        assert!(expand_in(src, "m!(a);").is_err());
        let src = "macro_rules! m { ($n:ident $($v:literal)*) => { fn $n() { f(&[$($v,)*]) } }; }";
        assert_eq!(bare(expand_in(src, "m!(a);").unwrap()), "fna(){f(&[])}");
        let src = "macro_rules! test { ($name:ident, $text:expr, $($token:expr),*) => ( #[test] fn $name() { let tokens = collect_tokens($text); let mut iter = tokens.iter(); $( let t = iter.next().unwrap(); assert_eq!(*t, $token); )* assert!(iter.next().is_none()); } ) }";
        assert!(expand_in(src, r#"test!(dtd_05, "<!DOCTYPE greeting []>",);"#).unwrap().ends_with("let mut iter = tokens . iter () ; assert ! (iter . next () . is_none ()) ; }"));
        // Methods and paths the macro also writes are not locals: `unwrap` here is no capture.
        assert!(expand_in(src, r#"test!(d, str::from_utf8(b"<a/>").unwrap(), Token::A);"#).is_ok());
    }

    #[test]
    fn what_is_not_expanded_exactly_says_why() {
        let hygiene = "macro_rules! m { ($n:ident, $e:expr) => { #[test] fn $n() { let v = 1; assert_eq!($e, v) } }; }";
        assert!(expand_in(hygiene, "m!(a, v + 0);").unwrap_err().contains("hygiene"));
        assert!(expand_in(hygiene, "m!(a, f(&mut w).v);").is_ok());
        let none = "macro_rules! m { ($n:ident) => { fn $n() {} }; }";
        assert!(expand_in(none, "m!(a, b);").unwrap_err().contains("matches none"));
    }

    #[test]
    fn nested_repetitions_are_written_per_inner_round() {
        // mime's `mimes!`: several items per invocation, a list of pieces per constant.
        let nested = "macro_rules! m { ($($n:ident, $($v:expr),*;)*) => { enum E { $($n,)* } #[test] fn t() { let _ = [$( c!{$n, $($v),*} ),*]; } }; }";
        let e = expand_in(nested, r#"m! { A, "a/b", 1; B, "c/d", 1, Some(3); }"#).unwrap();
        let bare = e.replace(' ', "");
        assert!(bare.contains("enumE{A,B,}"), "{e}");
        assert!(bare.contains(r#"[c!{A,"a/b",1},c!{B,"c/d",1,Some(3)}]"#), "{e}");
        let nested = "macro_rules! m { ($($($n:ident)*),*) => { $($(fn $n() {})*)* }; }";
        assert_eq!(expand_in(nested, "m!(a b, c);").unwrap().replace(' ', ""), "fna(){}fnb(){}fnc(){}");
        // Inner rounds of one outer round must agree in count.
        let uneven = "macro_rules! m { ($($($a:ident)* ; $($b:ident)*),*) => { $($(f($a, $b);)*)* }; }";
        assert!(expand_in(uneven, "m!(x y ; z);").unwrap_err().contains("different counts"));
    }

    #[test]
    fn the_definition_an_invocation_reaches_is_the_last_one_before_it_around_it() {
        let src = "macro_rules! m { () => { fn top() {} } }\nmod a { macro_rules! m { () => { fn inner() {} } } m!(); }\nm!();\nmod b { m!(); }\nmod c { macro_rules! late { () => {} } }\nlate!();";
        let file = syn::parse_file(src).unwrap();
        let defs = definitions(&file.items);
        let at = |needle: &str, nth: usize| src.match_indices(needle).nth(nth).unwrap().0;
        let rules = |d: Option<&Definition>| d.map(|d| d.rules.to_string());
        let top = Some("() => { fn top () { } }".to_string());
        // In `a`, its own later definition shadows the top one.
        assert_eq!(rules(reaching(&defs, "m", "a", at("m!();", 0))), Some("() => { fn inner () { } }".to_string()));
        // After `a` ends, the last definition before is `a`'s, out of scope: not expanded.
        assert_eq!(rules(reaching(&defs, "m", "", at("m!();", 1))), None);
        assert_eq!(rules(reaching(&defs, "m", "b", at("m!();", 2))), None);
        // Before any definition, and in a module the definition is not around.
        assert!(reaching(&defs, "m", "", 0).is_none());
        assert!(reaching(&defs, "late", "", at("late!();", 0)).is_none());
        let src = "macro_rules! m { () => { fn top() {} } }\nmod b { m!(); }";
        let file = syn::parse_file(src).unwrap();
        let defs = definitions(&file.items);
        assert_eq!(rules(reaching(&defs, "m", "b", src.find("m!();").unwrap())), top);
    }
}
