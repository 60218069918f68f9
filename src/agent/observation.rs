//! Rendering a command's result as the observation the model sees: return code, timeout and
//! refusal notices, and head+tail truncation of long output (mini-swe-agent's rule: output of
//! 10,000 characters or more shows the first 5,000, "N characters elided", the last 5,000).

use super::shell::ShellOutput;

/// Output of this many characters or more is truncated.
pub const TRUNCATE_AT: usize = 10_000;
/// Characters kept at each end of truncated output.
pub const KEEP_EACH_END: usize = 5_000;

/// `text` if shorter than `TRUNCATE_AT` characters, else head + elision note + tail.
pub fn truncate_head_tail(text: &str) -> String {
    let n = text.chars().count();
    if n < TRUNCATE_AT {
        return text.to_string();
    }
    let head_end = text
        .char_indices()
        .nth(KEEP_EACH_END)
        .map_or(text.len(), |(i, _)| i);
    let tail_start = text
        .char_indices()
        .nth(n - KEEP_EACH_END)
        .map_or(text.len(), |(i, _)| i);
    format!(
        "{}\n<elided_chars>\n{} characters elided\n</elided_chars>\n{}",
        &text[..head_end],
        n - 2 * KEEP_EACH_END,
        &text[tail_start..]
    )
}

/// The observation for a command that ran.
pub fn render_output(out: &ShellOutput, timeout_secs: u64) -> String {
    let body = truncate_head_tail(&out.output);
    let mut s = String::new();
    if out.timed_out {
        s.push_str(&format!(
            "<returncode>timeout</returncode>\n<warning>\nThe command did not finish within {timeout_secs} s and was killed \
             (with every process it started). Avoid long-running or interactive commands.\n</warning>\n"
        ));
    } else {
        let rc = out
            .exit_code
            .map_or_else(|| "signal".to_string(), |c| c.to_string());
        s.push_str(&format!("<returncode>{rc}</returncode>\n"));
    }
    if out.truncated {
        s.push_str("<warning>\nThe sandbox capped this command's output; the middle part was not recorded.\n</warning>\n");
    }
    s.push_str("<output>\n");
    s.push_str(&body);
    if !body.is_empty() && !body.ends_with('\n') {
        s.push('\n');
    }
    s.push_str("</output>");
    s
}

/// The observation for a command the controller refused to run.
pub fn render_refusal(reason: &str) -> String {
    format!("<returncode>refused</returncode>\n<warning>\nThe command was not run. {reason}\n</warning>")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_output_is_kept() {
        let s = "x".repeat(TRUNCATE_AT - 1);
        assert_eq!(truncate_head_tail(&s), s);
    }

    #[test]
    fn long_output_keeps_head_and_tail() {
        let s = format!(
            "{}{}{}",
            "h".repeat(5_000),
            "m".repeat(2_345),
            "t".repeat(5_000)
        );
        let t = truncate_head_tail(&s);
        assert!(t.starts_with(&"h".repeat(5_000)));
        assert!(t.ends_with(&"t".repeat(5_000)));
        assert!(t.contains("2345 characters elided"));
        assert!(!t.contains('m'));
    }

    #[test]
    fn multibyte_boundaries() {
        let s = "é".repeat(12_000);
        let t = truncate_head_tail(&s);
        assert!(t.contains("2000 characters elided"));
    }
}
