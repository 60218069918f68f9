//! Table-driven tests of the Qwen3.5 completion parser (reasoning split, XML tool calls, typed
//! arguments, malformed calls reported with position and reason).

use execcritic::model::toolcall::{
    parse_assistant, AssistantTurn, ParseOptions, ToolCall, ToolCallReason,
};
use serde_json::{json, Value};

fn tools() -> Vec<Value> {
    vec![
        json!({"type": "function", "function": {"name": "bash", "parameters": {"type": "object",
            "properties": {"command": {"type": "string"}, "timeout": {"type": "integer"}},
            "required": ["command"]}}}),
        json!({"name": "edit", "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "line": {"type": "number"}, "dry": {"type": "boolean"},
            "opts": {"type": "object"}, "lines": {"type": "array"}, "note": {},
            "any": {"type": "custom"}, "maybe": {"type": ["integer", "null"]}}}}),
    ]
}

fn call(name: &str, args: Value) -> ToolCall {
    ToolCall {
        name: name.into(),
        arguments: args.as_object().unwrap().clone(),
    }
}

fn turn(reasoning: Option<&str>, content: &str, calls: Vec<ToolCall>) -> AssistantTurn {
    AssistantTurn {
        reasoning: reasoning.map(String::from),
        reasoning_truncated: false,
        content: content.into(),
        tool_calls: calls,
    }
}

const OPENED: ParseOptions = ParseOptions {
    prompt_opened_think: true,
};
const PLAIN: ParseOptions = ParseOptions {
    prompt_opened_think: false,
};

#[test]
fn well_formed_completions() {
    let cases: Vec<(&str, &str, ParseOptions, AssistantTurn)> = vec![
        ("plain answer", "Hello there.", PLAIN, turn(None, "Hello there.", vec![])),
        (
            "prompt opened <think>: only </think> in the completion",
            "I should list files.\n</think>\n\nSure.",
            OPENED,
            turn(Some("I should list files."), "Sure.", vec![]),
        ),
        (
            "completion opens and closes think itself",
            "<think>\nhmm\n</think>\n\nok",
            PLAIN,
            turn(Some("hmm"), "ok", vec![]),
        ),
        (
            "empty think (enable_thinking=false shape)",
            "<think>\n\n</think>\n\nanswer",
            PLAIN,
            turn(Some(""), "answer", vec![]),
        ),
        (
            "one call, content before it",
            "Let me look.\n\n<tool_call>\n<function=bash>\n<parameter=command>\nls -la\n</parameter>\n</function>\n</tool_call>",
            PLAIN,
            turn(None, "Let me look.", vec![call("bash", json!({"command": "ls -la"}))]),
        ),
        (
            "reasoning + two calls + typed int + multi-line string value",
            "plan\n</think>\n\n<tool_call>\n<function=bash>\n<parameter=command>\ncat <<'X' > a.py\nprint(1)\n\nX\n</parameter>\n<parameter=timeout>\n30\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=bash>\n<parameter=command>\npytest -q\n</parameter>\n</function>\n</tool_call>\n",
            OPENED,
            turn(
                Some("plan"),
                "",
                vec![
                    call("bash", json!({"command": "cat <<'X' > a.py\nprint(1)\n\nX", "timeout": 30})),
                    call("bash", json!({"command": "pytest -q"})),
                ],
            ),
        ),
        (
            "every schema type",
            "<tool_call>\n<function=edit>\n<parameter=path>\n42\n</parameter>\n<parameter=line>\n3.5\n</parameter>\n<parameter=dry>\nTrue\n</parameter>\n<parameter=opts>\n{\"a\": [1, 2]}\n</parameter>\n<parameter=lines>\n[1, \"x\"]\n</parameter>\n<parameter=note>\n7\n</parameter>\n<parameter=any>\n{\"k\": null}\n</parameter>\n<parameter=maybe>\nnull\n</parameter>\n</function>\n</tool_call>",
            PLAIN,
            turn(None, "", vec![call("edit", json!({
                "path": "42", "line": 3.5, "dry": true, "opts": {"a": [1, 2]}, "lines": [1, "x"],
                "note": "7", "any": {"k": null}, "maybe": null}))]),
        ),
        (
            "number without a point stays an integer; unknown custom type falls back to string",
            "<tool_call>\n<function=edit>\n<parameter=line>\n12\n</parameter>\n<parameter=any>\nnot json\n</parameter>\n</function>\n</tool_call>",
            PLAIN,
            turn(None, "", vec![call("edit", json!({"line": 12, "any": "not json"}))]),
        ),
        (
            "unknown tool and unknown parameter keep raw strings; zero-parameter call",
            "<tool_call>\n<function=other>\n<parameter=n>\n5\n</parameter>\n</function>\n</tool_call>\n<tool_call>\n<function=submit>\n</function>\n</tool_call>",
            PLAIN,
            turn(None, "", vec![call("other", json!({"n": "5"})), call("submit", json!({}))]),
        ),
        (
            "value without surrounding newlines, extra blank line inside kept",
            "<tool_call><function=bash><parameter=command>echo hi</parameter></function></tool_call>",
            PLAIN,
            turn(None, "", vec![call("bash", json!({"command": "echo hi"}))]),
        ),
        (
            "tool-call-looking text inside reasoning is not parsed",
            "maybe <tool_call> later\n</think>\n\nfine",
            OPENED,
            turn(Some("maybe <tool_call> later"), "fine", vec![]),
        ),
    ];
    for (name, text, opts, expected) in cases {
        let got = parse_assistant(text, &tools(), opts)
            .unwrap_or_else(|e| panic!("case `{name}`: unexpected error {e}"));
        assert_eq!(got, expected, "case `{name}`");
    }
}

#[test]
fn unterminated_reasoning() {
    let t = parse_assistant("still thinking about <tool_call>", &tools(), OPENED).unwrap();
    assert_eq!(
        t.reasoning.as_deref(),
        Some("still thinking about <tool_call>")
    );
    assert!(t.reasoning_truncated);
    assert!(t.tool_calls.is_empty() && t.content.is_empty());
    let t = parse_assistant("<think>\nabc", &tools(), PLAIN).unwrap();
    assert_eq!(t.reasoning.as_deref(), Some("abc"));
    assert!(t.reasoning_truncated);
}

#[test]
fn malformed_calls_are_reported_with_position() {
    let cases: Vec<(&str, &str, usize, ToolCallReason)> = vec![
        (
            "truncated call",
            "ok\n<tool_call>\n<function=bash>\n<parameter=command>\nls",
            3,
            ToolCallReason::UnterminatedCall,
        ),
        (
            "missing function tag",
            "<tool_call>\n<parameter=command>\nls\n</parameter>\n</tool_call>",
            12,
            ToolCallReason::ExpectedFunction,
        ),
        (
            "empty function name",
            "<tool_call>\n<function=>\n</function>\n</tool_call>",
            22,
            ToolCallReason::BadFunctionName,
        ),
        (
            "unterminated parameter",
            "<tool_call>\n<function=bash>\n<parameter=command>\nls\n</function>\n</tool_call>",
            28,
            ToolCallReason::UnterminatedParameter("command".into()),
        ),
        (
            "duplicate parameter",
            "<tool_call>\n<function=bash>\n<parameter=command>\na\n</parameter>\n<parameter=command>\nb\n</parameter>\n</function>\n</tool_call>",
            63,
            ToolCallReason::DuplicateParameter("command".into()),
        ),
        (
            "junk between parameters",
            "<tool_call>\n<function=bash>\nhello\n</function>\n</tool_call>",
            28,
            ToolCallReason::ExpectedParameterOrEnd,
        ),
        (
            "missing </function>",
            "<tool_call>\n<function=bash>\n<parameter=command>\nls\n</parameter>\n</tool_call>",
            64,
            ToolCallReason::ExpectedParameterOrEnd,
        ),
        (
            "text after the call",
            "<tool_call>\n<function=submit>\n</function>\n</tool_call>\nDone!",
            55,
            ToolCallReason::TextAfterCall,
        ),
        (
            "integer parameter given text",
            "<tool_call>\n<function=bash>\n<parameter=timeout>\nsoon\n</parameter>\n</function>\n</tool_call>",
            28,
            ToolCallReason::BadValue { parameter: "timeout".into(), expected: "integer".into() },
        ),
        (
            "object parameter given invalid JSON",
            "<tool_call>\n<function=edit>\n<parameter=opts>\n{a: 1}\n</parameter>\n</function>\n</tool_call>",
            28,
            ToolCallReason::BadValue { parameter: "opts".into(), expected: "JSON object".into() },
        ),
        (
            "position counts the reasoning prefix",
            "r\n</think>\n\n<tool_call>\n<function=bash>\n<parameter=dry>\n</function>\n</tool_call>",
            40,
            ToolCallReason::UnterminatedParameter("dry".into()),
        ),
    ];
    for (name, text, position, reason) in cases {
        let err = parse_assistant(text, &tools(), PLAIN)
            .map(|t| panic!("case `{name}`: expected an error, got {t:?}"))
            .unwrap_err();
        assert_eq!(
            (err.position, err.reason),
            (position, reason),
            "case `{name}`"
        );
    }
}
