//! Python's whitespace for the chat template's string methods. Templates are written for
//! jinja2, where `str.strip()`, `lstrip()`, `rstrip()`, `split()` and `isspace()` without
//! arguments, and the `trim` filter, use Python's `str.isspace`: Unicode's White_Space **and**
//! U+001C–U+001F (the file, group, record and unit separators). Rust's `char::is_whitespace`,
//! which minijinja and minijinja-contrib use, lacks those four, so a tool output holding one of
//! them rendered another prompt than transformers renders (found by the `chat_template_render`
//! fuzz target). Everything else is minijinja-contrib's `pycompat`.

use minijinja::value::{from_args, Value};
use minijinja::{Error, State};

/// Python's `str.isspace` for one character.
pub fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// jinja2's `trim(value, chars=None)`: `str(value).strip(chars)`.
pub fn trim(value: Value, chars: Option<String>) -> String {
    let s = value.as_str().map(str::to_owned).unwrap_or_else(|| value.to_string());
    match chars {
        Some(chars) => s.trim_matches(|c| chars.contains(c)).to_string(),
        None => s.trim_matches(is_python_space).to_string(),
    }
}

/// `str.split(None, maxsplit)`: runs of whitespace separate, leading whitespace is dropped, and
/// after `maxsplit` splits the rest is one item (its trailing whitespace kept).
fn split_whitespace(s: &str, maxsplit: i64) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = s.trim_start_matches(is_python_space);
    while !rest.is_empty() {
        if maxsplit >= 0 && out.len() as i64 == maxsplit {
            out.push(rest);
            break;
        }
        let end = rest.find(is_python_space).unwrap_or(rest.len());
        out.push(&rest[..end]);
        rest = rest[end..].trim_start_matches(is_python_space);
    }
    out
}

/// The template's method calls on values: the whitespace methods of strings here, the rest
/// through minijinja-contrib's `pycompat`.
pub fn unknown_method(state: &State, value: &Value, method: &str, args: &[Value]) -> Result<Value, Error> {
    if let Some(s) = value.as_str() {
        let no_chars = || -> Result<bool, Error> {
            let (chars,): (Option<Value>,) = from_args(args)?;
            Ok(chars.is_none_or(|c| c.is_none()))
        };
        match method {
            "strip" if no_chars()? => return Ok(Value::from(s.trim_matches(is_python_space))),
            "lstrip" if no_chars()? => return Ok(Value::from(s.trim_start_matches(is_python_space))),
            "rstrip" if no_chars()? => return Ok(Value::from(s.trim_end_matches(is_python_space))),
            "isspace" if args.is_empty() => {
                return Ok(Value::from(!s.is_empty() && s.chars().all(is_python_space)))
            }
            "split" => {
                let (sep, maxsplit): (Option<Value>, Option<i64>) = from_args(args)?;
                if sep.is_none_or(|s| s.is_none()) {
                    return Ok(split_whitespace(s, maxsplit.unwrap_or(-1)).into_iter().map(Value::from).collect());
                }
            }
            _ => {}
        }
    }
    minijinja_contrib::pycompat::unknown_method_callback(state, value, method, args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whitespace_is_pythons() {
        assert!(is_python_space('\u{1c}') && is_python_space('\u{1f}') && is_python_space('\u{3000}'));
        assert!(!is_python_space('\u{200b}') && !is_python_space('\u{feff}'));
        // Python: ' \x1ca b\x1f c '.split() == ['a', 'b', 'c']; .split(None, 1) == ['a', 'b\x1f c ']
        assert_eq!(split_whitespace(" \u{1c}a b\u{1f} c ", -1), ["a", "b", "c"]);
        assert_eq!(split_whitespace(" \u{1c}a b\u{1f} c ", 1), ["a", "b\u{1f} c "]);
        assert_eq!(split_whitespace(" ", -1), Vec::<&str>::new());
        assert_eq!(split_whitespace("a", 0), ["a"]);
        assert_eq!(trim(Value::from("\u{1c} x \u{1f}"), None), "x");
        assert_eq!(trim(Value::from("xxaxx"), Some("x".into())), "a");
    }
}
