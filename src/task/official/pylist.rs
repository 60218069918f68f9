//! Python list-of-strings literals (`['a', "b"]`), the encoding of SWE-bench Pro's
//! `fail_to_pass`, `pass_to_pass` and `selected_test_files_to_run` columns (the official
//! evaluation reads them with Python's `eval`). JSON lists are accepted too.

use serde_json::Value;

/// Parse `text` as a JSON list of strings or a Python list literal of string literals.
/// The error says what was expected where.
pub fn parse_string_list(text: &str) -> Result<Vec<String>, String> {
    if let Ok(Value::Array(items)) = serde_json::from_str::<Value>(text) {
        return items
            .into_iter()
            .enumerate()
            .map(|(i, v)| match v {
                Value::String(s) => Ok(s),
                _ => Err(format!("entry {i} is not a string")),
            })
            .collect();
    }
    Parser {
        chars: text.chars().collect(),
        pos: 0,
    }
    .list()
}

struct Parser {
    chars: Vec<char>,
    pos: usize,
}

impl Parser {
    fn err(&self, what: &str) -> String {
        format!(
            "not a list of string literals: expected {what} at character {}",
            self.pos
        )
    }

    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn skip_ws(&mut self) {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, c: char) -> Result<(), String> {
        self.skip_ws();
        if self.peek() == Some(c) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.err(&format!("`{c}`")))
        }
    }

    fn list(mut self) -> Result<Vec<String>, String> {
        self.expect('[')?;
        let mut items = Vec::new();
        loop {
            self.skip_ws();
            if self.peek() == Some(']') {
                self.pos += 1;
                break;
            }
            items.push(self.string()?);
            self.skip_ws();
            match self.peek() {
                Some(',') => self.pos += 1,
                Some(']') => {
                    self.pos += 1;
                    break;
                }
                _ => return Err(self.err("`,` or `]`")),
            }
        }
        self.skip_ws();
        if self.pos != self.chars.len() {
            return Err(self.err("the end of the text"));
        }
        Ok(items)
    }

    fn string(&mut self) -> Result<String, String> {
        let quote = match self.peek() {
            Some(q @ ('\'' | '"')) => q,
            _ => return Err(self.err("a quoted string")),
        };
        self.pos += 1;
        let mut out = String::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.err("a closing quote"));
            };
            self.pos += 1;
            match c {
                c if c == quote => return Ok(out),
                '\n' => return Err(self.err("a closing quote before the line end")),
                '\\' => self.escape(&mut out)?,
                c => out.push(c),
            }
        }
    }

    /// One escape sequence after `\`, as Python's string literals read it.
    fn escape(&mut self, out: &mut String) -> Result<(), String> {
        let Some(c) = self.peek() else {
            return Err(self.err("an escaped character"));
        };
        self.pos += 1;
        match c {
            '\n' => {}
            '\\' | '\'' | '"' => out.push(c),
            'n' => out.push('\n'),
            't' => out.push('\t'),
            'r' => out.push('\r'),
            'a' => out.push('\u{7}'),
            'b' => out.push('\u{8}'),
            'f' => out.push('\u{c}'),
            'v' => out.push('\u{b}'),
            '0'..='7' => {
                let mut n = c.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match self.peek().and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            n = n * 8 + d;
                            self.pos += 1;
                        }
                        None => break,
                    }
                }
                out.push(char::from_u32(n).ok_or_else(|| self.err("a character code"))?);
            }
            'x' => out.push(self.hex(2)?),
            'u' => out.push(self.hex(4)?),
            'U' => out.push(self.hex(8)?),
            // Python keeps an unknown escape as written.
            other => {
                out.push('\\');
                out.push(other);
            }
        }
        Ok(())
    }

    fn hex(&mut self, digits: usize) -> Result<char, String> {
        let end = self.pos + digits;
        let text: String = self.chars.get(self.pos..end).unwrap_or(&[]).iter().collect();
        let code = u32::from_str_radix(&text, 16)
            .ok()
            .filter(|_| text.len() == digits)
            .ok_or_else(|| self.err(&format!("{digits} hexadecimal digits")))?;
        self.pos = end;
        char::from_u32(code).ok_or_else(|| self.err("a valid character code"))
    }
}

#[cfg(test)]
mod tests {
    use super::parse_string_list;

    #[test]
    fn python_and_json_lists() {
        assert_eq!(
            parse_string_list(r#"['a b', "it's", 'say \'hi\'', 'tab\tx', '\u00e9\x41']"#).unwrap(),
            vec!["a b", "it's", "say 'hi'", "tab\tx", "éA"]
        );
        assert_eq!(parse_string_list(r#"["x", "y"]"#).unwrap(), vec!["x", "y"]);
        assert_eq!(parse_string_list("[]").unwrap(), Vec::<String>::new());
        assert_eq!(parse_string_list(" [ 'x' , ] ").unwrap(), vec!["x"]);
        assert_eq!(parse_string_list(r"['a\d']").unwrap(), vec![r"a\d"]);
    }

    #[test]
    fn malformed_lists_are_errors() {
        for bad in ["", "'x'", "['x'", "['x' 'y']", "[1]", "['x'] y", r"['\x4']", "[\"x\", 1]"] {
            assert!(parse_string_list(bad).is_err(), "{bad:?}");
        }
    }
}
