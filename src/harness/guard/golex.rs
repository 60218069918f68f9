//! A Go tokenizer for the guard's test rewriter ([`super::gotest`]): the tokens of a Go source
//! file with their byte ranges, comments dropped, and the semicolons the Go specification inserts
//! at line ends ("Semicolons": after an identifier, a literal, `break`, `continue`,
//! `fallthrough`, `return`, `++`, `--`, `)`, `]` or `}`) made explicit.
//!
//! It is the lexical grammar only — enough to find top-level functions, the statements of a
//! body and the operands of a comparison by token ranges, the way [`super::libtest`] uses `syn`'s
//! spans. Anything it does not know is an error (the file is then not planned), never a guess.

use std::ops::Range;

/// What a token is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An identifier or keyword.
    Ident,
    Int,
    Float,
    Imaginary,
    Rune,
    /// An interpreted string literal (`"…"`).
    Str,
    /// A raw string literal (`` `…` ``).
    RawStr,
    /// An operator or punctuation (`;` written in the source included).
    Op,
    /// A semicolon the specification inserts at a line end (empty range at the newline).
    AutoSemi,
}

/// One token.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Token {
    pub kind: Kind,
    pub range: Range<usize>,
}

impl Token {
    pub fn text<'a>(&self, src: &'a str) -> &'a str {
        &src[self.range.clone()]
    }

    /// A statement separator: `;` as written or inserted.
    pub fn is_semi(&self, src: &str) -> bool {
        self.kind == Kind::AutoSemi || (self.kind == Kind::Op && self.text(src) == ";")
    }

    /// A basic literal (number, rune or string).
    pub fn is_literal(&self) -> bool {
        matches!(self.kind, Kind::Int | Kind::Float | Kind::Imaginary | Kind::Rune | Kind::Str | Kind::RawStr)
    }
}

/// Operators, longest first within each length.
const OPS: [&str; 48] = [
    "<<=", ">>=", "&^=", "...", "&&", "||", "<-", "++", "--", "==", "!=", "<=", ">=", ":=", "+=", "-=", "*=", "/=",
    "%=", "&=", "|=", "^=", "<<", ">>", "&^", "+", "-", "*", "/", "%", "&", "|", "^", "<", ">", "=", "!", "(", ")",
    "[", "]", "{", "}", ",", ";", ".", ":", "~",
];

/// Tokenize `src`.
pub fn lex(src: &str) -> Result<Vec<Token>, String> {
    let b = src.as_bytes();
    let mut out: Vec<Token> = Vec::new();
    let mut i = 0;
    // A line end ends a statement after these.
    let semi_after = |out: &[Token]| -> bool {
        let Some(t) = out.last() else { return false };
        match t.kind {
            Kind::Ident => true,
            k if k != Kind::Op && k != Kind::AutoSemi => true,
            Kind::Op => matches!(&src[t.range.clone()], "++" | "--" | ")" | "]" | "}"),
            _ => false,
        }
    };
    while i < b.len() {
        let c = b[i];
        if c == b'\n' {
            if semi_after(&out) {
                out.push(Token { kind: Kind::AutoSemi, range: i..i });
            }
            i += 1;
            continue;
        }
        if c == b' ' || c == b'\t' || c == b'\r' {
            i += 1;
            continue;
        }
        if b[i..].starts_with(b"//") {
            i = src[i..].find('\n').map_or(b.len(), |n| i + n);
            continue;
        }
        if b[i..].starts_with(b"/*") {
            let end = src[i + 2..].find("*/").ok_or("an unterminated comment")? + i + 4;
            if src[i..end].contains('\n') && semi_after(&out) {
                out.push(Token { kind: Kind::AutoSemi, range: i..i });
            }
            i = end;
            continue;
        }
        let start = i;
        let kind = if c == b'_' || c.is_ascii_alphabetic() || c >= 0x80 {
            let rest = &src[i..];
            let n = rest
                .char_indices()
                .find(|(_, ch)| !(*ch == '_' || ch.is_alphanumeric()))
                .map_or(rest.len(), |(n, _)| n);
            if n == 0 {
                return Err(format!("an unexpected character at byte {i}"));
            }
            i += n;
            Kind::Ident
        } else if c.is_ascii_digit() || (c == b'.' && b.get(i + 1).is_some_and(|d| d.is_ascii_digit())) {
            let hex = b[i..].starts_with(b"0x") || b[i..].starts_with(b"0X");
            let mut float = c == b'.';
            i += 1;
            while i < b.len() {
                let d = b[i];
                let exp = if hex { matches!(d, b'p' | b'P') } else { matches!(d, b'e' | b'E') };
                if exp {
                    float = true;
                    i += 1;
                    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
                        i += 1;
                    }
                } else if d == b'.' {
                    float = true;
                    i += 1;
                } else if d.is_ascii_alphanumeric() || d == b'_' {
                    i += 1;
                } else {
                    break;
                }
            }
            if src[start..i].ends_with('i') {
                Kind::Imaginary
            } else if float {
                Kind::Float
            } else {
                Kind::Int
            }
        } else if c == b'"' || c == b'\'' {
            i += 1;
            loop {
                match b.get(i) {
                    None | Some(b'\n') => return Err(format!("an unterminated literal at byte {start}")),
                    Some(b'\\') => i += 2,
                    Some(&q) if q == c => {
                        i += 1;
                        break;
                    }
                    Some(_) => i += 1,
                }
            }
            if c == b'"' {
                Kind::Str
            } else {
                Kind::Rune
            }
        } else if c == b'`' {
            let end = src[i + 1..].find('`').ok_or("an unterminated raw string")?;
            i += end + 2;
            Kind::RawStr
        } else {
            let op = OPS.iter().find(|op| b[i..].starts_with(op.as_bytes())).ok_or_else(|| format!("an unexpected character at byte {i}"))?;
            i += op.len();
            Kind::Op
        };
        out.push(Token { kind, range: start..i });
    }
    if semi_after(&out) {
        out.push(Token { kind: Kind::AutoSemi, range: b.len()..b.len() });
    }
    Ok(out)
}

/// The index of the token closing the bracket opened at `open` (`(`, `[` or `{`).
pub fn matching(tokens: &[Token], src: &str, open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (j, t) in tokens.iter().enumerate().skip(open) {
        if t.kind != Kind::Op {
            continue;
        }
        match t.text(src) {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

/// The value of a Go string or rune literal (`"…"`, `` `…` ``, `'…'`), or `None` for an escape
/// this reader does not decode.
pub fn unquote(lit: &str) -> Option<String> {
    if let Some(raw) = lit.strip_prefix('`').and_then(|s| s.strip_suffix('`')) {
        return Some(raw.replace('\r', ""));
    }
    let q = lit.chars().next()?;
    let body = lit.strip_prefix(q)?.strip_suffix(q)?;
    let mut out = String::new();
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let e = chars.next()?;
        let simple = match e {
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\u{b}'),
            '\\' => Some('\\'),
            '"' if q == '"' => Some('"'),
            '\'' if q == '\'' => Some('\''),
            _ => None,
        };
        if let Some(s) = simple {
            out.push(s);
            continue;
        }
        let (digits, radix) = match e {
            'x' => (2, 16),
            'u' => (4, 16),
            'U' => (8, 16),
            '0'..='7' => (2, 8),
            _ => return None,
        };
        let mut text = if radix == 8 { e.to_string() } else { String::new() };
        for _ in 0..digits {
            text.push(chars.next()?);
        }
        let v = u32::from_str_radix(&text, radix).ok()?;
        // \x and octal escapes are bytes: only ASCII ones are characters of their own.
        if matches!(e, 'x' | '0'..='7') && v > 0x7f {
            return None;
        }
        out.push(char::from_u32(v)?);
    }
    Some(out)
}

/// A Go interpreted literal (`"…"` for strings, `'…'` for runes) holding `s`.
pub fn quote(s: &str, q: char) -> String {
    let mut out = String::new();
    out.push(q);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            c if c.is_control() || (c as u32) >= 0x80 && !c.is_alphanumeric() => {
                if (c as u32) <= 0xffff {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push(q);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn texts(src: &str) -> Vec<String> {
        lex(src).unwrap().iter().map(|t| if t.kind == Kind::AutoSemi { "⏎".into() } else { t.text(src).to_string() }).collect()
    }

    #[test]
    fn semicolons_are_inserted_where_the_specification_says() {
        let src = "package p\n\nfunc f() int {\n\tx := a[1]\n\tx++\n\treturn x /* c\n */\n}\n";
        assert_eq!(
            texts(src),
            ["package", "p", "⏎", "func", "f", "(", ")", "int", "{", "x", ":=", "a", "[", "1", "]", "⏎", "x", "++", "⏎", "return", "x", "⏎", "}", "⏎"]
        );
        // No semicolon after an operator or an opening bracket at a line end.
        assert_eq!(texts("x := a +\n b"), ["x", ":=", "a", "+", "b", "⏎"]);
    }

    #[test]
    fn literals_keep_their_kind_and_text() {
        let src = r#"1 0x1F 1_000 1.5 .5 1e-3 0x1p-2 2i 'a' '\'' "a\"b" `raw
line`"#;
        let kinds: Vec<(Kind, &str)> = lex(src).unwrap().iter().filter(|t| t.kind != Kind::AutoSemi).map(|t| (t.kind, t.text(src))).collect();
        use Kind::*;
        assert_eq!(
            kinds,
            [(Int, "1"), (Int, "0x1F"), (Int, "1_000"), (Float, "1.5"), (Float, ".5"), (Float, "1e-3"), (Float, "0x1p-2"), (Imaginary, "2i"), (Rune, "'a'"), (Rune, "'\\''"), (Str, "\"a\\\"b\""), (RawStr, "`raw\nline`")]
        );
        // `0x1e+2` is a hex integer plus 2, not an exponent.
        assert_eq!(texts("0x1e+2"), ["0x1e", "+", "2", "⏎"]);
    }

    #[test]
    fn bad_input_is_an_error_never_a_panic() {
        for bad in ["\"open", "'x", "`raw", "/* open", "a $ b", "x := \"a\nb\""] {
            assert!(lex(bad).is_err(), "{bad}");
        }
        for odd in ["", "\\", "'\\", "\"\\", "é", "日本 := 1", "0x", "1e", "..."] {
            let _ = lex(odd);
        }
    }

    #[test]
    fn literals_round_trip_through_unquote_and_quote() {
        for (lit, v) in [
            (r#""a\tb\"c\\""#, "a\tb\"c\\"),
            (r#""\x41\u00e9\U0001F600\101""#, "Aé😀A"),
            ("`a\\n`", "a\\n"),
            (r"'\''", "'"),
        ] {
            assert_eq!(unquote(lit).as_deref(), Some(v), "{lit}");
        }
        assert_eq!(unquote(r#""\xff""#), None);
        assert_eq!(unquote(r#""\q""#), None);
        for s in ["plain", "tab\tnew\nline", "quote\"back\\slash", "é😀", "\u{7}\u{1b}", "\u{2028}"] {
            assert_eq!(unquote(&quote(s, '"')).as_deref(), Some(s), "{s:?}");
        }
        assert_eq!(quote("'", '\''), r"'\''");
    }

    #[test]
    fn brackets_match_across_nesting() {
        let src = "f(a[b{c}], (d))";
        let t = lex(src).unwrap();
        let close = matching(&t, src, 1).unwrap();
        assert_eq!(t[close].text(src), ")");
        assert_eq!(close, t.len() - 2);
        assert_eq!(matching(&lex("f(").unwrap(), "f(", 1), None);
    }
}
