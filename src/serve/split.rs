//! Splitting a completion into `reasoning_content`, `content` and tool calls *while it streams*.
//!
//! [`view`] computes the parts of a partial completion that can no longer change: text that might
//! still turn into `</think>` or `<tool_call>`, and whitespace that a following tool call would
//! trim away, is held back until the next tokens decide it. Each view's parts are prefixes of the
//! next view's, so a stream sends the differences, and the view of the finished text is exactly
//! what a non-streaming response returns — the concatenated deltas equal the final message.
//! The split follows `model::toolcall::parse_assistant`: reasoning up to `</think>` with
//! surrounding newlines trimmed, the answer's leading newlines dropped, content up to the first
//! `<tool_call>` (right-trimmed when calls follow), calls from there on.

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";
const CALL_OPEN: &str = "<tool_call>";

/// How a completion is to be read.
#[derive(Debug, Clone, Copy)]
pub struct SplitMode {
    /// The prompt opened `<think>`: the completion starts with reasoning.
    pub thinking: bool,
    /// Tools were offered (and not turned off by `tool_choice: "none"`): `<tool_call>` starts the
    /// calls.
    pub tool_calls: bool,
}

/// The settled parts of a (partial) completion.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct View<'a> {
    pub reasoning: &'a str,
    pub content: &'a str,
    /// The text from the first `<tool_call>` on (only when calls are being read).
    pub calls: Option<&'a str>,
    /// The whole answer after the reasoning (leading newlines dropped): the content to send
    /// instead when the calls do not parse.
    pub answer: &'a str,
}

/// Strip a suffix of `s` that is a proper, non-empty prefix of `tag` (it may yet become `tag`).
fn hold_partial<'a>(s: &'a str, tag: &str) -> &'a str {
    (1..tag.len())
        .rev()
        .find(|&k| s.ends_with(&tag[..k]))
        .map_or(s, |k| &s[..s.len() - k])
}

/// The settled parts of `text`; `finished` when no more tokens will come.
pub fn view(text: &str, mode: SplitMode, finished: bool) -> View<'_> {
    let lead = text.trim_start();
    if !finished && lead.len() < THINK_OPEN.len() && THINK_OPEN.starts_with(lead) {
        return View::default(); // maybe the start of an explicit <think>
    }
    let answer = if mode.thinking || lead.starts_with(THINK_OPEN) {
        let (head, answer) = match text.find(THINK_CLOSE) {
            Some(end) => (&text[..end], Some(&text[end + THINK_CLOSE.len()..])),
            None => (text, None),
        };
        let lead = head.trim_start();
        let body = lead.strip_prefix(THINK_OPEN).unwrap_or(head);
        let reasoning = match (answer, finished) {
            (Some(_), _) | (None, true) => body.trim_matches('\n'),
            (None, false) => hold_partial(body, THINK_CLOSE)
                .trim_start_matches('\n')
                .trim_end_matches('\n'),
        };
        match answer {
            Some(a) => return with_answer(reasoning, a, mode, finished),
            None => {
                return View {
                    reasoning,
                    ..View::default()
                }
            }
        }
    } else {
        text
    };
    with_answer("", answer, mode, finished)
}

fn with_answer<'a>(reasoning: &'a str, answer: &'a str, mode: SplitMode, finished: bool) -> View<'a> {
    let answer = answer.trim_start_matches('\n');
    let first_call = mode.tool_calls.then(|| answer.find(CALL_OPEN)).flatten();
    let (content, calls) = match first_call {
        Some(i) => (answer[..i].trim_end(), Some(&answer[i..])),
        None if finished => (answer, None),
        None if mode.tool_calls => (hold_partial(answer, CALL_OPEN).trim_end(), None),
        None => (answer, None),
    };
    View {
        reasoning,
        content,
        calls,
        answer,
    }
}

/// Sends the growth of a completion's view as deltas.
#[derive(Debug, Default)]
pub struct Splitter {
    reasoning: usize,
    content: usize,
}

/// New text of a view since the last one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Delta {
    pub reasoning: String,
    pub content: String,
}

impl Splitter {
    /// The deltas that take the previous view to `v`. A view that is not an extension of the
    /// previous one (the tool-call fallback: calls that do not parse become content) sends the
    /// whole new content past what was sent.
    pub fn advance(&mut self, v: &View<'_>) -> Delta {
        let take = |s: &str, sent: &mut usize| {
            let mut from = (*sent).min(s.len());
            while !s.is_char_boundary(from) {
                from -= 1;
            }
            *sent = s.len().max(*sent);
            s[from..].to_string()
        };
        Delta {
            reasoning: take(v.reasoning, &mut self.reasoning),
            content: take(v.content, &mut self.content),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::toolcall::{parse_assistant, ParseOptions};

    const CASES: &[&str] = &[
        "",
        "plain answer",
        "\n\nreasoning here\n</think>\n\nthe answer  ",
        "<think>\nexplicit</think>answer",
        "think\n</think>\n\nsay <tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>",
        "r</think>\n\nx  \n<tool_call>\n<function=g>\n</function>\n</tool_call>\n",
        "r</think>content with < and </thi and <tool_c inside",
        "never closes the think <th",
        "héllo wörld</think>\n\nünïcode ✓",
    ];

    /// Feeding a completion in pieces gives deltas that add up to the final view, every
    /// intermediate view extends the previous, and the final view agrees with `parse_assistant`.
    #[test]
    fn streamed_deltas_add_up_to_the_final_split() {
        for thinking in [true, false] {
            for tool_calls in [true, false] {
                let mode = SplitMode { thinking, tool_calls };
                for text in CASES {
                    let mut s = Splitter::default();
                    let (mut r, mut c) = (String::new(), String::new());
                    let mut prev = View::default();
                    let cuts: Vec<usize> = (0..=text.len()).filter(|&i| text.is_char_boundary(i)).collect();
                    for &i in &cuts {
                        let v = view(&text[..i], mode, false);
                        assert!(v.reasoning.starts_with(prev.reasoning) && v.content.starts_with(prev.content),
                            "{text:?} at {i}: {prev:?} -> {v:?}");
                        let d = s.advance(&v);
                        r += &d.reasoning;
                        c += &d.content;
                        prev = v;
                    }
                    let fin = view(text, mode, true);
                    let d = s.advance(&fin);
                    r += &d.reasoning;
                    c += &d.content;
                    assert_eq!((r.as_str(), c.as_str()), (fin.reasoning, fin.content), "{text:?} {mode:?}");
                    if tool_calls {
                        let parsed = parse_assistant(text, &[], ParseOptions { prompt_opened_think: thinking });
                        if let Ok(p) = parsed {
                            let has_think = thinking || text.trim_start().starts_with("<think>");
                            if has_think || !text.contains("</think>") {
                                assert_eq!(fin.reasoning, p.reasoning.as_deref().unwrap_or(""), "{text:?}");
                                assert_eq!(fin.content, p.content, "{text:?}");
                                assert_eq!(fin.calls.is_some(), !p.tool_calls.is_empty(), "{text:?}");
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn holds_back_possible_tags() {
        let m = SplitMode { thinking: true, tool_calls: true };
        assert_eq!(view("abc</th", m, false).reasoning, "abc");
        assert_eq!(view("abc</th", m, true).reasoning, "abc</th");
        assert_eq!(view("x</think>\n\nhi <tool_", m, false).content, "hi");
        assert_eq!(view("x</think>\n\nhi <tool_", m, true).content, "hi <tool_");
        let v = view("x</think>hi\n<tool_call>", m, false);
        assert_eq!((v.content, v.calls), ("hi", Some("<tool_call>")));
    }
}
