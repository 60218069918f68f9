//! Python `str` semantics the official parsers rely on, so that a Rust reading of a log splits
//! and strips it exactly where CPython would.
//!
//! CPython's `str.isspace()` (used by `str.split()`, `str.strip()` and `\s` in `re`) is the
//! Unicode `White_Space` set plus the four ASCII information separators U+001C..U+001F.

/// `\s` of Python's `re` for `str` patterns, as a `regex` character class.
pub const PY_SPACE_CLASS: &str = r"[\s\x1C-\x1F]";

/// `c.isspace()` in Python.
pub fn is_py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// `s.split()` in Python: runs of whitespace separate, no empty fields.
pub fn py_split(s: &str) -> Vec<&str> {
    s.split(is_py_space).filter(|f| !f.is_empty()).collect()
}

/// `s.strip()` in Python.
pub fn py_strip(s: &str) -> &str {
    s.trim_matches(is_py_space)
}

/// `s.split(sep)[0]` in Python (the whole string when `sep` is absent).
pub fn before_first<'a>(s: &'a str, sep: &str) -> &'a str {
    s.split_once(sep).map_or(s, |(head, _)| head)
}

/// `s.rsplit(sep, 1)[0]` in Python.
pub fn before_last<'a>(s: &'a str, sep: &str) -> &'a str {
    s.rsplit_once(sep).map_or(s, |(head, _)| head)
}

/// The text Python's `open(path).read()` returns for a file's decoded contents: universal
/// newlines turn `\r\n` and a lone `\r` into `\n`. (swebench reads `test_output.txt` this way
/// before parsing, so the replica must see the same text.)
pub fn python_newlines(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\r') {
        std::borrow::Cow::Owned(text.replace("\r\n", "\n").replace('\r', "\n"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

/// Numeric value of one character matched by Python's `\d` (a Unicode decimal digit). Decimal
/// digits are encoded in contiguous runs of whole `0..=9` sets, so the value is the distance from
/// the start of the run modulo 10.
pub fn decimal_value(c: char) -> Option<u32> {
    if let Some(v) = c.to_digit(10) {
        return Some(v);
    }
    let is_digit = |ch: char| is_unicode_decimal(ch);
    if !is_digit(c) {
        return None;
    }
    let mut start = c as u32;
    while let Some(prev) = start.checked_sub(1).and_then(char::from_u32) {
        if !is_digit(prev) {
            break;
        }
        start -= 1;
    }
    Some((c as u32 - start) % 10)
}

fn is_unicode_decimal(c: char) -> bool {
    use std::sync::OnceLock;
    static DIGIT: OnceLock<Option<regex::Regex>> = OnceLock::new();
    DIGIT
        .get_or_init(|| regex::Regex::new(r"^\d$").ok())
        .as_ref()
        .is_some_and(|re| re.is_match(c.encode_utf8(&mut [0; 4])))
}

/// Python's `int()` of a `-?\d+` match, saturating at the `i64` range (only zero versus
/// non-zero and the sign matter to the grading).
pub fn py_int(text: &str) -> Option<i64> {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    if digits.is_empty() {
        return None;
    }
    let mut value: i64 = 0;
    for c in digits.chars() {
        let d = i64::from(decimal_value(c)?);
        value = value.saturating_mul(10).saturating_add(d);
    }
    Some(if negative { -value } else { value })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_and_strip_follow_python() {
        assert_eq!(py_split(" a\x1cb\u{a0}c  "), vec!["a", "b", "c"]);
        assert_eq!(py_strip("\x1f x \u{3000}"), "x");
        assert_eq!(before_first("a - b - c", " - "), "a");
        assert_eq!(before_last("a ... ok ... ok", " ... ok"), "a ... ok");
    }

    #[test]
    fn int_reads_unicode_digits() {
        assert_eq!(py_int("42"), Some(42));
        assert_eq!(py_int("-0"), Some(0));
        assert_eq!(py_int("\u{663}"), Some(3)); // ARABIC-INDIC DIGIT THREE
        assert_eq!(py_int("\u{1d7ce}\u{1d7d9}"), Some(1)); // MATHEMATICAL BOLD 0, DOUBLE-STRUCK 1
        assert_eq!(py_int("99999999999999999999999"), Some(i64::MAX));
        assert_eq!(py_int("x"), None);
    }
}
