//! Fuzz targets of the Qwen3.5 completion parser (`model::toolcall`: reasoning split and XML tool
//! calls) and the submission-marker parser (`agent::marker`).
//!
//! * `toolcall_round_trip`: generated turns (reasoning, content, calls with string, integer,
//!   boolean and object parameters) rendered the way the chat template asks the model to write
//!   them parse back to exactly the turn.
//! * `toolcall_mutated`: byte-level mutations of rendered turns: no panic; an error's byte offset
//!   lies inside the completion, on a character boundary.
//! * `marker_detect`: outputs built from marker lines, noise and mutations: no panic; a hit's
//!   payload is a suffix of the output; a hit without leading noise is the first line.

use crate::driver::{fuzz, mutated};
use execcritic::agent::marker::{detect, Marker};
use execcritic::model::toolcall::{parse_assistant, AssistantTurn, ParseOptions, ToolCall};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use serde_json::{json, Value};

/// The tool schema the generated calls are typed by.
fn tools() -> Vec<Value> {
    vec![json!({"type": "function", "function": {"name": "typed", "parameters": {"properties": {
        "n": {"type": "integer"}, "b": {"type": "boolean"}, "o": {"type": "object"},
        "s": {"type": "string"}}}}})]
}

/// Free text: anything but the tags that would end the part it is in.
fn text(forbidden: &'static [&'static str]) -> impl Strategy<Value = String> {
    "[a-z <>/=\n\t{}\"\u{e9}]{0,40}".prop_filter("no closing tag", move |s| {
        !forbidden.iter().any(|t| s.contains(t))
    })
}

fn call() -> impl Strategy<Value = ToolCall> {
    let name = "[a-z_][a-z0-9_.-]{0,12}";
    let untyped = prop::collection::vec(("[a-z_]{1,8}", text(&["</parameter>"])), 0..4).prop_map(
        |ps| ps.into_iter().map(|(k, v)| (format!("u_{k}"), Value::String(v))).collect::<Vec<_>>(),
    );
    let typed = (any::<i64>(), any::<bool>(), prop::collection::btree_map("[a-z]{1,4}", any::<i32>(), 0..3))
        .prop_map(|(n, b, o)| vec![("n".to_string(), json!(n)), ("b".to_string(), json!(b)), ("o".to_string(), json!(o))]);
    prop_oneof![
        (name, untyped).prop_map(|(n, args)| ToolCall { name: n, arguments: args.into_iter().collect() }),
        typed.prop_map(|args| ToolCall { name: "typed".into(), arguments: args.into_iter().collect() }),
    ]
}

fn turn() -> impl Strategy<Value = AssistantTurn> {
    (
        prop::option::of(text(&["</think>"])),
        text(&["</think>", "<tool_call>", "<think>"]),
        prop::collection::vec(call(), 0..3),
    )
        .prop_map(|(reasoning, content, tool_calls)| AssistantTurn {
            reasoning: reasoning.map(|r| r.trim_matches('\n').to_string()),
            reasoning_truncated: false,
            content: if tool_calls.is_empty() {
                content.trim_start_matches('\n').to_string()
            } else {
                content.trim_start_matches('\n').trim_end().to_string()
            },
            tool_calls,
        })
        // Without reasoning, a content that opens with `<think>` would read as reasoning.
        .prop_filter("unambiguous", |t| t.reasoning.is_some() || !t.content.trim_start().starts_with("<think>"))
}

/// A turn as the chat template asks the model to write it.
fn render(t: &AssistantTurn) -> String {
    let mut s = String::new();
    if let Some(r) = &t.reasoning {
        s.push_str(&format!("<think>\n{r}\n</think>\n\n"));
    }
    s.push_str(&t.content);
    for c in &t.tool_calls {
        s.push_str(&format!("\n\n<tool_call>\n<function={}>\n", c.name));
        for (k, v) in &c.arguments {
            let v = match v {
                Value::String(s) => s.clone(),
                v => v.to_string(),
            };
            s.push_str(&format!("<parameter={k}>\n{v}\n</parameter>\n"));
        }
        s.push_str("</function>\n</tool_call>");
    }
    s
}

#[test]
fn toolcall_round_trip() {
    let tools = tools();
    fuzz("toolcall_round_trip", 3_000, turn(), |t| {
        let text = render(&t);
        let parsed = parse_assistant(&text, &tools, ParseOptions::default())
            .map_err(|e| TestCaseError::fail(format!("{e}\n{text}")))?;
        prop_assert_eq!(parsed, t, "{}", text);
        Ok(())
    });
}

const DICTIONARY: &[&str] = &[
    "<think>", "</think>", "<tool_call>", "</tool_call>", "<function=", "</function>",
    "<parameter=", "</parameter>", ">", "<", "\n", "null", "{\"a\":", "[[[[", "1e999", "\u{e9}",
];

#[test]
fn toolcall_mutated() {
    let tools = tools();
    // A fixed seed corpus of rendered turns, mutated.
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    let corpus: Vec<String> = (0..64)
        .map(|_| render(&turn().new_tree(&mut runner).unwrap().current()))
        .collect();
    let opts = [ParseOptions::default(), ParseOptions { prompt_opened_think: true }];
    fuzz("toolcall_mutated", 3_000, (mutated(corpus, DICTIONARY), any::<bool>()), |(text, think)| {
        match parse_assistant(&text, &tools, opts[think as usize]) {
            Ok(_) => {}
            Err(e) => {
                prop_assert!(e.position <= text.len(), "{e} beyond {}", text.len());
                prop_assert!(text.is_char_boundary(e.position), "{e} inside a character");
            }
        }
        Ok(())
    });
}

#[test]
fn marker_detect() {
    let line = prop_oneof![
        Just(Marker::Submit.text().to_string()),
        Just(Marker::Check.text().to_string()),
        Just(format!("  {}\r", Marker::Submit.text())),
        Just(format!("x{}", Marker::Check.text())),
        "[a-z \u{e9}\r]{0,10}",
    ];
    let output = (prop::collection::vec(line, 0..6), any::<bool>()).prop_map(|(ls, nl)| {
        let mut s = ls.join("\n");
        if nl {
            s.push('\n');
        }
        s
    });
    let markers: Vec<Vec<Marker>> = vec![vec![Marker::Submit], vec![Marker::Check], vec![Marker::Submit, Marker::Check], vec![]];
    fuzz("marker_detect", 3_000, (output, prop::sample::select(markers)), |(out, ms)| {
        if let Some(hit) = detect(&out, &ms) {
            prop_assert!(ms.contains(&hit.marker));
            prop_assert!(out.ends_with(&hit.payload));
            let head = &out[..out.len() - hit.payload.len()];
            prop_assert_eq!(head.lines().last().map(str::trim), Some(hit.marker.text()));
            if !hit.leading_noise {
                prop_assert_eq!(head.lines().count(), 1);
            }
        }
        Ok(())
    });
}

